"""Records a group owns (contract v4 section 5): `ownerId` may be `group:NAME`, and every member of the group (a
token that lists it) has the owner's rights over the group's pets and what follows them: reading, writing, sharing,
giving away, deleting; their vaccinations, shares, certificates, history and changes. A clinic's front desk
registers a client's pet as the clinic's; whoever is not a member sees nothing of it. On both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.auth import MAX_GROUPS
from tests.support import ADMIN, ALICE, BOB, assert_error, auth, create_vaccine, token

Client = AsyncTestClient[Any]
CLINIC = "group:clinic-42"
VET = "vet@clinic.example"
NURSE = "nurse@clinic.example"
OTHER_VET = "vet@elsewhere.example"


def member(user: str, *groups: str) -> dict[str, str]:
    """The headers of a token that lists these groups (none: a token without any)."""
    return {"Authorization": f"Bearer {token(user, groups=list(groups))}"}


VETS = member(VET, "clinic-42")
NURSES = member(NURSE, "clinic-42", "night-shift")
ELSEWHERE = member(OTHER_VET, "clinic-7")


async def register(client: Client, headers: dict[str, str], owner: str | None = CLINIC, **extra: Any) -> dict[str, Any]:
    body = {"name": "Bella", "petType": "Cat", **extra}
    if owner is not None:
        body["ownerId"] = owner
    response = await client.post("/v1/pets", json=body, headers=headers)
    assert response.status_code == 201, response.text
    pet: dict[str, Any] = response.json()
    return pet


@pytest.fixture
async def bella(client: Client) -> dict[str, Any]:
    """A client's cat, registered by the clinic's front desk as the clinic's own patient."""
    return await register(client, VETS)


@pytest.fixture
async def rabies(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (await create_vaccine(client, name="Rabies", pet_type="Cat", duration=365)).json()
    return vaccine


async def vaccinate(
    client: Client, pet: dict[str, Any], vaccine: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": "2025-01-01T00:00:00Z"}
    return await client.post("/v1/pet-vaccination", json=body, headers=headers)


class TestRegister:
    async def test_a_vet_registers_a_pet_as_the_clinics(self, client: Client) -> None:
        pet = await register(client, VETS)

        assert pet["ownerId"] == CLINIC
        assert pet["createdBy"] == pet["modifiedBy"] == VET

    async def test_keycloaks_full_path_names_the_same_group(self, client: Client) -> None:
        pet = await register(client, member(VET, "/clinic-42"), owner="group:/clinic-42")

        assert pet["ownerId"] == CLINIC
        assert (await client.get(f"/v1/pets/{pet['id']}", headers=NURSES)).status_code == 200

    async def test_a_group_one_is_not_a_member_of_is_403(self, client: Client) -> None:
        body = {"name": "Bella", "petType": "Cat", "ownerId": "group:clinic-7"}

        response = await client.post("/v1/pets", json=body, headers=VETS)

        assert_error(response, 403, 997)
        assert (await client.get("/v1/pets", headers=ELSEWHERE)).json()["totalCount"] == 0

    async def test_another_user_is_still_403(self, client: Client) -> None:
        body = {"name": "Bella", "petType": "Cat", "ownerId": ALICE}

        assert_error(await client.post("/v1/pets", json=body, headers=VETS), 403, 997)

    async def test_group_names_are_compared_exactly(self, client: Client) -> None:
        body = {"name": "Bella", "petType": "Cat", "ownerId": "group:Clinic-42"}

        assert_error(await client.post("/v1/pets", json=body, headers=VETS), 403, 997)

    @pytest.mark.parametrize("owner", ["group:", "group:has space", "group:" + "x" * 101, "group://x", "clinic-42"])
    async def test_a_malformed_owner_is_400(self, client: Client, owner: str) -> None:
        body = {"name": "Bella", "petType": "Cat", "ownerId": owner}

        error = assert_error(await client.post("/v1/pets", json=body, headers=VETS), 400, 994)

        assert "ownerId" in error["errors"]

    async def test_an_admin_may_name_any_group(self, client: Client) -> None:
        pet = await register(client, auth(ADMIN, admin=True), owner="group:clinic-7")

        assert (await client.get(f"/v1/pets/{pet['id']}", headers=ELSEWHERE)).status_code == 200
        assert_error(await client.get(f"/v1/pets/{pet['id']}", headers=VETS), 404, 995)

    async def test_an_idempotent_repeat_answers_the_same(self, client: Client) -> None:
        headers = {**VETS, "Idempotency-Key": "front-desk-1"}
        body = {"name": "Bella", "petType": "Cat", "ownerId": CLINIC}

        first = await client.post("/v1/pets", json=body, headers=headers)
        again = await client.post("/v1/pets", json=body, headers=headers)

        assert first.status_code == again.status_code == 201
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json() == first.json()
        assert (await client.get("/v1/pets", headers=NURSES)).json()["totalCount"] == 1


class TestAMembersRights:
    async def test_another_member_reads_it(self, client: Client, bella: dict[str, Any]) -> None:
        response = await client.get(f"/v1/pets/{bella['id']}", headers=NURSES)

        assert response.status_code == 200
        assert response.json() == bella
        again = await client.get(
            f"/v1/pets/{bella['id']}", headers={**NURSES, "If-None-Match": response.headers["ETag"]}
        )
        assert again.status_code == 304

    async def test_another_member_replaces_and_patches_it(self, client: Client, bella: dict[str, Any]) -> None:
        replaced = await client.put(
            f"/v1/pets/{bella['id']}", json={"name": "Bella", "petType": "Cat", "breed": "Siamese"}, headers=NURSES
        )
        patched = await client.patch(f"/v1/pets/{bella['id']}", json={"neutered": True}, headers=VETS)

        assert replaced.status_code == patched.status_code == 200, replaced.text
        assert patched.json()["ownerId"] == CLINIC
        assert patched.json()["breed"] == "Siamese"
        assert replaced.json()["modifiedBy"] == NURSE

    async def test_a_member_records_a_dose_whose_owner_is_the_group(
        self, client: Client, bella: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        response = await vaccinate(client, bella, rabies, NURSES)

        assert response.status_code == 201, response.text
        dose = response.json()
        assert dose["ownerId"] == CLINIC
        assert (await client.get(f"/v1/pet-vaccination/{dose['id']}", headers=VETS)).status_code == 200
        assert (await client.delete(f"/v1/pet-vaccination/{dose['id']}", headers=VETS)).status_code == 200

    async def test_a_member_shares_it_and_another_deletes_the_share(
        self, client: Client, bella: dict[str, Any]
    ) -> None:
        response = await client.post(
            "/v1/pet-shares", json={"petId": bella["id"], "grantee": ALICE, "access": "read"}, headers=VETS
        )
        assert response.status_code == 201, response.text
        shared = response.json()
        assert shared["ownerId"] == CLINIC

        assert (await client.get(f"/v1/pets/{bella['id']}", headers=auth(ALICE))).status_code == 200
        shares = await client.get("/v1/pet-shares", headers=NURSES)
        assert [one["id"] for one in shares.json()["items"]] == [shared["id"]]
        assert (await client.delete(f"/v1/pet-shares/{shared['id']}", headers=NURSES)).status_code == 200
        assert_error(await client.get(f"/v1/pets/{bella['id']}", headers=auth(ALICE)), 404, 995)

    @pytest.mark.parametrize("issuer", [pytest.param(VET, id="by a member"), pytest.param(ALICE, id="by a grantee")])
    async def test_another_member_reads_lists_and_revokes_a_certificate(
        self, client: Client, bella: dict[str, Any], issuer: str
    ) -> None:
        share = {"petId": bella["id"], "grantee": ALICE, "access": "read"}
        assert (await client.post("/v1/pet-shares", json=share, headers=VETS)).status_code == 201
        issuing = VETS if issuer == VET else auth(ALICE)
        response = await client.post("/v1/pet-certificates", json={"petId": bella["id"]}, headers=issuing)
        assert response.status_code == 201, response.text
        certificate = response.json()
        path = f"/v1/pet-certificates/{certificate['id']}"
        assert certificate["ownerId"] == CLINIC

        read = await client.get(path, headers=NURSES)
        assert read.status_code == 200, read.text
        assert "link" not in read.json()
        for listed in ("/v1/pet-certificates", f"/v1/pet-certificates?ownerId={CLINIC}"):
            items = (await client.get(listed, headers=NURSES)).json()["items"]
            assert [item["id"] for item in items] == [certificate["id"]], listed
        assert_error(await client.get(path, headers=ELSEWHERE), 404, 995)
        assert (await client.get("/v1/pet-certificates", headers=ELSEWHERE)).json()["totalCount"] == 0
        assert (await client.delete(path, headers=NURSES)).status_code == 200
        assert_error(await client.get(certificate["link"]), 410, 981)

    async def test_the_group_is_not_its_own_grantee(self, client: Client, bella: dict[str, Any]) -> None:
        response = await client.post(
            "/v1/pet-shares", json={"petId": bella["id"], "grantee": CLINIC, "access": "care"}, headers=VETS
        )

        assert "grantee" in assert_error(response, 400, 994)["errors"]

    async def test_a_member_deletes_it(self, client: Client, bella: dict[str, Any]) -> None:
        assert (await client.delete(f"/v1/pets/{bella['id']}", headers=NURSES)).status_code == 200

        assert_error(await client.get(f"/v1/pets/{bella['id']}", headers=VETS), 404, 995)
        history = await client.get(f"/v1/pets/{bella['id']}/history", headers=VETS)
        assert [change["action"] for change in history.json()["items"]] == ["created", "deleted"]

    async def test_the_history_is_the_members(self, client: Client, bella: dict[str, Any]) -> None:
        await client.patch(f"/v1/pets/{bella['id']}", json={"neutered": True}, headers=NURSES)

        history = await client.get(f"/v1/pets/{bella['id']}/history", headers=member(BOB, "clinic-42"))

        assert history.status_code == 200
        assert [change["by"] for change in history.json()["items"]] == [VET, NURSE]


class TestOthers:
    @pytest.mark.parametrize(
        "headers",
        [pytest.param(ELSEWHERE, id="another clinic"), pytest.param(member(VET), id="a member without the group")],
    )
    async def test_a_non_member_finds_nothing(
        self, client: Client, bella: dict[str, Any], rabies: dict[str, Any], headers: dict[str, str]
    ) -> None:
        dose = (await vaccinate(client, bella, rabies, VETS)).json()
        path = f"/v1/pets/{bella['id']}"

        assert_error(await client.get(path, headers=headers), 404, 995)
        assert_error(await client.put(path, json={"name": "X", "petType": "Cat"}, headers=headers), 404, 995)
        assert_error(await client.delete(path, headers=headers), 404, 995)
        assert_error(await client.get(f"{path}/history", headers=headers), 404, 995)
        assert_error(await client.get(f"/v1/pet-vaccination/{dose['id']}", headers=headers), 404, 995)
        assert_error(await vaccinate(client, bella, rabies, headers), 400, 994)
        for listed in ("/v1/pets", "/v1/pet-vaccination", f"/v1/pets?ownerId={CLINIC}"):
            assert (await client.get(listed, headers=headers)).json()["totalCount"] == 0
        changes = await client.get("/v1/changes", headers=headers)
        assert [change["resource"] for change in changes.json()["items"]] == ["vaccines"]

    async def test_a_member_may_not_give_it_to_another_user(self, client: Client, bella: dict[str, Any]) -> None:
        response = await client.put(
            f"/v1/pets/{bella['id']}", json={"name": "Bella", "petType": "Cat", "ownerId": ALICE}, headers=NURSES
        )

        assert_error(response, 403, 997)


class TestGivingAway:
    async def test_a_user_gives_a_pet_to_their_clinic_and_takes_it_back(self, client: Client) -> None:
        alice = member(ALICE, "clinic-42")
        pet = await register(client, alice, owner=None)
        assert pet["ownerId"] == ALICE
        shared = await client.post(
            "/v1/pet-shares", json={"petId": pet["id"], "grantee": BOB, "access": "read"}, headers=alice
        )
        assert shared.status_code == 201

        given = await client.put(
            f"/v1/pets/{pet['id']}", json={"name": "Bella", "petType": "Cat", "ownerId": CLINIC}, headers=alice
        )

        assert given.status_code == 200, given.text
        assert given.json()["ownerId"] == CLINIC
        assert (await client.get(f"/v1/pets/{pet['id']}", headers=VETS)).status_code == 200
        # The shares go with the transfer, as for any new owner.
        assert_error(await client.get(f"/v1/pets/{pet['id']}", headers=auth(BOB)), 404, 995)
        # Alice, as a member, may still give it; without the group she no longer sees it.
        assert_error(await client.get(f"/v1/pets/{pet['id']}", headers=auth(ALICE)), 404, 995)
        back = await client.patch(f"/v1/pets/{pet['id']}", json={"ownerId": ALICE}, headers=alice)
        assert back.status_code == 200
        assert back.json()["ownerId"] == ALICE
        assert_error(await client.get(f"/v1/pets/{pet['id']}", headers=VETS), 404, 995)

    async def test_a_member_gives_the_groups_pet_to_another_group_of_theirs(
        self, client: Client, bella: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        dose = (await vaccinate(client, bella, rabies, VETS)).json()

        given = await client.patch(f"/v1/pets/{bella['id']}", json={"ownerId": "group:night-shift"}, headers=NURSES)

        assert given.status_code == 200, given.text
        assert_error(await client.get(f"/v1/pets/{bella['id']}", headers=VETS), 404, 995)
        moved = await client.get(f"/v1/pet-vaccination/{dose['id']}", headers=member(BOB, "night-shift"))
        assert moved.json()["ownerId"] == "group:night-shift"


class TestLists:
    async def test_a_members_lists_count_theirs_their_groups_and_what_is_shared(self, client: Client) -> None:
        for _ in range(3):
            await register(client, VETS)
        await register(client, member(NURSE, "night-shift"), owner="group:night-shift")
        await register(client, VETS, owner=None)
        alices = await register(client, auth(ALICE), owner=None)
        await register(client, auth(ALICE), owner=None)
        shared = await client.post(
            "/v1/pet-shares", json={"petId": alices["id"], "grantee": NURSE, "access": "read"}, headers=auth(ALICE)
        )
        assert shared.status_code == 201

        async def total(query: str, headers: dict[str, str] = NURSES) -> int:
            response = await client.get(f"/v1/pets{query}", headers=headers)
            assert response.status_code == 200, response.text
            body = response.json()
            assert len(body["items"]) == body["totalCount"]
            count: int = body["totalCount"]
            return count

        assert await total("") == 5
        assert await total("?access=owned") == 4
        assert await total("?access=shared") == 1
        assert await total(f"?ownerId={CLINIC}") == 3
        assert await total("?ownerId=group:night-shift") == 1
        assert await total(f"?ownerId={ALICE}") == 1
        assert await total(f"?ownerId_ne={CLINIC}") == 2
        assert await total("?petType=Cat&access=owned") == 4
        assert await total(f"?ownerId={CLINIC}&access=shared") == 0
        assert await total("", VETS) == 4
        assert await total("?access=owned", VETS) == 4
        assert await total("?ownerId=group:night-shift", VETS) == 0
        assert await total("", member(NURSE)) == 1

    async def test_a_members_vaccinations_are_counted_by_due_date(
        self, client: Client, bella: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        own = await register(client, NURSES, owner=None)
        for pet in (bella, bella, own):
            assert (await vaccinate(client, pet, rabies, NURSES)).status_code == 201

        listed = await client.get("/v1/pet-vaccination?dueFrom=2025-06-01T00:00:00Z", headers=NURSES)
        owned = await client.get("/v1/pet-vaccination?access=owned&dueTo=2030-01-01T00:00:00Z", headers=NURSES)

        assert listed.json()["totalCount"] == 3
        assert owned.json()["totalCount"] == 3
        assert (await client.get("/v1/pet-vaccination", headers=VETS)).json()["totalCount"] == 2


class TestChanges:
    async def test_a_member_who_joins_later_sees_the_groups_changes(
        self, client: Client, bella: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        dose = (await vaccinate(client, bella, rabies, VETS)).json()
        await client.patch(f"/v1/pets/{bella['id']}", json={"neutered": True}, headers=VETS)
        newcomer = member(BOB, "clinic-42")

        changes = (await client.get("/v1/changes?resource=pets,pet-vaccination", headers=newcomer)).json()["items"]

        assert [(change["resource"], change["id"], change["action"]) for change in changes] == [
            ("pets", bella["id"], "created"),
            ("pet-vaccination", dose["id"], "created"),
            ("pets", bella["id"], "replaced"),
        ]
        without = (await client.get("/v1/changes?resource=pets,pet-vaccination", headers=auth(BOB))).json()
        assert without["items"] == []

    async def test_a_pet_given_away_leaves_its_change_with_the_giver(self, client: Client) -> None:
        alice = member(ALICE, "clinic-42")
        pet = await register(client, alice, owner=None)
        await client.patch(f"/v1/pets/{pet['id']}", json={"ownerId": CLINIC}, headers=alice)
        await client.patch(f"/v1/pets/{pet['id']}", json={"neutered": True}, headers=VETS)

        seen_by_alice = (await client.get("/v1/changes?resource=pets", headers=auth(ALICE))).json()["items"]
        seen_by_vet = (await client.get("/v1/changes?resource=pets", headers=VETS)).json()["items"]

        assert [change["version"] for change in seen_by_alice] == [1, 2]
        assert [change["version"] for change in seen_by_vet] == [2, 3]

    async def test_a_member_in_many_groups_reads_the_feed_in_commit_order(self, client: Client) -> None:
        groups = [f"clinic-{index}" for index in range(12)]
        created = []
        for name in groups:
            created.append((await register(client, member(VET, name), owner=f"group:{name}"))["id"])

        headers = member(NURSE, *reversed(groups))
        first = (await client.get("/v1/changes?resource=pets&limit=5", headers=headers)).json()
        rest = (await client.get(f"/v1/changes?resource=pets&after={first['nextCursor']}", headers=headers)).json()

        assert [change["id"] for change in first["items"] + rest["items"]] == created


class TestTheMostGroups:
    async def test_a_member_of_as_many_groups_as_a_token_may_list_reads_everything(
        self, client: Client, rabies: dict[str, Any]
    ) -> None:
        """Every group of a token's (MAX_GROUPS) is an owner key of its caller's: lists, their totals from the kept
        counts (with shares to some of the groups), the overdue list and the feed read them all in one request."""
        groups = [f"clinic-{index}" for index in range(MAX_GROUPS)]
        headers = member(NURSE, *groups)
        owned = [await register(client, member(VET, name), owner=f"group:{name}") for name in groups[::25]]
        alices = await register(client, auth(ALICE), owner=None)
        for name in groups[-2:]:
            body = {"petId": alices["id"], "grantee": f"group:{name}", "access": "care"}
            assert (await client.post("/v1/pet-shares", json=body, headers=auth(ALICE))).status_code == 201
        for pet in (*owned, alices):
            assert (await vaccinate(client, pet, rabies, headers)).status_code == 201

        pets = await client.get("/v1/pets?pageSize=2", headers=headers)
        shared = await client.get("/v1/pets?access=shared", headers=headers)
        overdue = await client.get("/v1/pet-vaccination?dueTo=2027-01-01T00:00:00Z", headers=headers)
        changes = await client.get("/v1/changes?resource=pets&limit=1000", headers=headers)

        assert pets.json()["totalCount"] == len(owned) + 1
        assert [pet["id"] for pet in shared.json()["items"]] == [alices["id"]]
        assert overdue.json()["totalCount"] == len(owned) + 1
        # Alice's pet was made before she shared it: that change is not one the shares let the groups see.
        assert [change["id"] for change in changes.json()["items"]] == [pet["id"] for pet in owned]
