"""Pet vaccinations, /v1/pet-vaccination (contract section 10.2), on both databases."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.values import format_timestamp
from tests.support import ADMIN, ALICE, BOB, MISSING_ID, admin, assert_error, auth, create, create_vaccine

Client = AsyncTestClient[Any]
PATH = "/v1/pet-vaccination"
DAY_MS = 86_400_000
APPLIED = "2026-11-20T10:00:00.000Z"
APPLIED_MS = 1_795_168_800_000
FIELDS = {
    "id",
    "createdAt",
    "createdBy",
    "modifiedAt",
    "modifiedBy",
    "ownerId",
    "petId",
    "vaccineId",
    "appliedAt",
    "dueAt",
    "notes",
    "lotNumber",
    "lotExpiresOn",
    "doseType",
    "veterinarian",
    "veterinarianLicence",
    "clinic",
    "rabiesTag",
    "status",
    "statusReason",
    "vaccine",
}


@dataclass
class Clinic:
    """Alice's dog and cat, Bob's dog, a dog vaccine good for a year, a cat vaccine good for 30 days."""

    alice_dog: dict[str, Any]
    alice_cat: dict[str, Any]
    bob_dog: dict[str, Any]
    rabies: dict[str, Any]
    feline: dict[str, Any]


@pytest.fixture
async def clinic(client: Client) -> Clinic:
    return Clinic(
        alice_dog=(await create(client, ALICE, name="Rex", pet_type="Dog")).json(),
        alice_cat=(await create(client, ALICE, name="Tom", pet_type="Cat")).json(),
        bob_dog=(await create(client, BOB, name="Max", pet_type="Dog")).json(),
        rabies=(await create_vaccine(client, name="Rabies", pet_type="Dog", duration=365)).json(),
        feline=(await create_vaccine(client, name="Feline leukemia", pet_type="Cat", duration=30)).json(),
    )


def vaccination(pet: dict[str, Any], vaccine: dict[str, Any], applied: str = APPLIED, **extra: Any) -> dict[str, Any]:
    return {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": applied, **extra}


async def vaccinate(client: Client, user: str = ALICE, **body: Any) -> httpx.Response:
    response = await client.post(PATH, json=body, headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 201, response.text
    return response


class TestCreate:
    async def test_the_front_end_records_a_vaccination(self, client: Client, clinic: Clinic) -> None:
        applied = format_timestamp(int(time.time() * 1000))  # as JavaScript's toISOString() gives it
        body = {"vaccineId": clinic.rabies["id"], "appliedAt": applied, "petId": clinic.alice_dog["id"]}

        response = await client.post(PATH, json=body, headers=auth(ALICE))

        assert response.status_code == 201, response.text
        record = response.json()
        assert set(record) == FIELDS
        assert record["ownerId"] == ALICE
        assert record["appliedAt"] == applied
        assert record["vaccine"] == clinic.rabies
        assert record["notes"] is None
        assert response.headers["location"] == f"{PATH}/{record['id']}"
        assert response.headers["etag"]

    async def test_due_is_applied_plus_the_vaccines_duration(self, client: Client, clinic: Clinic) -> None:
        record = (await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))).json()

        assert record["dueAt"] == format_timestamp(APPLIED_MS + 365 * DAY_MS)

    @pytest.mark.parametrize(
        ("sent", "stored"),
        [
            ("2026-11-20T11:00:00+01:00", "2026-11-20T10:00:00.000Z"),
            ("2026-11-20T10:00:00.1234567Z", "2026-11-20T10:00:00.123Z"),
            ("2026-11-20T10:00:00.9996Z", "2026-11-20T10:00:01.000Z"),
            ("2026-11-20t10:00:00z", "2026-11-20T10:00:00.000Z"),
        ],
    )
    async def test_applied_at_is_returned_in_utc_with_milliseconds(
        self, client: Client, clinic: Clinic, sent: str, stored: str
    ) -> None:
        record = (await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, sent))).json()

        assert record["appliedAt"] == stored

    @pytest.mark.parametrize(
        "applied",
        [
            "six minutes from now",
            "1899-12-31T23:59:59.999Z",
            "2026-11-20",
            "2026-11-20T10:00:00",
            "not a date",
            1795168800000,
            None,
        ],
    )
    async def test_a_bad_applied_at_is_400(self, client: Client, clinic: Clinic, applied: Any) -> None:
        if applied == "six minutes from now":
            applied = format_timestamp(int(time.time() * 1000) + 6 * 60_000)
        response = await client.post(PATH, json=vaccination(clinic.alice_dog, clinic.rabies, applied), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["appliedAt"]

    async def test_a_given_due_date_is_kept(self, client: Client, clinic: Clinic) -> None:
        due = "2027-05-20T10:00:00.000Z"
        record = (await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, dueAt=due))).json()

        assert record["dueAt"] == due

    @pytest.mark.parametrize(
        "due", ["9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.9994Z", "9999-12-31T23:59:59.999-00:00"]
    )
    async def test_the_last_moment_rfc_3339_can_write_is_a_due_date(
        self, client: Client, clinic: Clinic, due: str
    ) -> None:
        record = (await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, dueAt=due))).json()

        assert record["dueAt"] == "9999-12-31T23:59:59.999Z"

    @pytest.mark.parametrize("due", ["9999-12-31T23:59:59-01:00", "9999-12-31T23:59:59.9995Z"])
    async def test_a_due_date_after_the_year_9999_in_utc_is_400(self, client: Client, clinic: Clinic, due: str) -> None:
        """It would be returned with a five-digit year, which is no RFC 3339 date-time."""
        response = await client.post(PATH, json=vaccination(clinic.alice_dog, clinic.rabies, dueAt=due), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["dueAt"]

    @pytest.mark.parametrize("due", [APPLIED, "2026-11-19T10:00:00.000Z", "soon", 5])
    async def test_a_due_date_not_after_applied_is_400(self, client: Client, clinic: Clinic, due: Any) -> None:
        response = await client.post(PATH, json=vaccination(clinic.alice_dog, clinic.rabies, dueAt=due), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["dueAt"]

    async def test_someone_elses_pet_and_a_missing_pet_answer_alike(self, client: Client, clinic: Clinic) -> None:
        theirs = await client.post(PATH, json=vaccination(clinic.bob_dog, clinic.rabies), headers=auth(ALICE))
        missing = await client.post(PATH, json=vaccination({"id": MISSING_ID}, clinic.rabies), headers=auth(ALICE))

        assert assert_error(theirs, 400, 994) == assert_error(missing, 400, 994)
        assert list(assert_error(theirs, 400, 994)["errors"]) == ["petId"]

    async def test_a_missing_vaccine_is_400(self, client: Client, clinic: Clinic) -> None:
        response = await client.post(PATH, json=vaccination(clinic.alice_dog, {"id": MISSING_ID}), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["vaccineId"]

    async def test_a_vaccine_for_another_pet_type_is_400(self, client: Client, clinic: Clinic) -> None:
        response = await client.post(PATH, json=vaccination(clinic.alice_dog, clinic.feline), headers=auth())

        error = assert_error(response, 400, 994)
        assert list(error["errors"]) == ["vaccineId"]
        assert "Dog" in error["errors"]["vaccineId"][0]

    @pytest.mark.parametrize("value", ["nope", 5, None, ""])
    async def test_malformed_ids_are_400(self, client: Client, clinic: Clinic, value: Any) -> None:
        response = await client.post(
            PATH, json={**vaccination(clinic.alice_dog, clinic.rabies), "petId": value}, headers=auth()
        )

        assert list(assert_error(response, 400, 994)["errors"]) == ["petId"]

    async def test_read_only_fields_and_the_pet_and_vaccine_are_ignored(self, client: Client, clinic: Clinic) -> None:
        body = {
            **vaccination(clinic.alice_dog, clinic.rabies),
            "pet": clinic.alice_dog,
            "vaccine": None,
            "ownerId": BOB,
            "createdBy": BOB,
        }

        record = (await vaccinate(client, **body)).json()

        assert (record["ownerId"], record["createdBy"], record["vaccine"]) == (ALICE, ALICE, clinic.rabies)

    async def test_an_unknown_field_is_400(self, client: Client, clinic: Clinic) -> None:
        response = await client.post(
            PATH, json={**vaccination(clinic.alice_dog, clinic.rabies), "dose": 2}, headers=auth()
        )

        assert list(assert_error(response, 400, 994)["errors"]) == ["dose"]

    async def test_an_admin_records_any_pets_vaccination_for_its_owner(self, client: Client, clinic: Clinic) -> None:
        record = (await vaccinate(client, ADMIN, **vaccination(clinic.bob_dog, clinic.rabies))).json()

        assert (record["ownerId"], record["createdBy"]) == (BOB, ADMIN)

    @pytest.mark.parametrize(
        ("notes", "stored"), [("  Left leg.\nNo reaction.  ", "Left leg.\nNo reaction."), ("", None)]
    )
    async def test_notes(self, client: Client, clinic: Clinic, notes: str, stored: str | None) -> None:
        record = (await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, notes=notes))).json()

        assert record["notes"] == stored

    async def test_notes_longer_than_2000_characters_are_400(self, client: Client, clinic: Clinic) -> None:
        response = await client.post(
            PATH, json=vaccination(clinic.alice_dog, clinic.rabies, notes="n" * 2001), headers=auth()
        )

        assert list(assert_error(response, 400, 994)["errors"]) == ["notes"]

    async def test_an_idempotent_repeat_replays_even_after_the_pet_is_gone(
        self, client: Client, clinic: Clinic
    ) -> None:
        headers = {**auth(ALICE), "Idempotency-Key": "visit-7"}
        first = await client.post(PATH, json=vaccination(clinic.alice_cat, clinic.feline), headers=headers)
        await client.delete(f"/v1/pets/{clinic.alice_cat['id']}", headers=auth(ALICE))
        again = await client.post(PATH, json=vaccination(clinic.alice_cat, clinic.feline), headers=headers)

        assert (first.status_code, again.status_code) == (201, 201)
        assert again.json() == first.json()
        assert again.headers["idempotent-replayed"] == "true"


class TestRead:
    async def test_the_owner_and_an_admin_see_it_others_do_not(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        location = created.headers["location"]

        assert (await client.get(location, headers=auth(ALICE))).json() == created.json()
        assert (await client.get(location, headers=admin())).json() == created.json()
        theirs = await client.get(location, headers=auth(BOB))
        missing = await client.get(f"{PATH}/{MISSING_ID}", headers=auth(BOB))
        assert assert_error(theirs, 404, 995) == assert_error(missing, 404, 995)

    async def test_if_none_match_is_304_until_its_vaccine_changes(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        conditional = {**auth(ALICE), "If-None-Match": created.headers["etag"]}

        before = await client.get(created.headers["location"], headers=conditional)
        await client.put(
            f"/v1/vaccines/{clinic.rabies['id']}",
            json={"name": "Rabies (3 years)", "petType": "Dog", "duration": 1095},
            headers=admin(),
        )
        after = await client.get(created.headers["location"], headers=conditional)

        assert before.status_code == 304
        assert after.status_code == 200
        assert after.json()["vaccine"]["name"] == "Rabies (3 years)"
        assert after.json()["dueAt"] == created.json()["dueAt"]  # fixed when the record was written


class TestList:
    async def _seed(self, client: Client, clinic: Clinic) -> dict[str, dict[str, Any]]:
        records = {
            "rex 2024": vaccination(clinic.alice_dog, clinic.rabies, "2024-01-10T09:00:00Z"),
            "rex 2025": vaccination(clinic.alice_dog, clinic.rabies, "2025-01-10T09:00:00Z"),
            "tom 2025": vaccination(clinic.alice_cat, clinic.feline, "2025-06-01T09:00:00Z"),
            "max 2025": vaccination(clinic.bob_dog, clinic.rabies, "2025-03-01T09:00:00Z"),
        }
        return {
            name: (await vaccinate(client, BOB if name.startswith("max") else ALICE, **body)).json()
            for name, body in records.items()
        }

    async def _names(
        self, client: Client, seeded: dict[str, dict[str, Any]], query: str, user: str = ALICE
    ) -> list[str]:
        response = await client.get(f"{PATH}?{query}", headers=auth(user, admin=user == ADMIN))
        assert response.status_code == 200, response.text
        by_id = {record["id"]: name for name, record in seeded.items()}
        return [by_id[item["id"]] for item in response.json()["items"]]

    async def test_the_front_ends_list_of_a_pet_with_its_vaccines(self, client: Client, clinic: Clinic) -> None:
        seeded = await self._seed(client, clinic)

        query = f"order=desc&sort=appliedAt&petId={clinic.alice_dog['id']}"
        response = await client.get(f"{PATH}?{query}", headers=auth(ALICE))

        assert await self._names(client, seeded, query) == ["rex 2025", "rex 2024"]
        assert [item["vaccine"]["name"] for item in response.json()["items"]] == ["Rabies", "Rabies"]

    @pytest.mark.parametrize(
        ("query", "user", "expected"),
        [
            ("", ALICE, ["rex 2024", "rex 2025", "tom 2025"]),
            ("", BOB, ["max 2025"]),
            ("", ADMIN, ["rex 2024", "rex 2025", "tom 2025", "max 2025"]),
            ("ownerId=bob@example.com", ADMIN, ["max 2025"]),
            ("ownerId=bob@example.com", ALICE, []),
            ("sort=appliedAt", ADMIN, ["rex 2024", "rex 2025", "max 2025", "tom 2025"]),
            ("sort=-dueAt", ADMIN, ["max 2025", "rex 2025", "tom 2025", "rex 2024"]),
            ("appliedAt=2025-01-10T09:00:00Z", ALICE, ["rex 2025"]),
            ("appliedAt=2025-01-10T10:00:00%2B01:00", ALICE, ["rex 2025"]),
            ("appliedAt=2025-01-10T09:00:00.0001Z", ALICE, []),
            ("appliedAtMin=2025-01-10T09:00:00Z&appliedAtMax=2025-06-01T09:00:00Z", ALICE, ["rex 2025", "tom 2025"]),
            ("dueFrom=2025-07-01T09:00:00Z", ADMIN, ["rex 2025", "tom 2025", "max 2025"]),
            ("dueTo=2025-07-01T09:00:00Z&sort=dueAt", ADMIN, ["rex 2024"]),
            ("dueTo=2026-03-01T09:00:00Z&dueFrom=2026-01-10T09:00:00Z", ADMIN, ["rex 2025"]),
            ("sort=ownerId,-appliedAt", ADMIN, ["tom 2025", "rex 2025", "rex 2024", "max 2025"]),
        ],
    )
    async def test_filters_and_sorts(
        self, client: Client, clinic: Clinic, query: str, user: str, expected: list[str]
    ) -> None:
        seeded = await self._seed(client, clinic)

        assert await self._names(client, seeded, query, user) == expected

    async def test_by_pet_and_vaccine_ids(self, client: Client, clinic: Clinic) -> None:
        seeded = await self._seed(client, clinic)

        by_pets = await self._names(client, seeded, f"petId={clinic.alice_cat['id']},{clinic.bob_dog['id']}", ADMIN)
        by_vaccine = await self._names(client, seeded, f"vaccineId={clinic.rabies['id']}", ALICE)

        assert by_pets == ["tom 2025", "max 2025"]
        assert by_vaccine == ["rex 2024", "rex 2025"]

    async def test_what_is_overdue_now(self, client: Client, clinic: Clinic) -> None:
        seeded = await self._seed(client, clinic)
        now = format_timestamp(int(time.time() * 1000))

        assert await self._names(client, seeded, f"dueTo={now}&sort=dueAt", ADMIN) == [
            "rex 2024",
            "tom 2025",
            "rex 2025",
            "max 2025",
        ]

    @pytest.mark.parametrize(
        ("query", "parameter"),
        [
            ("petId=nope", "petId"),
            ("vaccineId=1,2", "vaccineId"),
            ("appliedAtMin=yesterday", "appliedAtMin"),
            ("sort=name", "sort"),
            ("petType=Dog", "petType"),
            ("search=x", "search"),
        ],
    )
    async def test_a_bad_or_unknown_parameter_is_400_naming_it(
        self, client: Client, clinic: Clinic, query: str, parameter: str
    ) -> None:
        response = await client.get(f"{PATH}?{query}", headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == [parameter]

    async def test_empty_parts_of_the_query_are_ignored(self, client: Client, clinic: Clinic) -> None:
        seeded = await self._seed(client, clinic)

        assert await self._names(client, seeded, f"&petId={clinic.alice_cat['id']}&") == ["tom 2025"]


class TestReplace:
    async def test_replaces_every_field_and_computes_an_omitted_due_date_again(
        self, client: Client, clinic: Clinic
    ) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, dueAt="2030-01-01T00:00:00Z"))
        body = {**created.json(), "petId": clinic.alice_cat["id"], "vaccineId": clinic.feline["id"], "notes": "x"}
        del body["dueAt"]

        response = await client.put(created.headers["location"], json=body, headers=auth())

        assert response.status_code == 200, response.text
        replaced = response.json()
        assert (replaced["petId"], replaced["vaccineId"], replaced["notes"]) == (
            clinic.alice_cat["id"],
            clinic.feline["id"],
            "x",
        )
        assert replaced["dueAt"] == format_timestamp(APPLIED_MS + 30 * DAY_MS)
        assert replaced["vaccine"] == clinic.feline
        assert response.headers["etag"] != created.headers["etag"]

    async def test_the_new_values_obey_the_rules(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        other_owner = await client.put(
            created.headers["location"], json=vaccination(clinic.bob_dog, clinic.rabies), headers=auth()
        )
        wrong_type = await client.put(
            created.headers["location"], json=vaccination(clinic.alice_cat, clinic.rabies), headers=auth()
        )

        assert list(assert_error(other_owner, 400, 994)["errors"]) == ["petId"]
        assert list(assert_error(wrong_type, 400, 994)["errors"]) == ["vaccineId"]

    async def test_someone_elses_is_404_and_unchanged(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        response = await client.put(
            created.headers["location"], json=vaccination(clinic.bob_dog, clinic.rabies), headers=auth(BOB)
        )

        assert_error(response, 404, 995)
        assert (await client.get(created.headers["location"], headers=auth())).json() == created.json()

    async def test_a_stale_if_match_is_412(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        await client.put(created.headers["location"], json=vaccination(clinic.alice_dog, clinic.rabies), headers=auth())

        response = await client.put(
            created.headers["location"],
            json=vaccination(clinic.alice_dog, clinic.rabies),
            headers={**auth(), "If-Match": created.headers["etag"]},
        )

        assert_error(response, 412, 992)

    async def test_a_put_of_a_missing_id_never_creates(self, client: Client, clinic: Clinic) -> None:
        response = await client.put(
            f"{PATH}/{MISSING_ID}", json=vaccination(clinic.alice_dog, clinic.rabies), headers=auth()
        )

        assert_error(response, 404, 995)


class TestDelete:
    async def test_the_owner_deletes_and_gets_the_record_back(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        theirs = await client.delete(created.headers["location"], headers=auth(BOB))
        mine = await client.delete(created.headers["location"], headers=auth(ALICE))

        assert_error(theirs, 404, 995)
        assert mine.status_code == 200
        assert mine.json() == created.json()
        assert_error(await client.get(created.headers["location"], headers=auth()), 404, 995)


class TestReferences:
    async def test_deleting_a_pet_deletes_its_vaccinations(self, client: Client, clinic: Clinic) -> None:
        rex = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        tom = await vaccinate(client, **vaccination(clinic.alice_cat, clinic.feline))

        deleted = await client.delete(f"/v1/pets/{clinic.alice_dog['id']}", headers=auth())

        assert deleted.status_code == 200
        assert_error(await client.get(rex.headers["location"], headers=admin()), 404, 995)
        assert (await client.get(tom.headers["location"], headers=auth())).status_code == 200
        listed = await client.get(PATH, headers=admin())
        assert [item["id"] for item in listed.json()["items"]] == [tom.json()["id"]]
        assert listed.json()["totalCount"] == 1

    async def test_a_vaccine_in_use_is_409_and_stays(self, client: Client, clinic: Clinic) -> None:
        used = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        refused = await client.delete(f"/v1/vaccines/{clinic.rabies['id']}", headers=admin())
        await client.delete(used.headers["location"], headers=auth())
        allowed = await client.delete(f"/v1/vaccines/{clinic.rabies['id']}", headers=admin())

        assert_error(refused, 409, 985)
        assert allowed.status_code == 200

    async def test_409_comes_after_404_403_and_412(self, client: Client, clinic: Clinic) -> None:
        await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        location = f"/v1/vaccines/{clinic.rabies['id']}"

        assert_error(await client.delete(location, headers=auth(ALICE)), 403, 997)
        assert_error(await client.delete(location, headers={**admin(), "If-Match": '"stale"'}), 412, 992)
        assert_error(await client.delete(location, headers=admin()), 409, 985)

    async def test_the_vaccinations_follow_their_pet_to_a_new_owner(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))
        transfer = {"name": "Rex", "petType": "Dog", "ownerId": BOB}

        moved = await client.put(f"/v1/pets/{clinic.alice_dog['id']}", json=transfer, headers=admin())
        as_bob = await client.get(created.headers["location"], headers=auth(BOB))
        as_alice = await client.get(created.headers["location"], headers=auth(ALICE))
        bobs = await client.get(PATH, headers=auth(BOB))
        alices = await client.get(PATH, headers=auth(ALICE))

        assert moved.status_code == 200
        assert as_bob.json()["ownerId"] == BOB
        assert as_bob.headers["etag"] != created.headers["etag"]
        assert_error(as_alice, 404, 995)
        assert (bobs.json()["totalCount"], alices.json()["totalCount"]) == (1, 0)
