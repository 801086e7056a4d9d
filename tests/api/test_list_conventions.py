"""The conventions of web data providers on every list (contract v3 section 4): one `order` per sort field,
`{field}_like`, `{field}_gte`, `{field}_lte`, `{field}_ne`, `q` and `id`, made from each resource's declaration;
an operator on a field it does not fit is 400 naming it. On both databases."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.registry import RESOURCES
from petrecords.resources.listing import compared_fields, list_parameters
from tests.support import ADMIN, ALICE, BOB, admin, assert_error, auth, create, create_vaccine

Client = AsyncTestClient[Any]


async def names(client: Client, path: str, query: str, user: str = ALICE) -> list[str]:
    response = await client.get(f"{path}?{query}", headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 200, response.text
    return [item["name"] for item in response.json()["items"]]


@pytest.fixture
async def pets(client: Client) -> dict[str, dict[str, Any]]:
    made = {}
    for name, pet_type, owner in [
        ("Rex", "Dog", ALICE),
        ("rexy", "Cat", ALICE),
        ("Max", "Dog", ALICE),
        ("Bella", "Cat", ALICE),
        ("Bob's dog", "Dog", BOB),
    ]:
        made[name] = (await create(client, owner, name=name, pet_type=pet_type)).json()
    return made


class TestOrderLists:
    async def test_one_direction_per_sort_field(self, client: Client, pets: dict[str, Any]) -> None:
        assert await names(client, "/v1/pets", "sort=petType,name&order=asc,desc") == ["rexy", "Bella", "Rex", "Max"]
        assert await names(client, "/v1/pets", "sort=petType,name&order=desc,asc") == ["Max", "Rex", "Bella", "rexy"]

    async def test_repeated_directions_are_a_list_too(self, client: Client, pets: dict[str, Any]) -> None:
        repeated = await names(client, "/v1/pets", "sort=petType&sort=name&order=asc&order=desc")

        assert repeated == await names(client, "/v1/pets", "sort=petType,name&order=asc,desc")

    async def test_one_direction_is_still_the_default_of_unmarked_fields(self, client: Client, pets: Any) -> None:
        assert await names(client, "/v1/pets", "sort=petType,-name&order=desc") == ["Rex", "Max", "rexy", "Bella"]

    @pytest.mark.parametrize(
        "query",
        [
            "sort=petType,name&order=asc,desc,asc",
            "sort=petType,-name&order=asc,desc",
            "order=asc,desc",
            "sort=name&order=up",
        ],
    )
    async def test_a_list_that_does_not_fit_is_400(self, client: Client, query: str) -> None:
        response = await client.get(f"/v1/pets?{query}", headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["order"]


class TestOperators:
    async def test_like_is_a_case_insensitive_substring(self, client: Client, pets: dict[str, Any]) -> None:
        assert await names(client, "/v1/pets", "name_like=REX&sort=name") == ["Rex", "rexy"]
        assert await names(client, "/v1/pets", "name_like=e_y") == ["rexy"]
        assert await names(client, "/v1/pets", "name_like=%25") == ["Rex", "rexy", "Max", "Bella"]

    async def test_q_is_search(self, client: Client, pets: dict[str, Any]) -> None:
        assert await names(client, "/v1/pets", "q=ell") == await names(client, "/v1/pets", "search=ell") == ["Bella"]

    async def test_ne_differs(self, client: Client, pets: dict[str, Any]) -> None:
        assert await names(client, "/v1/pets", "petType_ne=dog&sort=name") == ["Bella", "rexy"]
        assert await names(client, "/v1/pets", f"ownerId_ne={ALICE}", ADMIN) == ["Bob's dog"]
        assert await names(client, "/v1/pets", f"id_ne={pets['Rex']['id']}&sort=name") == ["Bella", "Max", "rexy"]

    async def test_bounds_are_inclusive(self, client: Client, pets: dict[str, Any]) -> None:
        created = pets["Max"]["createdAt"]

        assert "Max" in await names(client, "/v1/pets", f"createdAt_gte={created}")
        assert "Max" in await names(client, "/v1/pets", f"createdAt_lte={created}")
        assert await names(client, "/v1/pets", f"createdAt_gte={created}&createdAt_lte={created}") == ["Max"]

    async def test_a_vaccines_number_and_description(self, client: Client) -> None:
        await create_vaccine(client, name="Short", duration=30, description="For puppies.\nTwice.")
        await create_vaccine(client, name="Long", duration=730)

        assert await names(client, "/v1/vaccines", "duration_gte=30&duration_lte=30") == ["Short"]
        assert await names(client, "/v1/vaccines", "duration_gte=31") == ["Long"]
        assert await names(client, "/v1/vaccines", "description_like=PUPPIES") == ["Short"]
        assert await names(client, "/v1/vaccines", "description_like=%0ATwice") == ["Short"]

    async def test_a_vaccinations_dates_and_references(self, client: Client, pets: dict[str, Any]) -> None:
        rabies = (await create_vaccine(client, name="Rabies", pet_type="Dog")).json()
        for pet, applied in (("Rex", "2025-01-01T00:00:00Z"), ("Max", "2025-06-01T00:00:00Z")):
            body = {"petId": pets[pet]["id"], "vaccineId": rabies["id"], "appliedAt": applied}
            assert (await client.post("/v1/pet-vaccination", json=body, headers=auth())).status_code == 201

        async def pets_of(query: str) -> list[str]:
            response = await client.get(f"/v1/pet-vaccination?{query}&sort=appliedAt", headers=auth())
            assert response.status_code == 200, response.text
            by_id = {pet["id"]: name for name, pet in pets.items()}
            return [by_id[item["petId"]] for item in response.json()["items"]]

        assert await pets_of("appliedAt_gte=2025-06-01T00:00:00Z") == ["Max"]
        assert await pets_of("appliedAt_lte=2025-06-01T00:00:00.000Z") == ["Rex", "Max"]
        assert await pets_of(f"petId_ne={pets['Rex']['id']}") == ["Max"]
        assert await pets_of("dueAt_lte=2026-01-01T00:00:00Z") == ["Rex"]

    @pytest.mark.parametrize(
        ("query", "named"),
        [
            ("name_gte=a", "name_gte"),
            ("createdAt_like=2025", "createdAt_like"),
            ("petType_lte=Dog", "petType_lte"),
            ("colour_like=brown", "colour_like"),
            ("name_ne=Rex", "name_ne"),
            ("createdAt_gte=yesterday", "createdAt_gte"),
        ],
    )
    async def test_an_operator_that_does_not_fit_is_400_naming_it(self, client: Client, query: str, named: str) -> None:
        response = await client.get(f"/v1/pets?{query}", headers=auth())

        error = assert_error(response, 400, 994)
        assert list(error["errors"]) == [named]
        assert named in error["message"]


class TestIds:
    async def test_id_repeated_or_comma_separated_is_ids(self, client: Client, pets: dict[str, Any]) -> None:
        rex, max_ = pets["Rex"]["id"], pets["Max"]["id"]

        repeated = await names(client, "/v1/pets", f"id={rex}&id={max_}&sort=name")
        separated = await names(client, "/v1/pets", f"id={rex},{max_}&sort=name")

        assert repeated == separated == ["Max", "Rex"]

    async def test_someone_elses_id_is_not_in_the_answer(self, client: Client, pets: dict[str, Any]) -> None:
        bobs = pets["Bob's dog"]["id"]
        assert await names(client, "/v1/pets", f"id={bobs}") == []


@pytest.mark.parametrize("resource", RESOURCES.resources, ids=lambda resource: resource.name)
async def test_every_list_documents_its_conventions(client: Client, resource: Any) -> None:
    document = (await client.get("/openapi.json")).json()
    documented = {parameter["name"] for parameter in document["paths"][resource.path]["get"]["parameters"]}

    assert set(list_parameters(resource)) == documented
    assert {"q", "id"} & documented
    for name in compared_fields(resource):
        assert any(parameter.startswith(f"{name}_") for parameter in documented), name
    assert (await client.get(resource.path, headers=admin())).status_code == 200
