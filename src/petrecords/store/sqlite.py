"""The embedded store: SQLite run directly on the event loop.

A SQLite primary-key lookup costs microseconds, far less than a hop to a worker thread, so
statements run inline. The process keeps two connections, each given by an asyncio lock to one
transaction at a time: one for reads, which WAL never makes wait for writers, and one for writes.
Write transactions start with BEGIN IMMEDIATE so that writers from other processes queue there instead
of failing half-way. That queue is waited on here, asynchronously, for at most `busy_timeout`: SQLite's
own busy handler would sleep inline and stall every request of the process.

Group commit: a commit waits for its fsync, and SQLite has one writer, so one commit per request caps
writes at the disk's sync rate. Write requests that are ready at the same moment therefore share one
SQLite transaction, each in its own savepoint (a failed request rolls back only its own work), and
one COMMIT. No request of the group answers before that COMMIT has returned; if it fails, all of them
answer 503 and none of their work is kept.

The statements every request runs (begin, commit, the primary-key lookup, the single-row writes
and the count changes) are compiled once from the schema and run on the driver's own connection:
SQLAlchemy's per-execution work costs several times the lookup itself. So are lists and counts (one
statement per query shape, compiled once) and the idempotency lookup; the idempotency writes, rarer, go
through SQLAlchemy on the same connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
import uuid
from collections.abc import Hashable, Sequence
from typing import Any

import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.db import create_sqlite_engine
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import PetRow
from petrecords.store.faults import DATABASE_ERRORS, LOCKED, STORAGE, raise_translated, unavailable
from petrecords.store.pages import PageAnchors
from petrecords.store.sql import (
    DELETE_PET,
    INSERT_PET,
    SELECT_PET,
    UPDATE_PET,
    SqlStore,
    SqlTransaction,
    Statement,
    count_changes,
    count_upsert,
    pet_values,
    row_to_pet,
)

# Waits between attempts to take the write lock that another process holds: short at first, as most writes
# take milliseconds, then steady, until busy_timeout.
_FIRST_BUSY_PAUSE_SECONDS = 0.001
_LAST_BUSY_PAUSE_SECONDS = 0.05

_NAMED = sqlite_dialect.dialect(paramstyle="named")
_COUNT_UPSERT = count_upsert(sqlite_dialect.insert)


def _compiled(statement: sa.ClauseElement) -> str:
    return str(statement.compile(dialect=_NAMED))


_SELECT_PET = _compiled(SELECT_PET)
_INSERT_PET = _compiled(INSERT_PET)
_UPDATE_PET = _compiled(UPDATE_PET)
_DELETE_PET = _compiled(DELETE_PET)
_CHANGE_COUNT = _compiled(_COUNT_UPSERT)


@functools.lru_cache(maxsize=1024)
def _compiled_query(statement: sa.Select[Any]) -> tuple[str, dict[str, Any]]:
    """The SQL of a reusable statement, and the values of the parameters it fixes itself."""
    compiled = statement.compile(dialect=_NAMED)
    return str(compiled), dict(compiled.params)


def _driver_value(value: Any) -> Any:
    return value.hex if isinstance(value, uuid.UUID) else value


def _driver_values(pet: PetRow) -> dict[str, Any]:
    values = pet_values(pet)
    values["id"] = pet.id.hex  # how SQLAlchemy's Uuid type stores it in SQLite
    return values


class _Connection:
    """One connection of the store, and the lock that gives it to one transaction at a time."""

    def __init__(self, engine: sa.Engine) -> None:
        self.sqlalchemy = engine.connect()
        self.driver: Any = self.sqlalchemy.connection.driver_connection
        self.lock = asyncio.Lock()


class _WriteGroup:
    """Write transactions that share one SQLite transaction, and so one COMMIT."""

    def __init__(self) -> None:
        self.committed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.broken: BaseException | None = None
        """Set when SQLite may have rolled the shared transaction back under a member."""


class SqliteTransaction(SqlTransaction):
    change_count = _COUNT_UPSERT

    def __init__(self, store: SqliteStore, *, write: bool) -> None:
        super().__init__(write=write)
        self._store = store
        self.page_anchors = store.page_anchors
        self._group: _WriteGroup | None = None
        self._leads_group = False

    def _connection(self) -> _Connection:
        return self._store.writer() if self.write else self._store.reader()

    async def data_version(self) -> Hashable:
        # data_version moves when another connection commits: this process's writer, or another process.
        other = (await self._run("PRAGMA data_version", {})).fetchone()[0]
        return (other, self._store.commits)

    async def _begin(self) -> None:
        if not self.write:
            reader = self._store.reader()
            await reader.lock.acquire()
            try:
                reader.driver.execute("BEGIN")
            except DATABASE_ERRORS as exc:
                reader.lock.release()
                raise_translated(exc)
            return
        await self._enter_write_group()
        writer = self._store.writer()
        try:
            writer.driver.execute("SAVEPOINT request")
        except DATABASE_ERRORS as exc:
            # Nothing of this request's is in the group: let the group commit without it.
            writer.lock.release()
            if self._leads_group:
                await asyncio.shield(self._commit_group())
            raise_translated(exc)

    async def _enter_write_group(self) -> None:
        """Hold the writer, inside the open write group or a new one (led by this transaction)."""
        store, writer = self._store, self._store.writer()
        deadline = time.monotonic() + store.busy_timeout_seconds
        pause = _FIRST_BUSY_PAUSE_SECONDS
        while True:
            await writer.lock.acquire()
            if store.group is not None:
                self._group = store.group
                return
            try:
                writer.driver.execute("BEGIN IMMEDIATE")
            except DATABASE_ERRORS as exc:
                writer.lock.release()
                error = unavailable(exc)
                if error is None:
                    raise
                remaining = deadline - time.monotonic()
                if error.cause != LOCKED or remaining <= 0:
                    raise error from exc
            else:
                self._group = store.group = _WriteGroup()
                self._leads_group = True
                return
            # Another process holds the write lock. Wait without the connection, so that reads go on meanwhile.
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _LAST_BUSY_PAUSE_SECONDS)

    async def _end(self, *, commit: bool) -> None:
        if not self.write:
            reader = self._store.reader()
            try:
                reader.driver.execute("COMMIT")
            except sqlite3.Error as exc:
                with contextlib.suppress(sqlite3.Error):
                    reader.driver.execute("ROLLBACK")
                raise_translated(exc)
            finally:
                reader.lock.release()
            return
        group, writer = self._joined_group(), self._store.writer()
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
            writer.lock.release()
        if self._leads_group:
            # Shielded: the group's other members wait for this commit even if this request is cancelled.
            await asyncio.shield(self._commit_group())
        if not commit:
            return
        if own_error is not None:
            raise_translated(own_error)
        await group.committed

    def _joined_group(self) -> _WriteGroup:
        if self._group is None:
            raise RuntimeError("the write transaction has not begun")
        return self._group

    async def _commit_group(self) -> None:
        """Let the write requests that are ready join, then commit them all at once."""
        store, writer, group = self._store, self._store.writer(), self._joined_group()
        await asyncio.sleep(0)
        async with writer.lock:
            store.group = None
            store.commits += 1
            try:
                if group.broken is not None:
                    raise group.broken
                writer.driver.execute("COMMIT")
            except sqlite3.Error as exc:
                # A failed COMMIT (disk full, I/O error) leaves nothing half-written: roll back and refuse.
                with contextlib.suppress(sqlite3.Error):
                    writer.driver.execute("ROLLBACK")
                group.committed.set_exception(unavailable(exc) or exc)
                group.committed.exception()  # every member is told; none may be left to ask
            else:
                group.committed.set_result(None)

    async def _run(self, sql: str, parameters: dict[str, Any] | list[dict[str, Any]]) -> sqlite3.Cursor:
        """One compiled statement on the driver's connection, inside this transaction."""
        if not self.begun:
            await self._begin()
            self.begun = True
        connection = self._connection().driver
        if self.write and not connection.in_transaction:
            # SQLite rolled the group's transaction back (disk full, I/O error): nothing may run outside it.
            raise DatabaseUnavailable(cause=STORAGE, detail="the write transaction was rolled back")
        try:
            if isinstance(parameters, list):
                return connection.executemany(sql, parameters)
            return connection.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise_translated(exc)

    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        sql, fixed = _compiled_query(statement[0])
        values = {**fixed, **{name: _driver_value(value) for name, value in statement[1].items()}}
        rows: list[Sequence[Any]] = (await self._run(sql, values)).fetchall()
        return rows

    async def get_pet(self, pet_id: uuid.UUID, *, for_update: bool = False) -> PetRow | None:
        # for_update needs nothing more: a write transaction already holds SQLite's one write lock.
        row = (await self._run(_SELECT_PET, {"pet_id": pet_id.hex})).fetchone()
        return None if row is None else row_to_pet(row)

    async def insert_pets(self, new_pets: Sequence[PetRow]) -> None:
        await self._run(_INSERT_PET, [_driver_values(pet) for pet in new_pets])
        await self._change_counts(count_changes((), new_pets))

    async def update_pet(self, pet: PetRow, *, previous: PetRow) -> None:
        values = _driver_values(pet)
        values["pet_id"] = values.pop("id")
        await self._run(_UPDATE_PET, values)
        await self._change_counts(count_changes([previous], [pet]))

    async def delete_pet(self, pet: PetRow) -> None:
        await self._run(_DELETE_PET, {"pet_id": pet.id.hex})
        await self._change_counts(count_changes([pet], ()))

    async def _change_counts(self, changes: list[tuple[str, str, int]]) -> None:
        if changes:
            await self._run(_CHANGE_COUNT, self.count_rows(changes))

    async def _execute(self, statement: sa.Executable, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        self._connection().sqlalchemy.execute(statement, rows)


class SqliteStore(SqlStore):
    dialect = "sqlite"

    def __init__(self, url: str, *, busy_timeout_ms: int) -> None:
        super().__init__()
        # SQLite never waits on its own here: _begin does, without blocking the event loop.
        self._engine = create_sqlite_engine(url, busy_timeout_ms=0, autocommit=True)
        self.busy_timeout_seconds = busy_timeout_ms / 1000
        self._reader: _Connection | None = None
        self._writer: _Connection | None = None
        self.group: _WriteGroup | None = None
        """The write group whose transaction is open, which a new write transaction joins."""
        self.page_anchors = PageAnchors()
        self.commits = 0
        """Write groups ended by this process: part of the data version."""

    def reader(self) -> _Connection:
        if self._reader is None:
            self._reader = self._connect()
        return self._reader

    def writer(self) -> _Connection:
        if self._writer is None:
            self._writer = self._connect()
        return self._writer

    def _connect(self) -> _Connection:
        try:
            return _Connection(self._engine)
        except DATABASE_ERRORS as exc:
            raise_translated(exc)

    def transaction(self, *, write: bool) -> SqliteTransaction:
        return SqliteTransaction(self, write=write)

    def pool_figures(self) -> dict[str, int]:
        connections = [c for c in (self._reader, self._writer) if c is not None]
        checked_out = sum(c.lock.locked() for c in connections)
        return {"size": 2, "checked_out": checked_out, "overflow": 0, "idle": len(connections) - checked_out}

    async def close(self) -> None:
        for connection in (self._reader, self._writer):
            if connection is not None:
                connection.sqlalchemy.close()
        self._reader = self._writer = None
        self._engine.dispose()
