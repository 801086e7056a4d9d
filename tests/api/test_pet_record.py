"""The pet record a clinic keeps (contract v4 section 2): birth date, sex, neutered, breed, microchip (in three
formats), colour and the day it died, all optional; a microchip code belongs to one pet; a pet dies after it was
born and after its doses; clients that send only a name and a type never erase them; list filters and sorting. On
both databases."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, FIELDS, assert_error, auth, create, create_vaccine

Client = AsyncTestClient[Any]
CHIP = "982000123456789"
FDX_A = "0A1B2C3D4E"
AVID = "123456789"
CLINIC_FIELDS = ("birthDate", "sex", "neutered", "breed", "microchip", "color", "deceasedAt")


def today() -> datetime.date:
    return datetime.datetime.now(datetime.UTC).date()


class TestFields:
    async def test_every_record_has_the_fifteen_fields(self, client: Client) -> None:
        plain = (await create(client)).json()

        assert set(plain) == FIELDS
        assert len(FIELDS) == 15
        assert all(plain[name] is None for name in CLINIC_FIELDS)

    async def test_values_as_a_clinic_writes_them(self, client: Client) -> None:
        created = await create(
            client,
            birthDate="2019-04-23",
            sex="FEMALE",
            neutered=True,
            breed="  Beagle  ",
            microchip=" 982 000.123-456 789 ",
            color="  Tricolour, white blaze ",
            deceasedAt="2025-10-01",
        )

        record = created.json()
        assert (record["birthDate"], record["sex"], record["neutered"]) == ("2019-04-23", "female", True)
        assert (record["breed"], record["microchip"]) == ("Beagle", CHIP)
        assert (record["color"], record["deceasedAt"]) == ("Tricolour, white blaze", "2025-10-01")

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
            ("color", "x" * 101),
            ("color", "a\x00b"),
            ("color", 7),
            ("deceasedAt", "2019-02-30"),
            ("deceasedAt", "1899-12-31"),
            ("deceasedAt", (today() + datetime.timedelta(days=2)).isoformat()),
            ("deceasedAt", "2020-01-01T00:00:00Z"),
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
    async def test_blank_breed_microchip_and_color_are_null(self, client: Client, blank: Any) -> None:
        record = (await create(client, breed=blank, microchip=blank, color=blank)).json()

        assert (record["breed"], record["microchip"], record["color"]) == (None, None, None)

    async def test_a_pet_may_die_today_or_the_day_it_was_born(self, client: Client) -> None:
        day = today().isoformat()

        record = (await create(client, birthDate=day, deceasedAt=day)).json()

        assert (record["birthDate"], record["deceasedAt"]) == (day, day)


class TestOlderClients:
    async def test_a_replace_or_update_that_names_none_of_the_new_fields_keeps_them(self, client: Client) -> None:
        created = (await create(client, color="Black", deceasedAt="2025-10-01")).json()

        replaced = await client.put(f"/v1/pets/{created['id']}", json={"name": "Rex", "petType": "Dog"}, headers=auth())
        patched = await client.patch(f"/v1/pets/{created['id']}", json={"breed": "Pug"}, headers=auth())

        assert (replaced.json()["color"], replaced.json()["deceasedAt"]) == ("Black", "2025-10-01")
        assert (patched.json()["color"], patched.json()["deceasedAt"]) == ("Black", "2025-10-01")

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
            ("Cy", {"birthDate": "2018-03-03", "breed": "beagle", "deceasedAt": "2024-05-05"}),
            ("Di", {"microchip": FDX_A}),
            ("Ed", {"microchip": AVID, "deceasedAt": "2025-01-01"}),
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
        assert await self.names(client, "sex_ne=female&sort=name") == ["Bo", "Cy", "Di", "Ed"]
        assert await self.names(client, "microchip=0a1b-2c3d-4e") == ["Di"]
        assert await self.names(client, "microchip=123*456*789,982000123456789&sort=name") == ["Bo", "Ed"]
        assert await self.names(client, "deceased=true&sort=name") == ["Cy", "Ed"]
        assert await self.names(client, "deceased=FALSE&sort=name") == ["Ada", "Bo", "Di"]
        assert await self.names(client, "deceased=false&sex=male") == ["Bo"]
        assert await self.names(client, "deceasedAt_gte=2024-06-01") == ["Ed"]

    async def test_sorted_by_birth_date(self, client: Client, pets: dict[str, Any]) -> None:
        assert await self.names(client, "sort=birthDate,name") == ["Ada", "Cy", "Bo", "Di", "Ed"]
        # Null after every value, before them descending, on both databases.
        assert await self.names(client, "sort=-birthDate,name") == ["Di", "Ed", "Bo", "Cy", "Ada"]

    @pytest.mark.parametrize(
        "query",
        ["sex=f", "microchip=123", "neutered=maybe", "birthDateFrom=2019-13-01", "deceased=yes", "deceased="],
    )
    async def test_a_bad_filter_is_400(self, client: Client, query: str) -> None:
        response = await client.get(f"/v1/pets?{query}", headers=auth(ADMIN, admin=True))

        assert list(assert_error(response, 400, 994)["errors"]) == [query.split("=")[0]]


class TestDeath:
    """A pet dies on or after the day it was born, and after the day of each completed dose of it: no vaccination of
    it may be applied after that day (contract v4 section 2)."""

    @pytest.fixture
    async def rabies(self, client: Client) -> dict[str, Any]:
        return (await create_vaccine(client, name="Rabies", pet_type="Dog", duration=365)).json()

    async def vaccinate(self, client: Client, pet: dict[str, Any], vaccine: dict[str, Any], applied: str) -> Any:
        body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": applied}
        response = await client.post("/v1/pet-vaccination", json=body, headers=auth())
        assert response.status_code == 201, response.text
        return response.json()

    async def test_before_its_birth_is_400_naming_it(self, client: Client) -> None:
        born = await client.post(
            "/v1/pets",
            json={"name": "Rex", "petType": "Dog", "birthDate": "2020-05-02", "deceasedAt": "2020-05-01"},
            headers=auth(),
        )
        pet = (await create(client, birthDate="2020-05-02")).json()
        died = await client.patch(f"/v1/pets/{pet['id']}", json={"deceasedAt": "2020-05-01"}, headers=auth())
        dead = (await create(client, deceasedAt="2021-01-01")).json()
        later = await client.put(
            f"/v1/pets/{dead['id']}", json={"name": "Rex", "petType": "Dog", "birthDate": "2021-01-02"}, headers=auth()
        )

        assert list(assert_error(born, 400, 994)["errors"]) == ["deceasedAt"]
        assert list(assert_error(died, 400, 994)["errors"]) == ["deceasedAt"]
        # Only the birth date moved: it is named.
        assert list(assert_error(later, 400, 994)["errors"]) == ["birthDate"]

    async def test_before_a_recorded_dose_is_400_naming_it(self, client: Client, rabies: dict[str, Any]) -> None:
        pet = (await create(client)).json()
        await self.vaccinate(client, pet, rabies, "2025-03-10T23:30:00+00:00")
        path = f"/v1/pets/{pet['id']}"

        patched = await client.patch(path, json={"deceasedAt": "2025-03-09"}, headers=auth())
        replaced = await client.put(
            path, json={"name": "Rex", "petType": "Dog", "deceasedAt": "2025-03-09"}, headers=auth()
        )
        that_day = await client.patch(path, json={"deceasedAt": "2025-03-10"}, headers=auth())

        assert list(assert_error(patched, 400, 994)["errors"]) == ["deceasedAt"]
        assert list(assert_error(replaced, 400, 994)["errors"]) == ["deceasedAt"]
        assert that_day.status_code == 200, that_day.text
        assert that_day.json()["deceasedAt"] == "2025-03-10"

    async def test_a_dose_entered_in_error_does_not_hold_it_back(self, client: Client, rabies: dict[str, Any]) -> None:
        pet = (await create(client)).json()
        dose = await self.vaccinate(client, pet, rabies, "2025-03-10T09:00:00Z")
        marked = await client.patch(
            f"/v1/pet-vaccination/{dose['id']}",
            json={"status": "entered-in-error", "statusReason": "Another pet's dose."},
            headers=auth(),
        )
        assert marked.status_code == 200, marked.text

        died = await client.patch(f"/v1/pets/{pet['id']}", json={"deceasedAt": "2025-01-01"}, headers=auth())

        assert died.status_code == 200, died.text

    async def test_no_dose_is_applied_after_the_day(self, client: Client, rabies: dict[str, Any]) -> None:
        pet = (await create(client, deceasedAt="2025-03-10")).json()
        late = {"petId": pet["id"], "vaccineId": rabies["id"], "appliedAt": "2025-03-11T00:00:00Z"}

        created = await client.post("/v1/pet-vaccination", json=late, headers=auth())
        on_the_day = await self.vaccinate(client, pet, rabies, "2025-03-10T23:59:59.999Z")
        replaced = await client.put(f"/v1/pet-vaccination/{on_the_day['id']}", json=late, headers=auth())
        patched = await client.patch(
            f"/v1/pet-vaccination/{on_the_day['id']}", json={"appliedAt": "2025-03-11T00:30:00+01:00"}, headers=auth()
        )

        for refused in (created, replaced):
            message = assert_error(refused, 400, 994)["errors"]["appliedAt"][0]
            assert "2025-03-10" in message
        # Half past midnight at +01:00 is still the day it died in UTC.
        assert patched.status_code == 200, patched.text

    async def test_a_deceased_pet_is_listed_and_written_as_any_other(self, client: Client) -> None:
        pet = (await create(client, deceasedAt="2025-03-10")).json()

        renamed = await client.patch(f"/v1/pets/{pet['id']}", json={"name": "Rex II"}, headers=auth())
        revived = await client.patch(f"/v1/pets/{pet['id']}", json={"deceasedAt": None}, headers=auth())

        assert renamed.json()["deceasedAt"] == "2025-03-10"
        assert revived.json()["deceasedAt"] is None
