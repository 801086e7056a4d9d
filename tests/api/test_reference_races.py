"""Integrity under concurrency, on both databases and across two instances: whatever the interleaving of
creates, replaces, deletes and owner transfers, no vaccination refers to a deleted pet or vaccine, each has
its pet's owner, a vaccine in use is never deleted, and the kept counts agree with the rows."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import asyncpg
import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import ADMIN, ALICE, BOB, auth

Client = AsyncTestClient[Any]
ROUNDS = 6
APPLIED = "2026-11-20T10:00:00.000Z"


async def _rows(database_url: str, query: str) -> list[tuple[Any, ...]]:
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return [tuple(row) for row in connection.execute(query).fetchall()]
        finally:
            connection.close()
    pg = await asyncpg.connect(database_url, timeout=5)
    try:
        return [tuple(row) for row in await pg.fetch(query)]
    finally:
        await pg.close()


async def _post(client: Client, path: str, body: dict[str, Any], user: str = ALICE) -> httpx.Response:
    return await client.post(path, json=body, headers=auth(user, admin=user == ADMIN))


async def _assert_integrity(database_url: str) -> None:
    dangling = await _rows(
        database_url,
        "SELECT v.id FROM pet_vaccinations v LEFT JOIN pets p ON p.id = v.pet_id "
        "LEFT JOIN vaccines x ON x.id = v.vaccine_id WHERE p.id IS NULL OR x.id IS NULL",
    )
    stray_owner = await _rows(
        database_url,
        "SELECT v.id FROM pet_vaccinations v JOIN pets p ON p.id = v.pet_id WHERE v.owner_id <> p.owner_id",
    )
    kept = dict(
        await _rows(
            database_url,
            "SELECT scope, SUM(count) FROM record_counts WHERE resource = 'pet-vaccination' GROUP BY scope",
        )
    )
    counted = dict(await _rows(database_url, "SELECT owner_id, COUNT(*) FROM pet_vaccinations GROUP BY owner_id"))
    total = (await _rows(database_url, "SELECT COUNT(*) FROM pet_vaccinations"))[0][0]
    assert dangling == []
    assert stray_owner == []
    assert {owner: int(count) for owner, count in kept.items() if owner and count} == counted
    assert int(kept.get("", 0)) == total


@pytest.mark.parametrize("round_number", range(ROUNDS))
async def test_deletes_creates_and_transfers_race_without_breaking_a_reference(
    make_client: Callable[[Settings], Client],
    make_settings: Callable[..., Settings],
    database_url: str,
    round_number: int,
) -> None:
    rng = random.Random(round_number)
    first, second = make_client(make_settings()), make_client(make_settings())
    async with first, second:
        clients = [first, second]
        pet = (await _post(first, "/v1/pets", {"name": "Rex", "petType": "Dog"})).json()
        other = (await _post(first, "/v1/pets", {"name": "Max", "petType": "Dog"})).json()
        vaccine = (
            await _post(first, "/v1/vaccines", {"name": "Rabies", "petType": "Dog", "duration": 365}, ADMIN)
        ).json()
        for_pet = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": APPLIED}
        for_other = {**for_pet, "petId": other["id"]}

        operations: list[tuple[str, Any]] = [
            *(("create", lambda c: _post(c, "/v1/pet-vaccination", for_pet)) for _ in range(8)),
            *(("create other", lambda c: _post(c, "/v1/pet-vaccination", for_other)) for _ in range(3)),
            ("delete pet", lambda c: c.delete(f"/v1/pets/{pet['id']}", headers=auth(ALICE))),
            ("delete vaccine", lambda c: c.delete(f"/v1/vaccines/{vaccine['id']}", headers=auth(ADMIN, admin=True))),
            (
                "transfer",
                lambda c: c.put(
                    f"/v1/pets/{pet['id']}",
                    json={"name": "Rex", "petType": "Dog", "ownerId": BOB},
                    headers=auth(ADMIN, admin=True),
                ),
            ),
        ]
        rng.shuffle(operations)
        answers = await asyncio.gather(*(send(clients[index % 2]) for index, (_, send) in enumerate(operations)))
        outcome = {name: response.status_code for (name, _), response in zip(operations, answers, strict=True)}
        statuses = {(name, response.status_code) for (name, _), response in zip(operations, answers, strict=True)}

        assert all(response.status_code < 500 for response in answers), statuses
        assert {status for name, status in statuses if name.startswith("create")} <= {201, 400}
        assert outcome["delete vaccine"] in (200, 409)
        assert outcome["delete pet"] in (200, 404)  # 404: the transfer to Bob came first
        await _assert_integrity(database_url)
        remaining = {row[0] for row in await _rows(database_url, "SELECT vaccine_id FROM pet_vaccinations")}
        vaccines_left = await _rows(database_url, "SELECT COUNT(*) FROM vaccines")
        if outcome["delete vaccine"] == 200:
            assert remaining == set()
        else:
            assert vaccines_left[0][0] == 1
        created_other = sum(
            1
            for (name, _), response in zip(operations, answers, strict=True)
            if name == "create other" and response.status_code == 201
        )
        if outcome["delete vaccine"] == 409:
            listed = await first.get(f"/v1/pet-vaccination?petId={other['id']}", headers=auth(ADMIN, admin=True))
            assert listed.json()["totalCount"] == created_other
