"""Record ids, timestamps and e-mail addresses (petrecords.values)."""

from __future__ import annotations

import copy
import itertools
import math
import pickle
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.values import (
    format_timestamp,
    new_record_id,
    normalize_email,
    parse_datetime_ms,
    parse_record_id,
    uuid_of_hex,
    uuid_of_int,
)

MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
CANONICAL = "0190f3c4-5e6a-7b8c-9d0e-1f2a3b4c5d6e"


class TestNewRecordId:
    def test_is_rfc_9562_version_7_variant_10(self) -> None:
        record_id = new_record_id()
        assert record_id.version == 7
        assert record_id.variant == uuid.RFC_4122
        assert (record_id.int >> 62) & 0b11 == 0b10
        assert (record_id.int >> 76) & 0xF == 7

    def test_canonical_lower_case_form(self) -> None:
        text = str(new_record_id())
        assert text == text.lower()
        assert len(text) == 36
        assert [len(part) for part in text.split("-")] == [8, 4, 4, 4, 12]
        assert parse_record_id(text) == uuid.UUID(text)

    def test_strictly_increasing_in_a_tight_loop(self) -> None:
        ids = [new_record_id() for _ in range(10_000)]
        assert all(earlier < later for earlier, later in itertools.pairwise(ids))
        # Also as text, which is how clients and the databases compare them.
        texts = [str(record_id) for record_id in ids]
        assert texts == sorted(texts)
        assert len(set(texts)) == len(texts)

    def test_timestamp_bits_are_the_current_time(self) -> None:
        before = time.time_ns() // 1_000_000
        record_id = new_record_id()
        after = time.time_ns() // 1_000_000
        stamped = record_id.int >> 80
        # The generator may borrow a few milliseconds ahead when its per-millisecond counter runs out.
        assert before - 1 <= stamped <= after + 1_000


class TestParseRecordId:
    def test_canonical_lower_case(self) -> None:
        assert parse_record_id(CANONICAL) == uuid.UUID(CANONICAL)

    @pytest.mark.parametrize("text", [CANONICAL.upper(), "0190F3C4-5e6a-7B8C-9d0e-1F2A3b4c5d6e"])
    def test_upper_and_mixed_case(self, text: str) -> None:
        assert parse_record_id(text) == uuid.UUID(CANONICAL)

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "{" + CANONICAL + "}",
            "urn:uuid:" + CANONICAL,
            CANONICAL.replace("-", ""),
            CANONICAL[:-1],
            CANONICAL + "0",
            " " + CANONICAL[1:],
            CANONICAL[:-1] + " ",
            CANONICAL[:-1] + "g",
            "0190f3c45-e6a-7b8c-9d0e-1f2a3b4c5d6e",  # a dash in the wrong place
            "0190f3c4-5e6a-7b8c-9d0e1f2a3b4c5d6e-",
            "0190f3c4+5e6a+7b8c+9d0e+1f2a3b4c5d6e",
            "0190f3c4-5e6a-7b8c-9d0e-1f2a3b4c5d6١",  # an Arabic-Indic digit: int() would accept it
            "not-a-uuid-at-all-not-a-uuid-at-all!",
        ],
    )
    def test_rejects_other_forms(self, text: str) -> None:
        assert parse_record_id(text) is None

    @given(st.uuids())
    def test_round_trips_any_uuid(self, value: uuid.UUID) -> None:
        assert parse_record_id(str(value)) == value
        assert parse_record_id(str(value).upper()) == value

    @given(st.text(max_size=40))
    def test_arbitrary_text_is_canonical_or_rejected(self, text: str) -> None:
        parsed = parse_record_id(text)
        if parsed is not None:
            assert str(parsed) == text.lower()


class TestUuidsMadeWithoutChecks:
    """`uuid_of_int` and `uuid_of_hex` skip uuid.UUID's checks: what they make must be that UUID in every way."""

    @given(st.uuids())
    def test_is_the_uuid(self, value: uuid.UUID) -> None:
        for made in (uuid_of_int(value.int), uuid_of_hex(value.hex)):
            assert type(made) is uuid.UUID
            assert made == value
            assert hash(made) == hash(value)
            assert (str(made), made.hex, made.bytes, made.version) == (
                str(value),
                value.hex,
                value.bytes,
                value.version,
            )
            assert made.is_safe is uuid.SafeUUID.unknown
            assert pickle.loads(pickle.dumps(made)) == value  # noqa: S301 (our own bytes)
            assert copy.deepcopy(made) == value
            with pytest.raises(TypeError):
                made.int = 0  # type: ignore[misc]

    @pytest.mark.parametrize("text", ["", "0" * 31, "0" * 33, "g" * 32, "0" * 30 + "-1"])
    def test_hex_of_another_length_or_digit_is_refused(self, text: str) -> None:
        with pytest.raises(ValueError, match=r"stored UUID|invalid literal"):
            uuid_of_hex(text)


class TestFormatTimestamp:
    @pytest.mark.parametrize(
        ("epoch_ms", "expected"),
        [
            (0, "1970-01-01T00:00:00.000Z"),
            (1, "1970-01-01T00:00:00.001Z"),
            (999, "1970-01-01T00:00:00.999Z"),
            (1000, "1970-01-01T00:00:01.000Z"),
            (1_795_277_189_123, "2026-11-21T16:06:29.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (MAX_MS, "9999-12-31T23:59:59.999Z"),
            (253_402_214_400_000, "9999-12-31T00:00:00.000Z"),
            # .NET's default date, which moved-in data can hold: four digits, as RFC 3339 writes every year.
            (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
            (-59_011_459_200_001, "0099-12-31T23:59:59.999Z"),
            (-30_610_224_000_000, "1000-01-01T00:00:00.000Z"),
        ],
    )
    def test_exact_millisecond_form(self, epoch_ms: int, expected: str) -> None:
        assert format_timestamp(epoch_ms) == expected

    @given(st.integers(min_value=MIN_MS, max_value=MAX_MS))
    def test_matches_datetime(self, epoch_ms: int) -> None:
        moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)
        assert format_timestamp(epoch_ms) == moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        assert parse_datetime_ms(format_timestamp(epoch_ms)) == epoch_ms


class TestParseDatetimeMs:
    BASE = 1_795_277_189_000  # 2026-11-21T16:06:29Z

    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("2026-11-21T16:06:29Z", BASE),
            ("2026-11-21T16:06:29z", BASE),
            ("2026-11-21t16:06:29Z", BASE),
            ("2026-11-21T16:06:29.123Z", BASE + 123),
            ("2026-11-21T17:06:29+01:00", BASE),
            ("2026-11-21T10:36:29-05:30", BASE),
            ("2026-11-21T16:06:29+00:00", BASE),
            ("2026-11-21T16:06:29-00:00", BASE),
            ("2026-11-22T16:05:29+23:59", BASE),
            ("1970-01-01T00:00:00Z", 0),
            ("1970-01-01T01:00:00+01:00", 0),
            ("9999-12-31T23:59:59.999Z", MAX_MS),
        ],
    )
    def test_valid(self, text: str, expected: int) -> None:
        assert parse_datetime_ms(text) == expected

    @pytest.mark.parametrize(
        ("fraction", "expected"),
        [
            ("1", Fraction(100)),
            ("12", Fraction(120)),
            ("123", Fraction(123)),
            ("1234", Fraction(1234, 10)),
            ("12345", Fraction(12345, 100)),
            ("123456", Fraction(123456, 1000)),
            ("1234567", Fraction(1234567, 10_000)),
            ("12345678", Fraction(12345678, 100_000)),
            ("123456789", Fraction(123456789, 1_000_000)),
            ("000000001", Fraction(1, 1_000_000)),
            ("999999999", Fraction(999999999, 1_000_000)),
        ],
    )
    def test_fractions_of_one_to_nine_digits_are_exact(self, fraction: str, expected: Fraction) -> None:
        parsed = parse_datetime_ms(f"2026-11-21T16:06:29.{fraction}Z")
        assert parsed == self.BASE + expected
        assert isinstance(parsed, Fraction | int)

    @pytest.mark.parametrize(
        ("fraction", "ceiling", "rounded"),
        [
            ("1234567890", 124, 123),
            ("0000000000001", 1, 0),
            ("1230000000000000000000", 123, 123),
            ("4995" + "0" * 40 + "1", 500, 500),
            ("4994" + "9" * 40, 500, 499),
            ("0004" + "9" * 5000, 1, 0),
            ("9" * 3000, 1000, 1000),
        ],
    )
    def test_any_number_of_fraction_digits_compares_exactly_with_whole_milliseconds(
        self, fraction: str, ceiling: int, rounded: int
    ) -> None:
        """RFC 3339 allows any number of fraction digits; a long one still ceils and rounds exactly."""
        parsed = parse_datetime_ms(f"2026-11-21T16:06:29.{fraction}Z")
        assert parsed is not None
        assert math.ceil(parsed) == self.BASE + ceiling
        assert math.floor(parsed + Fraction(1, 2)) == self.BASE + rounded

    def test_sub_millisecond_part_is_kept(self) -> None:
        parsed = parse_datetime_ms("2026-11-21T16:06:29.1234Z")
        assert isinstance(parsed, Fraction)
        assert parsed != self.BASE + 123
        assert parsed - self.BASE == Fraction(6170, 50)

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "2026-11-21",
            "2026-11-21T16:06:29",  # no offset
            "2026-11-21T16:06Z",
            "2026-11-21T16:06:29.Z",
            "2026-02-30T00:00:00Z",
            "2026-02-29T00:00:00Z",  # not a leap year
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-11-00T00:00:00Z",
            "2026-11-21T24:00:00Z",
            "2026-11-21T16:60:00Z",
            "2026-11-21T16:06:61Z",
            "2026-11-21T16:06:29+24:00",
            "2026-11-21T16:06:29-24:00",
            "2026-11-21T16:06:29+01:60",
            "2026-11-21T16:06:29+0100",
            "2026-11-21T16:06:29+01",
            "2026-11-21T16:06:29 +01:00",
            "2026-11-21X16:06:29Z",
            "26-11-21T16:06:29Z",
            "2026-11-21T16:06:29ZZ",
            " 2026-11-21T16:06:29Z",
            "2026-11-21T16:06:29Z\n",
            "２０２６-11-21T16:06:29Z",  # full-width digits
        ],
    )
    def test_invalid_is_none(self, text: str) -> None:
        assert parse_datetime_ms(text) is None

    def test_leap_year_day(self) -> None:
        assert parse_datetime_ms("2024-02-29T00:00:00Z") == 1_709_164_800_000

    @given(st.integers(min_value=0, max_value=MAX_MS))
    def test_round_trips_format_timestamp(self, epoch_ms: int) -> None:
        assert parse_datetime_ms(format_timestamp(epoch_ms)) == epoch_ms

    @given(
        st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9998, 12, 31)),  # noqa: DTZ001
        st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
        st.integers(min_value=0, max_value=999_999),
    )
    def test_offsets_agree_with_datetime(self, local: datetime, offset_minutes: int, micros: int) -> None:
        zone = timezone(timedelta(minutes=offset_minutes))
        moment = local.replace(microsecond=micros, tzinfo=zone)
        sign = "-" if offset_minutes < 0 else "+"
        hours, minutes = divmod(abs(offset_minutes), 60)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{micros:06d}{sign}{hours:02d}:{minutes:02d}"
        expected_us = (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
        assert parse_datetime_ms(text) == Fraction(expected_us, 1000)


class TestNormalizeEmail:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("alice@example.com", "alice@example.com"),
            ("Alice@Example.COM", "alice@example.com"),
            ("ALICE.SMITH+pets@mail.example.org", "alice.smith+pets@mail.example.org"),
            ("o'brien@example.ie", "o'brien@example.ie"),
            ("a_b-c@sub-domain.example.co.uk", "a_b-c@sub-domain.example.co.uk"),
            ("x@a.io", "x@a.io"),
            ("1234@123.example", "1234@123.example"),
        ],
    )
    def test_accepts_and_lower_cases(self, text: str, expected: str) -> None:
        assert normalize_email(text) == expected

    @pytest.mark.parametrize(
        "text",
        [
            "",
            "alice",
            "alice@",
            "@example.com",
            "alice@example",  # a single label
            "alice@@example.com",
            "alice@exa mple.com",
            "alice @example.com",
            " alice@example.com",
            "alice@example.com ",
            "alice@example.com\n",
            "alice..smith@example.com",
            ".alice@example.com",
            "alice.@example.com",
            "alice@-example.com",
            "alice@example-.com",
            "alice@example..com",
            "alice@.example.com",
            "alice@example.com.",
            "élise@example.com",
            "alice@exämple.com",
            "alice@example.com,bob@example.com",
            "Alice <alice@example.com>",
            "\x00alice@example.com",
            "a" * 64 + "@" + ("b" * 60 + ".") * 4 + "com",  # 313 characters: longer than 254
        ],
    )
    def test_rejects(self, text: str) -> None:
        assert normalize_email(text) is None

    @given(st.text(max_size=60))
    def test_result_is_lower_case_or_none(self, text: str) -> None:
        result = normalize_email(text)
        if result is not None:
            assert result == text.lower()
            assert normalize_email(result) == result
            assert len(result) <= 254
