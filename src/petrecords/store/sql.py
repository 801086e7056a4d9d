"""The transaction both SQL stores run: its life cycle (begun on the first statement, counts and deferred writes
written at its end) and the records' writes and reads. Its other parts, each a class it combines: the list planner
(store/planner.py), the kept counts and grants (store/kept_counts.py), the change log (store/log.py), and idempotency
keys, tickets and leases (store/bookkeeping.py); what they run on is store/runner.py's.

Statements are built once per collection and query shape (which conditions, how many values each has, the
sort) with named parameters, and reused: building and hashing a SQLAlchemy statement for every request costs
more than running it. Each store compiles each statement once for its database and runs it on its driver.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.db import head_revision
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Collection, Lock, Principal, Row, Store, Transaction
from petrecords.store.bookkeeping import SqlBookkeeping
from petrecords.store.faults import DATABASE_ERRORS, raise_translated
from petrecords.store.kept_counts import KeptCounts
from petrecords.store.log import SqlChangeLog
from petrecords.store.planner import ListPlanner
from petrecords.store.records import (
    Statement,
    delete_statement,
    insert_statement,
    reader_of,
    record_values,
    referrers_statement,
    select_by_id,
    set_all_if_statement,
    set_if_statement,
    stored_uuid,
    table_reader,
    update_statement,
)
from petrecords.store.turns import LongReadTurns, Turn

SCHEMA_VERSION = sa.select(sa.column("version_num", sa.String())).select_from(sa.table("alembic_version"))


class SqlTransaction(ListPlanner, KeptCounts, SqlChangeLog, SqlBookkeeping, Transaction):
    """The statements of one transaction; subclasses say how to run them.

    The transaction begins on its first statement, so that a request holds no connection (or, on SQLite, the
    process's connection) while it is still reading and checking its input. The kept counts a transaction
    changes are written last, in one fixed order, so that concurrent writers lock counter rows alike and
    cannot deadlock.

    The dialect hooks, which each store's subclass gives: how statements run (`_begin`, `_end`, `fetch`,
    `_execute`, `defers_writes`); the dialect's forms of statements (`change_count`, `change_period_count`,
    `idempotency_insert`, `change_insert`, `window_statements`, `changes_seen_by_statement`, `shared_at_statement`,
    `state_upserts`, `horizon`, `dialect_name`, `readers_value`); how it searches (`trigram_search`,
    `probe_search`); and over how many rows each kept count is spread (`counter_slots`).
    """

    defers_writes = False
    """Whether writes wait for the transaction's next read or its commit, to go to the database together
    (see `_write_deferred`); else each runs when it is made."""

    def __init__(self, *, write: bool) -> None:
        super().__init__()
        self.write = write
        self.begun = False
        self._deferred: list[tuple[sa.ClauseElement, dict[str, Any] | Sequence[dict[str, Any]]]] = []
        self.long_read_turns: LongReadTurns | None = None
        """Where a long read of this transaction takes its turn; None: it takes none."""
        self._turn: Turn | None = None

    async def __aenter__(self) -> SqlTransaction:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        commit = exc_type is None
        try:
            if commit and self._counted:
                await self._write_counts()
            if commit and self._deferred:
                await self._write_deferred(last=True)
        except BaseException:
            commit = False
            raise
        finally:
            self._deferred.clear()
            turn, self._turn = self._turn, None
            try:
                if turn is not None:
                    turn.give_back(rest=self._turn_rests)
            finally:
                if self.begun:
                    self.begun = False
                    await self._end(commit=commit)

    @property
    def _turn_rests(self) -> bool:
        """Whether a long read's turn rests after this transaction (see store/turns.py): where it read from is
        where the rest spares cores."""
        return True

    async def _write_deferred(self, *, last: bool) -> None:
        """Run the deferred writes, in the order they were made. `last`: nothing follows them but the commit."""
        deferred, self._deferred = self._deferred, []
        for statement, rows in deferred:
            await self._execute_now(statement, rows)

    @abc.abstractmethod
    async def _begin(self) -> None: ...

    @abc.abstractmethod
    async def _end(self, *, commit: bool) -> None: ...

    @abc.abstractmethod
    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of a query, as sequences of column values."""

    @abc.abstractmethod
    async def _execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Run a statement that returns no rows, once (with the given parameters), or once per row of them."""

    async def execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if self.defers_writes:
            self._deferred.append((statement, rows))
        else:
            await self._execute_now(statement, rows)

    async def _execute_now(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if not self.begun:
            await self._begin()
            self.begun = True
        try:
            await self._execute(statement, rows)
        except DATABASE_ERRORS as exc:
            raise_translated(exc)

    async def lock(self, locks: Sequence[Lock]) -> None:
        """Nothing to do where there is one writer (SQLite): a write transaction holds the database."""

    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        rows = await self.fetch((select_by_id(collection), {"record_id": record_id}))
        return reader_of(collection).row(rows[0]) if rows else None

    async def insert(self, collection: Collection, row: Row) -> None:
        await self.execute(insert_statement(collection), record_values(collection, row))
        await self._count(collection, (), [row], inserted=True)

    async def insert_many(self, collection: Collection, rows: Sequence[Row]) -> None:
        await self.execute(insert_statement(collection), [record_values(collection, row) for row in rows])
        await self._count(collection, (), rows, inserted=True)

    async def update(self, collection: Collection, row: Row, *, previous: Row) -> None:
        values = record_values(collection, row)
        values["record_id"] = values.pop("id")
        await self.execute(update_statement(collection), values)
        await self._count(collection, [previous], [row])

    async def delete(self, collection: Collection, row: Row) -> None:
        await self.execute(delete_statement(collection), {"record_id": row["id"]})
        await self._count(collection, [row], ())

    async def set_if(self, collection: Collection, record_id: uuid.UUID, *, expected: Row, values: Row) -> bool:
        statement = set_if_statement(collection, tuple(expected), tuple(values))
        parameters = {f"expected_{name}": value for name, value in expected.items()}
        parameters.update(values, record_id=record_id)
        return bool(await self.fetch((statement, parameters)))

    async def set_all_if(
        self, collection: Collection, record_ids: Sequence[uuid.UUID], *, expected: Row, values: Row
    ) -> set[uuid.UUID]:
        if not record_ids:
            return set()
        statement = set_all_if_statement(collection, len(record_ids), tuple(expected), tuple(values))
        parameters = {f"expected_{name}": value for name, value in expected.items()}
        parameters.update(values)
        parameters.update({f"record_id_{index}": record_id for index, record_id in enumerate(record_ids)})
        return {stored_uuid(row[0]) for row in await self.fetch((statement, parameters))}

    async def referrers(self, collection: Collection, column: str, record_id: uuid.UUID) -> Sequence[Row]:
        rows = await self.fetch((referrers_statement(collection, column, exists=False), {"record_id": record_id}))
        reader = table_reader(collection.table)
        return [reader.row(row) for row in rows]

    async def has_referrer(self, collection: Collection, column: str, record_id: uuid.UUID) -> bool:
        return bool(await self.fetch((referrers_statement(collection, column, exists=True), {"record_id": record_id})))


class SqlStore(Store):
    """What both SQL stores share: readiness means the database answers and its schema is at head."""

    def __init__(self) -> None:
        self.head = head_revision()
        """The schema revision this version of the service runs on."""
        self.long_read_turns: LongReadTurns | None = None
        """Where long reads take their turns (see store/turns.py); None: they take none."""
        self.long_read_share = 1.0
        """The share of a database core that each turn's long reads may take (see store/turns.py): the whole, but
        where the store rests them."""

    @property
    @abc.abstractmethod
    def read_connections(self) -> int:
        """Connections a process reads through at once (besides lookups by id)."""

    async def schema_is_current(self) -> bool:
        try:
            async with self.transaction(write=False) as tx:
                rows = await tx.fetch((SCHEMA_VERSION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            return False
        return bool(rows) and rows[0][0] == self.head

    @abc.abstractmethod
    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> SqlTransaction: ...

    async def lookup(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of one read statement that finds a few rows by their keys, as one state of the data: here in a
        read transaction of its own; a store may do without one (SQLite's)."""
        async with self.transaction(write=False, single=True) as tx:
            return await tx.fetch(statement)
