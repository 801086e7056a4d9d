"""A transaction on SQLite: on the event loop, long reads on threads, writes in a group with one COMMIT (see the
package's docstring)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Collection, Row
from petrecords.store.bookkeeping import idempotency_upsert
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
    DATABASE_ERRORS,
    LOCKED,
    STORAGE,
    raise_translated,
    unavailable,
    unconfirmed,
    vanished,
)
from petrecords.store.queries import TrigramSearch
from petrecords.store.records import Statement
from petrecords.store.sql import SqlTransaction
from petrecords.store.sqlite.connections import (
    _LAST_BUSY_PAUSE_SECONDS,
    _ON_THE_LOOP_SECONDS,
    _SQLITE_INTERRUPT,
    _all_rows,
    _BusyWait,
    _Connection,
    _Database,
    _EndedPastDeadline,
    _landed,
    _WriteGroup,
)
from petrecords.store.sqlite.statements import _compiled, _driver_values, _in_order, _lookup_of
from petrecords.tables import period_counts

if TYPE_CHECKING:
    from petrecords.store.sqlite.store import SqliteStore


class SqliteTransaction(SqlTransaction):
    change_count = count_upsert(sqlite_dialect.insert)
    change_period_count = count_upsert(sqlite_dialect.insert, period_counts)
    idempotency_insert = idempotency_upsert(sqlite_dialect.insert)
    # One writer at a time: the order of the log's positions is the order of the commits, and no write in
    # flight can come to precede a committed one.
    horizon = None
    one_writer = True
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
        other = (await self._run("PRAGMA data_version", ())).fetchone()[0]
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
            self.page_anchors = reader.page_anchors
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
        self.page_anchors = writer.page_anchors
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
        busy = _BusyWait(store.busy_timeout_seconds)
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
                if error.cause != LOCKED or busy.spent:
                    raise error from exc
            else:
                self._group = database.group = _WriteGroup()
                self._leads_group = True
                return
            # Another process holds the write lock. Wait without the connection, so that reads go on meanwhile.
            await busy.pause()

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

    async def _run(self, sql: str, parameters: tuple[Any, ...] | list[tuple[Any, ...]]) -> sqlite3.Cursor:
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
            raise self._store.timed_out() from exc
        raise_translated(exc)

    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        # The request clients send most: its statement and reader looked up once, its one parameter given as
        # the driver takes it.
        sql, reader = _lookup_of(collection)
        rows = (await self._run(sql, (record_id.hex,))).fetchall()
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

    async def _read(self, sql: str, parameters: tuple[Any, ...]) -> list[Sequence[Any]]:
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
            raise self._store.timed_out() from None
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
            sql, names, fixed = _compiled(statement)
            # The values of each row as _driver_values gives them, with the statement looked up once: a batch of
            # reminders passes 1,000 changes of a dozen values each through here.
            await self._run(sql, [_in_order(names, fixed, row) for row in rows])
        self._connection().deadline = math.inf
