"""Progress of a long command, on standard error while it is a terminal (records done, rate, time left); nothing
at all when it is not (a pipe, a file, a service manager's log)."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeRemainingColumn

REFRESH_SECONDS = 0.25


class Meter:
    """Counts what a command has done; shows it when standard error is a terminal. `total` is in the unit that
    `advance` is given besides records (bytes of a file read, or records), None when not known."""

    def __init__(self, what: str, *, total: int | None, unit: str = "records", stream: TextIO | None = None) -> None:
        self.records = 0
        self._started = time.monotonic()
        stream = sys.stderr if stream is None else stream
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        if stream.isatty():
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn(f"{{task.fields[records]:>12,}} {unit}"),
                TextColumn("{task.fields[rate]:>9,.0f}/s"),
                TimeRemainingColumn(),
                console=Console(file=stream),
                refresh_per_second=1 / REFRESH_SECONDS,
                transient=False,
            )
            self._task = self._progress.add_task(what, total=total, records=0, rate=0.0)

    def __enter__(self) -> Meter:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, records: int, done: int | None = None) -> None:
        """`records` more done; `done`: how far along, in the unit of the total (the records, when not given)."""
        self.records += records
        if self._progress is None or self._task is None:
            return
        elapsed = max(time.monotonic() - self._started, 1e-6)
        if done is None:
            self._progress.update(self._task, advance=records, records=self.records, rate=self.records / elapsed)
        else:
            self._progress.update(self._task, completed=done, records=self.records, rate=self.records / elapsed)
