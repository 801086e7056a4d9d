"""The embedded store: SQLite run directly on the event loop.

A SQLite primary-key lookup costs microseconds, far less than a hop to a worker thread, so
statements run inline. The process keeps one connection; an asyncio lock gives it to one
transaction at a time, and write transactions start with BEGIN IMMEDIATE so that writers from other
processes queue there instead of failing half-way. That queue is waited on here, asynchronously, for at
most `busy_timeout`: SQLite's own busy handler would sleep inline and stall every request of the process.

The statements every request runs (begin, commit, the primary-key lookup, the single-row writes
and the count changes) are compiled once from the schema and run on the driver's own connection:
SQLAlchemy's per-execution work costs several times the lookup itself. Lists, whose statements
vary with the query, go through SQLAlchemy on the same connection.
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
from petrecords.store.base import PetRow
from petrecords.store.faults import DATABASE_ERRORS, LOCKED, unavailable
from petrecords.store.pages import PageAnchors
from petrecords.store.sql import (
    PET_COLUMNS,
    SqlStore,
    SqlTransaction,
    Statement,
    count_changes,
    pet_values,
)
from petrecords.tables import pet_counts, pets

# Waits between attempts to take the write lock that another process holds: short at first, as most writes
# take milliseconds, then steady, until busy_timeout.
_FIRST_BUSY_PAUSE_SECONDS = 0.001
_LAST_BUSY_PAUSE_SECONDS = 0.05

_NAMED = sqlite_dialect.dialect(paramstyle="named")
_PET_KEYS = [column.name for column in pets.c]


def _compiled(statement: sa.ClauseElement, keys: list[str] | None = None) -> str:
    return str(statement.compile(dialect=_NAMED, column_keys=keys))


_SELECT_PET = _compiled(sa.select(*PET_COLUMNS).where(pets.c.id == sa.bindparam("pet_id")))
_INSERT_PET = _compiled(sa.insert(pets), _PET_KEYS)
_UPDATE_PET = _compiled(sa.update(pets).where(pets.c.id == sa.bindparam("pet_id")), _PET_KEYS[1:])
_DELETE_PET = _compiled(sa.delete(pets).where(pets.c.id == sa.bindparam("pet_id")))
_upsert = sqlite_dialect.insert(pet_counts)
_CHANGE_COUNT = _compiled(
    _upsert.on_conflict_do_update(
        index_elements=[pet_counts.c.scope, pet_counts.c.pet_type, pet_counts.c.slot],
        set_={"count": pet_counts.c.count + _upsert.excluded.count},
    ),
    ["scope", "pet_type", "slot", "count"],
)


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


class SqliteTransaction(SqlTransaction):
    upsert = staticmethod(sqlite_dialect.insert)

    def __init__(self, store: SqliteStore, *, write: bool) -> None:
        super().__init__(write=write)
        self._store = store
        self.page_anchors = store.page_anchors

    async def data_version(self) -> Hashable:
        # data_version moves when another connection (another process) commits; this process's own
        # commits are counted by the store.
        other = (await self._run("PRAGMA data_version", {})).fetchone()[0]
        return (other, self._store.commits)

    async def _begin(self) -> None:
        store = self._store
        deadline = time.monotonic() + store.busy_timeout_seconds
        pause = _FIRST_BUSY_PAUSE_SECONDS
        while True:
            await store.lock.acquire()
            try:
                store.driver_connection().execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
                return
            except DATABASE_ERRORS as exc:
                store.lock.release()
                error = unavailable(exc)
                if error is None:
                    raise
                remaining = deadline - time.monotonic()
                if error.cause != LOCKED or remaining <= 0:
                    raise error from exc
            # Another process holds the write lock. Wait without the connection, so that reads go on meanwhile.
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, _LAST_BUSY_PAUSE_SECONDS)

    async def _end(self, *, commit: bool) -> None:
        connection = self._store.driver_connection()
        if self.write:
            self._store.commits += 1
        try:
            connection.execute("COMMIT" if commit else "ROLLBACK")
        except sqlite3.Error as exc:
            # A failed COMMIT (disk full, I/O error) leaves nothing half-written: roll back and refuse.
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
            if (error := unavailable(exc)) is None:
                raise
            raise error from exc
        finally:
            self._store.lock.release()

    async def _run(self, sql: str, parameters: dict[str, Any] | list[dict[str, Any]]) -> sqlite3.Cursor:
        """One compiled statement on the driver's connection, inside this transaction."""
        if not self.begun:
            await self._begin()
            self.begun = True
        connection = self._store.driver_connection()
        try:
            if isinstance(parameters, list):
                return connection.executemany(sql, parameters)
            return connection.execute(sql, parameters)
        except sqlite3.Error as exc:
            if (error := unavailable(exc)) is None:
                raise
            raise error from exc

    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        sql, fixed = _compiled_query(statement[0])
        values = {**fixed, **{name: _driver_value(value) for name, value in statement[1].items()}}
        rows: list[Sequence[Any]] = (await self._run(sql, values)).fetchall()
        return rows

    async def get_pet(self, pet_id: uuid.UUID, *, for_update: bool = False) -> PetRow | None:
        # for_update needs nothing more: a write transaction already holds SQLite's one write lock.
        row = (await self._run(_SELECT_PET, {"pet_id": pet_id.hex})).fetchone()
        if row is None:
            return None
        return PetRow(
            id=uuid.UUID(hex=row[0]),
            created_at=row[1],
            created_by=row[2],
            modified_at=row[3],
            modified_by=row[4],
            owner_id=row[5],
            name=row[6],
            pet_type=row[7],
            revision=row[8],
        )

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

    async def _execute(
        self, statement: sa.Executable, rows: dict[str, Any] | Sequence[dict[str, Any]] | None
    ) -> sa.CursorResult[Any]:
        return self._store.connection().execute(statement, rows)


class SqliteStore(SqlStore):
    dialect = "sqlite"

    def __init__(self, url: str, *, busy_timeout_ms: int) -> None:
        super().__init__()
        # SQLite never waits on its own here: _begin does, without blocking the event loop.
        self._engine = create_sqlite_engine(url, busy_timeout_ms=0, autocommit=True)
        self.busy_timeout_seconds = busy_timeout_ms / 1000
        self._connection: sa.Connection | None = None
        self._driver: Any = None
        self.page_anchors = PageAnchors()
        self.commits = 0
        """Write transactions ended by this process: part of the data version."""
        self.lock = asyncio.Lock()

    def connection(self) -> sa.Connection:
        if self._connection is None:
            self._connection = self._engine.connect()
            self._driver = self._connection.connection.driver_connection
        return self._connection

    def driver_connection(self) -> Any:
        """The pysqlite3 connection under `connection()`: the same transaction, without SQLAlchemy."""
        if self._connection is None:
            self.connection()
        return self._driver

    def transaction(self, *, write: bool) -> SqliteTransaction:
        return SqliteTransaction(self, write=write)

    def pool_figures(self) -> dict[str, int]:
        return {"size": 1, "checked_out": int(self.lock.locked()), "overflow": 0}

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._engine.dispose()
