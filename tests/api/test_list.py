"""A list (contract section 4, and section 5 on who sees what): what every resource answers alike (the envelope,
paging values, unknown parameters, no token), on each registered resource; a pet list's paging, filters and sort."""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from petrecords.resources.declaration import Resource
from tests.support import ADMIN, ALICE, BOB, FIELDS, Examples, as_read, auth, pet_body, run_sql

Client = AsyncTestClient[Any]
MakeClient = Callable[[Settings], Client]
Params = dict[str, Any] | Sequence[tuple[str, str]] | None

CAROL = "carol@example.com"
ENVELOPE = {"items", "pageIndex", "pageSize", "totalPages", "totalCount", "hasPreviousPage", "hasNextPage"}
RECORD_FIELDS = FIELDS
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- helpers ---------------------------------------------------------------------------------------


def epoch_ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def admin() -> dict[str, str]:
    return auth(ADMIN, admin=True)


async def create(
    client: Client, name: str = "Rex", pet_type: str = "Dog", *, user: str = ALICE, owner: str | None = None
) -> dict[str, Any]:
    """A record created over HTTP; with `owner`, created by the admin for that owner."""
    if owner is None:
        response = await client.post("/v1/pets", json=pet_body(name, pet_type), headers=auth(user))
    else:
        response = await client.post("/v1/pets", json=pet_body(name, pet_type, ownerId=owner), headers=admin())
    assert response.status_code == 201, response.text
    pet: dict[str, Any] = response.json()
    return pet


async def fetch(client: Client, pet_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/pets/{pet_id}", headers=admin())
    assert response.status_code == 200, response.text
    pet: dict[str, Any] = response.json()
    return pet


async def set_times(database_url: str, pet_id: str, *, created: int, modified: int | None = None) -> None:
    """Set createdAt/modifiedAt (epoch ms) directly: the only way to control them precisely."""
    key = uuid.UUID(pet_id).hex if database_url.startswith("sqlite") else str(uuid.UUID(pet_id))
    modified = created if modified is None else modified
    # Only integers and a parsed UUID go into the statement.
    statement = f"UPDATE pets SET created_at = {int(created)}, modified_at = {int(modified)} WHERE id = '{key}'"  # noqa: S608
    await run_sql(database_url, statement)


async def list_pets(client: Client, params: Params = None, *, headers: dict[str, str] | None = None) -> httpx.Response:
    return await client.get("/v1/pets", params=params, headers=auth() if headers is None else headers)


async def page(client: Client, params: Params = None, *, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """A successful list response, checked against the envelope rules."""
    response = await list_pets(client, params, headers=headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == ENVELOPE
    for item in body["items"]:
        assert set(item) == RECORD_FIELDS
    assert body["totalPages"] == math.ceil(body["totalCount"] / body["pageSize"])
    assert body["hasPreviousPage"] == (body["pageIndex"] > 1)
    assert body["hasNextPage"] == (body["pageIndex"] < body["totalPages"])
    return body


def ids_of(body: dict[str, Any]) -> list[str]:
    return [item["id"] for item in body["items"]]


async def listed_ids(client: Client, params: Params = None, *, headers: dict[str, str] | None = None) -> list[str]:
    extra = list(params.items()) if isinstance(params, dict) else list(params or [])
    return ids_of(await page(client, [*extra, ("pageSize", "100")], headers=headers))


async def walk(client: Client, params: dict[str, str], *, page_size: int, headers: dict[str, str]) -> list[str]:
    """Every id, page after page, until a page says there is no next one."""
    seen: list[str] = []
    index = 1
    while True:
        body = await page(client, {**params, "pageIndex": str(index), "pageSize": str(page_size)}, headers=headers)
        assert body["pageIndex"] == index
        assert len(body["items"]) <= page_size
        seen.extend(ids_of(body))
        if not body["hasNextPage"]:
            assert index >= body["totalPages"]
            return seen
        assert len(body["items"]) == page_size
        index += 1


def assert_bad_query(response: httpx.Response, *names: str) -> None:
    """400/994, every offending parameter named in the message and in `errors`."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == 994
    assert set(body) <= {"code", "message", "errors"}
    for name in names:
        assert name in body["message"], body
        assert name in body["errors"], body


SORT_KEYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "id": lambda pet: pet["id"],
    "name": lambda pet: pet["name"].lower(),
    "petType": lambda pet: pet["petType"].lower(),
    "ownerId": lambda pet: pet["ownerId"].lower(),
    "createdAt": lambda pet: pet["createdAt"],
    "createdBy": lambda pet: pet["createdBy"].lower(),
    "modifiedAt": lambda pet: pet["modifiedAt"],
    "modifiedBy": lambda pet: pet["modifiedBy"].lower(),
}
_FIELD_BY_FOLDED = {name.lower(): name for name in SORT_KEYS}


def expected_order(pets: Sequence[dict[str, Any]], sort: str = "createdAt", order: str = "asc") -> list[str]:
    """The contract's order computed in Python: the fields in turn, then id ascending.

    Text compares by the code points of its lower-case form; timestamps (fixed width) compare as text.
    """
    result = sorted(pets, key=SORT_KEYS["id"])
    for item in reversed(sort.split(",")):
        field = _FIELD_BY_FOLDED[item.strip().removeprefix("-").lower()]
        result.sort(key=SORT_KEYS[field], reverse=item.strip().startswith("-") or order == "desc")
    return [pet["id"] for pet in result]


# --- the envelope and paging ---------------------------------------------------------------------


class TestList:
    """The same for every resource: an administrator's list."""

    async def test_empty_collection_has_zero_pages(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(resource.path, headers=admin())

        assert response.status_code == 200, response.text
        assert response.json() == {
            "items": [],
            "pageIndex": 1,
            "pageSize": 100,
            "totalPages": 0,
            "totalCount": 0,
            "hasPreviousPage": False,
            "hasNextPage": False,
        }

    async def test_a_record_is_listed_as_it_reads(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.get(resource.path, params={"id": created.json()["id"]}, headers=admin())

        assert response.status_code == 200, response.text
        assert response.json()["items"] == [as_read(resource, created.json())]
        assert response.json()["totalCount"] == 1

    @pytest.mark.parametrize("parameter", ["pageIndex", "pageSize"])
    async def test_invalid_paging_value_is_400_naming_it(
        self, resource: Resource, examples: Examples, parameter: str
    ) -> None:
        for value in ["0", "-1", "abc", "1.5", "", "1e3", " ", "0x10"]:
            response = await examples.client.get(resource.path, params={parameter: value}, headers=admin())

            assert_bad_query(response, parameter)

    async def test_without_token_is_401(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(resource.path)

        assert response.status_code == 401
        assert response.json()["code"] == 997

    async def test_unknown_parameter_is_400_naming_it(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(resource.path, params={"colour": "brown"}, headers=admin())

        assert_bad_query(response, "colour")

    async def test_parameter_names_are_case_sensitive(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(resource.path, params={"pagesize": "5"}, headers=admin())

        assert_bad_query(response, "pagesize")


class TestListEnvelope:
    async def test_defaults_are_first_page_of_a_hundred(self, client: Client) -> None:
        """Contract v3 section 4: existing clients list a pet's vaccinations without pageSize and expect 100."""
        for number in range(103):
            await create(client, f"Pet {number}")

        body = await page(client)

        assert body["pageIndex"] == 1
        assert body["pageSize"] == 100
        assert len(body["items"]) == 100
        assert body["totalCount"] == 103
        assert body["totalPages"] == 2
        assert body["hasPreviousPage"] is False
        assert body["hasNextPage"] is True

    async def test_items_are_the_full_records(self, client: Client) -> None:
        created = await create(client, "Rex", "cat")

        body = await page(client)

        assert body["items"] == [created]

    async def test_middle_page_has_previous_and_next(self, client: Client) -> None:
        for number in range(7):
            await create(client, f"Pet {number}")

        body = await page(client, {"pageIndex": "2", "pageSize": "3"})

        assert len(body["items"]) == 3
        assert (body["pageIndex"], body["pageSize"], body["totalPages"], body["totalCount"]) == (2, 3, 3, 7)
        assert body["hasPreviousPage"] is True
        assert body["hasNextPage"] is True

    async def test_last_page_is_partial_and_has_no_next(self, client: Client) -> None:
        for number in range(7):
            await create(client, f"Pet {number}")

        body = await page(client, {"pageIndex": "3", "pageSize": "3"})

        assert len(body["items"]) == 1
        assert body["totalPages"] == 3
        assert body["hasPreviousPage"] is True
        assert body["hasNextPage"] is False

    async def test_exact_multiple_of_page_size_has_no_extra_page(self, client: Client) -> None:
        for number in range(6):
            await create(client, f"Pet {number}")

        body = await page(client, {"pageIndex": "2", "pageSize": "3"})

        assert len(body["items"]) == 3
        assert body["totalPages"] == 2
        assert body["hasNextPage"] is False

    async def test_page_past_the_last_is_empty_with_counts(self, client: Client) -> None:
        for number in range(3):
            await create(client, f"Pet {number}")

        body = await page(client, {"pageIndex": "5", "pageSize": "2"})

        assert body == {
            "items": [],
            "pageIndex": 5,
            "pageSize": 2,
            "totalPages": 2,
            "totalCount": 3,
            "hasPreviousPage": True,
            "hasNextPage": False,
        }

    async def test_page_past_the_last_of_nothing_has_zero_pages(self, client: Client) -> None:
        body = await page(client, {"pageIndex": "3"})

        assert body["items"] == []
        assert body["totalPages"] == 0
        assert body["totalCount"] == 0
        assert body["hasPreviousPage"] is True
        assert body["hasNextPage"] is False

    async def test_page_size_above_maximum_is_reduced_to_100(self, client: Client) -> None:
        for number in range(3):
            await create(client, f"Pet {number}")

        body = await page(client, {"pageSize": "1000"})

        assert body["pageSize"] == 100
        assert body["totalPages"] == 1
        assert len(body["items"]) == 3

    async def test_page_size_equal_to_maximum_is_kept(self, client: Client) -> None:
        body = await page(client, {"pageSize": "100"})

        assert body["pageSize"] == 100

    async def test_huge_page_size_is_reduced_not_rejected(self, client: Client) -> None:
        await create(client)

        body = await page(client, {"pageSize": str(10**30)})

        assert body["pageSize"] == 100
        assert body["totalCount"] == 1

    async def test_huge_page_index_is_not_a_server_error(self, client: Client) -> None:
        await create(client)

        response = await list_pets(client, {"pageIndex": str(10**30)})

        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert_bad_query(response, "pageIndex")
        else:
            body = response.json()
            assert body["items"] == []
            assert body["totalCount"] == 1
            assert body["totalPages"] == 1
            assert body["hasNextPage"] is False

    async def test_large_page_index_within_integer_range_is_empty_page(self, client: Client) -> None:
        await create(client)

        body = await page(client, {"pageIndex": str(10**12), "pageSize": "100"})

        assert body["items"] == []
        assert body["pageIndex"] == 10**12
        assert body["totalCount"] == 1

    async def test_configured_maximum_page_size_applies(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(max_page_size=5, default_page_size=5)) as client:
            for number in range(7):
                await create(client, f"Pet {number}")

            body = await page(client, {"pageSize": "50"})

        assert body["pageSize"] == 5
        assert len(body["items"]) == 5
        assert body["totalPages"] == 2
        assert body["hasNextPage"] is True

    async def test_configured_default_page_size_applies(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(default_page_size=3)) as client:
            for number in range(4):
                await create(client, f"Pet {number}")

            body = await page(client)

        assert body["pageSize"] == 3
        assert len(body["items"]) == 3
        assert body["totalPages"] == 2

    async def test_both_paging_values_invalid_are_both_named(self, client: Client) -> None:
        response = await list_pets(client, {"pageIndex": "0", "pageSize": "x"})

        assert_bad_query(response, "pageIndex", "pageSize")

    async def test_bad_query_without_token_is_401_first(self, client: Client) -> None:
        response = await client.get("/v1/pets", params={"colour": "red", "pageSize": "0"})

        assert response.status_code == 401
        assert response.json()["code"] == 997


class TestListParameters:
    async def test_several_bad_parameters_are_all_named(self, client: Client) -> None:
        response = await list_pets(
            client,
            {"colour": "brown", "age": "3", "pageSize": "0", "petType": "Dragon", "sort": "weight", "order": "up"},
        )

        assert_bad_query(response, "colour", "age", "pageSize", "petType", "sort", "order")

    @pytest.mark.parametrize(
        ("parameter", "value"),
        [
            ("pageIndex", "1"),
            ("pageSize", "5"),
            ("ownerId", ALICE),
            ("name", "rex"),
            ("search", "rex"),
            ("createdFrom", "2026-01-01T00:00:00Z"),
            ("createdTo", "2026-01-01T00:00:00Z"),
            ("modifiedFrom", "2026-01-01T00:00:00Z"),
            ("modifiedTo", "2026-01-01T00:00:00Z"),
            ("order", "asc"),
        ],
    )
    async def test_single_valued_parameter_repeated_is_400(self, client: Client, parameter: str, value: str) -> None:
        response = await list_pets(client, [(parameter, value), (parameter, value)])

        assert_bad_query(response, parameter)


# --- filters ---------------------------------------------------------------------------------------


class TestListFilterIds:
    async def test_comma_separated_ids_select_those_records(self, client: Client) -> None:
        pets = [await create(client, f"Pet {number}") for number in range(4)]

        found = await listed_ids(client, {"ids": f"{pets[0]['id']},{pets[2]['id']}"})

        assert sorted(found) == sorted([pets[0]["id"], pets[2]["id"]])

    async def test_repeated_ids_select_those_records(self, client: Client) -> None:
        pets = [await create(client, f"Pet {number}") for number in range(4)]

        found = await listed_ids(client, [("ids", pets[1]["id"]), ("ids", pets[3]["id"])])

        assert sorted(found) == sorted([pets[1]["id"], pets[3]["id"]])

    async def test_unknown_id_matches_nothing(self, client: Client) -> None:
        await create(client)

        body = await page(client, {"ids": str(uuid.uuid4())})

        assert body["items"] == []
        assert body["totalCount"] == 0
        assert body["totalPages"] == 0

    async def test_someone_elses_id_matches_nothing_for_non_admin(self, client: Client) -> None:
        bobs = await create(client, user=BOB)

        body = await page(client, {"ids": bobs["id"]})

        assert body["totalCount"] == 0

    async def test_admin_finds_anyones_id(self, client: Client) -> None:
        bobs = await create(client, user=BOB)

        assert await listed_ids(client, {"ids": bobs["id"]}, headers=admin()) == [bobs["id"]]

    @pytest.mark.parametrize("value", ["not-a-uuid", "12345", "", "{uuid}x", "{uuid},nope"])
    async def test_malformed_id_is_400(self, client: Client, value: str) -> None:
        pet = await create(client)

        response = await list_pets(client, {"ids": value.format(uuid=pet["id"])})

        assert_bad_query(response, "ids")


class TestListFilterPetType:
    async def test_pet_type_matches_case_insensitively(self, client: Client) -> None:
        dog = await create(client, "Rex", "Dog")
        await create(client, "Tom", "Cat")

        assert await listed_ids(client, {"petType": "dOG"}) == [dog["id"]]

    async def test_comma_separated_pet_types(self, client: Client) -> None:
        dog = await create(client, "Rex", "Dog")
        cat = await create(client, "Tom", "Cat")
        await create(client, "Kapi", "Capybara")

        found = await listed_ids(client, {"petType": "dog,CAT"})

        assert sorted(found) == sorted([dog["id"], cat["id"]])

    async def test_repeated_pet_types(self, client: Client) -> None:
        dog = await create(client, "Rex", "Dog")
        await create(client, "Tom", "Cat")
        bird = await create(client, "Tweety", "Bird")

        found = await listed_ids(client, [("petType", "bird"), ("petType", "Dog")])

        assert sorted(found) == sorted([dog["id"], bird["id"]])

    @pytest.mark.parametrize("value", ["Dragon", "", "Dog,Dragon", "Dogs"])
    async def test_unknown_pet_type_is_400(self, client: Client, value: str) -> None:
        response = await list_pets(client, {"petType": value})

        assert_bad_query(response, "petType")


class TestListVisibility:
    async def _three_owners(self, client: Client) -> dict[str, list[str]]:
        return {
            ALICE: [(await create(client, "A1"))["id"], (await create(client, "A2"))["id"]],
            BOB: [
                (await create(client, "B1", user=BOB))["id"],
                (await create(client, "B2", owner=BOB))["id"],
            ],
            CAROL: [(await create(client, "C1", owner=CAROL))["id"]],
        }

    async def test_non_admin_lists_only_own_records(self, client: Client) -> None:
        owned = await self._three_owners(client)

        body = await page(client)

        assert sorted(ids_of(body)) == sorted(owned[ALICE])
        assert body["totalCount"] == 2
        assert {item["ownerId"] for item in body["items"]} == {ALICE}

    async def test_admin_lists_everyones_records(self, client: Client) -> None:
        owned = await self._three_owners(client)

        body = await page(client, headers=admin())

        assert sorted(ids_of(body)) == sorted(pet_id for ids in owned.values() for pet_id in ids)
        assert body["totalCount"] == 5

    async def test_admin_filters_by_owner(self, client: Client) -> None:
        owned = await self._three_owners(client)

        body = await page(client, {"ownerId": BOB}, headers=admin())

        assert sorted(ids_of(body)) == sorted(owned[BOB])
        assert body["totalCount"] == 2

    async def test_owner_filter_is_case_insensitive(self, client: Client) -> None:
        owned = await self._three_owners(client)

        found = await listed_ids(client, {"ownerId": "Bob@Example.COM"}, headers=admin())

        assert sorted(found) == sorted(owned[BOB])

    async def test_owner_filter_for_unknown_owner_matches_nothing(self, client: Client) -> None:
        await self._three_owners(client)

        body = await page(client, {"ownerId": "nobody@example.com"}, headers=admin())

        assert body["totalCount"] == 0

    async def test_non_admin_naming_another_owner_matches_nothing(self, client: Client) -> None:
        await self._three_owners(client)

        body = await page(client, {"ownerId": BOB})

        assert body == {
            "items": [],
            "pageIndex": 1,
            "pageSize": 100,
            "totalPages": 0,
            "totalCount": 0,
            "hasPreviousPage": False,
            "hasNextPage": False,
        }

    async def test_non_admin_naming_self_lists_own(self, client: Client) -> None:
        owned = await self._three_owners(client)

        found = await listed_ids(client, {"ownerId": ALICE})

        assert sorted(found) == sorted(owned[ALICE])

    async def test_non_admin_filters_apply_within_own_records(self, client: Client) -> None:
        await create(client, "Rex", "Dog", user=BOB)
        mine = await create(client, "Rex", "Dog")

        found = await listed_ids(client, {"name": "rex", "petType": "dog"})

        assert found == [mine["id"]]


class TestListFilterName:
    NAMES = (
        "Rex",
        "rex",
        "Rexy",
        "T-Rex",
        "100% Dog",
        "100 Dogs",
        "snake_case",
        "snake9case",
        "back\\slash",
        "backslash",
        "back9slash",
        "under_score",
    )

    async def _seed(self, client: Client) -> dict[str, str]:
        return {name: (await create(client, name))["id"] for name in self.NAMES}

    async def _names(self, client: Client, params: dict[str, str]) -> list[str]:
        body = await page(client, {**params, "pageSize": "100"})
        return sorted(item["name"] for item in body["items"])

    @pytest.mark.parametrize(
        ("pattern", "expected"),
        [
            ("rex", ["Rex", "rex"]),
            ("REX", ["Rex", "rex"]),
            ("ex", []),
            ("rex%", ["Rex", "Rexy", "rex"]),
            ("%rex", ["Rex", "T-Rex", "rex"]),
            ("%REX%", ["Rex", "Rexy", "T-Rex", "rex"]),
            ("r_x", ["Rex", "rex"]),
            ("r_", []),
            ("____", ["Rexy"]),
            ("100%", ["100 Dogs", "100% Dog"]),
            ("100\\%%", ["100% Dog"]),
            ("100\\% dog", ["100% Dog"]),
            ("100\\%", []),
            ("snake_case", ["snake9case", "snake_case"]),
            ("snake\\_case", ["snake_case"]),
            ("%\\_%", ["snake_case", "under_score"]),
            ("back\\\\slash", ["back\\slash"]),
            ("back_slash", ["back\\slash", "back9slash"]),
            ("back%slash", ["back\\slash", "back9slash", "backslash"]),
            ("%\\\\%", ["back\\slash"]),
            ("%", sorted(NAMES)),
            ("nothing-like-it", []),
        ],
    )
    async def test_name_matches_whole_name(self, client: Client, pattern: str, expected: list[str]) -> None:
        await self._seed(client)

        assert await self._names(client, {"name": pattern}) == sorted(expected)

    @pytest.mark.parametrize(
        ("pattern", "expected"),
        [
            ("EX", ["Rex", "Rexy", "T-Rex", "rex"]),
            ("t-r", ["T-Rex"]),
            ("e_y", ["Rexy"]),
            ("\\%", ["100% Dog"]),
            ("0%d", ["100 Dogs", "100% Dog"]),
            ("\\_", ["snake_case", "under_score"]),
            ("e_c", ["snake9case", "snake_case"]),
            ("\\\\", ["back\\slash"]),
            ("%", sorted(NAMES)),
            ("_", sorted(NAMES)),
            ("zzz", []),
        ],
    )
    async def test_search_matches_substring(self, client: Client, pattern: str, expected: list[str]) -> None:
        await self._seed(client)

        assert await self._names(client, {"search": pattern}) == sorted(expected)

    async def test_name_and_search_combine(self, client: Client) -> None:
        await self._seed(client)

        assert await self._names(client, {"name": "r%", "search": "Y"}) == ["Rexy"]

    @pytest.mark.parametrize("name", ["Émile", "ΟΔΟΣ", "Straße", "İstanbul", "Ωmega ς", "ǅemal"])
    async def test_a_name_matches_itself(self, client: Client, name: str) -> None:
        pet = await create(client, name)
        await create(client, "Other")

        assert await listed_ids(client, {"name": name}) == [pet["id"]]
        assert await listed_ids(client, {"search": name}) == [pet["id"]]

    @pytest.mark.parametrize(("name", "part"), [("ΟΔΟΣ", "Σ"), ("ΟΔΟΣ", "ΟΣ"), ("Émile", "É"), ("Émile", "é")])
    async def test_search_finds_a_part_of_the_name(self, client: Client, name: str, part: str) -> None:
        pet = await create(client, name)
        await create(client, "Other")

        assert await listed_ids(client, {"search": part}) == [pet["id"]]

    @pytest.mark.parametrize(("name", "pattern"), [("İstanbul", "_stanbul"), ("Émile", "_mile"), ("ΟΔΟΣ", "οδο_")])
    async def test_underscore_matches_any_one_character(self, client: Client, name: str, pattern: str) -> None:
        pet = await create(client, name)

        assert await listed_ids(client, {"name": pattern}) == [pet["id"]]

    @pytest.mark.parametrize("parameter", ["name", "search"])
    @pytest.mark.parametrize(
        "pattern",
        [
            pytest.param("\x00", id="nul"),
            pytest.param("a\x00b", id="nul-inside"),
            pytest.param("\x1b", id="escape"),
            pytest.param("\x7f", id="delete"),
        ],
    )
    async def test_control_characters_in_pattern_match_nothing_or_are_400(
        self, client: Client, parameter: str, pattern: str
    ) -> None:
        await create(client, "ab")

        response = await list_pets(client, {parameter: pattern})

        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            assert_bad_query(response, parameter)
        else:
            assert response.json()["totalCount"] == 0

    async def test_name_matches_non_ascii_in_other_case(self, client: Client) -> None:
        pet = await create(client, "Émile")

        assert await listed_ids(client, {"name": "éMILE"}) == [pet["id"]]


class TestListFilterTimes:
    """Records at T0 - 1 ms, T0, T0 + 1 ms and T0 + 1 h; `from` is inclusive, `to` exclusive."""

    async def _seed(self, client: Client, database_url: str, *, column: str) -> None:
        offsets = {"before": -1, "at": 0, "after": 1, "hour": 3_600_000}
        base = epoch_ms(T0)
        for label, offset in offsets.items():
            pet = await create(client, label)
            if column == "created":
                await set_times(database_url, pet["id"], created=base + offset, modified=base + 10_000_000)
            else:
                await set_times(database_url, pet["id"], created=base - 10_000_000, modified=base + offset)

    async def _labels(self, client: Client, params: dict[str, str]) -> list[str]:
        body = await page(client, {**params, "pageSize": "100"})
        return sorted(item["name"] for item in body["items"])

    @pytest.mark.parametrize("column", ["created", "modified"])
    @pytest.mark.parametrize(
        ("bound", "value", "expected"),
        [
            ("From", "2026-01-01T00:00:00Z", ["after", "at", "hour"]),
            ("From", "2026-01-01T00:00:00.000Z", ["after", "at", "hour"]),
            ("From", "2026-01-01T00:00:00.001Z", ["after", "hour"]),
            ("From", "2026-01-01T00:00:00.0005Z", ["after", "hour"]),
            ("From", "2025-12-31T23:59:59.999Z", ["after", "at", "before", "hour"]),
            ("From", "2026-01-01T02:00:00+02:00", ["after", "at", "hour"]),
            ("From", "2025-12-31T19:00:00.001-05:00", ["after", "hour"]),
            ("From", "2026-01-01T00:00:00z", ["after", "at", "hour"]),
            ("From", "2026-01-01t00:00:00Z", ["after", "at", "hour"]),
            ("From", "2026-01-01T00:00:00+00:00", ["after", "at", "hour"]),
            ("To", "2026-01-01T00:00:00Z", ["before"]),
            ("To", "2026-01-01T00:00:00.001Z", ["at", "before"]),
            ("To", "2026-01-01T00:00:00.0005Z", ["at", "before"]),
            ("To", "2026-01-01T01:00:00Z", ["after", "at", "before"]),
            ("To", "2026-01-01T03:00:00.001+02:00", ["after", "at", "before", "hour"]),
            ("To", "2025-12-31T19:00:00-05:00", ["before"]),
            ("To", "2025-01-01T00:00:00Z", []),
        ],
    )
    async def test_time_bound(
        self, client: Client, database_url: str, column: str, bound: str, value: str, expected: list[str]
    ) -> None:
        await self._seed(client, database_url, column=column)

        assert await self._labels(client, {f"{column}{bound}": value}) == expected

    @pytest.mark.parametrize("column", ["created", "modified"])
    async def test_from_and_to_together_are_a_half_open_range(
        self, client: Client, database_url: str, column: str
    ) -> None:
        await self._seed(client, database_url, column=column)

        labels = await self._labels(
            client, {f"{column}From": "2026-01-01T00:00:00.000Z", f"{column}To": "2026-01-01T01:00:00.000Z"}
        )

        assert labels == ["after", "at"]

    @pytest.mark.parametrize("column", ["created", "modified"])
    async def test_empty_range_matches_nothing(self, client: Client, database_url: str, column: str) -> None:
        await self._seed(client, database_url, column=column)

        body = await page(client, {f"{column}From": "2026-01-01T00:00:00Z", f"{column}To": "2026-01-01T00:00:00Z"})

        assert body["totalCount"] == 0

    async def test_created_and_modified_bounds_combine(self, client: Client, database_url: str) -> None:
        base = epoch_ms(T0)
        old_untouched = await create(client, "old untouched")
        old_modified = await create(client, "old modified")
        new = await create(client, "new")
        await set_times(database_url, old_untouched["id"], created=base - 1000)
        await set_times(database_url, old_modified["id"], created=base - 1000, modified=base + 5000)
        await set_times(database_url, new["id"], created=base + 1000, modified=base + 5000)

        found = await listed_ids(client, {"createdTo": "2026-01-01T00:00:00Z", "modifiedFrom": "2026-01-01T00:00:00Z"})

        assert found == [old_modified["id"]]

    @pytest.mark.parametrize("parameter", ["createdFrom", "createdTo", "modifiedFrom", "modifiedTo"])
    @pytest.mark.parametrize(
        "value",
        [
            "",
            "yesterday",
            "2026-01-01",
            "2026-01-01T00:00:00",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:00:00+24:00",
            "2026-01-01T00:00:00.Z",
            "1767225600000",
        ],
    )
    async def test_malformed_date_time_is_400(self, client: Client, parameter: str, value: str) -> None:
        response = await list_pets(client, {parameter: value})

        assert_bad_query(response, parameter)


class TestListFilterCombinations:
    async def test_all_filters_must_hold(self, client: Client, database_url: str) -> None:
        base = epoch_ms(T0)
        target = await create(client, "Rex", "Dog", owner=BOB)
        others = [
            await create(client, "Rex", "Cat", owner=BOB),  # wrong type
            await create(client, "Max", "Dog", owner=BOB),  # wrong name
            await create(client, "Rex", "Dog", owner=ALICE),  # wrong owner
            await create(client, "Rex", "Dog", owner=BOB),  # too old
        ]
        for pet in [target, *others[:3]]:
            await set_times(database_url, pet["id"], created=base + 1000)
        await set_times(database_url, others[3]["id"], created=base - 1000)

        params = {
            "ownerId": BOB,
            "petType": "dog,bird",
            "name": "r%",
            "search": "E",
            "createdFrom": "2026-01-01T00:00:00Z",
        }
        everything = [target["id"], *(pet["id"] for pet in others)]
        found = await listed_ids(client, {**params, "ids": ",".join(everything)}, headers=admin())

        assert found == [target["id"]]


# --- sorting ---------------------------------------------------------------------------------------


async def seed_for_sorting(client: Client, database_url: str) -> list[dict[str, Any]]:
    """Records that differ (and tie) in every sortable field; returned as stored."""
    pets = [
        await create(client, "alpha", "Dog"),
        await create(client, "Bravo", "cat", user=BOB),
        await create(client, "charlie", "Capybara", user=CAROL),
        await create(client, "bravo", "Other", owner=ALICE),
        await create(client, "Alpha", "bird"),
        await create(client, "delta", "Dog", user=BOB),
        await create(client, "Émile", "fish", owner=CAROL),
        await create(client, "zed", "DOG", user=CAROL),
        await create(client, "Zed", "guineapig", owner=BOB),
    ]
    for index in (1, 7):  # modified by someone else than the creator
        replaced = await client.put(
            f"/v1/pets/{pets[index]['id']}",
            json=pet_body(pets[index]["name"], pets[index]["petType"]),
            headers=admin(),
        )
        assert replaced.status_code == 200, replaced.text
    base = epoch_ms(T0)
    created = [3, 1, 1, 0, 2, 1, 5, 0, 3]
    modified = [10, 1, 20, 0, 20, 1, 5, 10, 3]
    for pet, created_offset, modified_offset in zip(pets, created, modified, strict=True):
        await set_times(database_url, pet["id"], created=base + created_offset, modified=base + modified_offset)
    return [await fetch(client, pet["id"]) for pet in pets]


class TestListSort:
    @pytest.mark.parametrize(
        "sort",
        [
            "id",
            "name",
            "petType",
            "ownerId",
            "createdAt",
            "createdBy",
            "modifiedAt",
            "modifiedBy",
            "-id",
            "-name",
            "-petType",
            "-ownerId",
            "-createdAt",
            "-createdBy",
            "-modifiedAt",
            "-modifiedBy",
            "PETTYPE",
            "-CreatedAT",
            "ownerid,name",
            "ownerId,-name",
            "-ownerId,modifiedAt,name",
            "createdBy,-modifiedBy,-createdAt",
            "petType,-id",
            " name , -createdAt ",
        ],
    )
    async def test_sort_by_fields(self, client: Client, database_url: str, sort: str) -> None:
        pets = await seed_for_sorting(client, database_url)

        assert await listed_ids(client, {"sort": sort}, headers=admin()) == expected_order(pets, sort)

    @pytest.mark.parametrize("sort", ["name", "name,createdAt", "-name,createdAt", "ownerId,-createdAt", "id"])
    async def test_order_desc_reverses_fields_without_prefix(
        self, client: Client, database_url: str, sort: str
    ) -> None:
        pets = await seed_for_sorting(client, database_url)

        found = await listed_ids(client, {"sort": sort, "order": "desc"}, headers=admin())

        assert found == expected_order(pets, sort, "desc")

    async def test_order_asc_is_the_default_direction(self, client: Client, database_url: str) -> None:
        pets = await seed_for_sorting(client, database_url)

        found = await listed_ids(client, {"sort": "ownerId,-name", "order": "asc"}, headers=admin())

        assert found == expected_order(pets, "ownerId,-name")

    async def test_repeated_sort_parameters_are_fields_in_turn(self, client: Client, database_url: str) -> None:
        pets = await seed_for_sorting(client, database_url)

        found = await listed_ids(client, [("sort", "ownerId"), ("sort", "-name")], headers=admin())

        assert found == expected_order(pets, "ownerId,-name")

    async def test_default_order_is_created_at_oldest_first(self, client: Client, database_url: str) -> None:
        pets = await seed_for_sorting(client, database_url)

        found = await listed_ids(client, headers=admin())

        assert found == expected_order(pets, "createdAt")
        assert found != expected_order(pets, "id")

    async def test_order_desc_alone_is_newest_first_ties_by_id_ascending(
        self, client: Client, database_url: str
    ) -> None:
        pets = await seed_for_sorting(client, database_url)

        found = await listed_ids(client, {"order": "desc"}, headers=admin())

        assert found == expected_order(pets, "createdAt", "desc")

    async def test_default_order_ignores_creation_sequence(self, client: Client, database_url: str) -> None:
        first = await create(client, "first")
        second = await create(client, "second")
        third = await create(client, "third")
        base = epoch_ms(T0)
        await set_times(database_url, first["id"], created=base + 2)
        await set_times(database_url, second["id"], created=base + 1)
        await set_times(database_url, third["id"], created=base)

        assert await listed_ids(client) == [third["id"], second["id"], first["id"]]

    async def test_ties_are_broken_by_id_ascending(self, client: Client, database_url: str) -> None:
        pets = [await create(client, "Same", "Dog") for _ in range(5)]
        for pet in pets:
            await set_times(database_url, pet["id"], created=epoch_ms(T0))
        by_id = sorted(pet["id"] for pet in pets)

        for params in ({}, {"sort": "name"}, {"sort": "-name"}, {"sort": "-createdAt"}, {"order": "desc"}):
            assert await listed_ids(client, params) == by_id, params

    async def test_text_sorts_case_insensitively(self, client: Client) -> None:
        for name in ("charlie", "Bravo", "alpha", "Delta"):
            await create(client, name)

        body = await page(client, {"sort": "name"})

        assert [item["name"] for item in body["items"]] == ["alpha", "Bravo", "charlie", "Delta"]

    async def test_non_ascii_names_sort_the_same_on_every_database(self, client: Client) -> None:
        names = ["Émile", "zed", "Zed", "ärger", "Bob", "émile", "Ωmega", "ñu", "Ñu", "Zürich", "apple", "Apple", "ǅ"]
        pets = [await create(client, name) for name in names]

        for sort in ("name", "-name", "name,-id"):
            found = await listed_ids(client, {"sort": sort})
            assert found == expected_order(pets, sort), sort

    async def test_pet_types_sort_case_insensitively(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(pet_types=("charlie", "alpha", "Bravo", "Delta"))) as client:
            pets = [await create(client, "Rex", pet_type) for pet_type in ("Delta", "Bravo", "charlie", "alpha")]

            body = await page(client, {"sort": "petType"})
            reverse = await page(client, {"sort": "-petType"})

        assert [item["petType"] for item in body["items"]] == ["alpha", "Bravo", "charlie", "Delta"]
        assert ids_of(body) == expected_order(pets, "petType")
        assert ids_of(reverse) == expected_order(pets, "-petType")

    async def test_non_ascii_pet_types_sort_case_insensitively(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(pet_types=("Émeu", "éclair", "Zebra"))) as client:
            for pet_type in ("Zebra", "Émeu", "éclair"):
                await create(client, "Rex", pet_type)

            body = await page(client, {"sort": "petType"})

        assert [item["petType"] for item in body["items"]] == ["Zebra", "éclair", "Émeu"]

    @pytest.mark.parametrize("sort", ["weight", "", "-", "name,", "name,colour", "+name", "--name", "created_at"])
    async def test_unknown_sort_field_is_400(self, client: Client, sort: str) -> None:
        response = await list_pets(client, {"sort": sort})

        assert_bad_query(response, "sort")

    @pytest.mark.parametrize("order", ["descending", "up", "", "1", "asc,desc"])
    async def test_bad_order_is_400(self, client: Client, order: str) -> None:
        response = await list_pets(client, {"order": order})

        assert_bad_query(response, "order")


class TestListPaging:
    @pytest.mark.parametrize(
        ("sort", "order"),
        [
            (None, None),
            (None, "desc"),
            ("name", None),
            ("-name", None),
            ("petType,name", None),
            ("ownerId", "desc"),
            ("-modifiedAt", None),
            ("createdBy,-petType", None),
            ("id", None),
        ],
    )
    async def test_walking_pages_yields_every_record_once(
        self, client: Client, database_url: str, sort: str | None, order: str | None
    ) -> None:
        base = epoch_ms(T0)
        pets = []
        types = ("Dog", "Cat", "Bird")
        names = ("Rex", "rex", "Max", "bella", "Bella")
        for number in range(25):
            owner = (ALICE, BOB, CAROL)[number % 3]
            pet = await create(client, names[number % 5], types[number % 3], owner=owner)
            # Few distinct timestamps, so that most records tie and the id decides.
            await set_times(database_url, pet["id"], created=base + number % 4, modified=base + number % 2)
            pets.append(await fetch(client, pet["id"]))
        params = {key: value for key, value in (("sort", sort), ("order", order)) if value is not None}

        seen = await walk(client, params, page_size=7, headers=admin())

        assert len(seen) == len(set(seen)) == 25
        assert seen == expected_order(pets, sort or "createdAt", order or "asc")

    async def test_pages_are_consecutive_slices(self, client: Client) -> None:
        for number in range(10):
            await create(client, f"Pet {number:02d}")

        whole = await listed_ids(client, {"sort": "name"})
        slices = [ids_of(await page(client, {"sort": "name", "pageSize": "4", "pageIndex": str(i)})) for i in (1, 2, 3)]

        assert slices == [whole[0:4], whole[4:8], whole[8:10]]
