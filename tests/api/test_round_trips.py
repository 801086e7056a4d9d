"""What a write sends to PostgreSQL: its statements are few, because every one is a round trip. A write's
changes wait for the transaction's next read or its end and go together, as one statement."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.resources import handlers
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
        json={"name": created.json()["name"], "petType": "Dog", "breed": "Beagle"},
        headers={**auth(), "If-Match": created.headers["etag"]},
    )
    assert response.status_code == 200, response.text
    begin, read, write, commit = statements
    assert begin.startswith("BEGIN; SELECT pg_advisory_xact_lock(")
    assert read.startswith("SELECT")
    assert write.startswith("WITH ")
    assert commit == "COMMIT"


async def test_a_rename_also_reads_the_pets_due_rows(client: AsyncTestClient[Any], statements: list[str]) -> None:
    """A pet's name, type and owner are also its due rows' (petrecords.due_rows): a replace that changes one holds them
    (a vaccine's write, which does not hold the pet, rewrites them too), which the deferred write waits for, and reads
    them after that write, whose counts then go in a statement of their own."""
    created = await _pet(client)
    statements.clear()
    response = await client.put(
        created.headers["location"],
        json={"name": "Max", "petType": "Dog"},
        headers={**auth(), "If-Match": created.headers["etag"]},
    )
    assert response.status_code == 200, response.text
    begin, read, hold, write, due_rows, counts, commit = statements
    assert begin.startswith("BEGIN; SELECT pg_advisory_xact_lock(")
    assert read.startswith("SELECT")
    assert hold.startswith("SELECT pg_advisory_xact_lock(")
    assert write.startswith("WITH ")
    assert due_rows.startswith("SELECT due_doses.")
    assert counts.startswith("WITH ")
    assert "record_counts" in counts
    assert commit == "COMMIT"


NEVER = 2**128 + 1
"""A divisor of no record id (128 bits): no create purges the expired keys."""


async def test_a_create_with_an_idempotency_key(
    client: AsyncTestClient[Any], statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One create in _PURGE_EVERY, chosen by its random id, also purges the expired keys: not this one.
    monkeypatch.setattr(handlers, "_PURGE_EVERY", NEVER)
    await _pet(client, **{"Idempotency-Key": "one"})
    # The key is held and looked up before the writes, which carry the response kept for it.
    assert [statement.split()[0] for statement in statements] == ["BEGIN", "SELECT", "SELECT", "WITH", "COMMIT"]
    assert "idempotency_keys" in statements[3]


async def test_a_create_that_purges_the_expired_idempotency_keys(
    client: AsyncTestClient[Any], statements: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handlers, "_PURGE_EVERY", 1)
    await _pet(client, **{"Idempotency-Key": "one"})
    # The purge is one statement more, in the same transaction.
    assert [statement.split()[0] for statement in statements] == [
        "BEGIN",
        "SELECT",
        "SELECT",
        "WITH",
        "DELETE",
        "WITH",
        "COMMIT",
    ]
    assert "idempotency_keys" in statements[4]
