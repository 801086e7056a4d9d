"""PATCH, a JSON Merge Patch of a record's client-set fields (contract v3 section 3), and the v3 rule for PUT: an
omitted optional field keeps its stored value. On both databases, every resource."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.values import format_timestamp
from tests.api.test_pet_vaccinations import APPLIED, APPLIED_MS, DAY_MS, PATH, Clinic, clinic, vaccinate, vaccination
from tests.support import ADMIN, ALICE, BOB, MISSING_ID, admin, assert_error, auth, create, create_vaccine

Client = AsyncTestClient[Any]
MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}
__all__ = ["clinic"]  # the fixture, used by name


async def patch(client: Client, path: str, body: Any, user: str = ALICE, **headers: str) -> httpx.Response:
    return await client.patch(path, json=body, headers={**auth(user, admin=user == ADMIN), **MERGE_PATCH, **headers})


async def history(client: Client, path: str, user: str = ALICE) -> list[dict[str, Any]]:
    response = await client.get(f"{path}/history", headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


class TestUpdatePet:
    async def test_changes_only_what_it_names_and_is_a_write(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="Dog")

        response = await patch(client, created.headers["location"], {"name": "  Max "})

        assert response.status_code == 200, response.text
        updated = response.json()
        assert {**created.json(), "name": "Max", "modifiedAt": updated["modifiedAt"]} == updated
        assert updated["modifiedAt"] >= created.json()["modifiedAt"]
        assert response.headers["etag"] != created.headers["etag"]
        assert (await client.get(created.headers["location"], headers=auth())).json() == updated
        changes = await history(client, created.headers["location"])
        assert [(change["action"], change["version"]) for change in changes] == [("created", 1), ("replaced", 2)]
        assert changes[-1]["record"] == updated

    @pytest.mark.parametrize("content_type", ["application/merge-patch+json", "application/json; charset=utf-8"])
    async def test_takes_merge_patch_or_plain_json(self, client: Client, content_type: str) -> None:
        created = await create(client)

        response = await client.patch(
            created.headers["location"], content=b'{"petType": "cat"}', headers={**auth(), "Content-Type": content_type}
        )

        assert response.status_code == 200, response.text
        assert response.json()["petType"] == "Cat"

    async def test_another_media_type_is_415(self, client: Client) -> None:
        created = await create(client)

        response = await client.patch(
            created.headers["location"],
            content=b'{"name": "Max"}',
            headers={**auth(), "Content-Type": "application/json-patch+json"},
        )

        assert_error(response, 415, 988)

    async def test_an_empty_patch_is_a_write_with_no_change_of_value(self, client: Client) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], {})

        assert response.status_code == 200, response.text
        assert response.headers["etag"] != created.headers["etag"]
        same = {name: value for name, value in response.json().items() if name != "modifiedAt"}
        assert same == {name: value for name, value in created.json().items() if name != "modifiedAt"}
        assert len(await history(client, created.headers["location"])) == 2

    async def test_null_for_a_required_field_is_400_and_writes_nothing(self, client: Client) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], {"name": None, "petType": None})

        assert set(assert_error(response, 400, 994)["errors"]) == {"name", "petType"}
        assert (await client.get(created.headers["location"], headers=auth())).json() == created.json()

    async def test_a_null_owner_is_not_given(self, client: Client) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], {"ownerId": None, "name": "Max"})

        assert response.status_code == 200, response.text
        assert response.json()["ownerId"] == ALICE

    async def test_a_non_admin_may_not_name_another_owner(self, client: Client) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], {"ownerId": BOB})

        assert_error(response, 403, 997)

    async def test_an_admin_transfers_the_pet_and_its_vaccinations_follow(self, client: Client, clinic: Clinic) -> None:
        given = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        response = await patch(client, f"/v1/pets/{clinic.alice_dog['id']}", {"ownerId": BOB}, ADMIN)

        assert response.status_code == 200, response.text
        assert response.json()["ownerId"] == BOB
        followed = await client.get(given.headers["location"], headers=auth(BOB))
        assert followed.json()["ownerId"] == BOB

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"name": ""}, "name"),
            ({"petType": "Unicorn"}, "petType"),
            ({"colour": "brown"}, "colour"),
            ({"id": MISSING_ID}, "id"),
            ({"name": 7}, "name"),
        ],
    )
    async def test_a_bad_member_is_400_naming_it(self, client: Client, body: dict[str, Any], field: str) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], body)

        assert list(assert_error(response, 400, 994)["errors"]) == [field]

    @pytest.mark.parametrize("body", [[], "name", 3, None])
    async def test_a_patch_that_is_no_object_is_400(self, client: Client, body: Any) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], body)

        assert_error(response, 400, 994)

    async def test_read_only_fields_are_ignored(self, client: Client) -> None:
        created = await create(client)
        sent = {
            **created.json(),
            "name": "Max",
            "createdBy": "mallory@example.com",
            "modifiedAt": "2000-01-01T00:00:00Z",
        }

        response = await patch(client, created.headers["location"], sent)

        assert response.status_code == 200, response.text
        assert response.json()["createdBy"] == ALICE
        assert response.json()["name"] == "Max"

    async def test_never_creates(self, client: Client) -> None:
        response = await patch(client, f"/v1/pets/{MISSING_ID}", {"name": "Max"})

        assert_error(response, 404, 995)
        assert (await client.get(f"/v1/pets/{MISSING_ID}", headers=auth())).status_code == 404

    async def test_someone_elses_pet_is_404_and_unchanged(self, client: Client) -> None:
        created = await create(client)

        response = await patch(client, created.headers["location"], {"name": "Max"}, BOB)

        assert_error(response, 404, 995)
        assert (await client.get(created.headers["location"], headers=auth())).json() == created.json()

    async def test_a_malformed_id_is_404(self, client: Client) -> None:
        assert_error(await patch(client, "/v1/pets/not-an-id", {"name": "Max"}), 404, 995)

    async def test_a_bad_member_is_400_before_a_missing_record_is_404(self, client: Client) -> None:
        response = await patch(client, f"/v1/pets/{MISSING_ID}", {"petType": "Unicorn"})

        assert_error(response, 400, 994)

    async def test_if_match_is_honoured(self, client: Client) -> None:
        created = await create(client)
        first = await patch(
            client, created.headers["location"], {"name": "Max"}, **{"If-Match": created.headers["etag"]}
        )

        stale = await patch(
            client, created.headers["location"], {"name": "Bo"}, **{"If-Match": created.headers["etag"]}
        )

        assert first.status_code == 200, first.text
        assert_error(stale, 412, 992)
        assert (await client.get(created.headers["location"], headers=auth())).json()["name"] == "Max"


class TestUpdateVaccine:
    async def test_a_null_description_clears_it_and_an_absent_one_is_kept(self, client: Client) -> None:
        created = await create_vaccine(client, description="Core vaccine.")
        location = f"/v1/vaccines/{created.json()['id']}"

        kept = await patch(client, location, {"duration": 730}, ADMIN)
        cleared = await patch(client, location, {"description": None}, ADMIN)

        assert (kept.json()["description"], kept.json()["duration"]) == ("Core vaccine.", 730)
        assert cleared.json()["description"] is None

    async def test_a_whole_number_written_with_a_fraction_is_that_number(self, client: Client) -> None:
        created = await create_vaccine(client)

        response = await client.patch(
            f"/v1/vaccines/{created.json()['id']}",
            content=b'{"duration": 30.0}',
            headers={**admin(), **MERGE_PATCH},
        )

        assert response.status_code == 200, response.text
        assert response.json()["duration"] == 30

    async def test_a_non_admin_is_403_after_the_404(self, client: Client) -> None:
        created = await create_vaccine(client)

        existing = await patch(client, f"/v1/vaccines/{created.json()['id']}", {"duration": 1})
        missing = await patch(client, f"/v1/vaccines/{MISSING_ID}", {"duration": 1})

        assert_error(existing, 403, 997)
        assert_error(missing, 404, 995)


class TestUpdateVaccination:
    async def test_the_stored_due_date_is_kept_unless_named(self, client: Client, clinic: Clinic) -> None:
        due = "2030-01-01T00:00:00.000Z"
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, dueAt=due))

        notes = await patch(client, created.headers["location"], {"notes": "Left leg."})
        recomputed = await patch(client, created.headers["location"], {"dueAt": None})

        assert (notes.json()["notes"], notes.json()["dueAt"]) == ("Left leg.", due)
        assert recomputed.json()["dueAt"] == format_timestamp(APPLIED_MS + 365 * DAY_MS)
        assert recomputed.json()["notes"] == "Left leg."

    async def test_the_result_obeys_the_rules_of_a_replace(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, dueAt="2027-01-01T00:00:00Z"))

        after_due = await patch(client, created.headers["location"], {"appliedAt": "2027-06-01T00:00:00Z"})
        wrong_type = await patch(client, created.headers["location"], {"petId": clinic.alice_cat["id"]})
        other_owner = await patch(client, created.headers["location"], {"petId": clinic.bob_dog["id"]})

        assert list(assert_error(after_due, 400, 994)["errors"]) == ["appliedAt"]
        assert list(assert_error(wrong_type, 400, 994)["errors"]) == ["vaccineId"]
        assert list(assert_error(other_owner, 400, 994)["errors"]) == ["petId"]

    async def test_moving_to_another_pet_with_its_vaccine(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies))

        response = await patch(
            client, created.headers["location"], {"petId": clinic.alice_cat["id"], "vaccineId": clinic.feline["id"]}
        )

        assert response.status_code == 200, response.text
        moved = response.json()
        assert (moved["petId"], moved["vaccine"]) == (clinic.alice_cat["id"], clinic.feline)
        assert moved["dueAt"] == created.json()["dueAt"]

    async def test_a_reference_the_caller_may_not_see_is_400_before_a_missing_record_is_404(
        self, client: Client, clinic: Clinic
    ) -> None:
        response = await patch(client, f"{PATH}/{MISSING_ID}", {"petId": clinic.bob_dog["id"]})

        assert list(assert_error(response, 400, 994)["errors"]) == ["petId"]

    async def test_the_pet_and_vaccine_sent_back_are_ignored(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, applied=APPLIED))

        response = await patch(client, created.headers["location"], {"pet": None, "vaccine": {"x": 1}, "notes": "n"})

        assert response.status_code == 200, response.text
        assert response.json()["notes"] == "n"


class TestReplaceKeepsWhatItOmits:
    """Contract v3 section 3: an omitted optional field keeps its stored value, and null clears it."""

    async def test_omitted_notes_are_kept_and_null_notes_cleared(self, client: Client, clinic: Clinic) -> None:
        created = await vaccinate(client, **vaccination(clinic.alice_dog, clinic.rabies, notes="Left leg."))

        kept = await client.put(
            created.headers["location"], json=vaccination(clinic.alice_dog, clinic.rabies), headers=auth()
        )
        cleared = await client.put(
            created.headers["location"], json=vaccination(clinic.alice_dog, clinic.rabies, notes=None), headers=auth()
        )

        assert kept.json()["notes"] == "Left leg."
        assert cleared.json()["notes"] is None
