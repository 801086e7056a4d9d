"""The helpers of tests/support.py that every API test's time rests on: `wipe`, before each of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from petrecords.registry import SCHEMA
from tests.support import ALICE, BOB, KEPT_CONNECTIONS_NAME, fetch_sql, scalar_sql, store_pets, wipe

_KEPT_BACKENDS = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1 ORDER BY pid"
)


async def _rows(database_url: str) -> dict[str, int]:
    return {
        table.name: await scalar_sql(database_url, f'SELECT count(*) FROM "{table.name}"')  # noqa: S608 - ours
        for table in SCHEMA.sorted_tables
    }


async def test_a_wipe_empties_every_table(database_url: str, tmp_path: Path) -> None:
    await wipe(database_url)  # what the tests before this one left
    await store_pets(database_url, tmp_path, (ALICE, ["Rex", "Tom"]), (BOB, ["Kim"]))
    assert (await _rows(database_url))["pets"] == 3

    await wipe(database_url)

    # On PostgreSQL, one row of kept counts holds the data's version, which starts again from a random number.
    version_row = {"record_counts": 1} if database_url.startswith("postgresql") else {}
    assert {table: count for table, count in (await _rows(database_url)).items() if count} == version_row


@pytest.mark.only_on("postgresql")
async def test_wipes_keep_one_connection_and_make_another_once_the_server_ended_it(
    database_url: str, tmp_path: Path
) -> None:
    for _ in range(3):
        await wipe(database_url)
    (kept,) = await fetch_sql(database_url, _KEPT_BACKENDS, KEPT_CONNECTIONS_NAME)
    await fetch_sql(database_url, "SELECT pg_terminate_backend($1, 5000)", kept["pid"])
    await store_pets(database_url, tmp_path, (ALICE, ["Rex"]))

    await wipe(database_url)

    assert await scalar_sql(database_url, "SELECT count(*) FROM pets") == 0
    (again,) = await fetch_sql(database_url, _KEPT_BACKENDS, KEPT_CONNECTIONS_NAME)
    assert again["pid"] != kept["pid"]
