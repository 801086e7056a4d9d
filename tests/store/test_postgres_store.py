"""The PostgreSQL store on asyncpg: the SQL it compiles once, and what happens to a pooled connection that
breaks or is cut short in the middle of a transaction."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa

from petrecords.config import Settings
from petrecords.db import create_postgres_engine
from petrecords.errors import DatabaseUnavailable
from petrecords.store import bookkeeping, queries, records, sql
from petrecords.store.base import Condition, NewChange, Operator, PageQuery, Row, SortKey
from petrecords.store.postgres import PostgresStore, PostgresTransaction
from petrecords.store.postgres.statements import _TRY_LOCK, _arguments, _compiled
from tests.support import PET_RECORDS, of_types, pet_row, record_statements, until, wipe

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

_BACKEND_PID = sa.select(sa.func.pg_backend_pid())


def _pet(name: str = "Rex") -> Row:
    return pet_row(name, at_ms=1)


@pytest.fixture
async def store(make_settings: Callable[..., Settings], database_url: str) -> AsyncIterator[PostgresStore]:
    await wipe(database_url)
    opened = PostgresStore(make_settings(db_pool_size=2, db_connect_timeout_seconds=2))
    try:
        yield opened
    finally:
        await opened.close()


async def _terminate_backend(database_url: str, pid: int) -> None:
    admin = await asyncpg.connect(database_url, timeout=5)
    try:
        await admin.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()


async def _waiting_for_a_lock_on_pets(connection: asyncpg.Connection) -> bool:
    """Whether a session of this database waits for a lock on the pets table (asked on `connection`)."""
    waiting = await connection.fetchval(
        "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'pets'::regclass"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    )
    return bool(waiting)


async def test_statements_compile_as_sqlalchemy_runs_them(make_settings: Callable[..., Settings]) -> None:
    """The store's dialect is never connected; SQLAlchemy's, once connected, must agree on every statement."""
    engine = create_postgres_engine(make_settings())
    try:
        async with engine.connect():
            pass  # SQLAlchemy learns the server's settings on its first connection
        dialect = engine.dialect
    finally:
        await engine.dispose()
    conditions = (
        Condition(("owner_id",), Operator.EQUAL, ("alice@example.com",)),
        Condition(("pet_type",), Operator.IN, ("Dog", "Cat")),
        Condition(("name_key",), Operator.LIKE, ("r\\%%",)),
    )
    by_type = PageQuery(
        conditions=conditions,
        sort=(SortKey("pet_type", rank=("Dog", "Cat")), SortKey("id")),
        limit=20,
        offset=0,
    )
    statements: list[Any] = [
        records.select_by_id(PET_RECORDS),
        records.insert_statement(PET_RECORDS),
        records.update_statement(PET_RECORDS),
        records.delete_statement(PET_RECORDS),
        bookkeeping.SELECT_IDEMPOTENT_RESPONSE,
        PostgresTransaction.idempotency_insert,
        bookkeeping.PURGE_EXPIRED_IDEMPOTENCY_KEYS,
        sql.SCHEMA_VERSION,
        PostgresTransaction.change_count,
        _TRY_LOCK,
        queries.list_statement(PET_RECORDS, by_type)[0],
        queries.list_statement(PET_RECORDS, by_type, keys_only=True, after_key=(0, "dog", uuid.UUID(int=0)))[0],
        queries.count_statement(PET_RECORDS, conditions)[0],
        queries.count_statement(PET_RECORDS, of_types("Dog"))[0],
    ]
    for statement in statements:
        compiled = statement.compile(dialect=dialect)
        assert _compiled(statement) == (
            str(compiled),
            tuple(compiled.positiontup),
            {name: value for name, value in compiled.params.items() if value is not None},
        )


class TestPool:
    async def test_figures_count_the_connections_in_use(self, store: PostgresStore) -> None:
        assert store.pool_figures() == {"size": 2, "checked_out": 0, "overflow": 0, "idle": 0}
        async with store.transaction(write=False) as first, store.transaction(write=True) as second:
            await first.count(PET_RECORDS, ())
            await second.insert(PET_RECORDS, _pet())
            before_a_read = store.pool_figures()
            await second.count(PET_RECORDS, ())
            during = store.pool_figures()
        # A write waits for the transaction's next read, or its end, to go with what follows it.
        assert before_a_read == {"size": 2, "checked_out": 1, "overflow": 0, "idle": 0}
        assert during == {"size": 2, "checked_out": 2, "overflow": 0, "idle": 0}
        assert store.pool_figures() == {"size": 2, "checked_out": 0, "overflow": 0, "idle": 2}

    async def test_concurrent_first_use_opens_one_pool(self, store: PostgresStore) -> None:
        async def count() -> int:
            async with store.transaction(write=False) as tx:
                return await tx.count(PET_RECORDS, ())

        assert await asyncio.gather(*(count() for _ in range(20))) == [0] * 20
        assert store.pool_figures()["checked_out"] == 0

    async def test_writes_commit_or_roll_back_as_a_whole(self, store: PostgresStore) -> None:
        kept, dropped = _pet("Kept"), _pet("Dropped")

        async def insert(pet: Row, *, then_fail: bool) -> None:
            async with store.transaction(write=True) as tx:
                await tx.insert(PET_RECORDS, pet)
                if then_fail:
                    raise RuntimeError

        await insert(kept, then_fail=False)
        with pytest.raises(RuntimeError):
            await insert(dropped, then_fail=True)

        async with store.transaction(write=False) as tx:
            assert await tx.get(PET_RECORDS, kept["id"]) == kept
            assert await tx.get(PET_RECORDS, dropped["id"]) is None
            assert await tx.count(PET_RECORDS, of_types("Dog")) == 1


class TestDeferredWrites:
    async def test_writes_combined_into_one_statement_run_in_the_order_made(self, store: PostgresStore) -> None:
        pets = [_pet(f"Pet {index}") for index in range(5)]
        async with store.transaction(write=True) as tx:
            for pet in pets:
                await tx.insert(PET_RECORDS, pet)
                await tx.record_change(_created(pet))
        async with store.transaction(write=False) as tx:
            logged = await tx.changes_after((0, 0), limit=10, reader=None, resources=None)
            assert await tx.count(PET_RECORDS, ()) == 5
        # In the order of their cursors, as the feed reads them: one transaction's, in the order made.
        assert [change.record_id for change in logged] == [pet["id"] for pet in pets]
        assert len({change.cursor[0] for change in logged}) == 1

    async def test_a_read_sees_the_writes_made_before_it(self, store: PostgresStore) -> None:
        pet = _pet()
        async with store.transaction(write=True) as tx:
            await tx.insert(PET_RECORDS, pet)
            assert await tx.get(PET_RECORDS, pet["id"]) == pet

    async def test_many_rows_and_parameters_split_into_several_statements(self, store: PostgresStore) -> None:
        pets = [_pet(f"Pet {index}") for index in range(3000)]
        async with store.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, pets[:1000])
            for pet in pets[1000:]:
                await tx.insert(PET_RECORDS, pet)
        async with store.transaction(write=False) as tx:
            assert await tx.count(PET_RECORDS, ()) == 3000

    async def test_a_failed_combined_write_keeps_nothing(self, store: PostgresStore) -> None:
        pet = _pet()

        async def insert_twice() -> None:
            async with store.transaction(write=True) as tx:
                await tx.insert(PET_RECORDS, pet)
                await tx.insert(PET_RECORDS, pet)

        with pytest.raises(asyncpg.UniqueViolationError):
            await insert_twice()
        async with store.transaction(write=False) as tx:
            assert await tx.count(PET_RECORDS, ()) == 0
            assert await tx.get(PET_RECORDS, pet["id"]) is None

    async def test_the_writes_of_every_create_are_one_statement_of_the_same_text(
        self, store: PostgresStore, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One text for every create of a resource: asyncpg prepares a statement once per connection and text."""
        sent = record_statements(monkeypatch)
        for pet in (_pet("Rex"), of_type(_pet("Max"), "Cat")):
            async with store.transaction(write=True) as tx:
                await tx.insert(PET_RECORDS, pet)
                await tx.record_change(_created(pet))
        assert len(sent) == 2
        assert sent[0] == sent[1]
        assert sent[0].startswith("WITH ")


class TestCountSlots:
    async def test_writers_on_two_connections_do_not_wait_for_each_others_count_rows(self, database_url: str) -> None:
        """Concurrent writers of one owner's counts, on connections whose slots differ: the second is not held
        until the first commits (it would fail at its lock timeout if it were)."""
        owner = f"slots-{uuid.uuid4().hex}@example.com"
        statement = _compiled(PostgresTransaction.change_count)
        arguments = _arguments(statement, _count_row(_pet(), owner))
        connections: list[asyncpg.Connection] = []
        slots: list[int] = []
        try:
            while len(set(slots)) < 2:
                connections.append(await asyncpg.connect(database_url, timeout=5))
                pid = await connections[-1].fetchval("SELECT pg_backend_pid()")
                slots.append(pid % PostgresTransaction.counter_slots)
            first, second = connections[0], connections[-1]
            await first.execute("BEGIN")
            await first.execute(statement[0], *arguments)
            await second.execute("BEGIN; SET LOCAL lock_timeout = '5s'")
            await second.execute(statement[0], *arguments)
            await second.execute("COMMIT")
            await first.execute("COMMIT")
            counted = await first.fetch("SELECT slot, count FROM record_counts WHERE scope = $1 ORDER BY slot", owner)
            assert [(row["slot"], row["count"]) for row in counted] == sorted([(slots[0], 1), (slots[-1], 1)])
        finally:
            for connection in connections:
                await connection.close()


def _count_row(pet: Row, scope: str) -> dict[str, Any]:
    return {"resource": "pets", "scope": scope, "partition": pet["pet_type"], "slot": 0, "count": 1, "writes": 0}


def of_type(pet: Row, pet_type: str) -> Row:
    return {**pet, "pet_type": pet_type}


def _created(pet: Row) -> NewChange:
    return NewChange(
        resource="pets",
        record_id=pet["id"],
        action="created",
        version=1,
        at=1,
        by=pet["created_by"],
        owner_before=None,
        owner_after=pet["owner_id"],
        record=b"{}",
    )


class TestBrokenConnection:
    async def test_a_connection_killed_in_a_write_is_503_and_replaced(
        self, store: PostgresStore, database_url: str
    ) -> None:
        pet = _pet()

        async def insert_after_the_kill() -> None:
            async with store.transaction(write=True) as tx:
                await _terminate_backend(database_url, (await tx.fetch((_BACKEND_PID, {})))[0][0])
                await tx.insert(PET_RECORDS, pet)

        with pytest.raises(DatabaseUnavailable) as raised:
            await insert_after_the_kill()

        assert raised.value.cause == "connection"
        assert store.pool_figures()["checked_out"] == 0
        async with store.transaction(write=False) as tx:
            assert await tx.get(PET_RECORDS, pet["id"]) is None

    async def test_a_connection_killed_in_a_read_is_503_and_replaced(
        self, store: PostgresStore, database_url: str
    ) -> None:

        async def count_after_the_kill() -> None:
            async with store.transaction(write=False) as tx:
                await _terminate_backend(database_url, (await tx.fetch((_BACKEND_PID, {})))[0][0])
                await tx.count(PET_RECORDS, ())

        with pytest.raises(DatabaseUnavailable) as raised:
            await count_after_the_kill()

        assert raised.value.cause == "connection"
        async with store.transaction(write=False) as tx:
            assert await tx.count(PET_RECORDS, ()) == 0
        assert store.pool_figures()["checked_out"] == 0

    async def test_a_cancelled_statement_gives_its_connection_up(self, store: PostgresStore, database_url: str) -> None:
        """A request cut short while its statement waits: the connection, in an unknown state, is not reused,
        and the server forgets the statement."""
        holder = await asyncpg.connect(database_url, timeout=5)
        try:
            locked = holder.transaction()
            await locked.start()
            await holder.execute("LOCK TABLE pets IN ACCESS EXCLUSIVE MODE")

            async def blocked_write() -> None:
                async with store.transaction(write=True) as tx:
                    await tx.insert(PET_RECORDS, _pet())

            task = asyncio.create_task(blocked_write())
            await until(lambda: _waiting_for_a_lock_on_pets(holder), what="the write to wait for the table lock")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert store.pool_figures()["checked_out"] == 0
            await locked.rollback()
        finally:
            await holder.close()

        async with store.transaction(write=True) as tx:
            await tx.insert(PET_RECORDS, _pet())
        async with store.transaction(write=False) as tx:
            assert await tx.count(PET_RECORDS, ()) == 1
