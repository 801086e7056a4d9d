"""A record's history, GET /v1/{resource}/{id}/history (contract section 11), on both databases."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.api.test_shares import WorkDone
from tests.support import ADMIN, ALICE, BOB, MISSING_ID, admin, assert_error, auth, create, create_vaccine

Client = AsyncTestClient[Any]
CAROL = "carol@example.com"
WRITTEN_REPLACED_DELETED = [("created", 1), ("replaced", 2), ("deleted", 3)]
CHANGE_FIELDS = {"cursor", "resource", "id", "action", "version", "at", "by", "record"}


async def history(client: Client, path: str, user: str = ALICE, **params: str) -> dict[str, Any]:
    response = await client.get(f"{path}/history", params=params, headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


class TestHistory:
    async def test_every_write_is_kept_with_the_record_as_it_was_after(self, client: Client) -> None:
        created = await create(client, name="Rex")
        location = created.headers["location"]
        replaced = await client.put(location, json={"name": "Max", "petType": "Cat"}, headers=auth())
        deleted = await client.delete(location, headers=auth())

        body = await history(client, location)

        items = body["items"]
        assert [set(item) for item in items] == [CHANGE_FIELDS] * 3
        assert [(item["action"], item["version"]) for item in items] == [
            ("created", 1),
            ("replaced", 2),
            ("deleted", 3),
        ]
        assert [item["record"] for item in items] == [created.json(), replaced.json(), replaced.json()]
        assert {item["resource"] for item in items} == {"pets"}
        assert {item["id"] for item in items} == {created.json()["id"]}
        assert [item["by"] for item in items] == [ALICE, ALICE, ALICE]
        assert items[0]["at"] == created.json()["createdAt"]
        assert items[1]["at"] == replaced.json()["modifiedAt"]
        assert len({item["cursor"] for item in items}) == 3
        assert (body["totalCount"], body["pageIndex"], body["totalPages"]) == (3, 1, 1)
        assert deleted.status_code == 200

    async def test_pages(self, client: Client) -> None:
        location = (await create(client)).headers["location"]
        for name in ("B", "C", "D", "E"):
            await client.put(location, json={"name": name, "petType": "Dog"}, headers=auth())

        page = await history(client, location, pageIndex="2", pageSize="2")

        assert [item["version"] for item in page["items"]] == [3, 4]
        assert (page["totalCount"], page["totalPages"], page["hasPreviousPage"], page["hasNextPage"]) == (
            5,
            3,
            True,
            True,
        )

    async def test_someone_elses_record_answers_like_a_missing_one(self, client: Client) -> None:
        location = (await create(client, ALICE)).headers["location"]

        theirs = await client.get(f"{location}/history", headers=auth(BOB))
        missing = await client.get(f"/v1/pets/{MISSING_ID}/history", headers=auth(BOB))
        malformed = await client.get("/v1/pets/nope/history", headers=auth(BOB))

        assert assert_error(theirs, 404, 995) == assert_error(missing, 404, 995) == assert_error(malformed, 404, 995)

    async def test_a_deleted_record_is_readable_by_whoever_could_read_it_just_before(self, client: Client) -> None:
        location = (await create(client, ALICE)).headers["location"]
        await client.delete(location, headers=auth(ALICE))

        assert [item["action"] for item in (await history(client, location, ALICE))["items"]][-1] == "deleted"
        assert (await history(client, location, ADMIN))["totalCount"] == 2
        assert_error(await client.get(f"{location}/history", headers=auth(BOB)), 404, 995)

    async def test_a_transferred_pet_belongs_to_its_new_owner_only(self, client: Client) -> None:
        location = (await create(client, ALICE)).headers["location"]
        await client.put(location, json={"name": "Rex", "petType": "Dog", "ownerId": BOB}, headers=admin())

        assert_error(await client.get(f"{location}/history", headers=auth(ALICE)), 404, 995)
        items = (await history(client, location, BOB))["items"]
        assert [(item["record"]["ownerId"], item["by"]) for item in items] == [(ALICE, ALICE), (BOB, ADMIN)]

    async def test_the_shared_catalogue_is_everyones(self, client: Client) -> None:
        vaccine = await create_vaccine(client)

        items = (await history(client, vaccine.headers["location"], BOB))["items"]

        assert [(item["action"], item["by"], item["record"]) for item in items] == [("created", ADMIN, vaccine.json())]

    async def test_writes_that_fail_or_replay_keep_nothing(self, client: Client) -> None:
        headers = {**auth(), "Idempotency-Key": "once"}
        first = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=headers)
        await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=headers)  # replayed
        location = first.headers["location"]
        await client.put(location, json={"name": "Max", "petType": "Dog"}, headers={**auth(), "If-Match": '"old"'})
        await client.put(location, json={"name": ""}, headers=auth())

        assert [item["action"] for item in (await history(client, location))["items"]] == ["created"]

    @pytest.mark.parametrize("query", ["pageSize=0", "sort=version", "pageIndex=x", "pageIndex=1&pageIndex=2"])
    async def test_a_bad_or_unknown_parameter_is_400(self, client: Client, query: str) -> None:
        location = (await create(client)).headers["location"]

        assert_error(await client.get(f"{location}/history?{query}", headers=auth()), 400, 994)


class TestWhoMayReadAHistory:
    async def test_an_earlier_owner_may_not_once_the_pet_was_deleted_by_the_next(self, client: Client) -> None:
        location = (await create(client, ALICE)).headers["location"]
        await client.put(location, json={"name": "Rex", "petType": "Dog", "ownerId": BOB}, headers=admin())
        await client.delete(location, headers=auth(BOB))

        missing = await client.get(f"/v1/pets/{MISSING_ID}/history", headers=auth(ALICE))
        assert assert_error(await client.get(f"{location}/history", headers=auth(ALICE)), 404, 995) == assert_error(
            missing, 404, 995
        )
        assert [item["action"] for item in (await history(client, location, BOB))["items"]] == [
            "created",
            "replaced",
            "deleted",
        ]
        assert (await history(client, location, ADMIN))["totalCount"] == 3

    async def test_someone_elses_history_costs_what_a_missing_ones_costs(
        self, client: Client, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Alive, deleted or never existed: the same statements and locks, so that the time of the 404 tells
        nothing either (the history of a live record of someone else's skipped a lookup a missing one made)."""
        live = (await create(client, ALICE)).json()["id"]
        gone = (await create(client, ALICE)).json()["id"]
        await client.delete(f"/v1/pets/{gone}", headers=auth(ALICE))
        work = WorkDone(monkeypatch)

        answers = [await work.of(client.get(f"/v1/pets/{one}/history", headers=auth(BOB))) for one in (live, gone)]
        missing, missing_work = await work.of(client.get(f"/v1/pets/{MISSING_ID}/history", headers=auth(BOB)))

        for response, done in answers:
            assert (response.status_code, response.content) == (missing.status_code, missing.content)
            assert done == missing_work

    async def test_someone_elses_vaccination_answers_like_a_missing_one(self, client: Client) -> None:
        pet = (await create(client, ALICE)).json()
        vaccine = (await create_vaccine(client)).json()
        body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": "2026-11-20T10:00:00Z"}
        location = (await client.post("/v1/pet-vaccination", json=body, headers=auth(ALICE))).headers["location"]

        theirs = await client.get(f"{location}/history", headers=auth(BOB))
        missing = await client.get(f"/v1/pet-vaccination/{MISSING_ID}/history", headers=auth(BOB))
        malformed = await client.get("/v1/pet-vaccination/nope/history", headers=auth(BOB))

        assert assert_error(theirs, 404, 995) == assert_error(missing, 404, 995) == assert_error(malformed, 404, 995)
        assert (await history(client, location, ALICE))["totalCount"] == 1

    async def test_a_deleted_vaccine_stays_everyones(self, client: Client) -> None:
        vaccine = await create_vaccine(client)
        location = vaccine.headers["location"]
        await client.put(location, json={"name": "Rabies", "petType": "Dog", "duration": 30}, headers=admin())
        await client.delete(location, headers=admin())

        for user in (ALICE, BOB, ADMIN):
            items = (await history(client, location, user))["items"]
            assert [(item["action"], item["record"]["duration"]) for item in items] == [
                ("created", 365),
                ("replaced", 30),
                ("deleted", 30),
            ]
        assert_error(await client.get(f"/v1/vaccines/{MISSING_ID}/history", headers=auth(BOB)), 404, 995)


class TestVaccinationHistory:
    async def test_it_follows_its_pet_and_ends_with_it(self, client: Client) -> None:
        pet = (await create(client, ALICE)).json()
        vaccine = (await create_vaccine(client)).json()
        body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": "2026-11-20T10:00:00Z"}
        vaccination = await client.post("/v1/pet-vaccination", json=body, headers=auth(ALICE))
        location = vaccination.headers["location"]
        await client.put(
            f"/v1/pets/{pet['id']}", json={"name": "Rex", "petType": "Dog", "ownerId": BOB}, headers=admin()
        )
        await client.delete(f"/v1/pets/{pet['id']}", headers=auth(BOB))

        items = (await history(client, location, BOB))["items"]

        assert [(item["action"], item["version"]) for item in items] == [
            ("created", 1),
            ("replaced", 2),
            ("deleted", 3),
        ]
        assert [item["record"]["ownerId"] for item in items] == [ALICE, BOB, BOB]
        assert [item["by"] for item in items] == [ALICE, ADMIN, BOB]
        moved = items[1]["record"]
        assert (moved["modifiedAt"], moved["modifiedBy"]) == (vaccination.json()["modifiedAt"], ALICE)
        assert items[0]["record"]["vaccine"] == vaccine
        assert_error(await client.get(f"{location}/history", headers=auth(ALICE)), 404, 995)

    async def test_it_shows_a_grantee_only_its_versions_on_pets_they_may_see(self, client: Client) -> None:
        """Contract section 12: a grantee reads the history of a shared pet's vaccination from before the share
        too, except the versions from while it belonged to a pet the grantee may not see; its owner likewise reads
        none from while it was someone else's on a pet they may not see. Paged by what is shown."""
        rex = (await create(client, ALICE, name="Rex")).json()
        bo = (await create(client, BOB, name="Bo")).json()
        vaccine = (await create_vaccine(client)).json()
        body = {"petId": bo["id"], "vaccineId": vaccine["id"], "appliedAt": "2026-11-20T10:00:00Z"}
        location = (await client.post("/v1/pet-vaccination", json=body, headers=auth(BOB))).headers["location"]
        await client.patch(location, json={"notes": "Bo's secret"}, headers=auth(BOB))
        for grantee, access in ((BOB, "care"), (CAROL, "read")):
            shared = {"petId": rex["id"], "grantee": grantee, "access": access}
            assert (await client.post("/v1/pet-shares", json=shared, headers=auth())).status_code == 201
        moved = await client.patch(location, json={"petId": rex["id"], "notes": None}, headers=auth(BOB))
        assert moved.status_code == 200, moved.text
        await client.patch(location, json={"notes": "Rex's"}, headers=auth(ALICE))

        on_rex = [3, 4]
        for user in (CAROL, ALICE):
            page = await history(client, location, user)
            assert [item["version"] for item in page["items"]] == on_rex, user
            assert page["totalCount"] == len(on_rex)
            assert bo["id"] not in str(page)
            assert "secret" not in str(page)
        assert [item["version"] for item in (await history(client, location, BOB))["items"]] == [1, 2, 3, 4]
        assert (await history(client, location, ADMIN))["totalCount"] == 4
        second = await history(client, location, CAROL, pageIndex="2", pageSize="1")
        assert [item["version"] for item in second["items"]] == [4]
        assert (second["totalCount"], second["totalPages"], second["hasNextPage"]) == (2, 2, False)

        await client.delete(location, headers=auth(ALICE))

        assert [item["version"] for item in (await history(client, location, CAROL))["items"]] == [3, 4, 5]
        assert (await history(client, location, BOB))["totalCount"] == 5
