"""The clinic's record of a dose (contract v4 section 10.2): lot, expiry, dose type, veterinarian, licence, clinic,
rabies tag (one completed dose a tag a calendar year), status and the reason of a correction; corrections never
overwrite; filters and sorting. On both databases."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, admin, assert_error, auth, create, create_vaccine, run_sql, scalar_sql

Client = AsyncTestClient[Any]
PATH = "/v1/pet-vaccination"
APPLIED = "2026-03-02T10:00:00.000Z"
CERTIFICATE = {
    "lotNumber": "A123-45/B",
    "lotExpiresOn": "2027-06-30",
    "doseType": "booster",
    "veterinarian": "Dr. Ana Ruiz",
    "veterinarianLicence": "VET-12345",
    "clinic": "Riverside Veterinary Clinic\n1 Main St, Springfield",
    "rabiesTag": "R-2026-0042",
}
NEW_FIELDS = (*CERTIFICATE, "status", "statusReason")
IN_ERROR = {"status": "entered-in-error", "statusReason": "Recorded for the wrong pet."}


@dataclass
class Patients:
    """Alice's dogs Rex and Max, Bob's dog Bo, and a rabies vaccine for dogs."""

    rex: dict[str, Any]
    max: dict[str, Any]
    bo: dict[str, Any]
    rabies: dict[str, Any]

    def dose(self, pet: dict[str, Any] | None = None, applied: str = APPLIED, **extra: Any) -> dict[str, Any]:
        return {"petId": (pet or self.rex)["id"], "vaccineId": self.rabies["id"], "appliedAt": applied, **extra}


@pytest.fixture
async def patients(client: Client) -> Patients:
    return Patients(
        rex=(await create(client, ALICE, name="Rex")).json(),
        max=(await create(client, ALICE, name="Max")).json(),
        bo=(await create(client, BOB, name="Bo")).json(),
        rabies=(await create_vaccine(client, name="Rabies", group="Rabies", manufacturer="Zoetis")).json(),
    )


async def record(client: Client, body: dict[str, Any], user: str = ALICE) -> dict[str, Any]:
    response = await client.post(PATH, json=body, headers=auth(user))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def write(client: Client, method: str, dose: dict[str, Any], body: dict[str, Any]) -> httpx.Response:
    return await client.request(method, f"{PATH}/{dose['id']}", json=body, headers=auth())


class TestFields:
    async def test_a_dose_as_a_certificate_shows_it(self, client: Client, patients: Patients) -> None:
        sent = {
            **CERTIFICATE,
            "lotNumber": "  A123-45/B ",
            "doseType": "BOOSTER",
            "veterinarian": " Dr. Ana Ruiz ",
            "clinic": " Riverside Veterinary Clinic\n1 Main St, Springfield\n",
            "rabiesTag": " r-2026-0042 ",
        }

        created = await record(client, patients.dose(**sent))

        assert {name: created[name] for name in NEW_FIELDS} == {
            **CERTIFICATE,
            "status": "completed",
            "statusReason": None,
        }
        # The vaccine it embeds shows the vaccine's new fields.
        assert (created["vaccine"]["group"], created["vaccine"]["manufacturer"]) == ("Rabies", "Zoetis")

    async def test_a_dose_without_them_is_completed_and_the_rest_null(self, client: Client, patients: Patients) -> None:
        created = await record(client, patients.dose(status=None))

        assert {name: created[name] for name in NEW_FIELDS} == {
            **dict.fromkeys(CERTIFICATE),
            "status": "completed",
            "statusReason": None,
        }

    @pytest.mark.parametrize("blank", ["", "  \t"])
    async def test_blank_text_is_null(self, client: Client, patients: Patients, blank: str) -> None:
        texts = ("lotNumber", "veterinarian", "veterinarianLicence", "clinic", "rabiesTag")

        created = await record(client, patients.dose(**dict.fromkeys(texts, blank)))

        assert all(created[name] is None for name in texts)

    @pytest.mark.parametrize(
        ("sent", "stored"),
        [("a1 b2", "a1 b2"), ("LOT 7/2026.1", "LOT 7/2026.1"), ("x" * 50, "x" * 50), (" 1-2 ", "1-2")],
    )
    async def test_a_lot_number_is_kept_as_written(
        self, client: Client, patients: Patients, sent: str, stored: str
    ) -> None:
        assert (await record(client, patients.dose(lotNumber=sent)))["lotNumber"] == stored

    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("lotNumber", "A_1"),
            ("lotNumber", "x" * 51),
            ("lotNumber", "lot\t7"),
            ("lotNumber", "lötnummer"),
            ("lotNumber", 12345),
            ("lotExpiresOn", "2027-02-30"),
            ("lotExpiresOn", "2027-06-30T00:00:00Z"),
            ("doseType", "second"),
            ("doseType", True),
            ("veterinarian", "x" * 101),
            ("veterinarian", "a\x00b"),
            ("veterinarianLicence", "x" * 51),
            ("clinic", "x" * 301),
            ("clinic", "bad\rreturn"),
            ("rabiesTag", "R 1"),
            ("rabiesTag", "R_1"),
            ("rabiesTag", "x" * 31),
            ("rabiesTag", "R-1é"),
            ("status", "voided"),
            ("statusReason", "x" * 501),
        ],
    )
    async def test_a_bad_value_is_400_naming_it(
        self, client: Client, patients: Patients, field: str, value: Any
    ) -> None:
        response = await client.post(PATH, json=patients.dose(**{field: value}), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == [field]

    async def test_an_older_clients_replace_keeps_them(self, client: Client, patients: Patients) -> None:
        created = await record(client, patients.dose(**CERTIFICATE))
        older = {"petId": created["petId"], "vaccineId": created["vaccineId"], "appliedAt": created["appliedAt"]}

        replaced = await write(client, "PUT", created, older)
        patched = await write(client, "PATCH", created, {"notes": "Left leg."})

        for response in (replaced, patched):
            assert response.status_code == 200, response.text
            assert {name: response.json()[name] for name in CERTIFICATE} == CERTIFICATE

    async def test_null_clears_an_optional_one(self, client: Client, patients: Patients) -> None:
        created = await record(client, patients.dose(**CERTIFICATE))

        cleared = await write(client, "PATCH", created, {"lotNumber": None, "rabiesTag": None, "doseType": None})

        assert (cleared.json()["lotNumber"], cleared.json()["rabiesTag"], cleared.json()["doseType"]) == (None,) * 3

    async def test_history_and_the_feed_show_them(self, client: Client, patients: Patients) -> None:
        created = await record(client, patients.dose(**CERTIFICATE))
        await write(client, "PATCH", created, IN_ERROR)

        history = (await client.get(f"{PATH}/{created['id']}/history", headers=auth())).json()["items"]
        feed = (await client.get("/v1/changes", params={"resource": PATH.rsplit("/", 1)[1]}, headers=auth())).json()

        assert [change["record"]["status"] for change in history] == ["completed", "entered-in-error"]
        assert history[0]["record"]["rabiesTag"] == CERTIFICATE["rabiesTag"]
        assert [change["record"]["statusReason"] for change in feed["items"]] == [None, IN_ERROR["statusReason"]]


class TestLotExpiry:
    async def test_an_expired_product_is_400_naming_its_expiry(self, client: Client, patients: Patients) -> None:
        response = await client.post(PATH, json=patients.dose(lotExpiresOn="2026-03-01"), headers=auth())

        message = assert_error(response, 400, 994)["errors"]["lotExpiresOn"][0]
        assert "2026-03-02" in message

    async def test_the_day_of_the_dose_in_utc_is_the_last_day(self, client: Client, patients: Patients) -> None:
        late_evening = patients.dose(applied="2026-03-02T23:30:00-02:00", lotExpiresOn="2026-03-03")
        on_the_day = await record(client, late_evening)

        assert on_the_day["appliedAt"] == "2026-03-03T01:30:00.000Z"

    async def test_a_replace_that_moves_the_dose_past_the_stored_expiry_is_400(
        self, client: Client, patients: Patients
    ) -> None:
        created = await record(client, patients.dose(lotExpiresOn="2026-03-05"))

        moved = await write(client, "PUT", created, patients.dose(applied="2026-03-06T08:00:00Z"))
        patched = await write(client, "PATCH", created, {"appliedAt": "2026-03-06T08:00:00Z"})

        assert list(assert_error(moved, 400, 994)["errors"]) == ["lotExpiresOn"]
        assert list(assert_error(patched, 400, 994)["errors"]) == ["lotExpiresOn"]


class TestCorrections:
    """A dose recorded in error is marked so, with a reason, and kept; from then on it can only be deleted."""

    async def test_a_create_must_be_completed(self, client: Client, patients: Patients) -> None:
        marked = await client.post(PATH, json=patients.dose(**IN_ERROR), headers=auth())
        reasoned = await client.post(PATH, json=patients.dose(statusReason="Why not."), headers=auth())

        assert list(assert_error(marked, 400, 994)["errors"]) == ["status"]
        assert list(assert_error(reasoned, 400, 994)["errors"]) == ["statusReason"]

    @pytest.mark.parametrize("method", ["PUT", "PATCH"])
    async def test_marking_one_in_error_needs_a_reason(self, client: Client, patients: Patients, method: str) -> None:
        created = await record(client, patients.dose())
        body = patients.dose(status="entered-in-error") if method == "PUT" else {"status": "entered-in-error"}

        response = await write(client, method, created, body)

        assert list(assert_error(response, 400, 994)["errors"]) == ["statusReason"]

    @pytest.mark.parametrize("method", ["PUT", "PATCH"])
    async def test_a_dose_marked_in_error_is_kept_readable_and_listed(
        self, client: Client, patients: Patients, method: str
    ) -> None:
        created = await record(client, patients.dose(**CERTIFICATE))
        body = {**patients.dose(), **IN_ERROR} if method == "PUT" else {"status": "ENTERED-IN-ERROR", **IN_ERROR}

        marked = await write(client, method, created, {**body, "status": body["status"]})

        assert marked.status_code == 200, marked.text
        assert (marked.json()["status"], marked.json()["statusReason"]) == tuple(IN_ERROR.values())
        again = await client.get(f"{PATH}/{created['id']}", headers=auth())
        assert again.json() == marked.json()
        listed = await client.get(PATH, params={"status": "entered-in-error"}, headers=auth())
        assert [item["id"] for item in listed.json()["items"]] == [created["id"]]

    @pytest.mark.parametrize(
        ("method", "body"),
        [
            ("PATCH", {"notes": "Left leg."}),
            ("PATCH", {}),
            ("PATCH", {"status": "completed", "statusReason": None}),
            ("PATCH", {"statusReason": "Another reason."}),
            ("PUT", None),
        ],
    )
    async def test_then_any_write_but_a_delete_is_400_naming_status(
        self, client: Client, patients: Patients, method: str, body: dict[str, Any] | None
    ) -> None:
        created = await record(client, patients.dose())
        marked = (await write(client, "PATCH", created, IN_ERROR)).json()

        response = await write(client, method, created, marked if body is None else body)

        assert list(assert_error(response, 400, 994)["errors"]) == ["status"]
        unchanged = await client.get(f"{PATH}/{created['id']}", headers=auth())
        assert unchanged.json() == marked
        deleted = await client.delete(f"{PATH}/{created['id']}", headers=auth())
        assert deleted.status_code == 200, deleted.text

    async def test_a_reason_while_completed_is_400(self, client: Client, patients: Patients) -> None:
        created = await record(client, patients.dose())

        response = await write(client, "PATCH", created, {"statusReason": "Just in case."})

        assert list(assert_error(response, 400, 994)["errors"]) == ["statusReason"]

    async def test_a_grantee_with_care_marks_a_dose_in_error(self, client: Client, patients: Patients) -> None:
        vet = "vet@clinic.example"
        share = {"petId": patients.rex["id"], "grantee": vet, "access": "care"}
        assert (await client.post("/v1/pet-shares", json=share, headers=auth())).status_code == 201
        created = await record(client, patients.dose())

        marked = await client.patch(f"{PATH}/{created['id']}", json=IN_ERROR, headers=auth(vet))

        assert marked.status_code == 200, marked.text
        assert marked.json()["modifiedBy"] == vet


class TestRabiesTag:
    """One completed dose a rabies tag in a calendar year (UTC), whoever owns it; enforced by the database too."""

    async def test_a_second_completed_dose_with_the_tag_that_year_is_409(
        self, client: Client, patients: Patients
    ) -> None:
        first = await client.post(PATH, json=patients.dose(rabiesTag="R-1"), headers=auth())

        own = await client.post(
            PATH, json=patients.dose(patients.max, "2026-11-30T23:59:59Z", rabiesTag="r-1"), headers=auth()
        )
        others = await client.post(PATH, json=patients.dose(patients.bo, rabiesTag="R-1"), headers=auth(BOB))

        assert "rabiesTag" in assert_error(own, 409, 982)["message"]
        assert own.headers["location"] == first.headers["location"]
        assert_error(others, 409, 982)
        assert "location" not in others.headers

    async def test_the_tag_again_another_year_or_beside_a_dose_in_error_is_no_conflict(
        self, client: Client, patients: Patients
    ) -> None:
        first = await record(client, patients.dose(applied="2025-12-31T23:59:59.999Z", rabiesTag="R-1"))
        await record(client, patients.dose(patients.max, "2026-01-01T00:00:00Z", rabiesTag="R-1"))
        await write(client, "PATCH", first, IN_ERROR)

        again = await client.post(
            PATH, json=patients.dose(patients.bo, "2025-06-01T00:00:00Z", rabiesTag="R-1"), headers=auth(BOB)
        )

        assert again.status_code == 201, again.text

    async def test_a_replace_or_update_into_the_tags_year_is_409(self, client: Client, patients: Patients) -> None:
        await record(client, patients.dose(rabiesTag="R-1"))
        earlier = await record(client, patients.dose(patients.max, "2025-05-05T00:00:00Z", rabiesTag="R-1"))
        other = await record(client, patients.dose(patients.max))

        moved = await write(client, "PATCH", earlier, {"appliedAt": "2026-05-05T00:00:00Z", "dueAt": None})
        tagged = await write(client, "PATCH", other, {"rabiesTag": "r-1"})
        replaced = await write(client, "PUT", other, patients.dose(patients.max, rabiesTag="R-1"))
        own = await write(client, "PATCH", earlier, {"rabiesTag": "R-1", "notes": "x"})

        for response in (moved, tagged, replaced):
            assert_error(response, 409, 982)
        assert own.status_code == 200, own.text

    async def test_of_creates_at_once_with_one_tag_one_is_kept(self, client: Client, patients: Patients) -> None:
        """The writers of one tag and year hold them until they commit: the others then see the first's dose."""
        pets = [patients.rex, patients.max, patients.bo] * 4
        sent = [
            client.post(
                PATH, json=patients.dose(pet, rabiesTag="R-9"), headers=auth(BOB if pet is patients.bo else ALICE)
            )
            for pet in pets
        ]

        answers = await asyncio.gather(*sent)

        assert sorted(answer.status_code for answer in answers) == [201] + [409] * (len(pets) - 1)
        listed = await client.get(PATH, params={"rabiesTag": "r-9"}, headers=auth(ADMIN, admin=True))
        assert listed.json()["totalCount"] == 1

    async def test_the_database_refuses_a_second_one_itself(
        self, client: Client, patients: Patients, database_url: str
    ) -> None:
        """Written past the service (another program, an instance with an older check), a second completed dose with
        the tag that year is refused by the database's own unique index; one in error, or another year, is not."""
        first = await record(client, patients.dose(rabiesTag="R-1"))
        columns = (
            "id, created_at, created_by, modified_at, modified_by, owner_id, pet_id, vaccine_id, applied_at, due_at, "
            "revision, rabies_tag, status"
        )
        pet_id, vaccine_id = (
            (patients.rex["id"], patients.rabies["id"])
            if database_url.startswith("postgresql")
            else (patients.rex["id"].replace("-", ""), patients.rabies["id"].replace("-", ""))
        )

        def copy(record_id: str, applied_at: int, status: str) -> str:
            record_id = record_id if database_url.startswith("postgresql") else record_id.replace("-", "")
            return (
                f"INSERT INTO pet_vaccinations ({columns}) VALUES ('{record_id}', 0, 'x@example.com', 0, "  # noqa: S608
                f"'x@example.com', '{ALICE}', '{pet_id}', '{vaccine_id}', {applied_at}, {applied_at + 1}, 1, 'R-1', "
                f"'{status}')"
            )

        march_2026, december_2025 = 1_772_445_600_000, 1_767_225_599_999
        with pytest.raises(Exception, match=r"(?i)unique"):
            await run_sql(database_url, copy("01900000-0000-7000-8000-000000000001", march_2026 + 1, "completed"))
        await run_sql(database_url, copy("01900000-0000-7000-8000-000000000002", march_2026, "entered-in-error"))
        await run_sql(database_url, copy("01900000-0000-7000-8000-000000000003", december_2025, "completed"))
        count = "SELECT count(*) FROM pet_vaccinations WHERE rabies_tag = 'R-1'"
        assert await scalar_sql(database_url, count) == 3
        assert first["appliedAt"] == "2026-03-02T10:00:00.000Z"


class TestLists:
    @pytest.fixture
    async def doses(self, client: Client, patients: Patients) -> dict[str, dict[str, Any]]:
        made = {
            "a": await record(client, patients.dose(doseType="primary", lotNumber="L-1", rabiesTag="T-1")),
            "b": await record(client, patients.dose(doseType="booster", lotNumber="l-1")),
            "c": await record(client, patients.dose(lotNumber="L-2", rabiesTag="T-2")),
            "d": await record(client, patients.dose(patients.max, doseType="booster")),
        }
        made["c"] = (await write(client, "PATCH", made["c"], IN_ERROR)).json()
        return made

    async def keys(self, client: Client, doses: dict[str, dict[str, Any]], query: str) -> list[str]:
        response = await client.get(f"{PATH}?{query}", headers=auth())
        assert response.status_code == 200, response.text
        by_id = {dose["id"]: key for key, dose in doses.items()}
        return [by_id[item["id"]] for item in response.json()["items"]]

    @pytest.mark.parametrize(
        ("query", "expected"),
        [
            ("status=completed", ["a", "b", "d"]),
            ("status=entered-in-error", ["c"]),
            ("status=completed,ENTERED-IN-ERROR", ["a", "b", "c", "d"]),
            ("doseType=booster", ["b", "d"]),
            ("doseType=Primary&doseType=booster&petId={rex}", ["a", "b"]),
            ("doseType_ne=booster", ["a", "c"]),
            ("rabiesTag=t-1", ["a"]),
            ("rabiesTag=%20T-2%20", ["c"]),
            ("lotNumber=L-1", ["a"]),
            ("lotNumber=l-1", ["b"]),
            ("sort=status,-doseType", ["a", "b", "d", "c"]),
            ("sort=-status,doseType", ["c", "b", "d", "a"]),
        ],
    )
    async def test_filters_and_sorts(
        self, client: Client, patients: Patients, doses: dict[str, dict[str, Any]], query: str, expected: list[str]
    ) -> None:
        assert await self.keys(client, doses, query.format(rex=patients.rex["id"])) == expected

    @pytest.mark.parametrize(
        "query", ["status=void", "doseType=second", "rabiesTag=R%201", "lotNumber=A_1", "rabiesTag=", "lotNumber="]
    )
    async def test_a_bad_filter_is_400_naming_it(self, client: Client, query: str) -> None:
        response = await client.get(f"{PATH}?{query}", headers=auth(ADMIN, admin=True))

        assert list(assert_error(response, 400, 994)["errors"]) == [query.split("=")[0]]

    async def test_another_owners_tag_is_not_listed(self, client: Client, patients: Patients) -> None:
        await record(client, patients.dose(patients.bo, rabiesTag="T-7"), BOB)

        mine = await client.get(PATH, params={"rabiesTag": "T-7"}, headers=auth())
        everyone = await client.get(PATH, params={"rabiesTag": "T-7"}, headers=admin())

        assert (mine.json()["totalCount"], everyone.json()["totalCount"]) == (0, 1)
