"""What an instance does besides answering requests: the duties app.py hands to `Duties`, each a coroutine for the
life of the process (the change log's retention, horizon and NATS publisher in petrecords.changes, grant expiry in
resources/sharing.py, reminders, webhook delivery), and `every`, which runs a duty's step on an interval, or
sooner where the duty knows when it has work next. A duty
that one instance does at a time holds a lease in the database, and another takes over within seconds when that
one stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.store.base import Store
from petrecords.store.faults import DATABASE_ERRORS

log = logging.getLogger("petrecords.duties")

StoreLookup = Callable[[], Store | None]


STORE_ERRORS: tuple[type[BaseException], ...] = (DatabaseUnavailable, *DATABASE_ERRORS)


def wait_seconds(now_ms: int, moment_ms: int | None, *, most: float, least: float) -> float:
    """How long to wait for a moment (epoch milliseconds; None: none is known) from `now_ms`: until it, but at least
    `least`, so that a moment already past or a step of the clock cannot make a duty spin, and at most `most`."""
    if moment_ms is None:
        return most
    return min(most, max(least, (moment_ms - now_ms) / 1000))


async def every(
    seconds: float,
    step: Callable[[], Any],
    metrics: Metrics,
    duty: str,
    doing: str,
    *,
    pause: Callable[[], Awaitable[float]] | None = None,
) -> None:
    """Run a duty's step every `seconds`, for the life of the process; with `pause`, after a step that succeeded
    wait what it answers instead (it reads when there is work next; bounded by `seconds`)."""
    while True:
        wait = seconds
        try:
            await step()
            if pause is not None:
                wait = min(seconds, await pause())
        except STORE_ERRORS:
            pass  # the database is away: the next round tries again
        except Exception:
            # A bug must not end a duty for the life of the process: it is logged, counted and tried again.
            metrics.duty_failures.labels(duty).inc()
            log.exception("%s failed; trying again in %g s", doing, seconds)
        await asyncio.sleep(wait)


class Duties:
    """The background duties of one process, started with the app and stopped with it: each job a coroutine that
    runs for the life of the process, handed in by name (see app.py)."""

    TASK_NAME = "petrecords duty"
    """The start of the names of their tasks."""

    def __init__(self, jobs: Mapping[str, Callable[[], Coroutine[Any, Any, None]]]) -> None:
        self._jobs = dict(jobs)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(job(), name=f"{self.TASK_NAME}: {name}") for name, job in self._jobs.items()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
