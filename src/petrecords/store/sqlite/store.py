"""The store on SQLite: the database file, its connections, and readiness."""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import os
import stat
import time
import uuid
from collections.abc import Hashable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pysqlite3.dbapi2 as sqlite3

from petrecords.db import create_sqlite_engine, held_alone, sqlite_path, sqlite_uri
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Collection, Principal, Row
from petrecords.store.faults import CONNECTION, DATABASE_ERRORS, TIMEOUT, VANISHED, raise_translated, vanished
from petrecords.store.grants import PlanSizes
from petrecords.store.records import Statement
from petrecords.store.sql import SqlStore
from petrecords.store.sqlite.connections import (
    _READ_CONNECTIONS,
    _SQLITE_ERROR,
    _SQLITE_INTERRUPT,
    _SQLITE_NOTADB,
    _BusyWait,
    _Connection,
    _Database,
    _file_error,
    _identity,
    _stat,
)
from petrecords.store.sqlite.statements import _SCHEMA_VERSION, _driver_values, _lookup_of
from petrecords.store.sqlite.transaction import SqliteTransaction


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

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_ms: int,
        statement_timeout_seconds: float = math.inf,
        cache_kib: int | None = None,
    ) -> None:
        super().__init__()
        path = sqlite_path(url)
        if path is None:
            raise ValueError("the SQLite store needs a database file, not an in-memory database")
        # As strings: os.stat takes them a little faster than paths, and it runs before and after every COMMIT.
        self._path = str(path)
        self._wal_path = f"{path}-wal"
        self._probe_uri = sqlite_uri(path, mode="ro")
        # SQLite never waits on its own here: _begin does, without blocking the event loop.
        self._engine = create_sqlite_engine(url, busy_timeout_ms=0, autocommit=True, create=False, cache_kib=cache_kib)
        self.busy_timeout_seconds = busy_timeout_ms / 1000
        self.statement_timeout_seconds = statement_timeout_seconds
        """How long a read's statement may run before it is interrupted and the request answers 503."""
        self._database: _Database | None = None
        self._retired: list[_Database] = []
        """Databases no longer at the path whose connections a transaction still holds."""
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
            rows = database.lookups.cursor.execute(sql, (record_id.hex,)).fetchall()
        except sqlite3.Error as exc:
            raise_translated(exc)
        return row_reader.row(rows[0]) if rows else None

    async def lookup(self, statement: Statement) -> Sequence[Sequence[Any]]:
        # As `read` runs its lookup, on the lookups' connection and with no await between taking and giving it
        # back: SQLite reads one statement from one state of the data with no BEGIN, and the transaction's own
        # machinery (a reader taken in turn, its deadline, the end) cost a certificate link's first read about as
        # much again as the statement (bench/results/2026-12-06-certificate-first-read.md).
        # Bounded by the statement timeout all the same (on the lookups' connection, where one is set), though not
        # moved to a thread: what it reads is found by keys, and takes microseconds.
        lookups = self.database().lookups
        sql, values = _driver_values(*statement)
        lookups.deadline = time.monotonic() + self.statement_timeout_seconds
        try:
            rows: list[Sequence[Any]] = lookups.cursor.execute(sql, values).fetchall()
        except sqlite3.Error as exc:
            if getattr(exc, "sqlite_errorcode", None) == _SQLITE_INTERRUPT:
                raise self.timed_out() from exc
            raise_translated(exc)
        finally:
            lookups.deadline = math.inf
        return rows

    def timed_out(self) -> DatabaseUnavailable:
        """What a statement interrupted at its deadline (the statement timeout) is answered with."""
        timeout = self.statement_timeout_seconds
        return DatabaseUnavailable(cause=TIMEOUT, detail=f"a statement ran past its timeout of {timeout} s")

    def unread_data_version(self) -> Hashable:
        # On the lookups' connection, always the same one, as `read` uses it: the pragma's value is that
        # connection's own, comparable only with what the same connection said before. It moves when another
        # connection commits: this process's writer, or another process.
        database = self.database()
        try:
            other = database.lookups.cursor.execute("PRAGMA data_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise_translated(exc)
        return (id(database), other, self.commits)

    async def empty_log(self, *, past_bytes: int) -> bool:
        """Once the write-ahead log has grown past `past_bytes`, copy all of it into the database file and truncate
        it (`wal_checkpoint(TRUNCATE)`); whether it was emptied. For a burst of write transactions, between them:
        SQLite's own checkpoint after a COMMIT copies only the frames no reader still reads, and the log starts
        again from its beginning only when a write begins with every frame copied, which readers that never stop
        (every process's reads by id) keep from happening, so that the log grows for as long as the burst goes on
        (0.8-1.5 GB for 100,000 reminders, bench/results/2026-12-06-reminders-burst.md). The copy and its sync run
        on the caller's thread, holding the writer: for a burst that runs on a thread of its own. Readers that began
        before the copy ended keep the log from being truncated: it is tried again, with pauses that leave the
        event loop free, until the busy timeout. Durability is the COMMITs' as before: the copy is synced before
        the log is truncated."""
        try:
            if os.stat(self._wal_path).st_size <= past_bytes:
                return False
        except FileNotFoundError:
            return False
        busy = _BusyWait(self.busy_timeout_seconds)
        while True:
            database = self.database()
            writer = database.writer
            await writer.lock.acquire()
            try:
                if database.retired or writer.driver.in_transaction:
                    return False  # the file is gone, or a write group of this store's is open: its COMMIT first
                readers_in_the_way = writer.driver.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as exc:
                raise_translated(exc)
            finally:
                database.release(writer)
            if not readers_in_the_way:
                return True
            if busy.spent:
                return False
            await busy.pause()

    @contextlib.contextmanager
    def alone(self, duty: str) -> Iterator[bool]:
        """Whether the block is the only one, of every process that serves this database file, to run `duty` (a
        lock file beside the database, `{file}.{duty}-lock`; see db.held_alone), not waiting for it."""
        with contextlib.ExitStack() as holding:
            try:
                held = holding.enter_context(held_alone(Path(f"{self._path}.{duty}-lock")))
            except OSError as exc:
                raise _file_error(exc, "no folder at the configured database path") from exc
            yield held

    def held_elsewhere(self, duty: str) -> bool:
        """Whether another holder runs `duty` now (see `alone`): a look, which holds nothing after it."""
        with self.alone(duty) as held:
            return not held

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
