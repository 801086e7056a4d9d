"""The calls of the web front end written for this API (React, Refine, the simple REST data provider of
graduenz/whoof-web `src/rest-data-provider`), replayed as it makes them, URL for URL: every list with
pagination on and off, sorters, each filter operator, getMany, create, update with the id in the body, delete.
Each answer must hold every record the client asked for, in the order it asked for."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, auth, create, create_vaccine

Client = AsyncTestClient[Any]
ROUTES = {"pet": "v1/pets", "vaccine": "v1/vaccines", "pet_vaccination": "v1/pet-vaccination"}
OPERATORS = {"eq": "", "ne": "_ne", "gte": "_gte", "lte": "_lte", "contains": "_like"}


def stringify(query: dict[str, Any]) -> str:
    """query-string's `stringify`, as the data provider calls it: keys sorted, values encoded strictly, a list as
    the key repeated, nothing for an empty object."""
    parts = []
    for key in sorted(query):
        values = query[key] if isinstance(query[key], list) else [query[key]]
        parts.extend(f"{quote(key, safe='')}={quote(str(value), safe='')}" for value in values)
    return "&".join(parts)


def get_list(
    resource: str,
    *,
    pagination: tuple[int, int] | None = (1, 10),
    sorters: list[tuple[str, str]] = (),  # type: ignore[assignment]
    filters: list[tuple[str, str, Any]] = (),  # type: ignore[assignment]
) -> str:
    """The URL of getList: `${url}?${stringify(query)}&${stringify(queryFilters)}`."""
    query: dict[str, Any] = {}
    if pagination is not None:
        query["pageIndex"], query["pageSize"] = pagination
    if sorters:
        query["sort"] = ",".join(field for field, _ in sorters)
        query["order"] = ",".join(order for _, order in sorters)
    query_filters = {
        field if field == "q" else f"{field}{OPERATORS[operator]}": value for field, operator, value in filters
    }
    return f"/{ROUTES[resource]}?{stringify(query)}&{stringify(query_filters)}"


@pytest.fixture
async def world(client: Client) -> dict[str, Any]:
    pets = {
        name: (await create(client, ALICE, name=name, pet_type=pet_type)).json()
        for name, pet_type in [("Rex", "Dog"), ("Bella", "Cat"), ("Max", "Dog"), ("Luna", "Cat"), ("Rocky", "Dog")]
    }
    vaccines = {
        name: (await create_vaccine(client, name=name, pet_type=pet_type, duration=days)).json()
        for name, pet_type, days in [
            *((f"Dog vaccine {number:02}", "Dog", 30 + number) for number in range(22)),
            ("Feline core", "Cat", 365),
        ]
    }
    doses = []
    for number in range(25):
        body = {
            "petId": pets["Rex"]["id"],
            "vaccineId": vaccines[f"Dog vaccine {number % 22:02}"]["id"],
            "appliedAt": f"2025-01-{number + 1:02}T10:00:00.000Z",
        }
        response = await client.post("/v1/pet-vaccination", json=body, headers=auth())
        assert response.status_code == 201, response.text
        doses.append(response.json())
    return {"pets": pets, "vaccines": vaccines, "doses": doses}


async def items(client: Client, url: str, user: str = ALICE) -> list[dict[str, Any]]:
    response = await client.get(url, headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 200, (url, response.text)
    found: list[dict[str, Any]] = response.json()["items"]
    return found


class TestGetList:
    async def test_the_pet_table_with_sorters_and_a_page(self, client: Client, world: dict[str, Any]) -> None:
        url = get_list("pet", pagination=(1, 3), sorters=[("petType", "asc"), ("name", "desc")])

        assert [pet["name"] for pet in await items(client, url)] == ["Luna", "Bella", "Rocky"]

    async def test_a_pets_whole_timeline_with_pagination_off(self, client: Client, world: dict[str, Any]) -> None:
        """The timeline showed 20 of 25 doses when the default page size was 20."""
        rex = world["pets"]["Rex"]["id"]
        url = get_list(
            "pet_vaccination", pagination=None, sorters=[("appliedAt", "desc")], filters=[("petId", "eq", rex)]
        )

        found = await items(client, url)

        expected = sorted(world["doses"], key=lambda dose: dose["appliedAt"], reverse=True)
        assert [dose["id"] for dose in found] == [dose["id"] for dose in expected]

    async def test_the_vaccine_picker_of_a_dog(self, client: Client, world: dict[str, Any]) -> None:
        """The picker showed 20 of 22 vaccines; typing in it sent name_like and found nothing."""
        every = get_list("vaccine", pagination=None, filters=[("petType", "eq", "Dog")])
        typed = get_list("vaccine", pagination=None, filters=[("petType", "eq", "Dog"), ("name", "contains", "ine 1")])

        assert len(await items(client, every)) == 22
        assert [vaccine["name"] for vaccine in await items(client, typed)] == [
            f"Dog vaccine {number}" for number in range(10, 20)
        ]

    @pytest.mark.parametrize(
        ("filters", "expected"),
        [
            ([("petType", "ne", "Dog")], ["Bella", "Luna"]),
            ([("name", "contains", "R")], ["Rex", "Rocky"]),
            ([("q", "eq", "a")], ["Bella", "Max", "Luna"]),
            ([("petType", "eq", "dog"), ("name", "contains", "o")], ["Rocky"]),
        ],
    )
    async def test_each_filter_operator(
        self, client: Client, world: dict[str, Any], filters: list[tuple[str, str, Any]], expected: list[str]
    ) -> None:
        url = get_list("pet", pagination=(1, 10), filters=filters)

        assert [pet["name"] for pet in await items(client, url)] == expected

    async def test_date_bounds(self, client: Client, world: dict[str, Any]) -> None:
        doses = world["doses"]
        url = get_list(
            "pet_vaccination",
            pagination=None,
            sorters=[("appliedAt", "asc")],
            filters=[("appliedAt", "gte", doses[3]["appliedAt"]), ("appliedAt", "lte", doses[5]["appliedAt"])],
        )

        assert [dose["id"] for dose in await items(client, url)] == [dose["id"] for dose in doses[3:6]]

    async def test_duration_bounds(self, client: Client, world: dict[str, Any]) -> None:
        url = get_list("vaccine", pagination=None, filters=[("duration", "gte", 50), ("duration", "lte", 51)])

        assert [vaccine["duration"] for vaccine in await items(client, url)] == [50, 51]


class TestOthers:
    async def test_get_many(self, client: Client, world: dict[str, Any]) -> None:
        wanted = [world["vaccines"]["Feline core"]["id"], world["vaccines"]["Dog vaccine 03"]["id"]]

        found = await items(client, f"/v1/vaccines?{stringify({'id': wanted})}")

        assert {vaccine["id"] for vaccine in found} == set(wanted)

    async def test_create_update_with_the_id_in_the_body_and_delete(self, client: Client) -> None:
        created = await client.post("/v1/pets", json={"name": "Nala", "petType": "Cat"}, headers=auth())
        record = created.json()

        updated = await client.put(f"/v1/pets/{record['id']}", json={**record, "name": "Nala II"}, headers=auth())
        deleted = await client.request(
            "DELETE", f"/v1/pets/{record['id']}", headers={**auth(), "Content-Type": "application/json"}
        )

        assert created.status_code == 201
        assert (updated.status_code, updated.json()["name"]) == (200, "Nala II")
        assert (deleted.status_code, deleted.json()["name"]) == (200, "Nala II")
        assert (await client.get(f"/v1/pets/{record['id']}", headers=auth())).status_code == 404

    async def test_a_vaccination_from_the_form(self, client: Client, world: dict[str, Any]) -> None:
        """The form sends what it shows, the pet and the vaccine included, as the front end's form values."""
        pet, vaccine = world["pets"]["Max"], world["vaccines"]["Dog vaccine 00"]
        body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": "2025-03-01T09:00:00.000Z", "pet": None}

        response = await client.post("/v1/pet-vaccination", json=body, headers=auth())

        assert response.status_code == 201, response.text
        assert response.json()["vaccine"] == vaccine
