"""Long reads take turns (store/turns.py): a search that no index serves, over LONG_READ_SCOPE records or more,
waits while the instance's turns are held (by another worker: the turns of `petrecords serve`'s directory), and
answers 503 once its wait outlasts the statement timeout; a search over few records, or one the trigram index
serves, never waits. On both databases, through HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from petrecords.app import create_app
from petrecords.errors import DatabaseUnavailable
from petrecords.store.planner import LONG_READ_SCOPE
from petrecords.store.turns import LongReadTurns
from tests.conftest import test_settings as settings_of
from tests.support import ALICE, BOB, auth, overlapping_client, seeded_database, store_pets

BOBS = LONG_READ_SCOPE
ALICES = ("Ada", "Bea", "Cid")
WAITED_SECONDS = 0.3
"""Long enough for a search that did not wait to have answered."""


async def _seed(database_url: str, data_dir: Path) -> None:
    await store_pets(database_url, data_dir, (BOB, [f"abc {n}" for n in range(BOBS)]), (ALICE, ALICES))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def seeded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """BOB's LONG_READ_SCOPE pets, whose names hold "abc", and ALICE's three, in a database of this module's."""
    with seeded_database(request.param, tmp_path_factory.mktemp("long-reads"), _seed) as database_url:
        yield database_url


@contextlib.asynccontextmanager
async def _instance(database_url: str, serve_dir: Path, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An app as a worker of `petrecords serve` runs, whose instance directory is `serve_dir`."""
    settings = settings_of(database_url, serve_dir, long_reads_at_once=1, db_pool_size=4, **overrides)
    async with overlapping_client(create_app(settings, stopping_file=serve_dir / "stopping")) as client:
        yield client


@contextlib.contextmanager
def _other_worker(serve_dir: Path) -> Iterator[LongReadTurns]:
    turns = LongReadTurns(1, directory=serve_dir / "turns", wait_seconds=5)
    try:
        yield turns
    finally:
        turns.close()


async def test_a_long_search_waits_for_the_turn_another_worker_holds(seeded: str, tmp_path: Path) -> None:
    async with _instance(seeded, tmp_path) as client:
        with _other_worker(tmp_path) as other:
            held = await other.take()
            search = asyncio.ensure_future(client.get("/v1/pets?search=a&pageSize=5", headers=auth(BOB)))
            # Meanwhile, what is not long answers at once: few records, or the trigram index's matches.
            few = await client.get("/v1/pets?search=a", headers=auth(ALICE))
            assert (few.status_code, few.json()["totalCount"]) == (200, 2)
            indexed = await client.get("/v1/pets?search=abc 99&pageSize=5", headers=auth(BOB))
            assert (indexed.status_code, indexed.json()["totalCount"]) == (200, 111)
            await asyncio.sleep(WAITED_SECONDS)
            assert not search.done()
            held.give_back()
            answered = await asyncio.wait_for(search, 30)
            assert (answered.status_code, answered.json()["totalCount"]) == (200, BOBS), answered.text
            # Given back at the end of its request (on PostgreSQL after a rest): the other worker takes it.
            (await other.take()).give_back()


async def test_a_long_search_that_waits_past_the_statement_timeout_answers_503(seeded: str, tmp_path: Path) -> None:
    async with _instance(seeded, tmp_path, db_statement_timeout_seconds=1) as client:
        with _other_worker(tmp_path) as other:
            held = await other.take()
            refused = await client.get("/v1/pets?search=a", headers=auth(BOB))
            assert refused.status_code == 503, refused.text
            assert (refused.json()["code"], refused.headers["Retry-After"]) == (986, "5")
            held.give_back()
            answered = await client.get("/v1/pets?search=a", headers=auth(BOB))
            assert (answered.status_code, answered.json()["totalCount"]) == (200, BOBS), answered.text


async def test_long_searches_beyond_those_a_worker_lets_wait_answer_503_at_once(seeded: str, tmp_path: Path) -> None:
    # A waiting search holds its connection: of the four of a PostgreSQL pool, two may wait (SQLite: one of three).
    waiting_at_most = 2 if seeded.startswith("postgresql") else 1
    async with _instance(seeded, tmp_path) as client:
        with _other_worker(tmp_path) as other:
            held = await other.take()
            searches = [
                asyncio.ensure_future(client.get("/v1/pets?search=a", headers=auth(BOB)))
                for _ in range(waiting_at_most + 1)
            ]
            done, _ = await asyncio.wait(searches, timeout=WAITED_SECONDS * 10, return_when=asyncio.FIRST_COMPLETED)
            assert [response.result().status_code for response in done] == [503]
            assert done.pop().result().json()["code"] == 986
            held.give_back()
            answered = await asyncio.gather(*(search for search in searches if not search.done()))
            assert [response.status_code for response in answered] == [200] * waiting_at_most


async def test_a_long_searchs_turn_rests_after_it_on_postgresql_and_not_on_sqlite(seeded: str, tmp_path: Path) -> None:
    """At a hundredth of a core, a PostgreSQL turn stays taken after its search for 99 times the time the search
    held it (at most half the statement timeout); SQLite's long reads run on threads of the worker's own, and
    their turns take no share."""
    async with _instance(seeded, tmp_path, long_read_share=0.01) as client:
        answered = await client.get("/v1/pets?search=a&pageSize=5", headers=auth(BOB))
        assert (answered.status_code, answered.json()["totalCount"]) == (200, BOBS), answered.text
        other = LongReadTurns(1, directory=tmp_path / "turns", wait_seconds=0.05)
        try:
            if seeded.startswith("postgresql"):
                with pytest.raises(DatabaseUnavailable):
                    await other.take()
            else:
                (await other.take()).give_back()
        finally:
            other.close()
