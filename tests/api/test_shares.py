"""Shared access (contract v3 sections 5 and 12): shares of a pet to a user or a group, read or care, until they
expire or go; what they grant (the pet, its vaccinations, their history; with care, writing the vaccinations),
what they never grant, who writes and reads them, and the lists of shared records. On both databases."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.duties import Duties
from petrecords.store.base import Lock
from petrecords.store.postgres import PostgresTransaction
from petrecords.store.records import Statement
from petrecords.store.sql import SqlTransaction
from petrecords.store.sqlite import SqliteStore, SqliteTransaction
from petrecords.values import format_timestamp, now_ms
from tests.support import ADMIN, ALICE, BOB, MISSING_ID, assert_error, auth, create, create_vaccine, token

Client = AsyncTestClient[Any]
SHARES = "/v1/pet-shares"
VET = "vet@clinic.example"
CLINIC = "group:clinic-42"
CAROL = "carol@example.com"
SHARE_FIELDS = {
    "id",
    "createdAt",
    "createdBy",
    "modifiedAt",
    "modifiedBy",
    "ownerId",
    "petId",
    "grantee",
    "access",
    "expiresAt",
}


class WorkDone:
    """What the transactions of requests do, on either database (the background duties' aside): each statement they
    read or write, by its SQL whatever its values, and each lock they take, by the resource it holds and how; and
    the ids of the records they locked."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: list[tuple[str, ...]] = []
        self.locked: set[uuid.UUID] = set()
        for transaction in (SqliteTransaction, PostgresTransaction):
            monkeypatch.setattr(transaction, "fetch", self._reading(transaction.fetch))
            monkeypatch.setattr(transaction, "lock", self._locking(transaction.lock))
        # SQLite's lookups of one statement run without a transaction (SqlStore.lookup); PostgreSQL's in one.
        monkeypatch.setattr(SqliteStore, "lookup", self._reading(SqliteStore.lookup))
        monkeypatch.setattr(SqlTransaction, "execute", self._writing(SqlTransaction.execute))

    async def of(self, request: Awaitable[httpx.Response]) -> tuple[httpx.Response, list[tuple[str, ...]]]:
        """A request's answer, and what it did."""
        self.steps.clear()
        self.locked.clear()
        response = await request
        return response, list(self.steps)

    @staticmethod
    def _recorded() -> bool:
        task = asyncio.current_task()
        return task is None or not task.get_name().startswith(Duties.TASK_NAME)

    def _reading(self, fetch: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def reading(reader: SqlTransaction | SqliteStore, statement: Statement) -> Any:
            if self._recorded():
                self.steps.append(("read", str(statement[0])))
            return await fetch(reader, statement)

        return reading

    def _writing(self, execute: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        async def writing(transaction: SqlTransaction, statement: Any, rows: Any) -> None:
            if self._recorded():
                self.steps.append(("write", str(statement)))
            await execute(transaction, statement, rows)

        return writing

    def _locking(self, lock: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
        async def locking(transaction: SqlTransaction, locks: Sequence[Lock]) -> None:
            if self._recorded():
                self.steps.extend(("lock", one.resource, "shared" if one.shared else "exclusive") for one in locks)
                self.locked.update(one.record_id for one in locks)
            await lock(transaction, locks)

        return locking


def _asks_the_shares(statement: str) -> bool:
    """Whether a statement is access.granted's: the shares of one record that name some of the caller's grantees."""
    return "FROM pet_shares" in statement and "grantee IN" in statement


def as_vet(groups: tuple[str, ...] = ("clinic-42",)) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(VET, groups=list(groups))}"}


async def share(
    client: Client, pet: dict[str, Any], grantee: str, access: str = "read", **extra: Any
) -> httpx.Response:
    response = await client.post(
        SHARES, json={"petId": pet["id"], "grantee": grantee, "access": access, **extra}, headers=auth()
    )
    assert response.status_code == 201, response.text
    return response


@pytest.fixture
async def rex(client: Client) -> dict[str, Any]:
    pet: dict[str, Any] = (await create(client, ALICE, name="Rex", pet_type="Dog")).json()
    return pet


@pytest.fixture
async def rabies(client: Client) -> dict[str, Any]:
    vaccine: dict[str, Any] = (await create_vaccine(client, name="Rabies", pet_type="Dog", duration=30)).json()
    return vaccine


async def vaccinate(
    client: Client, pet: dict[str, Any], vaccine: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": "2025-01-01T00:00:00Z"}
    return await client.post("/v1/pet-vaccination", json=body, headers=headers)


class TestCreate:
    async def test_the_owner_shares_a_pet(self, client: Client, rex: dict[str, Any]) -> None:
        response = await share(client, rex, "Bob@Example.com", "care", expiresAt="2099-01-01T00:00:00Z")

        record = response.json()
        assert set(record) == SHARE_FIELDS
        assert (record["petId"], record["grantee"], record["access"]) == (rex["id"], BOB, "care")
        assert (record["ownerId"], record["createdBy"]) == (ALICE, ALICE)
        assert record["expiresAt"] == "2099-01-01T00:00:00.000Z"
        assert response.headers["location"] == f"{SHARES}/{record['id']}"

    async def test_to_a_group(self, client: Client, rex: dict[str, Any]) -> None:
        record = (await share(client, rex, CLINIC, "care")).json()

        assert (record["grantee"], record["expiresAt"]) == (CLINIC, None)

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"grantee": "not an address"}, "grantee"),
            ({"grantee": "group:"}, "grantee"),
            ({"grantee": "group:has space"}, "grantee"),
            ({"grantee": ALICE}, "grantee"),
            ({"access": "write"}, "access"),
            ({"expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
            ({"petId": MISSING_ID}, "petId"),
            ({"colour": "brown"}, "colour"),
        ],
    )
    async def test_a_bad_share_is_400_naming_it(
        self, client: Client, rex: dict[str, Any], body: dict[str, Any], field: str
    ) -> None:
        sent = {"petId": rex["id"], "grantee": BOB, "access": "read", **body}

        response = await client.post(SHARES, json=sent, headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == [field]

    async def test_only_a_pet_the_caller_owns(self, client: Client, rex: dict[str, Any]) -> None:
        await share(client, rex, BOB, "care")
        sent = {"petId": rex["id"], "grantee": CAROL, "access": "read"}

        by_bob = await client.post(SHARES, json=sent, headers=auth(BOB))
        by_admin = await client.post(SHARES, json=sent, headers=auth(ADMIN, admin=True))

        assert list(assert_error(by_bob, 400, 994)["errors"]) == ["petId"]
        assert by_admin.status_code == 201
        assert by_admin.json()["ownerId"] == ALICE

    async def test_one_share_for_each_pet_and_grantee(self, client: Client, rex: dict[str, Any]) -> None:
        first = await share(client, rex, BOB)

        again = await client.post(
            SHARES, json={"petId": rex["id"], "grantee": "BOB@example.com", "access": "care"}, headers=auth()
        )

        assert_error(again, 409, 982)
        assert again.headers["location"] == first.headers["location"]

    async def test_at_most_a_hundred_shares_for_a_pet(self, client: Client, rex: dict[str, Any]) -> None:
        for number in range(100):
            await share(client, rex, f"friend{number}@example.com")

        response = await client.post(
            SHARES, json={"petId": rex["id"], "grantee": "one.more@example.com", "access": "read"}, headers=auth()
        )

        assert list(assert_error(response, 400, 994)["errors"]) == ["petId"]


class TestWhatASharesGrants:
    async def test_read_lets_the_grantee_see_the_pet_and_its_vaccinations(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = (await vaccinate(client, rex, rabies, auth())).json()
        before = await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB))
        await share(client, rex, BOB)

        pet = await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB))
        listed = await client.get("/v1/pets", headers=auth(BOB))
        dose = await client.get(f"/v1/pet-vaccination/{given['id']}", headers=auth(BOB))
        doses = await client.get("/v1/pet-vaccination", headers=auth(BOB))
        history = await client.get(f"/v1/pets/{rex['id']}/history", headers=auth(BOB))

        assert_error(before, 404, 995)
        assert pet.json() == rex
        assert [item["id"] for item in listed.json()["items"]] == [rex["id"]]
        assert dose.json() == given
        assert [item["id"] for item in doses.json()["items"]] == [given["id"]]
        assert [change["action"] for change in history.json()["items"]] == ["created"]  # from before the share too

    async def test_read_never_writes(self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]) -> None:
        given = (await vaccinate(client, rex, rabies, auth())).json()
        await share(client, rex, BOB)

        replace_pet = await client.put(
            f"/v1/pets/{rex['id']}", json={"name": "Max", "petType": "Dog"}, headers=auth(BOB)
        )
        delete_pet = await client.delete(f"/v1/pets/{rex['id']}", headers=auth(BOB))
        vaccinated = await vaccinate(client, rex, rabies, auth(BOB))
        updated = await client.patch(f"/v1/pet-vaccination/{given['id']}", json={"notes": "x"}, headers=auth(BOB))

        for response in (replace_pet, delete_pet, vaccinated, updated):
            assert_error(response, 403, 997)
        assert (await client.get(f"/v1/pets/{rex['id']}", headers=auth())).json() == rex

    async def test_care_writes_the_pets_vaccinations_never_the_pet(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await share(client, rex, CLINIC, "care")

        given = await vaccinate(client, rex, rabies, as_vet())
        updated = await client.patch(given.headers["location"], json={"notes": "Left leg."}, headers=as_vet())
        pet = await client.patch(f"/v1/pets/{rex['id']}", json={"name": "Max"}, headers=as_vet())
        transferred = await client.patch(f"/v1/pets/{rex['id']}", json={"ownerId": VET}, headers=as_vet())
        more_shares = await client.post(
            SHARES, json={"petId": rex["id"], "grantee": CAROL, "access": "read"}, headers=as_vet()
        )
        deleted = await client.delete(given.headers["location"], headers=as_vet())

        assert given.status_code == 201, given.text
        assert (given.json()["createdBy"], given.json()["ownerId"]) == (VET, ALICE)
        assert (updated.status_code, updated.json()["modifiedBy"]) == (200, VET)
        assert_error(pet, 403, 997)
        assert_error(transferred, 403, 997)
        assert list(assert_error(more_shares, 400, 994)["errors"]) == ["petId"]
        assert deleted.status_code == 200

    async def test_a_vets_create_of_a_vaccination_looks_up_the_pets_shares_once(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The pet's shares decide both whether the vet may name the pet and whether they may write the new
        vaccination: one lookup answers both (access.granted remembers it for the transaction)."""
        await share(client, rex, CLINIC, "care")
        work = WorkDone(monkeypatch)

        given, done = await work.of(vaccinate(client, rex, rabies, as_vet()))
        lookups = [step for step in done if step[0] == "read" and _asks_the_shares(step[1])]
        refused, refused_done = await work.of(vaccinate(client, rex, rabies, as_vet(("clinic-43",))))
        refused_lookups = [step for step in refused_done if step[0] == "read" and _asks_the_shares(step[1])]

        assert given.status_code == 201, given.text
        assert len(lookups) == 1, done
        assert list(assert_error(refused, 400, 994)["errors"]) == ["petId"]
        assert len(refused_lookups) == 1, refused_done

    async def test_a_group_share_grants_every_member_and_no_one_else(self, client: Client, rex: dict[str, Any]) -> None:
        await share(client, rex, CLINIC)

        member = await client.get(f"/v1/pets/{rex['id']}", headers=as_vet())
        other_group = await client.get(f"/v1/pets/{rex['id']}", headers=as_vet(("clinic-43",)))
        case_differs = await client.get(f"/v1/pets/{rex['id']}", headers=as_vet(("Clinic-42",)))

        assert member.status_code == 200
        assert_error(other_group, 404, 995)
        assert_error(case_differs, 404, 995)

    async def test_an_expired_share_grants_nothing_and_stays_listed(self, client: Client, rex: dict[str, Any]) -> None:
        soon = format_timestamp(now_ms() + 1500)
        made = await share(client, rex, BOB, expiresAt=soon)
        assert (await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB))).status_code == 200

        await asyncio.sleep(1.6)

        assert_error(await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB)), 404, 995)
        assert (await client.get("/v1/pets", headers=auth(BOB))).json()["totalCount"] == 0
        kept = await client.get(made.headers["location"], headers=auth(BOB))
        assert kept.status_code == 200

    async def test_a_share_ends_with_its_deletion(self, client: Client, rex: dict[str, Any]) -> None:
        made = await share(client, rex, BOB)

        left = await client.delete(made.headers["location"], headers=auth(BOB))

        assert left.status_code == 200
        assert_error(await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB)), 404, 995)

    async def test_deleting_the_pet_deletes_its_shares(self, client: Client, rex: dict[str, Any]) -> None:
        made = await share(client, rex, BOB)

        await client.delete(f"/v1/pets/{rex['id']}", headers=auth())

        assert_error(await client.get(made.headers["location"], headers=auth()), 404, 995)
        history = await client.get(f"{made.headers['location']}/history", headers=auth())
        assert [change["action"] for change in history.json()["items"]] == ["created", "deleted"]

    async def test_a_transfer_deletes_the_pets_shares(self, client: Client, rex: dict[str, Any]) -> None:
        made = await share(client, rex, BOB)

        moved = await client.patch(f"/v1/pets/{rex['id']}", json={"ownerId": CAROL}, headers=auth(ADMIN, admin=True))

        assert moved.status_code == 200
        assert_error(await client.get(made.headers["location"], headers=auth(BOB)), 404, 995)
        assert_error(await client.get(f"/v1/pets/{rex['id']}", headers=auth(BOB)), 404, 995)


class TestMovingAVaccination:
    """A write is permitted only if the caller may write the record both as it is and as it will be: moving a
    vaccination to another pet (its petId) needs the right to write the vaccinations of both pets."""

    async def test_a_read_grantee_moves_none_of_their_own_into_the_shared_pet(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        bo = (await create(client, BOB, name="Bo")).json()
        own = (await vaccinate(client, bo, rabies, auth(BOB))).json()
        location = f"/v1/pet-vaccination/{own['id']}"
        await share(client, rex, BOB, "read")
        moved = {"petId": rex["id"], "vaccineId": rabies["id"], "appliedAt": own["appliedAt"]}

        replaced = await client.put(location, json=moved, headers=auth(BOB))
        patched = await client.patch(location, json={"petId": rex["id"]}, headers=auth(BOB))

        assert_error(replaced, 403, 997)
        assert_error(patched, 403, 997)
        assert (await client.get(location, headers=auth(BOB))).json() == own
        assert (await client.get(f"{location}/history", headers=auth(BOB))).json()["totalCount"] == 1
        assert (await client.get("/v1/pet-vaccination", headers=auth())).json()["totalCount"] == 0

    async def test_a_read_grantee_moves_none_of_the_owners_out(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        bo = (await create(client, BOB, name="Bo")).json()
        given = (await vaccinate(client, rex, rabies, auth())).json()
        await share(client, rex, BOB, "read")

        patched = await client.patch(f"/v1/pet-vaccination/{given['id']}", json={"petId": bo["id"]}, headers=auth(BOB))

        assert_error(patched, 403, 997)
        assert (await client.get(f"/v1/pet-vaccination/{given['id']}", headers=auth())).json() == given

    async def test_care_on_one_pet_and_read_on_the_other_moves_nothing_between_them(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        cared_for = (await vaccinate(client, rex, rabies, auth())).json()
        max_ = (await create(client, ALICE, name="Max")).json()
        only_read = (await vaccinate(client, max_, rabies, auth())).json()
        await share(client, rex, CLINIC, "care")
        await share(client, max_, CLINIC, "read")

        into_read = await client.patch(
            f"/v1/pet-vaccination/{cared_for['id']}", json={"petId": max_["id"]}, headers=as_vet()
        )
        out_of_read = await client.patch(
            f"/v1/pet-vaccination/{only_read['id']}", json={"petId": rex["id"]}, headers=as_vet()
        )

        assert_error(into_read, 403, 997)
        assert_error(out_of_read, 403, 997)
        for before in (cared_for, only_read):
            assert (await client.get(f"/v1/pet-vaccination/{before['id']}", headers=auth())).json() == before

    async def test_care_and_the_other_pets_ownership_move_both_ways(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        """The contract's rule to the letter: a care grantee who owns the other pet may write the vaccinations of
        both, so a vaccination moves either way, and its owner is always its pet's."""
        bo = (await create(client, BOB, name="Bo")).json()
        bobs = (await vaccinate(client, bo, rabies, auth(BOB))).json()
        alices = (await vaccinate(client, rex, rabies, auth())).json()
        await share(client, rex, BOB, "care")

        into_rex = await client.patch(f"/v1/pet-vaccination/{bobs['id']}", json={"petId": rex["id"]}, headers=auth(BOB))
        onto_bo = await client.put(
            f"/v1/pet-vaccination/{alices['id']}",
            json={"petId": bo["id"], "vaccineId": rabies["id"], "appliedAt": alices["appliedAt"]},
            headers=auth(BOB),
        )

        assert (into_rex.status_code, into_rex.json()["petId"], into_rex.json()["ownerId"]) == (200, rex["id"], ALICE)
        assert (onto_bo.status_code, onto_bo.json()["petId"], onto_bo.json()["ownerId"]) == (200, bo["id"], BOB)
        assert_error(await client.get(f"/v1/pet-vaccination/{alices['id']}", headers=auth()), 404, 995)

    async def test_a_pet_the_caller_may_not_see_is_400_before_404_and_403_before_412(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        hidden = (await create(client, ALICE, name="Hidden")).json()
        bo = (await create(client, BOB, name="Bo")).json()
        own = (await vaccinate(client, bo, rabies, auth(BOB))).json()
        await share(client, rex, BOB, "read")

        unseen = await client.patch(
            f"/v1/pet-vaccination/{MISSING_ID}", json={"petId": hidden["id"]}, headers=auth(BOB)
        )
        stale = await client.patch(
            f"/v1/pet-vaccination/{own['id']}",
            json={"petId": rex["id"]},
            headers={**auth(BOB), "If-Match": '"stale"'},
        )

        assert list(assert_error(unseen, 400, 994)["errors"]) == ["petId"]
        assert_error(stale, 403, 997)


class TestWhoWritesAShare:
    async def test_a_grantee_reads_it_and_cannot_change_it(self, client: Client, rex: dict[str, Any]) -> None:
        made = (await share(client, rex, BOB)).json()
        location = f"{SHARES}/{made['id']}"

        read = await client.get(location, headers=auth(BOB))
        replaced = await client.put(
            location, json={"petId": rex["id"], "grantee": BOB, "access": "care"}, headers=auth(BOB)
        )
        patched = await client.patch(location, json={"access": "care"}, headers=auth(BOB))
        stranger = await client.get(location, headers=auth(CAROL))

        assert read.json() == made
        assert_error(replaced, 403, 997)
        assert_error(patched, 403, 997)
        assert_error(stranger, 404, 995)

    async def test_the_owner_changes_its_access_and_expiry_not_its_pet_or_grantee(
        self, client: Client, rex: dict[str, Any]
    ) -> None:
        other = (await create(client, ALICE, name="Max")).json()
        made = (await share(client, rex, BOB)).json()
        location = f"{SHARES}/{made['id']}"

        changed = await client.patch(
            location, json={"access": "care", "expiresAt": "2099-01-01T00:00:00Z"}, headers=auth()
        )
        moved = await client.patch(location, json={"petId": other["id"]}, headers=auth())
        renamed = await client.put(
            location, json={"petId": rex["id"], "grantee": CAROL, "access": "read"}, headers=auth()
        )

        assert (changed.json()["access"], changed.json()["expiresAt"]) == ("care", "2099-01-01T00:00:00.000Z")
        assert list(assert_error(moved, 400, 994)["errors"]) == ["petId"]
        assert list(assert_error(renamed, 400, 994)["errors"]) == ["grantee"]

    async def test_only_the_owner_deletes_a_group_share(self, client: Client, rex: dict[str, Any]) -> None:
        made = await share(client, rex, CLINIC)

        by_member = await client.delete(made.headers["location"], headers=as_vet())
        by_owner = await client.delete(made.headers["location"], headers=auth())

        assert_error(by_member, 403, 997)
        assert by_owner.status_code == 200


class TestLists:
    async def test_shared_records_are_in_the_callers_lists(self, client: Client, rex: dict[str, Any]) -> None:
        own = (await create(client, BOB, name="Bo")).json()
        await share(client, rex, BOB)

        both = await client.get("/v1/pets?sort=name", headers=auth(BOB))
        owned = await client.get("/v1/pets?access=owned", headers=auth(BOB))
        shared = await client.get("/v1/pets?access=shared", headers=auth(BOB))
        by_alice = await client.get(f"/v1/pets?ownerId={ALICE}", headers=auth(BOB))

        assert [item["name"] for item in both.json()["items"]] == ["Bo", "Rex"]
        assert both.json()["totalCount"] == 2
        assert [item["id"] for item in owned.json()["items"]] == [own["id"]]
        assert [item["id"] for item in shared.json()["items"]] == [rex["id"]]
        assert [item["id"] for item in by_alice.json()["items"]] == [rex["id"]]

    async def test_a_list_right_after_a_share_is_made_or_deleted_answers_by_it(
        self, client: Client, rex: dict[str, Any]
    ) -> None:
        """A list chooses its plan by the kept sizes its store read a moment ago (store/grants.py, PlanSizes); what
        it answers follows every share at once, whether the sizes it remembers say the grantees hold nothing (read
        afresh then) or hold something (the shares decide)."""
        own = (await create(client, VET, name="Own")).json()
        lists = ("/v1/pets", "/v1/pets?access=shared", f"/v1/pet-vaccination?dueTo={format_timestamp(now_ms())}")

        async def totals() -> list[int]:
            return [(await client.get(path, headers=as_vet())).json()["totalCount"] for path in lists]

        assert await totals() == [1, 0, 0]
        made = await share(client, rex, CLINIC)
        assert await totals() == [2, 1, 0]
        deleted = await client.delete(f"{SHARES}/{made.json()['id']}", headers=auth())
        assert deleted.status_code == 200, deleted.text
        assert await totals() == [1, 0, 0]
        assert [item["id"] for item in (await client.get("/v1/pets", headers=as_vet())).json()["items"]] == [own["id"]]

    async def test_a_bad_access_is_400(self, client: Client) -> None:
        response = await client.get("/v1/pets?access=everything", headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["access"]

    async def test_a_clinics_overdue_list(self, client: Client, rex: dict[str, Any], rabies: dict[str, Any]) -> None:
        other = (await create(client, CAROL, name="Not a patient")).json()
        await share(client, rex, CLINIC, "care")
        await vaccinate(client, rex, rabies, as_vet())
        await vaccinate(client, other, rabies, auth(CAROL))
        now = format_timestamp(now_ms())

        overdue = await client.get(f"/v1/pet-vaccination?dueTo={now}&access=shared", headers=as_vet())

        assert [item["petId"] for item in overdue.json()["items"]] == [rex["id"]]

    async def test_shares_listed_by_owner_and_grantee(self, client: Client, rex: dict[str, Any]) -> None:
        await share(client, rex, BOB)
        await share(client, rex, CLINIC)

        owner = await client.get(SHARES, headers=auth())
        bob = await client.get(SHARES, headers=auth(BOB))
        vet = await client.get(f"{SHARES}?petId={rex['id']}", headers=as_vet())
        carol = await client.get(SHARES, headers=auth(CAROL))

        assert owner.json()["totalCount"] == 2
        assert [item["grantee"] for item in bob.json()["items"]] == [BOB]
        assert [item["grantee"] for item in vet.json()["items"]] == [CLINIC]
        assert carol.json()["totalCount"] == 0


class TestNothingElseReachesAnyone:
    async def test_shared_with_someone_else_answers_as_never_existed(self, client: Client, rex: dict[str, Any]) -> None:
        await share(client, rex, BOB)

        for path in (f"/v1/pets/{rex['id']}", f"/v1/pets/{rex['id']}/history"):
            shared = await client.get(path, headers=auth(CAROL))
            missing = await client.get(path.replace(rex["id"], MISSING_ID), headers=auth(CAROL))
            assert (shared.status_code, shared.content) == (missing.status_code, missing.content)
            assert {name for name in shared.headers if name != "x-request-id"} == {
                name for name in missing.headers if name != "x-request-id"
            }

    @pytest.mark.parametrize("shared_with", [BOB, None], ids=["shared with someone else", "shared with no one"])
    async def test_someone_elses_record_costs_what_one_that_never_existed_costs(
        self,
        client: Client,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        shared_with: str | None,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """Work that depends on whether a record exists would tell a caller, by the time an answer takes, what the
        answer does not. Each probe is asked of someone else's record (their pet, shared with another or with no
        one, or its vaccination) and of an id that never existed: the statements and locks of the two are the
        same, whatever their values."""
        if shared_with is not None:
            await share(client, rex, shared_with, "care")
        dose = (await vaccinate(client, rex, rabies, auth())).json()
        headers = auth(CAROL)
        probes: dict[str, tuple[str, Callable[[str], Awaitable[httpx.Response]]]] = {
            "get": (rex["id"], lambda pet: client.get(f"/v1/pets/{pet}", headers=headers)),
            "history": (rex["id"], lambda pet: client.get(f"/v1/pets/{pet}/history", headers=headers)),
            "replace": (
                rex["id"],
                lambda pet: client.put(f"/v1/pets/{pet}", json={"name": "X", "petType": "Dog"}, headers=headers),
            ),
            "vaccinate": (
                rex["id"],
                lambda pet: client.post(
                    "/v1/pet-vaccination",
                    json={"petId": pet, "vaccineId": rabies["id"], "appliedAt": "2025-01-01T00:00:00Z"},
                    headers=headers,
                ),
            ),
            "share": (
                rex["id"],
                lambda pet: client.post(SHARES, json={"petId": pet, "grantee": BOB, "access": "read"}, headers=headers),
            ),
            "list": (rex["id"], lambda pet: client.get("/v1/pet-vaccination", params={"petId": pet}, headers=headers)),
            "vaccination": (dose["id"], lambda one: client.get(f"/v1/pet-vaccination/{one}", headers=headers)),
            "vaccination history": (
                dose["id"],
                lambda one: client.get(f"/v1/pet-vaccination/{one}/history", headers=headers),
            ),
            "move": (
                dose["id"],
                lambda one: client.patch(f"/v1/pet-vaccination/{one}", json={"notes": "x"}, headers=headers),
            ),
        }
        work = WorkDone(monkeypatch)
        for name, (existing, probe) in probes.items():
            theirs, their_work = await work.of(probe(existing))
            missing, missing_work = await work.of(probe(MISSING_ID))
            assert (theirs.status_code, theirs.content) == (missing.status_code, missing.content), name
            assert their_work == missing_work, name

    async def test_a_share_of_someone_elses_pet_holds_none_of_their_records(
        self, client: Client, rex: dict[str, Any], rabies: dict[str, Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Naming someone else's pet in a share is refused before anything is held: neither the pet nor its
        vaccinations are read or locked (on PostgreSQL the stranger held them, and the owner's writes waited)."""
        doses = [(await vaccinate(client, rex, rabies, auth())).json()["id"] for _ in range(3)]
        work = WorkDone(monkeypatch)

        response, done = await work.of(
            client.post(SHARES, json={"petId": rex["id"], "grantee": CAROL, "access": "read"}, headers=auth(BOB))
        )

        assert list(assert_error(response, 400, 994)["errors"]) == ["petId"]
        assert not [step for step in done if step[0] == "lock"]
        assert not work.locked & {uuid.UUID(one) for one in (rex["id"], *doses)}

    async def test_a_chip_belongs_to_one_animal_whoever_owns_it(self, client: Client) -> None:
        await create(client, ALICE, name="Rex", microchip="982000123456789")

        again = await client.post(
            "/v1/pets", json={"name": "Max", "petType": "Dog", "microchip": "982-000-123-456-789"}, headers=auth(BOB)
        )

        assert_error(again, 409, 982)
        assert "location" not in again.headers


class TestGroupsClaim:
    @pytest.mark.parametrize("groups", ["clinic-42", [42], ["has space"], ["x" * 101], [""]])
    async def test_a_groups_claim_that_is_no_list_of_names_is_401(self, client: Client, groups: Any) -> None:
        response = await client.get("/v1/pets", headers={"Authorization": f"Bearer {token(VET, groups=groups)}"})

        assert_error(response, 401, 997)
