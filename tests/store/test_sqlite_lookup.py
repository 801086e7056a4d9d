"""A lookup of one statement on SQLite (SqliteStore.lookup): without a transaction, on the lookups' connection, and
bounded by the statement timeout all the same."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.errors import DatabaseUnavailable
from petrecords.store.sqlite import SqliteStore
from tests.support import PET_RECORDS, pet_row

LONG_READ = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000) SELECT count(*) FROM n"
"""A read of a few hundred milliseconds of SQLite's work (counting to two million)."""


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'pets.sqlite3'}", data_dir=tmp_path, db_statement_timeout_seconds=5
    )
    migrate(settings)
    opened = open_store(settings)
    assert isinstance(opened, SqliteStore)
    try:
        yield opened
    finally:
        await opened.close()


async def test_a_lookup_reads_what_a_transaction_reads_while_every_reader_is_taken(store: SqliteStore) -> None:
    async with store.transaction(write=True) as tx:
        await tx.insert(PET_RECORDS, pet_row("Rex"))
    statement = (sa.text("SELECT name FROM pets WHERE name = :name"), {"name": "Rex"})
    async with contextlib.AsyncExitStack() as readers:
        for _ in range(store.read_connections):
            tx = await readers.enter_async_context(store.transaction(write=False))
            in_a_transaction = [tuple(row) for row in await tx.fetch(statement)]
        # A lookup that waited for a reader would wait here for ever.
        looked_up = await asyncio.wait_for(store.lookup(statement), timeout=5)
    assert [tuple(row) for row in looked_up] == in_a_transaction == [("Rex",)]
    assert store.pool_figures()["checked_out"] == 0


async def test_a_lookup_past_the_statement_timeout_is_interrupted(store: SqliteStore) -> None:
    store.statement_timeout_seconds = 0.01
    with pytest.raises(DatabaseUnavailable) as raised:
        await store.lookup((sa.text(LONG_READ), {}))
    assert raised.value.cause == "timeout"
    # The connection's deadline is lifted with the statement: the next lookup runs to its end.
    store.statement_timeout_seconds = 5
    assert [tuple(row) for row in await store.lookup((sa.text("SELECT 1"), {}))] == [(1,)]
