"""The totals of lists filtered only by owner and type come from counts kept with every write.

They must equal what counting the rows gives. A `createdFrom` at the epoch matches every record
but makes the service count rows, so the two totals can be compared through the API.
"""

from __future__ import annotations

import random
from typing import Any

from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, auth, pet_body

CAROL = "carol@example.com"
TYPES = ["Dog", "Cat", "Capybara", "Other"]
FORCE_ROW_COUNT = {"createdFrom": "1970-01-01T00:00:00Z"}


async def _total(client: AsyncTestClient[Any], headers: dict[str, str], params: dict[str, str]) -> int:
    response = await client.get("/v1/pets", params=params, headers=headers)
    assert response.status_code == 200, response.text
    total: int = response.json()["totalCount"]
    return total


async def _assert_totals(client: AsyncTestClient[Any], expected: dict[str, tuple[str, str]]) -> None:
    """Every owner/type filter, as each kind of caller: kept count == row count == the model's count."""
    admin = auth(ADMIN, admin=True)
    filters: list[dict[str, str]] = [{}]
    filters += [{"petType": pet_type} for pet_type in TYPES]
    filters += [{"petType": "Dog,cat"}]
    for owner in (ALICE, BOB, CAROL):
        filters += [
            {"ownerId": owner},
            {"ownerId": owner, "petType": "Cat"},
            {"ownerId": owner, "petType": "dog,Other"},
        ]
    for params in filters:
        owner = params.get("ownerId")
        wanted_types = {t.capitalize() for t in params["petType"].split(",")} if "petType" in params else set(TYPES)
        for user, headers in ((ADMIN, admin), (ALICE, auth(ALICE)), (BOB, auth(BOB))):
            visible_owner = owner if user == ADMIN else ALICE if user == ALICE else BOB
            if user != ADMIN and owner is not None and owner != visible_owner:
                model = 0
            else:
                model = sum(
                    1
                    for pet_owner, pet_type in expected.values()
                    if pet_type in wanted_types and (visible_owner is None or pet_owner == visible_owner)
                )
            kept = await _total(client, headers, params)
            counted = await _total(client, headers, {**params, **FORCE_ROW_COUNT})
            assert kept == counted == model, (user, params)


async def test_kept_counts_match_row_counts_through_every_kind_of_write(client: AsyncTestClient[Any]) -> None:
    rng = random.Random(20261121)
    admin = auth(ADMIN, admin=True)
    expected: dict[str, tuple[str, str]] = {}
    for _ in range(40):
        owner, pet_type = rng.choice([ALICE, BOB, CAROL]), rng.choice(TYPES)
        response = await client.post("/v1/pets", json=pet_body("P", pet_type, ownerId=owner), headers=admin)
        assert response.status_code == 201, response.text
        expected[response.json()["id"]] = (owner, pet_type)
    await _assert_totals(client, expected)

    for pet_id in rng.sample(sorted(expected), 15):
        owner, pet_type = rng.choice([ALICE, BOB, CAROL]), rng.choice(TYPES)
        response = await client.put(f"/v1/pets/{pet_id}", json=pet_body("Q", pet_type, ownerId=owner), headers=admin)
        assert response.status_code == 200, response.text
        expected[pet_id] = (owner, pet_type)
    for pet_id in rng.sample(sorted(expected), 12):
        response = await client.delete(f"/v1/pets/{pet_id}", headers=admin)
        assert response.status_code == 200, response.text
        del expected[pet_id]
    await _assert_totals(client, expected)


async def test_failed_writes_leave_the_counts_alone(client: AsyncTestClient[Any]) -> None:
    created = await client.post("/v1/pets", json=pet_body("Rex", "Dog"), headers=auth(ALICE))
    assert created.status_code == 201
    pet_id = created.json()["id"]
    stale = {**auth(ALICE), "If-Match": '"stale"'}
    assert (await client.put(f"/v1/pets/{pet_id}", json=pet_body("Rex", "Cat"), headers=stale)).status_code == 412
    assert (await client.delete(f"/v1/pets/{pet_id}", headers=stale)).status_code == 412
    assert (await client.delete(f"/v1/pets/{pet_id}", headers=auth(BOB))).status_code == 404
    bad = await client.post("/v1/pets", json=pet_body("Rex", "Unicorn"), headers=auth(ALICE))
    assert bad.status_code == 400
    await _assert_totals(client, {pet_id: (ALICE, "Dog")})
