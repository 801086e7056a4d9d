"""What the change log's horizon waits for is observable (changes.horizon): on PostgreSQL, how long the oldest
write still in flight in the database has run is in /metrics, and a long wait is said as a warning naming its
session, once every REPEAT_SECONDS while it lasts, not at every look. On SQLite, whose one writer leaves the log
no horizon, it is 0 and nothing is said, whatever another process is writing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator

import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.app import open_store
from petrecords.changes.horizon import HorizonWatch
from petrecords.config import Settings
from petrecords.metrics import Metrics
from petrecords.store.base import Store
from tests.api.test_database_faults import _postgres_holding

WARNING = "the change log's horizon has waited"


@pytest.fixture
async def store(make_settings: Callable[..., Settings]) -> AsyncIterator[Store]:
    opened = open_store(make_settings())
    yield opened
    await opened.close()


def _waited(metrics: Metrics) -> float:
    for line in metrics.render().decode().splitlines():
        if line.startswith("petrecords_changes_horizon_wait_seconds "):
            return float(line.split()[1])
    raise AssertionError("no petrecords_changes_horizon_wait_seconds in /metrics")


@contextlib.contextmanager
def _sqlite_writing(database_url: str) -> Iterator[None]:
    writer = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO service_state (name) VALUES ('held')")
        yield
    finally:
        writer.execute("ROLLBACK")
        writer.close()


async def test_a_long_write_in_flight_is_measured_and_said_once(
    store: Store, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    watch = HorizonWatch(lambda: store, metrics=metrics)
    watch.WARN_SECONDS = 0.5  # "long", shortened: the rule is the same at any length
    caplog.set_level(logging.INFO, logger="petrecords.duties")

    def said() -> list[str]:
        return [record.getMessage() for record in caplog.records if WARNING in record.getMessage()]

    await watch.look()
    before = _waited(metrics)
    if database_url.startswith("sqlite"):
        with _sqlite_writing(database_url):
            await asyncio.sleep(0.6)
            await watch.look()
            await watch.look()
        assert (before, _waited(metrics), said()) == (0, 0, [])
        return
    # Another client's write, idle in its transaction until the block ends.
    async with _postgres_holding(database_url, "INSERT INTO service_state (name) VALUES ('held')"):
        await asyncio.sleep(0.6)
        await watch.look()
        waited = _waited(metrics)
        await watch.look()  # again within REPEAT_SECONDS: nothing more is said
        warnings = said()
    await watch.look()

    assert before == 0
    assert waited >= 0.5
    assert len(warnings) == 1, warnings
    assert "idle in transaction" in warnings[0]
    assert _waited(metrics) == 0
