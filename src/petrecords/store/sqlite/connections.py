"""The process's connections to the database file: each given to one transaction at a time, statements on the
event loop and long ones on a thread, write groups sharing one COMMIT, the file they were opened on."""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.errors import DatabaseUnavailable
from petrecords.store.faults import CONNECTION, vanished
from petrecords.store.pages import PageAnchors

# Waits between attempts to take the write lock that another process holds, until busy_timeout. Under load
# another worker holds it almost always, free only for moments between the commit of one of its groups and
# the start of the next: pauses growing to 50 ms missed those moments for hundreds of milliseconds (the
# write p99 under the mixed load of `make bench`: 282 ms, 47 ms with pauses of at most 2 ms). An attempt
# costs microseconds, and only a group's leader makes them.
_FIRST_BUSY_PAUSE_SECONDS = 0.001
_LAST_BUSY_PAUSE_SECONDS = 0.002


class _BusyWait:
    """The pauses between attempts at what another connection holds (the write lock, a checkpoint's readers), until
    `seconds` (busy_timeout) from its making: each leaves the event loop free."""

    def __init__(self, seconds: float) -> None:
        self._deadline = time.monotonic() + seconds
        self._pause = _FIRST_BUSY_PAUSE_SECONDS

    @property
    def spent(self) -> bool:
        return time.monotonic() >= self._deadline

    async def pause(self) -> None:
        """Wait before the next attempt, no later than the deadline."""
        await asyncio.sleep(max(0.0, min(self._pause, self._deadline - time.monotonic())))
        self._pause = min(self._pause * 2, _LAST_BUSY_PAUSE_SECONDS)


_SQLITE_ERROR, _SQLITE_INTERRUPT, _SQLITE_NOTADB = 1, 9, 26
# Virtual machine instructions between two looks at the clock: tens of microseconds of work, so that a
# statement outlives its deadline by about that much, and a lookup of a few rows never looks at all.
_PROGRESS_STEPS = 10_000
# How long a read's statement may run on the event loop before it goes on to a thread: longer than a page of a
# list of a few thousand records takes, which then pays for no hop; short enough that the other requests of
# the process wait no longer than that.
_ON_THE_LOOP_SECONDS = 0.004
_READ_CONNECTIONS = 3
"""Connections for read transactions, and threads for their long statements: so many such reads run at once in a
process (lookups by id have a connection of their own)."""


def _all_rows(driver: Any, sql: str, parameters: tuple[Any, ...]) -> list[Sequence[Any]]:
    rows: list[Sequence[Any]] = driver.execute(sql, parameters).fetchall()
    return rows


class _EndedPastDeadline(Exception):
    """A statement on a thread ended after its deadline without being interrupted: the event loop's interrupt came
    before the thread had begun it, and SQLite ignores an interrupt while none of the connection's statements runs."""


def _landed(running: asyncio.Future[Any]) -> None:
    """What the request that waited for a statement on a thread does not do if it was cancelled meanwhile: take
    its error, which would otherwise be logged as never retrieved."""
    if not running.cancelled():
        running.exception()


FileIdentity = tuple[int, int]
"""(st_dev, st_ino): which file a path names."""


def _file_error(exc: OSError, missing: str) -> DatabaseUnavailable:
    """The 503 for an error of the database's files: `missing` where the file or its folder is not there."""
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return vanished(missing)
    return DatabaseUnavailable(cause=CONNECTION, detail=f"{type(exc).__name__}: {exc.strerror}")


def _stat(path: str) -> os.stat_result:
    """The status of the file at `path`, or the 503 that says why there is none to serve from."""
    try:
        return os.stat(path)
    except OSError as exc:
        raise _file_error(exc, "no database file at the configured path") from exc


def _identity(path: str) -> FileIdentity:
    status = _stat(path)
    return status.st_dev, status.st_ino


class _Connection:
    """One connection of the store, and the lock that gives it to one transaction at a time.

    With `bounded`, a statement still running at its deadline is interrupted (SQLite's progress handler, asked
    every _PROGRESS_STEPS virtual machine instructions): one that read a caller's every record would otherwise
    hold the connection until it ended, and, on the event loop, every request of the process.
    """

    def __init__(self, engine: sa.Engine, *, bounded: bool = False) -> None:
        self.sqlalchemy = engine.connect()
        driver: Any = self.sqlalchemy.connection.driver_connection
        self.driver = driver
        self.cursor: Any = driver.cursor()
        """For statements run whole with no await between (lookups by id): one cursor made for all of them."""
        self.lock = asyncio.Lock()
        self.closed = False
        self.deadline = math.inf
        """When the running statement is interrupted (time.monotonic()); infinity when none runs."""
        self.off_the_loop: asyncio.Future[Any] | None = None
        """The statement running on a thread, while one is."""
        self.page_anchors = PageAnchors()
        """The anchors of deep pages read on this connection: they are kept under its own `PRAGMA data_version`,
        a counter of this connection's alone, which another connection may show for a different state of the data."""
        if bounded:
            driver.set_progress_handler(self._past_deadline, _PROGRESS_STEPS)

    def _past_deadline(self) -> bool:
        return time.monotonic() > self.deadline

    def all_rows_on_a_thread(self, sql: str, parameters: tuple[Any, ...]) -> list[Sequence[Any]]:
        """A statement's rows, run on a thread with no progress handler: every call of the handler takes the GIL
        from the event loop (thousands a second), which made a long read about 60 % slower and doubled the p99 of
        the loop's own statements beside it. The event loop interrupts such a statement at its deadline instead
        (sqlite3_interrupt, made to be called from another thread)."""
        self.driver.set_progress_handler(None, 0)
        try:
            rows = _all_rows(self.driver, sql, parameters)
        finally:
            self.driver.set_progress_handler(self._past_deadline, _PROGRESS_STEPS)
        if self._past_deadline():
            raise _EndedPastDeadline
        return rows

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            # At once, not back into the engine's pool: the file it has open may be one that is gone.
            self.sqlalchemy.invalidate()
            self.sqlalchemy.close()


class _WriteGroup:
    """Write transactions that share one SQLite transaction, and so one COMMIT."""

    def __init__(self) -> None:
        self.committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.broken: BaseException | None = None
        """Set when SQLite may have rolled the shared transaction back under a member."""


class _Database:
    """The store's connections to one database file, the file that was at the configured path (with its
    write-ahead log) when they were opened."""

    def __init__(
        self,
        lookups: _Connection,
        readers: list[_Connection],
        writer: _Connection,
        files: tuple[FileIdentity, FileIdentity],
    ) -> None:
        self.lookups = lookups
        """For reads of one record by id, which never wait behind a long read."""
        self.readers = readers
        self.free_readers = asyncio.Semaphore(len(readers))
        self.writer = writer
        self.files = files
        """The database file and its write-ahead log, as they were when the connections opened them."""
        self.group: _WriteGroup | None = None
        """The write group whose transaction is open, which a new write transaction joins."""
        self.retired = False
        """Set when the file is no longer the one at the configured path: nothing more may begin here."""

    @property
    def connections(self) -> tuple[_Connection, ...]:
        return (self.lookups, *self.readers, self.writer)

    @property
    def closed(self) -> bool:
        return all(connection.closed for connection in self.connections)

    async def take_reader(self) -> _Connection:
        await self.free_readers.acquire()
        reader = next(reader for reader in self.readers if not reader.lock.locked())
        await reader.lock.acquire()  # free: at once
        return reader

    def release(self, connection: _Connection) -> None:
        connection.lock.release()
        if connection in self.readers:
            self.free_readers.release()
        if self.retired:
            self.close_idle()

    def close_idle(self) -> None:
        """Close the connections that no transaction holds; a transaction that holds one ends first."""
        for connection in self.connections:
            if not connection.lock.locked():
                connection.close()

    def close(self) -> None:
        for connection in self.connections:
            connection.close()
