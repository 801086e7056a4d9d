"""Value rules shared by every layer: record ids, timestamps and user identifiers."""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from fractions import Fraction

# RFC 5322 dot-atom local part and a DNS host name with at least two labels, ASCII only. The OpenAPI
# document publishes the same expression.
EMAIL_PATTERN = (
    r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
    r"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
)
_EMAIL = re.compile(EMAIL_PATTERN)
MAX_EMAIL_LENGTH = 254


def normalize_email(value: str) -> str | None:
    """The lower-case form of an e-mail address, or None when `value` is not one."""
    if len(value) > MAX_EMAIL_LENGTH or not _EMAIL.fullmatch(value):
        return None
    return value.lower()


class _UuidV7Generator:
    """RFC 9562 version 7 ids, strictly increasing within the process.

    The 12 bits after the millisecond timestamp are a counter (method 1 of RFC 9562 section 6.2),
    so ids issued in the same millisecond still sort in issue order.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_ms = 0
        self._counter = 0

    def __call__(self) -> uuid.UUID:
        with self._lock:
            now_ms = time.time_ns() // 1_000_000
            if now_ms > self._last_ms:
                self._last_ms = now_ms
                self._counter = int.from_bytes(os.urandom(2), "big") & 0x3FF
            else:
                self._counter += 1
                if self._counter > 0xFFF:
                    # Counter exhausted: borrow the next millisecond rather than repeat an id.
                    self._last_ms += 1
                    self._counter = 0
            ms, counter = self._last_ms, self._counter
        rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
        value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand_b
        return uuid.UUID(int=value)


new_record_id = _UuidV7Generator()


_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


_new_object = object.__new__
_set_slot = object.__setattr__
_SAFETY_UNKNOWN = uuid.SafeUUID.unknown


def uuid_of_int(value: int) -> uuid.UUID:
    """The UUID of a 128-bit integer already known to be one: what `uuid.UUID(int=value)` makes, without its
    checks, which cost as much again on every record read."""
    made = _new_object(uuid.UUID)
    _set_slot(made, "int", value)
    _set_slot(made, "is_safe", _SAFETY_UNKNOWN)
    return made


def uuid_of_hex(value: str) -> uuid.UUID:
    """The UUID of 32 hexadecimal digits as a database returns a stored id (ValueError for anything else)."""
    if len(value) != 32:
        raise ValueError(f"not a stored UUID: {value!r}")
    return uuid_of_int(int(value, 16))


def parse_record_id(text: str) -> uuid.UUID | None:
    """A record id in canonical form (any letter case), or None."""
    return uuid_of_int(int(text.replace("-", ""), 16)) if _CANONICAL_UUID.fullmatch(text) else None


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_MINUTE_MS = 60_000
_MINUTES_A_DAY = 1_440
_KEPT = 16_384
_minute_prefixes: dict[int, str] = {}
"""Minute (since the epoch) -> its `YYYY-MM-DDTHH:MM:`: the timestamps a process shows bunch up in time."""
_day_prefixes: dict[int, str] = {}
"""Day (since the epoch) -> its `YYYY-MM-DDT`: dates that do not bunch up (due dates, say) still share days."""


def format_timestamp(epoch_ms: int) -> str:
    """RFC 3339, UTC, exactly millisecond precision: 2026-11-21T16:06:29.123Z; the year always in four digits
    (0001-01-01T00:00:00.000Z), from the year 1 to 9999."""
    minute, in_minute = divmod(epoch_ms, _MINUTE_MS)
    prefix = _minute_prefixes.get(minute)
    if prefix is None:
        day, in_day = divmod(minute, _MINUTES_A_DAY)
        date = _day_prefixes.get(day)
        if date is None:
            if len(_day_prefixes) >= _KEPT:
                _day_prefixes.clear()
            # Built from the fields: strftime's %Y writes a year before 1000 with fewer than four digits
            # ("1-01-01", .NET's default date, which moved-in data can hold), which RFC 3339 does not read.
            civil = time.gmtime(day * 86_400)
            date = _day_prefixes[day] = f"{civil.tm_year:04d}-{civil.tm_mon:02d}-{civil.tm_mday:02d}T"
        if len(_minute_prefixes) >= _KEPT:
            _minute_prefixes.clear()
        hour, in_hour = divmod(in_day, 60)
        prefix = _minute_prefixes[minute] = f"{date}{hour:02d}:{in_hour:02d}:"
    seconds, millis = divmod(in_minute, 1000)
    return f"{prefix}{seconds:02d}.{millis:03d}Z"


_KEPT_FRACTION_DIGITS = 9
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def parse_datetime_ms(text: str) -> int | Fraction | None:
    """An RFC 3339 date-time as exact milliseconds since the epoch, or None when malformed.

    Fractions of a millisecond are kept so that range bounds compare exactly with stored values. RFC 3339
    allows any number of fraction digits: beyond the ninth, only whether one of them is not zero can change
    how the moment compares with, rounds or ceils to whole milliseconds, so they are kept as one sticky
    digit (a thousand-digit fraction costs no big-integer arithmetic).
    """
    match = _RFC3339.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction, zulu, sign, off_hours, off_minutes = match.group(7, 8, 9, 10, 11)
    try:
        moment = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
    offset_minutes = 0
    if not zulu:
        hours, minutes = int(off_hours), int(off_minutes)
        if hours > 23 or minutes > 59:
            return None
        offset_minutes = (hours * 60 + minutes) * (1 if sign == "+" else -1)
    whole_ms = (int(moment.timestamp()) - offset_minutes * 60) * 1000
    if not fraction:
        return whole_ms
    if len(fraction) <= 3:
        # Whole milliseconds, as nearly every client sends them: no Fraction to build.
        return whole_ms + int(fraction.ljust(3, "0"))
    if len(fraction) > _KEPT_FRACTION_DIGITS:
        fraction = fraction[:_KEPT_FRACTION_DIGITS] + ("1" if fraction[_KEPT_FRACTION_DIGITS:].strip("0") else "")
    return whole_ms + Fraction(int(fraction), 10 ** len(fraction)) * 1000
