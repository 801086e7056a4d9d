"""The vaccine catalogue, /v1/vaccines (contract section 10.1), on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, MISSING_ID, admin, assert_error, auth, create_vaccine, vaccine_body

Client = AsyncTestClient[Any]
VACCINE_FIELDS = {
    "id",
    "createdAt",
    "createdBy",
    "modifiedAt",
    "modifiedBy",
    "name",
    "description",
    "petType",
    "duration",
    "group",
    "manufacturer",
}


class TestCreateVaccine:
    async def test_an_admin_creates_one(self, client: Client) -> None:
        response = await client.post(
            "/v1/vaccines", json=vaccine_body(description=" Core vaccine. ", pet_type="dOG"), headers=admin()
        )

        assert response.status_code == 201, response.text
        body = response.json()
        assert set(body) == VACCINE_FIELDS
        assert body["description"] == "Core vaccine."
        assert body["petType"] == "Dog"
        assert (body["createdBy"], body["modifiedBy"]) == (ADMIN, ADMIN)
        assert body["createdAt"] == body["modifiedAt"]
        assert response.headers["location"] == f"/v1/vaccines/{body['id']}"
        assert response.headers["etag"]

    @pytest.mark.parametrize("description", ["", "   ", "\n\t ", None])
    async def test_an_empty_blank_or_null_description_is_null(self, client: Client, description: str | None) -> None:
        body = (await create_vaccine(client, description=description)).json()

        assert body["description"] is None

    async def test_an_absent_description_is_null(self, client: Client) -> None:
        assert (await create_vaccine(client)).json()["description"] is None

    async def test_line_feeds_and_tabs_are_kept_inside_a_description(self, client: Client) -> None:
        body = (await create_vaccine(client, description="First dose.\n\tThen yearly.")).json()

        assert body["description"] == "First dose.\n\tThen yearly."

    @pytest.mark.parametrize("description", ["a" * 1001, "bad\rreturn", "nul\x00", "c1\x85inside", 5, ["x"], {"a": 1}])
    async def test_a_bad_description_is_400(self, client: Client, description: Any) -> None:
        response = await client.post("/v1/vaccines", json=vaccine_body(description=description), headers=admin())

        assert list(assert_error(response, 400, 994)["errors"]) == ["description"]

    async def test_a_description_of_1000_characters_after_trimming_is_accepted(self, client: Client) -> None:
        body = (await create_vaccine(client, description="  " + "é" * 1000 + "  ")).json()

        assert body["description"] == "é" * 1000

    @pytest.mark.parametrize("duration", [1, 36500])
    async def test_duration_bounds(self, client: Client, duration: int) -> None:
        assert (await create_vaccine(client, duration=duration)).json()["duration"] == duration

    @pytest.mark.parametrize("written", ["365.0", "3.65e2", "36500.000"])
    async def test_a_whole_number_with_a_fraction_part_is_that_number(self, client: Client, written: str) -> None:
        """JSON Schema counts 365.0 an integer, and so does the service (contract v3 section 10.1)."""
        content = b'{"name": "Rabies", "petType": "Dog", "duration": %s}' % written.encode()
        response = await client.post(
            "/v1/vaccines", content=content, headers={**admin(), "Content-Type": "application/json"}
        )

        assert response.status_code == 201, response.text
        assert response.json()["duration"] == int(float(written))
        assert isinstance(response.json()["duration"], int)

    @pytest.mark.parametrize("duration", [0, -1, 36501, 1.5, 365.25, 0.0, 36501.0, "365", True, None, [365]])
    async def test_a_bad_duration_is_400(self, client: Client, duration: Any) -> None:
        response = await client.post("/v1/vaccines", json=vaccine_body(duration=duration), headers=admin())

        error = assert_error(response, 400, 994)
        assert list(error["errors"]) == ["duration"]
        assert "duration" in error["message"]

    async def test_every_missing_field_is_named(self, client: Client) -> None:
        response = await client.post("/v1/vaccines", json={}, headers=admin())

        assert set(assert_error(response, 400, 994)["errors"]) == {"name", "petType", "duration"}

    async def test_an_unknown_field_is_named(self, client: Client) -> None:
        response = await client.post("/v1/vaccines", json=vaccine_body(ownerId=ALICE), headers=admin())

        assert list(assert_error(response, 400, 994)["errors"]) == ["ownerId"]

    async def test_a_non_admin_is_403(self, client: Client) -> None:
        response = await client.post("/v1/vaccines", json=vaccine_body(), headers=auth(ALICE))

        assert_error(response, 403, 997)
        assert (await client.get("/v1/vaccines", headers=auth(ALICE))).json()["totalCount"] == 0

    async def test_validation_comes_before_the_403(self, client: Client) -> None:
        response = await client.post("/v1/vaccines", json={"name": ""}, headers=auth(ALICE))

        assert_error(response, 400, 994)

    async def test_the_front_end_sends_an_empty_description(self, client: Client) -> None:
        response = await client.post(
            "/v1/vaccines",
            json={"name": "Leptospirosis", "description": "", "petType": "Dog", "duration": 365},
            headers=admin(),
        )

        assert response.status_code == 201, response.text
        assert response.json()["description"] is None


class TestReadVaccines:
    @pytest.mark.parametrize("user", [ALICE, BOB])
    async def test_everyone_gets_and_lists_the_catalogue(self, client: Client, user: str) -> None:
        created = (await create_vaccine(client)).json()

        got = await client.get(f"/v1/vaccines/{created['id']}", headers=auth(user))
        listed = await client.get("/v1/vaccines", headers=auth(user))

        assert got.json() == created
        assert [item["id"] for item in listed.json()["items"]] == [created["id"]]

    async def test_if_none_match_is_304(self, client: Client) -> None:
        created = await create_vaccine(client)

        response = await client.get(
            created.headers["location"], headers={**auth(ALICE), "If-None-Match": created.headers["etag"]}
        )

        assert response.status_code == 304

    async def test_an_unknown_or_malformed_id_is_404(self, client: Client) -> None:
        assert_error(await client.get(f"/v1/vaccines/{MISSING_ID}", headers=auth(ALICE)), 404, 995)
        assert_error(await client.get("/v1/vaccines/nope", headers=auth(ALICE)), 404, 995)


class TestReplaceVaccine:
    async def test_the_front_end_replaces_with_a_null_description_and_the_id(self, client: Client) -> None:
        created = (await create_vaccine(client, description="old")).json()
        body = {**created, "name": "Rabies 3y", "description": None, "duration": 1095}

        response = await client.put(f"/v1/vaccines/{created['id']}", json=body, headers=admin())

        assert response.status_code == 200, response.text
        replaced = response.json()
        assert (replaced["name"], replaced["description"], replaced["duration"]) == ("Rabies 3y", None, 1095)
        assert replaced["createdAt"] == created["createdAt"]

    async def test_an_omitted_description_is_kept(self, client: Client) -> None:
        """Contract v3 section 3: a client that does not know a field never erases it."""
        created = (await create_vaccine(client, description="old")).json()

        response = await client.put(f"/v1/vaccines/{created['id']}", json=vaccine_body(), headers=admin())

        assert response.json()["description"] == "old"
        assert response.headers["etag"] != (await create_vaccine(client)).headers["etag"]

    async def test_a_null_description_clears_it(self, client: Client) -> None:
        created = (await create_vaccine(client, description="old")).json()

        response = await client.put(
            f"/v1/vaccines/{created['id']}", json=vaccine_body(description=None), headers=admin()
        )

        assert response.json()["description"] is None

    async def test_a_non_admin_is_403_after_the_404(self, client: Client) -> None:
        created = (await create_vaccine(client)).json()

        existing = await client.put(f"/v1/vaccines/{created['id']}", json=vaccine_body(), headers=auth(ALICE))
        missing = await client.put(f"/v1/vaccines/{MISSING_ID}", json=vaccine_body(), headers=auth(ALICE))

        assert_error(existing, 403, 997)
        assert_error(missing, 404, 995)

    async def test_a_stale_if_match_is_412(self, client: Client) -> None:
        created = await create_vaccine(client)
        location, etag = created.headers["location"], created.headers["etag"]
        await client.put(location, json=vaccine_body(duration=30), headers=admin())

        response = await client.put(location, json=vaccine_body(), headers={**admin(), "If-Match": etag})

        assert_error(response, 412, 992)


class TestDeleteVaccine:
    async def test_an_admin_deletes_one_and_gets_it_back(self, client: Client) -> None:
        created = (await create_vaccine(client)).json()

        response = await client.delete(f"/v1/vaccines/{created['id']}", headers=admin())

        assert response.status_code == 200
        assert response.json() == created
        assert_error(await client.get(f"/v1/vaccines/{created['id']}", headers=admin()), 404, 995)

    async def test_a_non_admin_is_403_after_the_404(self, client: Client) -> None:
        created = (await create_vaccine(client)).json()

        assert_error(await client.delete(f"/v1/vaccines/{created['id']}", headers=auth(ALICE)), 403, 997)
        assert_error(await client.delete(f"/v1/vaccines/{MISSING_ID}", headers=auth(ALICE)), 404, 995)
        assert (await client.get(f"/v1/vaccines/{created['id']}", headers=auth(ALICE))).status_code == 200


class TestListVaccines:
    async def _seed(self, client: Client) -> dict[str, str]:
        seeded = {
            "Rabies": vaccine_body("Rabies", "Dog", 365, description="Core; the law requires it."),
            "Distemper": vaccine_body("Distemper", "Dog", 1095),
            "Feline leukemia": vaccine_body("Feline leukemia", "Cat", 365, description="For outdoor cats."),
            "Calicivirus": vaccine_body("Calicivirus", "Cat", 30),
        }
        ids = {}
        for name, body in seeded.items():
            response = await client.post("/v1/vaccines", json=body, headers=admin())
            assert response.status_code == 201, response.text
            ids[name] = response.json()["id"]
        return ids

    async def _names(self, client: Client, query: str) -> list[str]:
        response = await client.get(f"/v1/vaccines?{query}", headers=auth(ALICE))
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["items"]]

    async def test_the_front_ends_query_with_an_empty_part(self, client: Client) -> None:
        await self._seed(client)

        assert await self._names(client, "&petType=Dog") == ["Rabies", "Distemper"]

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("petType=cat", ["Feline leukemia", "Calicivirus"]),
            ("petType=Dog&petType=Cat&sort=name", ["Calicivirus", "Distemper", "Feline leukemia", "Rabies"]),
            ("name=rabies", ["Rabies"]),
            ("name=%25em%25&sort=name", ["Distemper", "Feline leukemia"]),
            ("search=LAW", ["Rabies"]),
            ("search=cat", ["Feline leukemia"]),
            ("search=i&sort=-name", ["Rabies", "Feline leukemia", "Distemper", "Calicivirus"]),
            ("durationMin=365&durationMax=365", ["Rabies", "Feline leukemia"]),
            ("durationMax=100", ["Calicivirus"]),
            ("sort=duration,name", ["Calicivirus", "Feline leukemia", "Rabies", "Distemper"]),
            ("sort=-duration,name", ["Distemper", "Feline leukemia", "Rabies", "Calicivirus"]),
            ("order=desc", ["Calicivirus", "Feline leukemia", "Distemper", "Rabies"]),
        ],
    )
    async def test_filters_and_sorts(self, client: Client, query: str, expected: list[str]) -> None:
        await self._seed(client)

        assert await self._names(client, query) == expected

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("durationMin=-9007199254740991", 4),
            ("durationMax=-9007199254740991", 0),
            ("durationMin=9007199254740991", 0),
            ("durationMax=9007199254740991", 4),
            ("durationMin=-2147483649&durationMax=2147483648", 4),
        ],
    )
    async def test_duration_bounds_far_beyond_any_duration(self, client: Client, query: str, expected: int) -> None:
        """The document admits every safe integer as a bound, wider than the column's 32 bits on PostgreSQL."""
        await self._seed(client)

        response = await client.get(f"/v1/vaccines?{query}", headers=auth(ALICE))

        assert response.status_code == 200, response.text
        assert response.json()["totalCount"] == expected

    @pytest.mark.parametrize("search", ["dose.\n\tthen", "%\n%", "\t"])
    async def test_search_finds_line_feeds_and_tabs_of_a_description(self, client: Client, search: str) -> None:
        """A description may hold them, so a part of it may too."""
        await create_vaccine(client, name="Rabies", description="First dose.\n\tThen yearly.")
        await create_vaccine(client, name="Distemper", description="First dose. Then yearly.")

        response = await client.get("/v1/vaccines", params={"search": search}, headers=auth(ALICE))

        assert response.status_code == 200, response.text
        assert [item["name"] for item in response.json()["items"]] == ["Rabies"]

    @pytest.mark.parametrize(("parameter", "value"), [("search", "a\rb"), ("search", "\x00"), ("name", "a\nb")])
    async def test_other_control_characters_in_a_pattern_are_400(
        self, client: Client, parameter: str, value: str
    ) -> None:
        """No stored name or description holds them (and no name a line feed)."""
        response = await client.get("/v1/vaccines", params={parameter: value}, headers=auth(ALICE))

        assert list(assert_error(response, 400, 994)["errors"]) == [parameter]

    async def test_ids(self, client: Client) -> None:
        ids = await self._seed(client)

        assert await self._names(client, f"ids={ids['Rabies']},{ids['Calicivirus']}") == ["Rabies", "Calicivirus"]

    async def test_counts_by_type_are_kept(self, client: Client) -> None:
        ids = await self._seed(client)
        await client.delete(f"/v1/vaccines/{ids['Rabies']}", headers=admin())
        await client.put(f"/v1/vaccines/{ids['Distemper']}", json=vaccine_body("Distemper", "Cat"), headers=admin())

        dogs = await client.get("/v1/vaccines?petType=Dog", headers=auth(ALICE))
        cats = await client.get("/v1/vaccines?petType=Cat&pageSize=2", headers=auth(ALICE))

        assert dogs.json()["totalCount"] == 0
        assert (cats.json()["totalCount"], cats.json()["totalPages"], cats.json()["hasNextPage"]) == (3, 2, True)

    @pytest.mark.parametrize(
        ("query", "parameter"),
        [
            ("ownerId=alice@example.com", "ownerId"),
            ("petType=Unicorn", "petType"),
            ("durationMin=1.5", "durationMin"),
            ("durationMax=x", "durationMax"),
            ("sort=ownerId", "sort"),
            ("dueTo=2026-01-01T00:00:00Z", "dueTo"),
        ],
    )
    async def test_a_bad_or_unknown_parameter_is_400_naming_it(
        self, client: Client, query: str, parameter: str
    ) -> None:
        response = await client.get(f"/v1/vaccines?{query}", headers=auth(ALICE))

        assert list(assert_error(response, 400, 994)["errors"]) == [parameter]


class TestVaccineIdempotency:
    async def test_a_repeat_replays_and_a_key_used_for_a_pet_is_422(self, client: Client) -> None:
        headers = {**admin(), "Idempotency-Key": "catalogue-1"}
        first = await client.post("/v1/vaccines", json=vaccine_body(), headers=headers)
        again = await client.post("/v1/vaccines", json=vaccine_body(), headers=headers)
        pet = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=headers)

        assert first.status_code == again.status_code == 201
        assert again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json()
        assert_error(pet, 422, 990)
        listed = await client.get("/v1/vaccines", headers=admin())
        assert listed.json()["totalCount"] == 1


class TestGroupAndManufacturer:
    """A vaccine's group (the disease its doses renew) and manufacturer (contract v4 section 10.1)."""

    async def test_as_an_admin_writes_them(self, client: Client) -> None:
        body = (await create_vaccine(client, group="  Rabies ", manufacturer=" Boehringer Ingelheim ")).json()

        assert (body["group"], body["manufacturer"]) == ("Rabies", "Boehringer Ingelheim")

    @pytest.mark.parametrize("blank", ["", "  ", None])
    async def test_blank_or_absent_is_null(self, client: Client, blank: Any) -> None:
        given = (await create_vaccine(client, group=blank, manufacturer=blank)).json()
        absent = (await create_vaccine(client)).json()

        assert (given["group"], given["manufacturer"], absent["group"], absent["manufacturer"]) == (None,) * 4

    @pytest.mark.parametrize(
        ("field", "value"),
        [("group", "x" * 101), ("group", "a\x00b"), ("group", 5), ("manufacturer", "x" * 101), ("manufacturer", [])],
    )
    async def test_a_bad_value_is_400_naming_it(self, client: Client, field: str, value: Any) -> None:
        response = await client.post("/v1/vaccines", json=vaccine_body(**{field: value}), headers=admin())

        assert list(assert_error(response, 400, 994)["errors"]) == [field]

    async def test_a_replace_that_omits_them_keeps_them(self, client: Client) -> None:
        created = await create_vaccine(client, group="Rabies", manufacturer="Zoetis")

        replaced = await client.put(created.headers["location"], json=vaccine_body(duration=730), headers=admin())
        cleared = await client.patch(created.headers["location"], json={"manufacturer": None}, headers=admin())

        assert (replaced.json()["group"], replaced.json()["manufacturer"]) == ("Rabies", "Zoetis")
        assert (cleared.json()["group"], cleared.json()["manufacturer"]) == ("Rabies", None)

    async def _names(self, client: Client, query: str) -> list[str]:
        response = await client.get(f"/v1/vaccines?{query}", headers=auth(ALICE))
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["items"]]

    async def test_the_group_filter_is_the_whole_group_case_ignored(self, client: Client) -> None:
        for name, group in [("Rabies 1y", "Rabies"), ("Rabies 3y", "RABIES"), ("DHPP", "DHPP"), ("Lepto", None)]:
            await create_vaccine(client, name=name, group=group)

        assert await self._names(client, "group=rabies") == ["Rabies 1y", "Rabies 3y"]
        assert await self._names(client, "group=%20Rabies%20") == ["Rabies 1y", "Rabies 3y"]
        # No wildcards: a group is named whole.
        assert await self._names(client, "group=Rab%25") == []
        assert await self._names(client, "group=dhpp") == ["DHPP"]
        assert await self._names(client, "sort=group,name") == ["DHPP", "Rabies 1y", "Rabies 3y", "Lepto"]
        assert await self._names(client, "sort=-group,name") == ["Lepto", "Rabies 1y", "Rabies 3y", "DHPP"]
        assert await self._names(client, "group_like=abi&sort=name") == ["Rabies 1y", "Rabies 3y"]

    @pytest.mark.parametrize("query", ["group=", "group=%20", "group=a%00b", f"group={'x' * 101}"])
    async def test_a_bad_group_filter_is_400(self, client: Client, query: str) -> None:
        response = await client.get(f"/v1/vaccines?{query}", headers=auth(ALICE))

        assert list(assert_error(response, 400, 994)["errors"]) == ["group"]
