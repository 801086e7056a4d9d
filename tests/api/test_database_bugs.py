"""A bug is not an outage (section 6): a statement that the database rejects for what it says (a syntax
error, a table or column that is not there, a violated constraint) answers 500/500, the same on both
databases, with its traceback in the log. It is never a 503 "retry later": waiting would not help. It is
not counted as an outage, and readiness stays what it is (the database answers and its schema is current).

The faults are real: a throw-away database whose schema is changed under the service.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import create_app, open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.store.base import Store
from petrecords.store.sql import SqlStore
from tests.api.test_database_faults import Client, _unavailable_counts
from tests.support import (
    PET_RECORDS,
    SECRET,
    assert_error,
    auth,
    create,
    pet_body,
    pet_row,
    run_sql,
    throwaway_postgres,
)


@pytest.fixture(params=["sqlite", "postgresql"])
def throwaway_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated database of its own, whose schema the test may break."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'pets.sqlite3'}"
        migrate(Settings(database_url=url, data_dir=tmp_path))
        yield url
        return
    with throwaway_postgres(migrated=True) as url:
        migrate(Settings(database_url=url, data_dir=tmp_path))
        yield url


@pytest.fixture
def settings(throwaway_url: str, tmp_path: Path) -> Settings:
    return Settings(database_url=throwaway_url, data_dir=tmp_path, auth_secret=SECRET, rate_limit=0, access_log=False)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Store]:
    opened = open_store(settings)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def _crashes(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The service's log records of failed requests; none may be an outage's warning."""
    records = [record for record in caplog.records if record.name == "petrecords.errors"]
    assert [record for record in records if record.levelno == logging.WARNING] == []
    return records


def assert_internal_error(response: Any) -> None:
    body = assert_error(response, 500, 500)
    assert body["message"] == "Internal server error."
    assert "retry-after" not in response.headers


async def _every_operation(client: Client, pet_id: str) -> list[Any]:
    return [
        await client.post("/v1/pets", json=pet_body("Tom"), headers=auth()),
        await client.get("/v1/pets", headers=auth()),
        await client.get(f"/v1/pets/{pet_id}", headers=auth()),
        await client.put(f"/v1/pets/{pet_id}", json=pet_body("Max"), headers=auth()),
        await client.delete(f"/v1/pets/{pet_id}", headers=auth()),
    ]


class TestMissingColumn:
    async def test_every_operation_answers_500_with_a_traceback_and_readiness_holds(
        self, client: Client, throwaway_url: str, logged: pytest.LogCaptureFixture
    ) -> None:
        pet = (await create(client)).json()
        await run_sql(throwaway_url, "ALTER TABLE pets RENAME COLUMN name TO former_name")

        responses = await _every_operation(client, pet["id"])
        ready = await client.get("/readyz")
        counts = await _unavailable_counts(client)

        for response in responses:
            assert_internal_error(response)
            assert "pets" not in response.text
        crashes = _crashes(logged)
        assert len(crashes) == len(responses)
        assert all(record.levelno == logging.ERROR and record.exc_info for record in crashes)
        assert ready.status_code == 200
        assert counts == {}


class TestMissingTable:
    async def test_writes_and_lists_answer_500_with_a_traceback(
        self, client: Client, throwaway_url: str, logged: pytest.LogCaptureFixture
    ) -> None:
        pet = (await create(client)).json()
        await run_sql(throwaway_url, "ALTER TABLE record_counts RENAME TO record_counts_gone")

        created = await client.post("/v1/pets", json=pet_body("Tom"), headers=auth())
        listed = await client.get("/v1/pets", headers=auth())
        got = await client.get(f"/v1/pets/{pet['id']}", headers=auth())
        counts = await _unavailable_counts(client)

        assert_internal_error(created)
        assert_internal_error(listed)
        assert got.status_code == 200  # a lookup does not touch the kept counts
        assert [record.levelno for record in _crashes(logged)] == [logging.ERROR, logging.ERROR]
        assert all(record.exc_info for record in _crashes(logged))
        assert counts == {}


class TestStatementErrors:
    """What the store raises for a wrong statement: the driver's own error, never a 503."""

    async def test_a_syntax_error(self, store: Store) -> None:
        assert isinstance(store, SqlStore)  # fetch runs any statement
        wrong = sa.select(sa.literal_column("1 + + FROM"))
        with pytest.raises((sqlite3.OperationalError, asyncpg.PostgresSyntaxError)) as raised:
            async with store.transaction(write=False) as tx:
                await tx.fetch((wrong, {}))
        assert "syntax error" in str(raised.value)

    async def test_a_violated_constraint(self, store: Store) -> None:
        pet = pet_row()
        with pytest.raises((sqlite3.IntegrityError, asyncpg.UniqueViolationError)):
            async with store.transaction(write=True) as tx:
                await tx.insert_many(PET_RECORDS, [pet, pet])
        async with store.transaction(write=False) as tx:
            assert await tx.get(PET_RECORDS, pet["id"]) is None
