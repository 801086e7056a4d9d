"""Every statement is bounded by the statement timeout (PETRECORDS_DB_STATEMENT_TIMEOUT_SECONDS) on both
databases: past it, the statement is cut short, the request answers 503/986 with Retry-After, and the
connection is back in the pool (on SQLite, the process's read connection is free again) before the answer.

On PostgreSQL the server cancels the statement; on SQLite, whose statements run on the event loop, the read
connection's progress handler interrupts it. A one- or two-letter `search` has no trigram to look up, so it
reads every record of the caller's: this is what bounds it.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import create_app, open_store
from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from tests.conftest import test_settings as settings_of
from tests.support import ALICE, PET_RECORDS, assert_error, auth, pet_row, store_of, wipe

MANY_PETS = 30_000
"""Enough of one caller's pets that reading them all takes several milliseconds on either database."""
SEED_BATCH = 3_000
SHORT_TIMEOUT_SECONDS = 0.001
"""The shortest statement timeout PostgreSQL takes (1 ms): a scan of MANY_PETS records outlives it."""
ENDLESS = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
"""A statement that would never end: counts without a bound (SQLite and PostgreSQL alike)."""


@pytest.fixture(scope="module")
async def many_pets(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """MANY_PETS of ALICE's pets, in an emptied database: once for the tests that read them, which write nothing."""
    await wipe(database_url)
    store = open_store(settings_of(database_url, tmp_path_factory.mktemp("data")))
    try:
        # In batches: each transaction well within the default statement timeout, even on a loaded machine.
        for start in range(0, MANY_PETS, SEED_BATCH):
            async with store.transaction(write=True) as tx:
                batch = [pet_row(f"pet {number}") for number in range(start, start + SEED_BATCH)]
                await tx.insert_many(PET_RECORDS, batch)
    finally:
        await store.close()


@pytest.mark.usefixtures("many_pets")
@pytest.mark.parametrize("search", ["e", "pe", "%", "_t"])
async def test_a_short_search_past_the_timeout_answers_503_and_frees_its_connection(
    make_settings: Callable[..., Settings], search: str
) -> None:
    # Retention off: its background write transaction would hold a connection of its own meanwhile.
    settings = make_settings(
        db_statement_timeout_seconds=SHORT_TIMEOUT_SECONDS, db_pool_size=1, changes_retention_days=0
    )
    app = create_app(settings)
    async with AsyncTestClient(app=app) as client:  # type: ignore[arg-type]
        response = await client.get("/v1/pets", params={"search": search}, headers=auth(ALICE))

        assert_error(response, 503, 986)
        assert response.headers["Retry-After"] == str(DatabaseUnavailable.retry_after_seconds)
        assert store_of(app).pool_figures()["checked_out"] == 0
        metrics = (await client.get("/metrics")).text
        counted = [line for line in metrics.splitlines() if line.startswith("petrecords_db_unavailable_total{")]
        assert any('cause="timeout"' in line for line in counted), (response.json(), counted)


async def test_a_statement_that_would_never_end_is_cut_short(make_settings: Callable[..., Settings]) -> None:
    """A deliberately endless read: interrupted at the timeout, as a 503 of cause "timeout"; the same
    connection then serves the next read."""
    store = open_store(make_settings(db_statement_timeout_seconds=0.05, db_pool_size=1))
    try:
        with pytest.raises(DatabaseUnavailable) as raised:
            async with store.transaction(write=False) as tx:
                await tx.fetch((sa.text(ENDLESS), {}))
        assert raised.value.cause == "timeout"
        assert store.pool_figures()["checked_out"] == 0
        async with store.transaction(write=False) as tx:
            assert await tx.count(PET_RECORDS, ()) >= 0
    finally:
        await store.close()
