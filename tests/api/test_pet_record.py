"""The pet record a clinic keeps (contract v4 section 2): birth date, sex, neutered, breed and microchip (in three
formats), all optional; a microchip code belongs to one pet; clients that send only a name and a type never erase
them; list filters and sorting. On both databases."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, FIELDS, assert_error, auth, create

Client = AsyncTestClient[Any]
CHIP = "982000123456789"
FDX_A = "0A1B2C3D4E"
AVID = "123456789"


class TestFields:
    async def test_every_record_has_the_thirteen_fields(self, client: Client) -> None:
        plain = (await create(client)).json()

        assert set(plain) == FIELDS
        assert all(plain[name] is None for name in ("birthDate", "sex", "neutered", "breed", "microchip"))

    async def test_values_as_a_clinic_writes_them(self, client: Client) -> None:
        created = await create(
            client,
            birthDate="2019-04-23",
            sex="FEMALE",
            neutered=True,
            breed="  Beagle  ",
            microchip=" 982 000.123-456 789 ",
        )

        record = created.json()
        assert (record["birthDate"], record["sex"], record["neutered"]) == ("2019-04-23", "female", True)
        assert (record["breed"], record["microchip"]) == ("Beagle", CHIP)

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("birthDate", "2019-02-30"),
            ("birthDate", "1899-12-31"),
            ("birthDate", "2019-4-23"),
            ("birthDate", "2019-04-23T00:00:00Z"),
            ("birthDate", (datetime.datetime.now(datetime.UTC).date() + datetime.timedelta(days=2)).isoformat()),
            ("birthDate", 20190423),
            ("sex", "f"),
            ("sex", True),
            ("neutered", "yes"),
            ("neutered", 1),
            ("breed", "x" * 101),
            ("breed", "a\x00b"),
            ("microchip", "98200012345678"),
            ("microchip", "9820001234567890"),
            ("microchip", "98200012345678X"),
            ("microchip", "982  000123456789"),
            ("microchip", 982000123456789),
        ],
    )
    async def test_a_bad_value_is_400_naming_it(self, client: Client, field: str, value: Any) -> None:
        response = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog", field: value}, headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == [field]

    async def test_a_rejected_sex_lists_the_values(self, client: Client) -> None:
        response = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog", "sex": "x"}, headers=auth())

        message = assert_error(response, 400, 994)["errors"]["sex"][0]
        assert all(value in message for value in ("female", "male", "unknown"))

    @pytest.mark.parametrize("blank", ["", "   ", None])
    async def test_blank_breed_and_microchip_are_null(self, client: Client, blank: Any) -> None:
        record = (await create(client, breed=blank, microchip=blank)).json()

        assert (record["breed"], record["microchip"]) == (None, None)


class TestOlderClients:
    async def test_a_replace_that_names_only_name_and_type_erases_nothing(self, client: Client) -> None:
        created = (await create(client, birthDate="2019-04-23", sex="male", neutered=False, microchip=CHIP)).json()

        replaced = await client.put(
            f"/v1/pets/{created['id']}", json={"name": "Rex II", "petType": "Dog"}, headers=auth()
        )

        kept = replaced.json()
        assert (kept["name"], kept["birthDate"], kept["sex"], kept["neutered"], kept["microchip"]) == (
            "Rex II",
            "2019-04-23",
            "male",
            False,
            CHIP,
        )
        # false, not 0 or null, from every database, on every read: a boolean is one in the JSON too.
        assert b'"neutered":false' in replaced.content
        again = await client.get(f"/v1/pets/{created['id']}", headers=auth())
        assert b'"neutered":false' in again.content
        patched = await client.patch(f"/v1/pets/{created['id']}", json={"name": "Rex III"}, headers=auth())
        assert patched.status_code == 200, patched.text
        assert b'"neutered":false' in patched.content

    async def test_null_clears(self, client: Client) -> None:
        created = (await create(client, sex="male", microchip=CHIP)).json()

        replaced = await client.put(
            f"/v1/pets/{created['id']}",
            json={"name": "Rex", "petType": "Dog", "sex": None, "microchip": None},
            headers=auth(),
        )

        assert (replaced.json()["sex"], replaced.json()["microchip"]) == (None, None)


class TestMicrochip:
    @pytest.mark.parametrize(
        ("sent", "stored"),
        [
            ("982000123456789", CHIP),
            ("982*000*123*456*789", CHIP),
            ("0a1b2c3d4e", FDX_A),
            (" 0A1B-2C3D-4E ", FDX_A),
            ("0a.1b.2c.3d.4e", FDX_A),
            ("0A1B*2C3D*4E", FDX_A),
            ("1234567890", "1234567890"),
            ("123456789", AVID),
            ("123*456*789", AVID),
            ("123.456 789", AVID),
        ],
    )
    async def test_the_three_formats_as_clinics_write_them(self, client: Client, sent: str, stored: str) -> None:
        record = (await create(client, microchip=sent)).json()

        assert record["microchip"] == stored

    @pytest.mark.parametrize(
        "sent",
        [
            "12345678",
            "12345678901",
            "0A1B2C3D4",
            "0A1B2C3D4E5",
            "0A1B2C3D4G",
            "12345678A",
            "98200012345678A",
            "*123456789",
            "123456789*",
            "123**456789",
            "123 - 456789",
            "123_456_789",
            "１２３４５６７８９",
        ],
    )
    async def test_anything_else_is_400_naming_the_formats(self, client: Client, sent: str) -> None:
        response = await client.post(
            "/v1/pets", json={"name": "Rex", "petType": "Dog", "microchip": sent}, headers=auth()
        )

        message = assert_error(response, 400, 994)["errors"]["microchip"][0]
        assert all(format_name in message for format_name in ("ISO 11784", "FDX-A", "AVID"))

    @pytest.mark.parametrize(("first", "second"), [(FDX_A, "0a1b-2c3d-4e"), (AVID, "123*456*789")])
    async def test_a_code_is_one_pets_however_it_is_written(self, client: Client, first: str, second: str) -> None:
        made = await create(client, microchip=first)

        again = await client.post(
            "/v1/pets", json={"name": "Max", "petType": "Dog", "microchip": second}, headers=auth()
        )

        assert_error(again, 409, 982)
        assert again.headers["location"] == made.headers["location"]

    async def test_a_second_pet_with_the_code_is_409(self, client: Client) -> None:
        first = await create(client, microchip=CHIP)

        own = await client.post("/v1/pets", json={"name": "Max", "petType": "Dog", "microchip": CHIP}, headers=auth())
        others = await client.post(
            "/v1/pets", json={"name": "Max", "petType": "Dog", "microchip": CHIP}, headers=auth(BOB)
        )

        assert_error(own, 409, 982)
        assert own.headers["location"] == first.headers["location"]
        assert_error(others, 409, 982)
        assert "location" not in others.headers

    async def test_of_creates_at_once_with_one_code_one_is_kept(self, client: Client) -> None:
        """The writers of one code hold it until they commit: the others then see the first's pet."""
        owners = [ALICE, BOB, ADMIN] * 4
        sent = [
            client.post(
                "/v1/pets", json={"name": f"Max {index}", "petType": "Dog", "microchip": CHIP}, headers=auth(owner)
            )
            for index, owner in enumerate(owners)
        ]

        answers = await asyncio.gather(*sent)

        assert sorted(answer.status_code for answer in answers) == [201] + [409] * (len(owners) - 1)
        assert all(answer.json()["code"] == 982 for answer in answers if answer.status_code == 409)
        listed = await client.get("/v1/pets", params={"microchip": CHIP}, headers=auth(ADMIN, admin=True))
        assert listed.json()["totalCount"] == 1

    async def test_a_replace_or_update_to_anothers_code_is_409(self, client: Client) -> None:
        await create(client, microchip=CHIP)
        second = (await create(client, name="Max")).json()

        replaced = await client.put(
            f"/v1/pets/{second['id']}", json={"name": "Max", "petType": "Dog", "microchip": CHIP}, headers=auth()
        )
        patched = await client.patch(f"/v1/pets/{second['id']}", json={"microchip": CHIP}, headers=auth())

        assert_error(replaced, 409, 982)
        assert_error(patched, 409, 982)

    async def test_a_pets_own_code_again_is_no_conflict(self, client: Client) -> None:
        created = (await create(client, microchip=CHIP)).json()

        again = await client.patch(f"/v1/pets/{created['id']}", json={"microchip": CHIP, "name": "Rex"}, headers=auth())

        assert again.status_code == 200, again.text

    async def test_the_code_is_free_again_once_its_pet_is_deleted(self, client: Client) -> None:
        first = (await create(client, microchip=CHIP)).json()
        await client.delete(f"/v1/pets/{first['id']}", headers=auth())

        again = await client.post("/v1/pets", json={"name": "Max", "petType": "Dog", "microchip": CHIP}, headers=auth())

        assert again.status_code == 201


class TestLists:
    @pytest.fixture
    async def pets(self, client: Client) -> dict[str, dict[str, Any]]:
        made = {}
        for name, extra in [
            ("Ada", {"birthDate": "2015-01-01", "sex": "female", "neutered": True, "breed": "Beagle"}),
            ("Bo", {"birthDate": "2020-06-15", "sex": "male", "microchip": CHIP}),
            ("Cy", {"birthDate": "2018-03-03", "breed": "beagle"}),
            ("Di", {"microchip": FDX_A}),
        ]:
            made[name] = (await create(client, ALICE, name=name, **extra)).json()
        return made

    async def names(self, client: Client, query: str) -> list[str]:
        response = await client.get(f"/v1/pets?{query}", headers=auth())
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["items"]]

    async def test_filters(self, client: Client, pets: dict[str, Any]) -> None:
        assert await self.names(client, "sex=female") == ["Ada"]
        assert await self.names(client, "sex=MALE,female&sort=name") == ["Ada", "Bo"]
        assert await self.names(client, "microchip=982 000 123 456 789") == ["Bo"]
        assert await self.names(client, "neutered=true") == ["Ada"]
        assert await self.names(client, "breed=BEAGLE&sort=name") == ["Ada", "Cy"]
        assert await self.names(client, "birthDateFrom=2018-03-03&birthDateTo=2020-06-15") == ["Cy"]
        assert await self.names(client, "birthDate_gte=2018-03-03&birthDate_lte=2020-06-15&sort=name") == ["Bo", "Cy"]
        assert await self.names(client, "sex_ne=female&sort=name") == ["Bo", "Cy", "Di"]
        assert await self.names(client, "microchip=0a1b-2c3d-4e") == ["Di"]
        assert await self.names(client, "microchip=0a1b2c3d4e,982*000*123*456*789&sort=name") == ["Bo", "Di"]

    async def test_sorted_by_birth_date(self, client: Client, pets: dict[str, Any]) -> None:
        assert await self.names(client, "sort=birthDate,name") == ["Ada", "Cy", "Bo", "Di"]
        # Null after every value, before them descending, on both databases.
        assert await self.names(client, "sort=-birthDate,name") == ["Di", "Bo", "Cy", "Ada"]

    @pytest.mark.parametrize("query", ["sex=f", "microchip=123", "neutered=maybe", "birthDateFrom=2019-13-01"])
    async def test_a_bad_filter_is_400(self, client: Client, query: str) -> None:
        response = await client.get(f"/v1/pets?{query}", headers=auth(ADMIN, admin=True))

        assert list(assert_error(response, 400, 994)["errors"]) == [query.split("=")[0]]
