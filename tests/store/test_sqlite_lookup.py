"""A lookup of one statement on SQLite (SqliteStore.lookup): without a transaction, on the lookups' connection, and
bounded by the statement timeout all the same."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
import sqlalchemy as sa

from petrecords.errors import DatabaseUnavailable
from petrecords.store.sqlite import SqliteStore
from tests.support import LONG_SQLITE_READ, PET_RECORDS, pet_row


async def test_a_lookup_reads_what_a_transaction_reads_while_every_reader_is_taken(sqlite_store: SqliteStore) -> None:
    async with sqlite_store.transaction(write=True) as tx:
        await tx.insert(PET_RECORDS, pet_row("Rex"))
    statement = (sa.text("SELECT name FROM pets WHERE name = :name"), {"name": "Rex"})
    async with contextlib.AsyncExitStack() as readers:
        for _ in range(sqlite_store.read_connections):
            tx = await readers.enter_async_context(sqlite_store.transaction(write=False))
            in_a_transaction = [tuple(row) for row in await tx.fetch(statement)]
        # A lookup that waited for a reader would wait here for ever.
        looked_up = await asyncio.wait_for(sqlite_store.lookup(statement), timeout=5)
    assert [tuple(row) for row in looked_up] == in_a_transaction == [("Rex",)]
    assert sqlite_store.pool_figures()["checked_out"] == 0


async def test_a_lookup_past_the_statement_timeout_is_interrupted(sqlite_store: SqliteStore) -> None:
    sqlite_store.statement_timeout_seconds = 0.01
    with pytest.raises(DatabaseUnavailable) as raised:
        await sqlite_store.lookup((sa.text(LONG_SQLITE_READ), {}))
    assert raised.value.cause == "timeout"
    # The connection's deadline is lifted with the statement: the next lookup runs to its end.
    sqlite_store.statement_timeout_seconds = 5
    assert [tuple(row) for row in await sqlite_store.lookup((sa.text("SELECT 1"), {}))] == [(1,)]
