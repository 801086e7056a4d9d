"""`every` and `wait_seconds`: how long a duty waits between its steps."""

from __future__ import annotations

import asyncio

import pytest

from petrecords import duties
from petrecords.duties import every, wait_seconds
from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics


class TestWaitSeconds:
    def test_until_a_moment_inside_the_bounds(self) -> None:
        assert wait_seconds(10_000, 11_500, most=10, least=0.2) == 1.5

    def test_no_moment_waits_the_most(self) -> None:
        assert wait_seconds(10_000, None, most=10, least=0.2) == 10

    def test_a_moment_beyond_the_most_waits_the_most(self) -> None:
        assert wait_seconds(10_000, 60_000, most=10, least=0.2) == 10

    @pytest.mark.parametrize("moment", [10_000, 10_100, 9_000, -(10**15)])
    def test_a_moment_now_or_past_waits_the_least(self, moment: int) -> None:
        # A row owed since before the pass ended, or a clock stepped forward: no pass at once, in a loop.
        assert wait_seconds(10_000, moment, most=10, least=0.2) == 0.2


async def waits_of(monkeypatch: pytest.MonkeyPatch, step: object, pause: object, rounds: int) -> list[float]:
    """The waits `every` asks for in its first `rounds` rounds (the duty ends at the last)."""
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == rounds:
            raise asyncio.CancelledError

    monkeypatch.setattr(duties.asyncio, "sleep", sleep)
    with pytest.raises(asyncio.CancelledError):
        await every(10, step, Metrics(), "test", "testing", pause=pause)  # type: ignore[arg-type]
    return waits


class TestEveryWithAPause:
    async def test_waits_what_the_pause_answers_at_most_the_interval(self, monkeypatch: pytest.MonkeyPatch) -> None:
        answers = iter([1.5, 0.2, 25.0])

        async def step() -> None:
            pass

        async def pause() -> float:
            return next(answers)

        assert await waits_of(monkeypatch, step, pause, 3) == [1.5, 0.2, 10]

    async def test_a_failing_read_or_step_waits_the_interval(self, monkeypatch: pytest.MonkeyPatch) -> None:
        steps = iter([None, DatabaseUnavailable(), None])

        async def step() -> None:
            failure = next(steps)
            if failure is not None:
                raise failure

        reads = iter([DatabaseUnavailable(), 2.0])

        async def pause() -> float:
            answer = next(reads)
            if isinstance(answer, Exception):
                raise answer
            return answer

        # The database away when the pause reads, then at the step (no read then), then both answer.
        assert await waits_of(monkeypatch, step, pause, 3) == [10, 10, 2.0]
