"""On PostgreSQL the count of a long read (a search no index serves, over LONG_READ_SCOPE records or more) runs in
slices, and rests after each slice in proportion to its time, so that it takes no more than
PETRECORDS_LONG_READ_SHARE of a core: exact all the same, in one snapshot, and bounded as a whole by the statement
timeout. Where PostgreSQL would read the whole table for it, a slice is a range of the table's blocks, however few
of their records match; else a number of matching records, through a cursor. Through HTTP, against a real
database."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from petrecords.app import create_app
from petrecords.store.planner import LONG_READ_SCOPE
from petrecords.store.postgres import PostgresTransaction, reads
from petrecords.store.turns import LongReadTurns
from petrecords.text import match_key
from tests.conftest import test_settings as settings_of
from tests.support import (
    ALICE,
    BOB,
    assert_error,
    auth,
    fetch_sql,
    overlapping_client,
    seeded_database,
    store_of,
    store_pets,
)

BOBS = [f"Pet {number}" for number in range(LONG_READ_SCOPE)]
SLICE = 1000
BLOCKS = 8


async def _seed(database_url: str, data_dir: Path) -> None:
    await store_pets(database_url, data_dir, (BOB, BOBS))
    # Statistics as autovacuum would keep them: BOB's pets are the whole table, which the planner then reads.
    await fetch_sql(database_url, "ANALYZE pets")


async def _table_blocks(database_url: str) -> int:
    [row] = await fetch_sql(database_url, "SELECT pg_relation_size('pets') / current_setting('block_size')::int")
    return int(row[0])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """BOB's LONG_READ_SCOPE pets, "Pet 0" to "Pet 9999", in a PostgreSQL database of this module's."""
    with seeded_database("postgresql", tmp_path_factory.mktemp("long-read-slices"), _seed) as database_url:
        yield database_url


def _small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reads, "LONG_READ_SLICE", SLICE)
    monkeypatch.setattr(reads, "LONG_READ_BLOCKS", BLOCKS)


@pytest.fixture
def rests(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The rests a count takes between its slices, of BLOCKS blocks or SLICE matching records each (taken at once,
    not waited)."""
    taken: list[float] = []

    async def rest(seconds: float) -> None:
        taken.append(seconds)

    _small_slices(monkeypatch)
    monkeypatch.setattr(reads, "_rest", rest)
    return taken


@contextlib.asynccontextmanager
async def _app(database_url: str, data_dir: Path, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    settings = settings_of(database_url, data_dir, long_reads_at_once=1, **overrides)
    async with overlapping_client(create_app(settings)) as client:
        yield client


def _matching(letter: str) -> int:
    return sum(letter in match_key(name) for name in BOBS)


@pytest.mark.parametrize("slices", ["of blocks", "of matches"])
@pytest.mark.parametrize("letter", ["p", "7", "9", "z"])
async def test_a_long_search_counted_in_slices_is_exact(
    seeded: str, tmp_path: Path, rests: list[float], monkeypatch: pytest.MonkeyPatch, letter: str, slices: str
) -> None:
    """BOB's pets are the whole table, read by ranges of blocks; or, as if an index narrowed them, by slices of
    matching records."""
    if slices == "of matches":
        monkeypatch.setattr(reads, "_reads_whole_table", lambda plan, table: False)
    async with _app(seeded, tmp_path) as client:
        answer = await client.get(f"/v1/pets?search={letter}&pageSize=5", headers=auth(BOB))
    assert answer.status_code == 200, answer.text
    assert answer.json()["totalCount"] == _matching(letter)
    assert all(seconds >= 0 for seconds in rests)
    if slices == "of matches":
        # A rest after every whole slice: none where the first slice held them all.
        assert len(rests) == _matching(letter) // SLICE
        return
    # A rest after every range but the last, however many of their records match: "z" matches none.
    blocks = await _table_blocks(seeded)
    assert blocks > 2 * BLOCKS
    assert len(rests) == -(-blocks // BLOCKS) - 1


async def test_at_a_whole_core_a_long_search_counts_in_one_statement(
    seeded: str, tmp_path: Path, rests: list[float]
) -> None:
    async with _app(seeded, tmp_path, long_read_share=1) as client:
        answer = await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB))
    assert (answer.status_code, answer.json()["totalCount"]) == (200, LONG_READ_SCOPE)
    assert rests == []


async def test_a_search_over_few_records_is_no_long_read_and_counts_in_one_statement(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_reads: list[bool] = []
    count_long_read = PostgresTransaction.count_long_read

    async def noted(self: PostgresTransaction, *args: Any) -> int:
        long_reads.append(True)
        return await count_long_read(self, *args)

    monkeypatch.setattr(PostgresTransaction, "count_long_read", noted)
    async with _app(seeded, tmp_path) as client:
        few = await client.get("/v1/pets?search=p", headers=auth(ALICE))
        assert (few.status_code, few.json()["totalCount"]) == (200, 0)
        assert long_reads == []
        many = await client.get("/v1/pets?search=p", headers=auth(BOB))
    assert (many.status_code, many.json()["totalCount"]) == (200, LONG_READ_SCOPE)
    assert long_reads == [True]


async def test_a_count_in_slices_reads_one_snapshot_whatever_commits_between_its_slices(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pet that matches, created and committed while the count rests after its first slice, is not counted."""
    created: list[str] = []

    async def create_during_the_rest(seconds: float) -> None:
        if not created:
            answer = await client.post("/v1/pets", json={"name": "Pet between", "petType": "Dog"}, headers=auth(BOB))
            assert answer.status_code == 201, answer.text
            created.append(answer.json()["id"])

    _small_slices(monkeypatch)
    monkeypatch.setattr(reads, "_rest", create_during_the_rest)
    async with _app(seeded, tmp_path) as client:
        try:
            during = await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB))
            after = await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB))
        finally:
            for pet in created:
                await client.delete(f"/v1/pets/{pet}", headers=auth(BOB))
    assert created
    assert (during.status_code, during.json()["totalCount"]) == (200, LONG_READ_SCOPE)
    assert (after.status_code, after.json()["totalCount"]) == (200, LONG_READ_SCOPE + 1)


async def test_a_count_in_slices_past_the_statement_timeout_answers_503_and_frees_its_connection(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout bounds the count as a whole, rests included, not each slice: at a millionth of a core, the
    first rest would outlast it, and the count ends there rather than sleep past it."""
    _small_slices(monkeypatch)
    settings = {"db_statement_timeout_seconds": 2, "long_read_share": 1e-6, "db_pool_size": 1}
    async with _app(seeded, tmp_path, **settings) as client:
        assert_error(await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB)), 503, 986)
        assert 'petrecords_db_unavailable_total{cause="timeout"}' in (await client.get("/metrics")).text
        # The pool's one connection is back, out of the cursor's transaction.
        few = await client.get("/v1/pets?search=p", headers=auth(ALICE))
        assert (few.status_code, few.json()["totalCount"]) == (200, 0)


async def test_a_count_whose_client_pauses_past_the_timeout_is_a_timeout_not_a_lost_session(
    seeded: str, tmp_path: Path, rests: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count's transaction may stay idle as long as any other, not only as long as the statement timeout: a
    client busy past a short timeout between two of its statements (at 1 ms, any moment of a loaded machine) had
    PostgreSQL end its session, counted as a lost connection instead of the timeout it is."""

    def pausing(plan: Any, table: str) -> bool:
        time.sleep(0.3)  # after the plan's EXPLAIN, before the first slice: idle in the count's transaction
        return True

    monkeypatch.setattr(reads, "_reads_whole_table", pausing)
    settings = {"db_statement_timeout_seconds": 0.2, "db_pool_size": 1, "changes_retention_days": 0}
    async with _app(seeded, tmp_path, **settings) as client:
        assert_error(await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB)), 503, 986)
        counted = (await client.get("/metrics")).text
    assert 'petrecords_db_unavailable_total{cause="timeout"}' in counted
    assert 'cause="connection"' not in counted


async def test_a_search_whose_client_goes_away_during_a_rest_gives_back_a_sound_connection(
    seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resting = asyncio.Event()

    async def rest_until_cancelled(seconds: float) -> None:
        resting.set()
        await asyncio.Event().wait()

    _small_slices(monkeypatch)
    monkeypatch.setattr(reads, "_rest", rest_until_cancelled)
    app = create_app(settings_of(seeded, tmp_path, long_reads_at_once=1, db_pool_size=1))
    async with overlapping_client(app) as client:
        search = asyncio.ensure_future(client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB)))
        await asyncio.wait_for(resting.wait(), 30)
        search.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await search
        # The pool's one connection, back and out of the cursor's transaction, answers the next request.
        few = await client.get("/v1/pets?search=p", headers=auth(ALICE))
        assert (few.status_code, few.json()["totalCount"]) == (200, 0)
        assert store_of(app).pool_figures()["checked_out"] == 0


async def test_a_long_reads_turn_is_given_back_owing_only_what_its_count_did_not_rest(
    seeded: str, tmp_path: Path, rests: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rests between the slices count toward the turn's share: given back, it owes what the rest of the long
    read (its page, the checks before it) took beyond them, not its count's time over again."""
    given_back: list[tuple[float, float]] = []
    rest_owed = LongReadTurns.rest_owed

    def noted(self: LongReadTurns, *, held: float, rested: float) -> float:
        given_back.append((held, rested))
        return rest_owed(self, held=held, rested=rested)

    monkeypatch.setattr(LongReadTurns, "rest_owed", noted)
    async with _app(seeded, tmp_path) as client:
        answer = await client.get("/v1/pets?search=p&pageSize=5", headers=auth(BOB))
    assert (answer.status_code, answer.json()["totalCount"]) == (200, LONG_READ_SCOPE)
    assert len(rests) == -(-(await _table_blocks(seeded)) // BLOCKS) - 1
    [(_, rested)] = given_back
    assert rested > 0
    assert rested == pytest.approx(sum(rests))
