"""A search costs in proportion to what its caller may see (tests/store/test_sqlite_long_reads.py shows that a long
read on SQLite never holds up the other requests of its process).

The cost is shown by the statement timeout (PETRECORDS_DB_STATEMENT_TIMEOUT_SECONDS): with many of another
owner's records matching, a caller who may see three records searches well within a timeout that reading the
others' matches outlives, on both databases. A timing answers only for the load of its moment: a search is tried
ATTEMPTS times, and one answer within the timeout shows the cost (reading the others' matches never fits in it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from httpx import Response
from litestar import Litestar
from litestar.testing import AsyncTestClient

from petrecords.app import create_app, open_store
from tests.conftest import test_settings as settings_of
from tests.support import ADMIN, ALICE, BOB, PET_RECORDS, auth, pet_row, run_sql, seeded_database

# Heavy by nature: a hundred thousand pets written on each database before the first search (35 s of a worker).
pytestmark = pytest.mark.long

OTHERS_MATCHES = 100_000
"""Another owner's pets that a search of "abc" matches: reading them all takes tens of milliseconds."""
SEED_BATCH = 5_000
TIMEOUT_SECONDS = 0.02
"""Outlived by a read of OTHERS_MATCHES records; far more than reading a few of them takes."""
ALICES = ("abc one", "xyz two", "xyz three")
ATTEMPTS = 20
PAUSE_SECONDS = 0.25
"""Between attempts: spread over seconds, they outlast a neighbouring test's burst of work on the same database
server (`make test` runs two at once)."""


async def search_within_timeout(
    client: AsyncTestClient[Litestar], params: dict[str, str], headers: dict[str, str]
) -> Response:
    """The first answer that is not the statement timeout's 503 (the machine's load can outlast the timeout on a
    few milliseconds' work, not on every try)."""
    for _ in range(ATTEMPTS - 1):
        response = await client.get("/v1/pets", params=params, headers=headers)
        if response.status_code != 503:
            return response
        await asyncio.sleep(PAUSE_SECONDS)
    return await client.get("/v1/pets", params=params, headers=headers)


async def _seed(database_url: str, data_dir: Path) -> None:
    store = open_store(settings_of(database_url, data_dir))
    try:
        for start in range(0, OTHERS_MATCHES, SEED_BATCH):
            async with store.transaction(write=True) as tx:
                batch = [pet_row(f"abc {n}", owner=BOB) for n in range(start, start + SEED_BATCH)]
                await tx.insert_many(PET_RECORDS, batch)
        async with store.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, [pet_row(name, owner=ALICE) for name in ALICES])
    finally:
        await store.close()
    if not database_url.startswith("sqlite"):
        # What autovacuum does within a minute of such writes, and `import` at once. Before it, the statistics
        # may describe the pets of a moment before, as a shared database's did (where ALICE owned most pets and
        # none matched "abc"), and a search of hers be planned by the name's index.
        await run_sql(database_url, "ANALYZE")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def others_matches(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database of its own holding OTHERS_MATCHES of BOB's pets whose names hold "abc", and ALICE's three: once
    for the tests of this module, which write nothing. Of its own, so that its statistics (and its hundred thousand
    deleted rows) are no other test's."""
    with seeded_database(request.param, tmp_path_factory.mktemp("search-cost"), _seed) as database_url:
        yield database_url


@pytest.mark.parametrize("search", ["abc", "ABC", "bc o", "xyz", "nothing"])
async def test_a_search_reads_only_what_its_caller_may_see(others_matches: str, tmp_path: Path, search: str) -> None:
    settings = settings_of(
        others_matches, tmp_path, db_statement_timeout_seconds=TIMEOUT_SECONDS, changes_retention_days=0
    )
    app = create_app(settings)
    async with AsyncTestClient(app=app) as client:
        # Whatever it answers: the first statements of a new PostgreSQL connection load its catalog, which on a busy
        # machine may outlast the timeout whatever they read. The pool hands the same connection on.
        await client.get("/v1/pets", params={"pageSize": "1"}, headers=auth(ALICE))
        response = await search_within_timeout(client, {"search": search}, auth(ALICE))
        assert response.status_code == 200, response.text
        expected = {name for name in ALICES if search.lower() in name}
        assert {item["name"] for item in response.json()["items"]} == expected
        assert response.json()["totalCount"] == len(expected)
        # The same search by one who may see every record reads the index, not every record.
        response = await search_within_timeout(client, {"search": "xyz", "pageSize": "5"}, auth(ADMIN, admin=True))
        assert response.status_code == 200, response.text
        assert response.json()["totalCount"] == 2
