"""What a write sends to PostgreSQL: its statements are few, because every one is a round trip. A write's
changes wait for the transaction's next read or its end and go together, as one statement."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.support import auth, record_statements

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    return record_statements(monkeypatch)


async def _pet(client: AsyncTestClient[Any], **headers: str) -> Any:
    body = {"name": "Rex", "petType": "Dog"}
    response = await client.post("/v1/pets", json=body, headers={**auth(), **headers})
    assert response.status_code == 201, response.text
    return response


async def test_a_create_is_one_statement(client: AsyncTestClient[Any], statements: list[str]) -> None:
    await _pet(client)
    # The record, its change and the kept counts, on their own a transaction: no BEGIN, no COMMIT.
    assert len(statements) == 1, statements
    assert statements[0].startswith("WITH ")


async def test_a_replace_reads_then_writes_once(client: AsyncTestClient[Any], statements: list[str]) -> None:
    created = await _pet(client)
    statements.clear()
    response = await client.put(
        created.headers["location"],
        json={"name": "Max", "petType": "Dog"},
        headers={**auth(), "If-Match": created.headers["etag"]},
    )
    assert response.status_code == 200, response.text
    begin, read, write, commit = statements
    assert begin.startswith("BEGIN; SELECT pg_advisory_xact_lock(")
    assert read.startswith("SELECT")
    assert write.startswith("WITH ")
    assert commit == "COMMIT"


async def test_a_create_with_an_idempotency_key(client: AsyncTestClient[Any], statements: list[str]) -> None:
    await _pet(client, **{"Idempotency-Key": "one"})
    # The key is held and looked up before the writes, which carry the response kept for it.
    assert [statement.split()[0] for statement in statements] == ["BEGIN", "SELECT", "SELECT", "WITH", "COMMIT"]
    assert "idempotency_keys" in statements[3]
