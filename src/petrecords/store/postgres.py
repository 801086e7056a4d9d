"""The scale-out store: PostgreSQL through asyncpg, with a connection pool per process."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection

from petrecords.config import Settings
from petrecords.db import create_postgres_engine
from petrecords.errors import IdempotencyInProgress
from petrecords.store.faults import DATABASE_ERRORS, unavailable
from petrecords.store.sql import SqlStore, SqlTransaction

_TRY_LOCK = sa.text("SELECT pg_try_advisory_xact_lock(:key)")


class PostgresTransaction(SqlTransaction):
    counter_slots = 8
    upsert = staticmethod(postgresql.insert)

    def __init__(self, store: PostgresStore, *, write: bool) -> None:
        super().__init__(write=write)
        self._store = store
        self._connection: AsyncConnection | None = None

    async def _begin(self) -> None:
        try:
            self._connection = await self._store.engine.connect()
            if self.write:
                await self._connection.begin()
            else:
                # Under READ COMMITTED every statement takes its own snapshot, inside a transaction or not;
                # without BEGIN and COMMIT a read costs one round trip per statement instead of two more.
                await self._connection.execution_options(isolation_level="AUTOCOMMIT")
        except DATABASE_ERRORS as exc:
            await self._release()
            if (error := unavailable(exc)) is None:
                raise
            raise error from exc

    async def _release(self) -> None:
        if self._connection is not None:
            connection, self._connection = self._connection, None
            await connection.close()

    def _open(self) -> AsyncConnection:
        if self._connection is None:
            raise RuntimeError("the transaction has not begun")
        return self._connection

    async def _end(self, *, commit: bool) -> None:
        connection = self._open()
        try:
            if commit:
                await connection.commit()
            else:
                await connection.rollback()
        except DATABASE_ERRORS as exc:
            if commit:
                if (error := unavailable(exc)) is None:
                    raise
                raise error from exc
            # A failed rollback changes nothing for the client: the error that led to it is the answer. The
            # connection, in an unknown state, is not reused; the server ends the transaction when it goes.
            with contextlib.suppress(*DATABASE_ERRORS):
                await connection.invalidate()
        finally:
            await self._release()

    async def _execute(
        self, statement: sa.Executable, rows: dict[str, Any] | Sequence[dict[str, Any]] | None
    ) -> sa.CursorResult[Any]:
        return await self._open().execute(statement, rows)

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        # Held until this transaction ends; a second request with the same key meanwhile is told so
        # at once instead of waiting and then replaying.
        digest = hashlib.blake2b(f"idempotency\x00{caller}\x00{key}".encode(), digest_size=8).digest()
        lock_key = int.from_bytes(digest, "big", signed=True)
        held = (await self.execute(_TRY_LOCK.bindparams(key=lock_key))).scalar()
        if not held:
            raise IdempotencyInProgress()


class PostgresStore(SqlStore):
    dialect = "postgresql"

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.engine = create_postgres_engine(settings)

    def transaction(self, *, write: bool) -> PostgresTransaction:
        return PostgresTransaction(self, write=write)

    def pool_figures(self) -> dict[str, int]:
        pool: Any = self.engine.pool
        return {"size": pool.size(), "checked_out": pool.checkedout(), "overflow": max(pool.overflow(), 0)}

    async def close(self) -> None:
        await self.engine.dispose()
