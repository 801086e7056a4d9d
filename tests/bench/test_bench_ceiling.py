"""The benchmark's create ceiling (bench/ceiling.py) bounds a create only if it writes what a create writes, and,
on SQLite, commits as the store does: these hold it to that, against the service on the same database. Its
neighbour (bench/neighbour.py) stands for the service's long searches only if it reads what they read."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import msgspec
import pysqlite3.dbapi2 as sqlite3
import pytest
from litestar.testing import AsyncTestClient

from petrecords.values import now_ms, parse_datetime_ms
from tests.support import ADMIN, ALICE, BOB, auth, bench_module, create, fetch_sql, wipe

ceiling = bench_module("ceiling")
neighbour = bench_module("neighbour")


def _backend(database_url: str) -> Any:
    if database_url.startswith("sqlite"):
        return ceiling.SqliteBackend(database_url.removeprefix("sqlite:///"))
    return ceiling.PostgresBackend(database_url.replace("postgresql+asyncpg://", "postgresql://"))


async def _close(backend: Any) -> None:
    if isinstance(backend, ceiling.SqliteBackend):
        backend.connection.close()
        backend.writer.close()
    elif backend.pool is not None:
        await backend.pool.close()


async def _rows(database_url: str, statement: str) -> list[tuple[Any, ...]]:
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return [tuple(row) for row in connection.execute(statement).fetchall()]
        finally:
            connection.close()
    return [tuple(row) for row in await fetch_sql(database_url, statement)]


def _values(name: str, pet_type: str = "Dog") -> tuple[Any, ...]:
    now = now_ms()
    return (uuid.uuid4(), now, ALICE, now, ALICE, ALICE, name, pet_type, 1)


async def test_the_create_ceiling_writes_what_a_create_writes(client: AsyncTestClient[Any], database_url: str) -> None:
    await create(client, ALICE, name="Rex", pet_type="Dog")
    backend = _backend(database_url)
    try:
        values = _values("Rex")
        await backend.create(values, msgspec.json.encode({"name": "Rex"}))
    finally:
        await _close(backend)
    pets = await _rows(database_url, "SELECT name, name_key, pet_type, owner_id, created_by, revision FROM pets")
    assert pets == [("Rex", "rex", "Dog", ALICE, ALICE, 1)] * 2
    changes = await _rows(
        database_url,
        'SELECT resource, action, version, "by", owner_before, owner_after FROM changes ORDER BY position',
    )
    assert changes == [("pets", "created", 1, ALICE, None, ALICE)] * 2
    # The kept counts, summed over the slots that spread them: both creates counted alike.
    counts = await _rows(
        database_url,
        "SELECT scope, partition, sum(count), sum(writes) FROM record_counts WHERE resource = 'pets' "
        "GROUP BY scope, partition ORDER BY scope",
    )
    assert counts == [("", "Dog", 2, 2), (ALICE, "Dog", 2, 0)]


@pytest.mark.only_on("sqlite")  # PostgreSQL commits each create on its own, as the store does
async def test_concurrent_ceiling_creates_share_one_commit_on_sqlite(database_url: str) -> None:
    await wipe(database_url)
    backend = _backend(database_url)
    statements: list[str] = []
    backend.writer.set_trace_callback(statements.append)
    try:
        await asyncio.gather(*(backend.create(_values(f"pet {number}"), b"{}") for number in range(12)))
    finally:
        await _close(backend)
    assert statements.count("COMMIT") == 1
    assert statements.count("SAVEPOINT request") == statements.count("RELEASE request") == 12
    assert await _rows(database_url, "SELECT count(*) FROM pets") == [(12,)]
    assert await _rows(database_url, "SELECT count(*) FROM changes") == [(12,)]


async def test_the_overdue_ceiling_counts_and_pages_as_the_service(
    client: AsyncTestClient[Any], database_url: str
) -> None:
    """The overdue lists' ceiling reads the counts kept by due period and the page as the service does: the same
    total and the same records, for instants within a day, at its start, and beyond every due date."""
    admin = auth(ADMIN, admin=True)
    vaccine = await client.post(
        "/v1/vaccines", json={"name": "Rabies", "petType": "Dog", "duration": 30}, headers=admin
    )
    pet = await create(client, ALICE, name="Rex", pet_type="Dog")
    for day in range(1, 6):
        body = {"petId": pet.json()["id"], "vaccineId": vaccine.json()["id"], "appliedAt": f"2026-01-0{day}T12:00:00Z"}
        assert (await client.post("/v1/pet-vaccination", json=body, headers=admin)).status_code == 201
    backend = _backend(database_url)
    try:
        for due_to in (
            "2026-02-03T12:00:00Z",
            "2026-02-03T00:00:00Z",
            "2026-02-03T12:00:00.001Z",
            "2027-01-01T00:00:00Z",
        ):
            for name, sort in (("overdue", "createdAt"), ("overdue-by-due", "dueAt")):
                listed = await client.get(
                    "/v1/pet-vaccination", params={"dueTo": due_to, "sort": sort, "pageSize": "20"}, headers=admin
                )
                total, rows = await backend.vaccinations(name, (int(parse_datetime_ms(due_to) or 0),))
                assert total == listed.json()["totalCount"], (due_to, name)
                ids = [str(uuid.UUID(hex=row[0]) if isinstance(row[0], str) else row[0]) for row in rows]
                assert ids == [item["id"] for item in listed.json()["items"]], (due_to, name)
    finally:
        await _close(backend)


async def test_the_lookup_ceilings_answer_the_json_the_service_answers(
    client: AsyncTestClient[Any], database_url: str
) -> None:
    """Get by id is stated against a bare lookup that returns the same JSON: every field the service shows, in its
    form (ids, instants, dates, flags), with the clinic's fields set and unset, and a vaccine's."""
    admin = auth(ADMIN, admin=True)
    clinic = {
        "birthDate": "1969-12-30",
        "sex": "female",
        "neutered": True,
        "breed": "Beagle",
        "microchip": "982000123456780",
        "color": "Tricolour",
        "deceasedAt": "1969-12-31",
    }
    pets = [await create(client, ALICE, name="Rex", pet_type="Dog"), await create(client, ALICE, name="Mia", **clinic)]
    vaccine = await client.post(
        "/v1/vaccines",
        json={"name": "Rabies", "petType": "Dog", "duration": 30, "group": "Rabies", "manufacturer": "Zoetis"},
        headers=admin,
    )
    backend = _backend(database_url)
    try:
        for pet in pets:
            answered = await client.get(f"/v1/pets/{pet.json()['id']}", headers=auth(ALICE))
            assert await ceiling.look_up(backend, f"/pets/{pet.json()['id']}") == answered.json()
        answered = await client.get(f"/v1/vaccines/{vaccine.json()['id']}", headers=admin)
        assert await ceiling.look_up(backend, f"/vaccines/{vaccine.json()['id']}") == answered.json()
    finally:
        await _close(backend)


async def test_the_neighbour_reads_what_the_long_search_reads(client: AsyncTestClient[Any], database_url: str) -> None:
    """bench/neighbour.py runs `scenarios/long_search.lua`'s search as the service's store does: the same total and
    the same page of the same caller's pets, whatever the case or accents of the names, and none of another's."""
    names = [f"{stem} {index}" for index, stem in enumerate(["Rex", "Bella", "ÉMILE", "Max", "Pepper"] * 6)]
    for name in names:
        await create(client, ALICE, name=name)
    await create(client, BOB, name="Bella")
    listed = await client.get("/v1/pets", params={"search": "e", "pageSize": "20"}, headers=auth(ALICE))
    assert listed.json()["totalCount"] == 24
    if database_url.startswith("sqlite"):
        connection = neighbour.sqlite_connection(database_url.removeprefix("sqlite:///"))
        try:
            total, rows = neighbour.search_in_sqlite(connection, ALICE)
        finally:
            connection.close()
    else:
        remote = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:
            total, rows = await neighbour.search_in_postgresql(remote, ALICE)
        finally:
            await remote.close()
    assert total == listed.json()["totalCount"]
    assert [str(uuid.UUID(str(row[0]))) for row in rows] == [item["id"] for item in listed.json()["items"]]
