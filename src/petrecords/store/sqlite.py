"""The embedded store: SQLite run directly on the event loop.

A SQLite primary-key lookup costs microseconds, far less than a hop to a worker thread, so
statements run inline. The process keeps one connection; an asyncio lock gives it to one
transaction at a time, and write transactions start with BEGIN IMMEDIATE so that writers from other
processes queue on `busy_timeout` instead of failing half-way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.db import create_sqlite_engine
from petrecords.errors import DatabaseUnavailable
from petrecords.store.sql import UNAVAILABLE_ERRORS, SqlStore, SqlTransaction


class SqliteTransaction(SqlTransaction):
    upsert = staticmethod(sqlite_dialect.insert)

    def __init__(self, store: SqliteStore, *, write: bool) -> None:
        super().__init__(write=write)
        self._store = store

    async def _begin(self) -> None:
        await self._store.lock.acquire()
        try:
            self._store.connection().exec_driver_sql("BEGIN IMMEDIATE" if self.write else "BEGIN")
        except UNAVAILABLE_ERRORS as exc:
            self._store.lock.release()
            raise DatabaseUnavailable() from exc

    async def _end(self, *, commit: bool) -> None:
        connection = self._store.connection()
        try:
            connection.exec_driver_sql("COMMIT" if commit else "ROLLBACK")
        except UNAVAILABLE_ERRORS as exc:
            # A failed COMMIT (disk full, I/O error) leaves nothing half-written: roll back and refuse.
            with contextlib.suppress(sa.exc.DBAPIError):
                connection.exec_driver_sql("ROLLBACK")
            raise DatabaseUnavailable() from exc
        finally:
            self._store.lock.release()

    async def _execute(self, statement: sa.Executable, rows: Sequence[dict[str, Any]] | None) -> sa.CursorResult[Any]:
        return self._store.connection().execute(statement, rows)


class SqliteStore(SqlStore):
    dialect = "sqlite"

    def __init__(self, url: str, *, busy_timeout_ms: int) -> None:
        super().__init__()
        self._engine = create_sqlite_engine(url, busy_timeout_ms=busy_timeout_ms, autocommit=True)
        self._connection: sa.Connection | None = None
        self.lock = asyncio.Lock()

    def connection(self) -> sa.Connection:
        if self._connection is None:
            self._connection = self._engine.connect()
        return self._connection

    def transaction(self, *, write: bool) -> SqliteTransaction:
        return SqliteTransaction(self, write=write)

    def pool_figures(self) -> dict[str, int]:
        return {"size": 1, "checked_out": int(self.lock.locked()), "overflow": 0}

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        self._engine.dispose()
