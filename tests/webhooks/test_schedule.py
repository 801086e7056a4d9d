"""When a failed delivery is tried again and when a webhook is disabled (webhooks.schedule), and the settings
that say so (PETRECORDS_WEBHOOKS_RETRY_SECONDS, PETRECORDS_WEBHOOKS_DISABLE_AFTER_HOURS)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords.config import Settings
from petrecords.webhooks.schedule import HOUR_MS, RetrySchedule

DEFAULT = RetrySchedule(waits_ms=(5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000), disable_after_ms=72 * HOUR_MS)


def _settings(**values: Any) -> Settings:
    return Settings(data_dir=Path("data"), **values)


class TestSettings:
    def test_the_defaults_are_the_contracts(self) -> None:
        """5 s, 30 s, 2 min, 10 min, 30 min, then every hour; disabled after 72 hours (section 17)."""
        assert RetrySchedule.from_settings(_settings()) == DEFAULT

    @pytest.mark.parametrize(
        ("text", "waits_ms"),
        [("1, 2,3", (1_000, 2_000, 3_000)), ("0.25", (250,)), ("1.5,60", (1_500, 60_000)), ("0.0001", (1,))],
    )
    def test_waits_are_comma_separated_seconds(self, text: str, waits_ms: tuple[int, ...]) -> None:
        assert RetrySchedule.from_settings(_settings(webhooks_retry_seconds=text)).waits_ms == waits_ms

    def test_the_variables_are_read(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """As an operator sets them: a comma-separated list, and a decimal number."""
        monkeypatch.setenv("PETRECORDS_WEBHOOKS_RETRY_SECONDS", "0.5, 2")
        monkeypatch.setenv("PETRECORDS_WEBHOOKS_DISABLE_AFTER_HOURS", "1.5")
        assert RetrySchedule.from_settings(_settings()) == RetrySchedule((500, 2_000), 3 * HOUR_MS // 2)

    @pytest.mark.parametrize("text", ["", " , ", "5,x", "5,0", "-5", "nan", "inf", "5,604801"])
    def test_waits_that_are_not_seconds_above_0_are_refused(self, text: str) -> None:
        with pytest.raises(pydantic.ValidationError, match="webhooks_retry_seconds"):
            _settings(webhooks_retry_seconds=text)

    def test_the_disabling_time_is_a_decimal_number_of_hours(self) -> None:
        assert (
            RetrySchedule.from_settings(_settings(webhooks_disable_after_hours="0.5")).disable_after_ms == HOUR_MS // 2
        )
        for refused in ("0", "-1", "x", "8761"):
            with pytest.raises(pydantic.ValidationError, match="webhooks_disable_after_hours"):
                _settings(webhooks_disable_after_hours=refused)

    def test_private_targets_are_refused_and_a_delivery_takes_10_s_at_most_by_default(self) -> None:
        settings = _settings()
        assert settings.webhooks_allow_private is False
        assert settings.webhooks_timeout_seconds == 10


class TestDefaultSchedule:
    def test_the_waits_in_turn_then_every_hour(self) -> None:
        assert [DEFAULT.wait_ms(failures) for failures in range(1, 10)] == [
            5_000, 30_000, 120_000, 600_000, 1_800_000, 3_600_000, 3_600_000, 3_600_000, 3_600_000
        ]  # fmt: skip

    def test_each_wait_counts_from_the_failure_before(self) -> None:
        """An attempt that took its whole 10 s still leaves the receiver its 5 s."""
        assert DEFAULT.next_attempt_at(failed_at_ms=1_000_000 + 10_000, failures=1) == 1_015_000

    def test_disabled_after_72_hours_of_failures(self) -> None:
        first = 1_000_000
        assert not DEFAULT.disable_due(first_failure_ms=first, failed_at_ms=first + 72 * HOUR_MS - 1)
        assert DEFAULT.disable_due(first_failure_ms=first, failed_at_ms=first + 72 * HOUR_MS)

    def test_a_failure_count_starts_at_1(self) -> None:
        with pytest.raises(ValueError, match="from 1"):
            DEFAULT.wait_ms(0)


schedules = st.builds(
    RetrySchedule,
    waits_ms=st.lists(st.integers(min_value=1, max_value=7 * 86_400_000), min_size=1, max_size=10).map(tuple),
    disable_after_ms=st.integers(min_value=1, max_value=8760 * HOUR_MS),
)
times = st.integers(min_value=0, max_value=2**48)


class TestProperties:
    @given(schedule=schedules, extra=st.integers(min_value=0, max_value=50))
    def test_the_waits_are_the_configured_ones_then_the_last_again(self, schedule: RetrySchedule, extra: int) -> None:
        count = len(schedule.waits_ms) + extra
        assert [schedule.wait_ms(failures) for failures in range(1, count + 1)] == [
            *schedule.waits_ms,
            *[schedule.waits_ms[-1]] * extra,
        ]

    @given(schedule=schedules, failed_at=times, failures=st.integers(min_value=1, max_value=10_000))
    def test_the_next_attempt_is_after_the_failure_by_its_wait(
        self, schedule: RetrySchedule, failed_at: int, failures: int
    ) -> None:
        next_at = schedule.next_attempt_at(failed_at_ms=failed_at, failures=failures)
        assert next_at > failed_at
        assert next_at - failed_at == schedule.wait_ms(failures)

    @given(schedule=schedules, first=times, count=st.integers(min_value=1, max_value=200))
    def test_attempts_that_fail_at_once_follow_the_waits_from_the_first_failure(
        self, schedule: RetrySchedule, first: int, count: int
    ) -> None:
        failed_at, failures = first, 1
        while failures < count:
            failed_at = schedule.next_attempt_at(failed_at_ms=failed_at, failures=failures)
            failures += 1
        assert failed_at - first == sum(schedule.wait_ms(number) for number in range(1, count))

    @given(
        schedule=schedules, first=times, elapsed=st.integers(min_value=0, max_value=2**40), later=st.integers(0, 2**40)
    )
    def test_disabling_comes_once_the_failures_have_lasted_the_time_and_stays(
        self, schedule: RetrySchedule, first: int, elapsed: int, later: int
    ) -> None:
        due = schedule.disable_due(first_failure_ms=first, failed_at_ms=first + elapsed)
        assert due == (elapsed >= schedule.disable_after_ms)
        if due:
            assert schedule.disable_due(first_failure_ms=first, failed_at_ms=first + elapsed + later)
