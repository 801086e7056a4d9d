"""Long reads on SQLite: a read still running after a few milliseconds on the event loop goes on on a thread, so
that it never holds up the other requests of its process; a transaction that took a long read's turn reads on the
thread from the start."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from petrecords.errors import DatabaseUnavailable
from petrecords.store import planner
from petrecords.store.base import Condition, Operator
from petrecords.store.sqlite import SqliteStore
from petrecords.store.sqlite.connections import _Connection
from tests.support import ALICE, LONG_SQLITE_READ, PET_RECORDS, pet_row


async def test_reads_are_answered_while_a_long_read_runs(sqlite_store: SqliteStore) -> None:
    """A long read leaves the event loop after a few milliseconds: the process's other reads go on meanwhile, on
    connections of their own (lookups by id, and other read transactions), and the next long read leaves it too."""
    async with sqlite_store.transaction(write=True) as tx:
        await tx.insert(PET_RECORDS, row := pet_row("Rex"))

    async def long_read() -> Sequence[Sequence[Any]]:
        async with sqlite_store.transaction(write=False) as tx:
            return await tx.fetch((sa.text(LONG_SQLITE_READ), {}))

    async def short_read() -> int:
        async with sqlite_store.transaction(write=False) as tx:
            return await tx.count(PET_RECORDS, ())

    # Twice: the connection's watch over the loop's part of a statement is back once a read left the loop.
    for _ in range(2):
        running = asyncio.create_task(long_read())
        await asyncio.sleep(0)  # it begins, and leaves the loop once it has run for a few milliseconds
        lookups = reads = 0
        while not running.done():
            assert await sqlite_store.read(PET_RECORDS, row["id"], None) == row
            assert await short_read() == 1
            lookups, reads = lookups + (not running.done()), reads + (not running.done())
            await asyncio.sleep(0)
        assert (await running)[0][0] == 2_000_000
        assert lookups >= 10, lookups
        assert reads >= 10, reads
    assert sqlite_store.pool_figures()["checked_out"] == 0


async def test_a_request_cancelled_during_a_long_read_gives_its_connection_back_when_the_read_ends(
    sqlite_store: SqliteStore,
) -> None:
    async def long_read() -> None:
        async with sqlite_store.transaction(write=False) as tx:
            await tx.fetch((sa.text(LONG_SQLITE_READ), {}))

    running = asyncio.create_task(long_read())
    await asyncio.sleep(0.05)  # on its thread by now
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    # The statement is interrupted; its connection is free once its thread is done with it.
    for _ in range(200):
        if sqlite_store.pool_figures()["checked_out"] == 0:
            break
        await asyncio.sleep(0.01)
    assert sqlite_store.pool_figures()["checked_out"] == 0
    async with sqlite_store.transaction(write=False) as tx:
        assert await tx.count(PET_RECORDS, ()) >= 0


async def _a_long_search_of_three_pets(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> tuple[Condition, ...]:
    """The conditions of a one-letter search of ALICE's pets, two of whose three names match: with LONG_READ_SCOPE
    lowered to 3, a long read that takes a turn."""
    monkeypatch.setattr(planner, "LONG_READ_SCOPE", 3)
    async with sqlite_store.transaction(write=True) as tx:
        await tx.insert_many(PET_RECORDS, [pet_row(name) for name in ("Rex", "Max", "Bea")])
    return (Condition(("owner_id",), Operator.EQUAL, (ALICE,)), Condition(("name_key",), Operator.LIKE, ("%e%",)))


async def test_a_transaction_that_took_a_long_reads_turn_reads_on_a_thread_from_the_start(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search no index serves, over LONG_READ_SCOPE records or more, takes a turn: its statements then run on a
    thread at once, though each would end on the event loop well inside _ON_THE_LOOP_SECONDS. Those of a
    transaction with no turn (the scope counted before it) run on the loop."""
    search = await _a_long_search_of_three_pets(sqlite_store, monkeypatch)
    read_by: list[int] = []
    original = _Connection.all_rows_on_a_thread

    def on_a_thread(connection: _Connection, statement: str, parameters: dict[str, Any]) -> list[Sequence[Any]]:
        read_by.append(threading.get_ident())
        return original(connection, statement, parameters)

    monkeypatch.setattr(_Connection, "all_rows_on_a_thread", on_a_thread)
    async with sqlite_store.transaction(write=False) as tx:
        assert await tx.count(PET_RECORDS, search) == 2
    assert read_by
    assert threading.get_ident() not in read_by
    read_by.clear()
    monkeypatch.setattr(planner, "LONG_READ_SCOPE", 4)
    async with sqlite_store.transaction(write=False) as tx:
        assert await tx.count(PET_RECORDS, search) == 2
    assert read_by == []


async def test_a_statement_on_a_thread_that_ends_past_its_timeout_answers_as_timed_out(
    sqlite_store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop interrupts a statement on a thread at its timeout; an interrupt that comes before the thread
    has begun the statement is ignored by SQLite, and the statement runs to its end. Ended past its timeout, it is
    a timeout all the same, whichever came first."""
    search = await _a_long_search_of_three_pets(sqlite_store, monkeypatch)
    # Past before any statement of the long read can end; the loop's statements over three records end before
    # SQLite first asks whether theirs has passed.
    sqlite_store.statement_timeout_seconds = 1e-9
    with pytest.raises(DatabaseUnavailable) as raised:
        async with sqlite_store.transaction(write=False) as tx:
            await tx.count(PET_RECORDS, search)
    assert raised.value.cause == "timeout"
    sqlite_store.statement_timeout_seconds = math.inf
    assert sqlite_store.pool_figures()["checked_out"] == 0
    async with sqlite_store.transaction(write=False) as tx:
        assert await tx.count(PET_RECORDS, search) == 2
