"""The embedded store: SQLite run on the event loop, and long reads on threads.

A SQLite primary-key lookup costs microseconds, far less than a hop to a worker thread, so
statements run inline. A read that outlasts a few milliseconds there (a search, a count over many records)
is interrupted and run again on a thread of its own, in the same transaction, so that it never holds up the
process's other requests: SQLite lets go of Python's lock while it works. The reads of a transaction that took a
long read's turn go to that thread at once. The process keeps its connections
each given by an asyncio lock to one transaction at a time: one for lookups by id alone, a few for read
transactions, which WAL never makes wait for writers, and one for writes.
Write transactions start with BEGIN IMMEDIATE so that writers from other processes queue there instead
of failing half-way. That queue is waited on here, asynchronously, for at most `busy_timeout`: SQLite's
own busy handler would sleep inline and stall every request of the process.

Group commit: a commit waits for its fsync, and SQLite has one writer, so one commit per request caps
writes at the disk's sync rate. Write requests that are ready at the same moment therefore share one
SQLite transaction, each in its own savepoint (a failed request rolls back only its own work), and
one COMMIT. No request of the group answers before that COMMIT has returned; if it fails, all of them
answer 503 and none of their work is kept (the write-ahead log sealed, see SqliteTransaction._seal_log).

Every statement (one per collection and query shape) is compiled once to SQL with named parameters and run
on the driver's own connection: SQLAlchemy's per-execution work costs several times a primary-key lookup.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import math
import os
import stat
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import Any, NoReturn

import msgspec
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.db import create_sqlite_engine, sqlite_path, sqlite_uri
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Collection, Principal, Row
from petrecords.store.changelog import (
    SEEN_BY_SEPARATOR,
    change_insert,
    changes_seen_by_select,
    shared_at_select,
    state_upserts,
    window_statements,
)
from petrecords.store.counts import count_upsert
from petrecords.store.faults import (
    CONNECTION,
    DATABASE_ERRORS,
    LOCKED,
    STORAGE,
    TIMEOUT,
    VANISHED,
    raise_translated,
    unavailable,
    unconfirmed,
    vanished,
)
from petrecords.store.grants import PlanSizes
from petrecords.store.pages import PageAnchors
from petrecords.store.queries import TrigramSearch
from petrecords.store.records import Reader, Statement, reader_of, select_by_id
from petrecords.store.sql import SCHEMA_VERSION, SqlStore, SqlTransaction, idempotency_upsert
from petrecords.tables import period_counts

# Waits between attempts to take the write lock that another process holds, until busy_timeout. Under load
# another worker holds it almost always, free only for moments between the commit of one of its groups and
# the start of the next: pauses growing to 50 ms missed those moments for hundreds of milliseconds (the
# write p99 under the mixed load of `make bench`: 282 ms, 47 ms with pauses of at most 2 ms). An attempt
# costs microseconds, and only a group's leader makes them.
_FIRST_BUSY_PAUSE_SECONDS = 0.001
_LAST_BUSY_PAUSE_SECONDS = 0.002

_NAMED = sqlite_dialect.dialect(paramstyle="named")
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


@functools.lru_cache(maxsize=1024)
def _compiled(statement: sa.ClauseElement) -> tuple[str, dict[str, Any]]:
    """The SQL of a reusable statement, and the values of the parameters it fixes itself."""
    compiled = statement.compile(dialect=_NAMED)
    return str(compiled), dict(compiled.params)


_SCHEMA_VERSION = _compiled(SCHEMA_VERSION)[0]


def _all_rows(driver: Any, sql: str, parameters: dict[str, Any]) -> list[Sequence[Any]]:
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


def _driver_values(statement: sa.ClauseElement, values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    sql, fixed = _compiled(statement)
    driven = dict(fixed)
    for name, value in values.items():
        # A UUID as SQLAlchemy's Uuid type stores it in SQLite (a create passes some forty values through here).
        driven[name] = value.hex if isinstance(value, uuid.UUID) else value
    return sql, driven


@functools.lru_cache(maxsize=64)
def _lookup_of(collection: Collection) -> tuple[str, Reader]:
    """The SQL of a record's lookup by id, and the reader of its row."""
    return _compiled(select_by_id(collection))[0], reader_of(collection)


FileIdentity = tuple[int, int]
"""(st_dev, st_ino): which file a path names."""


def _stat(path: str) -> os.stat_result:
    """The status of the file at `path`, or the 503 that says why there is none to serve from."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise vanished("no database file at the configured path") from exc
    except OSError as exc:
        raise DatabaseUnavailable(cause=CONNECTION, detail=f"{type(exc).__name__}: {exc.strerror}") from exc


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
        if bounded:
            driver.set_progress_handler(self._past_deadline, _PROGRESS_STEPS)

    def _past_deadline(self) -> bool:
        return time.monotonic() > self.deadline

    def all_rows_on_a_thread(self, sql: str, parameters: dict[str, Any]) -> list[Sequence[Any]]:
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


class SqliteTransaction(SqlTransaction):
    change_count = count_upsert(sqlite_dialect.insert)
    change_period_count = count_upsert(sqlite_dialect.insert, period_counts)
    idempotency_insert = idempotency_upsert(sqlite_dialect.insert)
    # One writer at a time: the order of the log's positions is the order of the commits, and no write in
    # flight can come to precede a committed one.
    horizon = None
    change_insert = change_insert(sa.literal(0, sa.BigInteger()))
    changes_seen_by_statement = changes_seen_by_select(
        None,
        lambda column: column.in_(
            sa.select(sa.literal_column("value")).select_from(sa.func.json_each(sa.bindparam("readers")))
        ),
        lambda grantee: sa.func.group_concat(grantee, SEEN_BY_SEPARATOR),
    )
    # SQLite's one writer: every change's xid is 0, and the position is the row id the insert just gave.
    window_statements = window_statements(sa.literal(0, sa.BigInteger()), sa.func.last_insert_rowid())
    shared_at_statement = shared_at_select("sqlite")
    dialect_name = "sqlite"
    state_upserts = state_upserts(sqlite_dialect.insert)
    trigram_search = TrigramSearch.FTS5
    probe_search = TrigramSearch.FTS5

    @staticmethod
    def readers_value(readers: Sequence[str]) -> Any:
        return msgspec.json.encode(list(readers)).decode()

    def __init__(self, store: SqliteStore, *, write: bool, single: bool = False) -> None:
        super().__init__(write=write)
        self._store = store
        self._single = single
        self.page_anchors = store.page_anchors
        self.plan_sizes = store.plan_sizes
        self.long_read_turns = store.long_read_turns
        self._database: _Database | None = None
        self._reader: _Connection | None = None
        self._group: _WriteGroup | None = None
        self._leads_group = False

    def _bound(self) -> _Database:
        if self._database is None:
            raise RuntimeError("the transaction has not begun")
        return self._database

    def _connection(self) -> _Connection:
        if self.write:
            return self._bound().writer
        if self._reader is None:
            raise RuntimeError("the transaction has not begun")
        return self._reader

    async def data_version(self) -> Hashable:
        # data_version moves when another connection commits: this process's writer, or another process.
        other = (await self._run("PRAGMA data_version", {})).fetchone()[0]
        self._connection().deadline = math.inf
        return (other, self._store.commits)

    async def _begin(self) -> None:
        if not self.write:
            database = self._store.database()
            reader = await database.take_reader()
            if database.retired:
                database.release(reader)
                raise vanished("the database file was replaced while this transaction waited")
            self._database, self._reader = database, reader
            if self._single:
                return  # one statement sees one state of the data: BEGIN and COMMIT would only cost time
            try:
                reader.driver.execute("BEGIN")
            except DATABASE_ERRORS as exc:
                database.release(reader)
                raise_translated(exc)
            return
        await self._enter_write_group()
        database = self._bound()
        writer = database.writer
        try:
            writer.driver.execute("SAVEPOINT request")
        except DATABASE_ERRORS as exc:
            # Nothing of this request's is in the group: let the group commit without it.
            database.release(writer)
            if self._leads_group:
                await asyncio.shield(self._commit_group())
            raise_translated(exc)

    async def _enter_write_group(self) -> None:
        """Hold the writer, inside the open write group or a new one (led by this transaction)."""
        store = self._store
        deadline = time.monotonic() + store.busy_timeout_seconds
        pause = _FIRST_BUSY_PAUSE_SECONDS
        while True:
            database = store.database()
            writer = database.writer
            await writer.lock.acquire()
            if database.retired:
                database.release(writer)
                raise vanished("the database file was replaced while this transaction waited")
            self._database = database
            if database.group is not None:
                self._group = database.group
                return
            try:
                writer.driver.execute("BEGIN IMMEDIATE")
            except DATABASE_ERRORS as exc:
                database.release(writer)
                error = unavailable(exc)
                if error is None:
                    raise
                remaining = deadline - time.monotonic()
                if error.cause != LOCKED or remaining <= 0:
                    raise error from exc
            else:
                self._group = database.group = _WriteGroup()
                self._leads_group = True
                return
            # Another process holds the write lock. Wait without the connection, so that reads go on meanwhile.
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _LAST_BUSY_PAUSE_SECONDS)

    async def _end(self, *, commit: bool) -> None:
        database = self._bound()
        if not self.write:
            reader = self._connection()
            if (running := reader.off_the_loop) is not None:
                # Its request was cancelled while a statement ran on a thread: the connection is free once it ends.
                reader.driver.interrupt()
                running.add_done_callback(lambda _: self._end_read(database, reader, quietly=True))
                reader.off_the_loop = None
                return
            self._end_read(database, reader)
            return
        group, writer = self._joined_group(), database.writer
        own_error: BaseException | None = None
        try:
            if commit:
                writer.driver.execute("RELEASE request")
            else:
                writer.driver.execute("ROLLBACK TO request")
                writer.driver.execute("RELEASE request")
        except sqlite3.Error as exc:
            group.broken = group.broken or exc
            own_error = exc
        finally:
            database.release(writer)
        if self._leads_group:
            # Shielded: the group's other members wait for this commit even if this request is cancelled.
            await asyncio.shield(self._commit_group())
        if not commit:
            return
        if own_error is not None:
            raise_translated(own_error)
        await group.committed

    def _end_read(self, database: _Database, reader: _Connection, *, quietly: bool = False) -> None:
        try:
            if not self._single:
                reader.driver.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                reader.driver.execute("ROLLBACK")
            if not quietly:
                raise_translated(exc)
        finally:
            database.release(reader)

    def _joined_group(self) -> _WriteGroup:
        if self._group is None:
            raise RuntimeError("the write transaction has not begun")
        return self._group

    async def _commit_group(self) -> None:
        """Let the write requests that are ready join, then commit them all at once."""
        store, database, group = self._store, self._bound(), self._joined_group()
        writer = database.writer
        await asyncio.sleep(0)
        await writer.lock.acquire()
        try:
            database.group = None
            store.commits += 1
            committing = False
            try:
                if group.broken is not None:
                    raise group.broken
                if database.retired:
                    raise vanished("the database file was replaced while the write group was open")
                # Before COMMIT, so that nothing is committed to a file that is no longer the database; after
                # it, since a file replaced during the commit's sync took the group's work with it.
                store.verify(database)
                committing = True
                writer.driver.execute("COMMIT")
                committing = False
                store.verify(database)
            except (sqlite3.Error, DatabaseUnavailable) as exc:
                # No member is acknowledged. A file found gone after the COMMIT took the group's work with it.
                error = unavailable(exc) or exc
                if committing and not writer.driver.in_transaction and not await self._seal_log(writer):
                    error = unconfirmed(error) if isinstance(error, DatabaseUnavailable) else error
                with contextlib.suppress(sqlite3.Error):
                    writer.driver.execute("ROLLBACK")
                group.committed.set_exception(error)
                group.committed.exception()  # every member is told; none may be left to ask
            else:
                group.committed.set_result(None)
        finally:
            database.release(writer)

    async def _seal_log(self, writer: _Connection) -> bool:
        """After a COMMIT that failed and that SQLite rolled back, make sure that it stays undone: whether the commit
        failed before its frames were in the write-ahead log or in their sync, nobody sees it now, but a log whose
        frames are whole would give it back to the next process that recovers the log after a crash. A write of
        one page, committed, lands where those frames begin and breaks the chain of their checksums. Whether the
        seal held (False: nothing can be said of the failed commit)."""
        deadline = time.monotonic() + self._store.busy_timeout_seconds
        while True:
            try:
                writer.driver.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                error = unavailable(exc)
                if error is None or error.cause != LOCKED or time.monotonic() >= deadline:
                    return False
                await asyncio.sleep(_LAST_BUSY_PAUSE_SECONDS)  # another process writes: its commit seals too
                continue
            try:
                # The header's user version, which nothing else uses: written as it is, it makes page 1 a frame.
                version = int(writer.driver.execute("PRAGMA user_version").fetchone()[0])
                writer.driver.execute(f"PRAGMA user_version = {version}")
                writer.driver.execute("COMMIT")
            except sqlite3.Error:
                with contextlib.suppress(sqlite3.Error):
                    writer.driver.execute("ROLLBACK")
                return False
            return True

    async def _begun(self) -> None:
        if not self.begun:
            await self._begin()
            self.begun = True

    async def _run(self, sql: str, parameters: dict[str, Any] | list[dict[str, Any]]) -> sqlite3.Cursor:
        """One compiled statement on the driver's connection, inside this transaction, on the event loop; its
        deadline is set (and stays set until its rows have been fetched: they are stepped through then)."""
        await self._begun()
        connection = self._connection()
        driver = connection.driver
        if self.write and not driver.in_transaction:
            # SQLite rolled the group's transaction back (disk full, I/O error): nothing may run outside it.
            raise DatabaseUnavailable(cause=STORAGE, detail="the write transaction was rolled back")
        connection.deadline = time.monotonic() + self._store.statement_timeout_seconds
        try:
            if isinstance(parameters, list):
                return driver.executemany(sql, parameters)
            return driver.execute(sql, parameters)
        except sqlite3.Error as exc:
            self._failed(connection, exc)

    def _failed(self, connection: _Connection, exc: sqlite3.Error) -> NoReturn:
        connection.deadline = math.inf
        if getattr(exc, "sqlite_errorcode", None) == _SQLITE_INTERRUPT and not self.write:
            raise self._timed_out() from exc
        raise_translated(exc)

    def _timed_out(self) -> DatabaseUnavailable:
        timeout = self._store.statement_timeout_seconds
        return DatabaseUnavailable(cause=TIMEOUT, detail=f"a statement ran past its timeout of {timeout} s")

    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        # The request clients send most: its statement and reader looked up once, its one parameter given as
        # the driver takes it.
        sql, reader = _lookup_of(collection)
        rows = (await self._run(sql, {"record_id": record_id.hex})).fetchall()
        return reader.row(rows[0]) if rows else None

    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        sql, values = _driver_values(statement[0], statement[1])
        if not self.write:
            return await self._read(sql, values)
        cursor = await self._run(sql, values)
        connection = self._connection()
        try:
            rows: list[Sequence[Any]] = cursor.fetchall()
        except sqlite3.Error as exc:
            self._failed(connection, exc)
        connection.deadline = math.inf
        return rows

    async def _read(self, sql: str, parameters: dict[str, Any]) -> list[Sequence[Any]]:
        """A read's rows: on the event loop for as long as _ON_THE_LOOP_SECONDS, then, if it has not ended, from
        the start again on a thread, in the same transaction (which sees the same data). A transaction that took a
        long read's turn reads on the thread from the start: its first milliseconds on the loop held up every
        quick request of the process (get by id's p99 beside one-letter searches of 10,000 pets: 1.4-2.8 times
        its p99 alone, 0.8-1.4 from the thread; bench/results/2026-11-28-quiet-one-session.md)."""
        await self._begun()
        reader = self._connection()
        started = time.monotonic()
        timeout_at = started + self._store.statement_timeout_seconds
        if self._turn is None:
            reader.deadline = min(timeout_at, started + _ON_THE_LOOP_SECONDS)
            try:
                rows = _all_rows(reader.driver, sql, parameters)
            except sqlite3.Error as exc:
                if getattr(exc, "sqlite_errorcode", None) != _SQLITE_INTERRUPT or time.monotonic() >= timeout_at:
                    self._failed(reader, exc)
            else:
                reader.deadline = math.inf
                return rows
        reader.deadline = timeout_at
        loop = asyncio.get_running_loop()
        running = loop.run_in_executor(self._store.long_reads, reader.all_rows_on_a_thread, sql, parameters)
        reader.off_the_loop = running
        running.add_done_callback(_landed)
        timer = None
        if math.isfinite(timeout_at):
            timer = loop.call_later(timeout_at - time.monotonic(), reader.driver.interrupt)
        try:
            # Shielded: when the request is cancelled, the statement is interrupted, and the connection is given
            # back only once the thread is done with it (see _end).
            rows = await asyncio.shield(running)
        except sqlite3.Error as exc:
            reader.off_the_loop = None
            self._failed(reader, exc)
        except _EndedPastDeadline:
            reader.off_the_loop = None
            reader.deadline = math.inf
            raise self._timed_out() from None
        finally:
            if timer is not None:
                timer.cancel()
        reader.off_the_loop = None
        reader.deadline = math.inf
        return rows

    async def _execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if isinstance(rows, dict):
            await self._run(*_driver_values(statement, rows))
        else:
            sql = _compiled(statement)[0]
            await self._run(sql, [_driver_values(statement, row)[1] for row in rows])
        self._connection().deadline = math.inf


class SqliteStore(SqlStore):
    """The database file at the configured path, through two connections opened together.

    Once that path no longer names the file the connections opened (deleted, moved away, replaced), a
    commit there would be acknowledged and then lost with the file: `verify` finds this before and after
    every COMMIT and in readiness, then the connections are closed (once no transaction holds them) and
    requests answer 503 until a database is at the path again. The store never makes a new database: it
    opens only a file that exists and that is a database migrated to this version's schema (checked
    read-only, so that a file that is not, an empty one say, is left as it was). A restored file is served
    again with no restart.
    """

    dialect = "sqlite"

    def __init__(self, url: str, *, busy_timeout_ms: int, statement_timeout_seconds: float = math.inf) -> None:
        super().__init__()
        path = sqlite_path(url)
        if path is None:
            raise ValueError("the SQLite store needs a database file, not an in-memory database")
        # As strings: os.stat takes them a little faster than paths, and it runs before and after every COMMIT.
        self._path = str(path)
        self._wal_path = f"{path}-wal"
        self._probe_uri = sqlite_uri(path, mode="ro")
        # SQLite never waits on its own here: _begin does, without blocking the event loop.
        self._engine = create_sqlite_engine(url, busy_timeout_ms=0, autocommit=True, create=False)
        self.busy_timeout_seconds = busy_timeout_ms / 1000
        self.statement_timeout_seconds = statement_timeout_seconds
        """How long a read's statement may run before it is interrupted and the request answers 503."""
        self._database: _Database | None = None
        self._retired: list[_Database] = []
        """Databases no longer at the path whose connections a transaction still holds."""
        self.page_anchors = PageAnchors()
        self.plan_sizes = PlanSizes()
        self.long_reads = concurrent.futures.ThreadPoolExecutor(_READ_CONNECTIONS, thread_name_prefix="sqlite-read")
        """Where reads that take longer than _ON_THE_LOOP_SECONDS run, and those of a transaction that took a long
        read's turn (one thread per read connection)."""
        self.commits = 0
        """Write groups ended, and databases opened anew, by this process: part of the data version."""

    def database(self) -> _Database:
        """The open database, opened first if none is."""
        if self._database is None:
            self._database = self._open()
        return self._database

    def _open(self) -> _Database:
        self._retired = [database for database in self._retired if not database.closed]
        if self._retired:
            # A process's connections to one file share SQLite's locks and its WAL index: new connections must
            # not meet old ones that still use a write-ahead log that is gone.
            raise vanished("connections to the database file that is gone are still in use")
        status = _stat(self._path)
        if not stat.S_ISREG(status.st_mode):
            # What SQLite itself would call CANTOPEN: a directory, say, where the database should be.
            raise DatabaseUnavailable(cause=CONNECTION, detail="the configured database path is not a file")
        before = status.st_dev, status.st_ino
        self._check_schema()
        opened: list[_Connection] = []
        try:
            # Only reads are interrupted: SQLite rolls back the whole transaction of an interrupted write, which
            # would be the write group's, every member's work. A write changes a few rows, found by their keys.
            opened.append(_Connection(self._engine, bounded=math.isfinite(self.statement_timeout_seconds)))
            # Read transactions' connections are always bounded: their reads leave the event loop at a deadline.
            opened.extend(_Connection(self._engine, bounded=True) for _ in range(_READ_CONNECTIONS))
            opened.append(_Connection(self._engine))
            # Both connections have the database in WAL mode now, and so the write-ahead log open.
            files = (_identity(self._path), _identity(self._wal_path))
            if files[0] != before:
                raise vanished("the database file was replaced while it was being opened")
        except BaseException as exc:
            for connection in opened:
                connection.close()
            if isinstance(exc, DATABASE_ERRORS):
                raise_translated(exc)
            raise
        return _Database(opened[0], opened[1:-1], opened[-1], files)

    def _check_schema(self) -> None:
        """Refuse a file that is not a database migrated to this version's schema, asking read-only."""
        try:
            probe = sqlite3.connect(self._probe_uri, uri=True, timeout=0, check_same_thread=False)
        except sqlite3.Error as exc:
            raise_translated(exc)
        try:
            version = probe.execute(_SCHEMA_VERSION).fetchall()
        except sqlite3.Error as exc:
            # No alembic_version table (an empty file is an empty database), or not a database at all.
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in (_SQLITE_ERROR, _SQLITE_NOTADB):
                raise vanished(f"the file at the configured path is not a migrated database: {exc}") from exc
            raise_translated(exc)
        finally:
            probe.close()
        if version != [(self.head,)]:
            raise vanished(f"the database at the configured path is not at schema {self.head}")

    def verify(self, database: _Database) -> None:
        """Raise the 503 unless the configured path still names the files `database` has open.

        Two stat calls: cheap beside a commit, which waits for its fsync.
        """
        try:
            files = (_identity(self._path), _identity(self._wal_path))
        except DatabaseUnavailable as error:
            if error.cause == VANISHED:
                self._retire(database)
            raise
        if files != database.files:
            self._retire(database)
            raise vanished("the file at the configured path is not the database file the store opened")

    def _retire(self, database: _Database) -> None:
        database.retired = True
        if self._database is database:
            self._database = None
            self._retired.append(database)
            self.commits += 1  # a database opened anew may be another file: anchors of this one do not hold
        database.close_idle()

    async def schema_is_current(self) -> bool:
        if (database := self._database) is not None:
            try:
                self.verify(database)
            except DatabaseUnavailable:
                return False
        return await super().schema_is_current()

    async def read(self, collection: Collection, record_id: uuid.UUID, caller: Principal | None) -> Row | None:
        # What a transaction of this one statement does (see SqliteTransaction._begin and get), without making
        # one: on the request clients send most, the transaction's own work cost more than the statement.
        # Its connection is taken and given back with no await between: no other request can meet it in use,
        # so it needs no lock, and the database `database()` gives cannot have been retired meanwhile.
        database = self.database()
        sql, row_reader = _lookup_of(collection)
        try:
            # All of them: a statement read to its end holds no snapshot of the database open.
            rows = database.lookups.cursor.execute(sql, {"record_id": record_id.hex}).fetchall()
        except sqlite3.Error as exc:
            raise_translated(exc)
        return row_reader.row(rows[0]) if rows else None

    async def data_version(self) -> Hashable:
        # On the lookups' connection, always the same one, as `read` uses it: the pragma's value is that
        # connection's own, comparable only with what the same connection said before.
        database = self.database()
        try:
            other = database.lookups.cursor.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise_translated(exc)
        return (id(database), other, self.commits)

    @property
    def read_connections(self) -> int:
        return _READ_CONNECTIONS

    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> SqliteTransaction:
        return SqliteTransaction(self, write=write, single=single and not write)

    def pool_figures(self) -> dict[str, int]:
        database = self._database
        connections = () if database is None else database.connections
        checked_out = sum(connection.lock.locked() for connection in connections)
        idle = len(connections) - checked_out
        return {"size": 2 + _READ_CONNECTIONS, "checked_out": checked_out, "overflow": 0, "idle": idle}

    async def close(self) -> None:
        for database in (self._database, *self._retired):
            if database is not None:
                database.close()
        self._database = None
        self._retired = []
        self.long_reads.shutdown(wait=False, cancel_futures=True)
        self._engine.dispose()
