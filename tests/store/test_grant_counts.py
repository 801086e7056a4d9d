"""The grantees' kept counts (store/grants.py) give exactly what counting the records shared with a caller gives
(alone, as `access=shared` asks, or with the caller's own, as a list without `access` does), on both databases:
for pets and for vaccinations (every one, and below, from and between instants of their due dates), for callers
with several grantees (a user and the groups they are in, of which the pets' owners may be members, and which may own
pets themselves: a member's own records are then theirs and their groups'), shares that
never expire, will expire, have expired unseen by the expiry duty or were taken out by it. The same lists' pages
hold the same records whichever way they are read (gathered, or looked up record by record in the shares).

A hypothesis state machine writes pets' vaccinations and shares through the store and moves a clock forward (the
`now` of each count, as a request's); after each step it compares the store's counts and pages with its own
model's. Then concurrent writers through HTTP on PostgreSQL: shares made, changed and deleted while vaccinations
are written and deleted, the totals afterwards against the rows counted.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import msgspec
import pytest
from hypothesis.stateful import initialize, invariant, precondition, rule
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.registry import RESOURCES
from petrecords.resources.fields import DAY_MS
from petrecords.resources.sharing import expire_grants
from petrecords.shares import PET_SHARES
from petrecords.store.base import Condition, Operator, PageQuery, Row, SortKey, Store
from petrecords.store.grants import shared_count_scope
from petrecords.store.planner import LOOKED_UP_EACH
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.values import now_ms
from tests.conftest import StoreMachine, run_machine_on_store
from tests.conftest import test_settings as settings_of
from tests.store.test_period_counts import bounds
from tests.support import (
    ADMIN,
    ALICE,
    BOB,
    NOW,
    PET_RECORDS,
    auth,
    pet_row,
    share_row,
    token,
    vaccination_row,
    wipe,
)

VACCINATIONS = PET_VACCINATIONS.collection
SHARES = PET_SHARES.collection
CAROL = "carol@example.com"
CLINIC, OTHER = "group:clinic", "group:other"
OWNERS = (ALICE, BOB, CLINIC)
GRANTEES = (CAROL, ALICE, CLINIC, OTHER)
CALLERS = (
    (CAROL, (CAROL, CLINIC)),
    (CAROL, (CAROL, CLINIC, OTHER)),
    (ALICE, (ALICE, CLINIC)),  # an owner in a group her pets are shared with: her own are not "shared"
    (BOB, (BOB, OTHER)),
    (CAROL, (CAROL,)),
)
HOUR_MS = 3_600_000


def shared_conditions(
    key: str, caller: str, grantees: tuple[str, ...], now: int, below: int | None = None, at_least: int | None = None
) -> tuple[Condition, ...]:
    """What a list with `access=shared` asks of the store (resources/access.py): not the caller's (nor their
    groups'), shared now. The caller is the first of their grantees."""
    assert grantees[0] == caller
    return (
        Condition(("owner_id",), Operator.DIFFERS, grantees),
        Condition((key,), Operator.SHARED, (now, *grantees)),
        *bounds(below, at_least, None),
    )


def seen_conditions(
    key: str, caller: str, grantees: tuple[str, ...], now: int, below: int | None = None, at_least: int | None = None
) -> tuple[Condition, ...]:
    """What a list without `access` asks of the store for a caller with grants: theirs (and their groups'), and
    shared now."""
    assert grantees[0] == caller
    return (
        Condition(("owner_id", key), Operator.OWNED_OR_SHARED, (now, *grantees)),
        *bounds(below, at_least, None),
    )


class GrantCounts(StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pets: list[Row] = []
        self.vaccinations: dict[uuid.UUID, Row] = {}
        self.shares: dict[tuple[uuid.UUID, str], Row] = {}
        self.clock = now_ms()
        """The requests' now: never behind the real time that the writes see, nor behind the last expiry duty."""

    @initialize()
    def pets_of_each_owner(self) -> None:
        pets = [pet_row(owner=owner) for owner in OWNERS for _ in range(2)]
        self.write_vaccine_and_pets(pets)
        self.pets = pets

    @rule(
        pet=st.integers(0, 2 * len(OWNERS) - 1),
        days=st.lists(st.integers(-5, 5), min_size=1, max_size=3),
        nudge=st.integers(-1, 1),
    )
    def vaccinate(self, pet: int, days: list[int], nudge: int) -> None:
        rows = [vaccination_row(self.pets[pet], self.vaccine, NOW + day * DAY_MS + nudge) for day in days]

        async def write(tx: Any) -> None:
            await tx.insert_many(VACCINATIONS, rows)

        self.write(write)
        self.vaccinations.update((row["id"], row) for row in rows)

    @precondition(lambda self: bool(self.vaccinations))
    @rule(pick=st.integers(0, 10**6), day=st.integers(-5, 5), delete=st.booleans())
    def rewrite_vaccination(self, pick: int, day: int, delete: bool) -> None:
        previous = list(self.vaccinations.values())[pick % len(self.vaccinations)]
        if delete:
            self.write(lambda tx: tx.delete(VACCINATIONS, previous))
            del self.vaccinations[previous["id"]]
            return
        row = {**previous, "due_at": NOW + day * DAY_MS, "revision": previous["revision"] + 1}
        self.write(lambda tx: tx.update(VACCINATIONS, row, previous=previous))
        self.vaccinations[row["id"]] = row

    @rule(
        pet=st.integers(0, 2 * len(OWNERS) - 1),
        grantee=st.sampled_from(GRANTEES),
        expires_in=st.sampled_from([None, -HOUR_MS, 1, HOUR_MS, DAY_MS, 3 * DAY_MS]),
    )
    def share(self, pet: int, grantee: str, expires_in: int | None) -> None:
        target = self.pets[pet]
        if grantee == target["owner_id"]:
            return
        expires_at = None if expires_in is None else now_ms() + expires_in
        previous = self.shares.get((target["id"], grantee))
        if previous is None:
            row = share_row(target, grantee, expires_at)
            self.write(lambda tx: tx.insert(SHARES, row))
        else:
            row = {**previous, "expires_at": expires_at, "revision": previous["revision"] + 1}
            self.write(lambda tx: tx.update(SHARES, row, previous=previous))
        self.shares[(target["id"], grantee)] = row

    @precondition(lambda self: bool(self.shares))
    @rule(pick=st.integers(0, 10**6))
    def unshare(self, pick: int) -> None:
        key = list(self.shares)[pick % len(self.shares)]
        row = self.shares.pop(key)
        self.write(lambda tx: tx.delete(SHARES, row))

    @rule(forward=st.sampled_from([0, 1, HOUR_MS, DAY_MS + 1, 2 * DAY_MS]), duty=st.booleans())
    def time_passes(self, forward: int, duty: bool) -> None:
        self.clock = max(self.clock + forward, now_ms())
        if duty:
            self.call(lambda: expire_grants(store=self.store, resources=RESOURCES, now=self.clock, limit=1000))

    @invariant()
    def counts_are_exact(self) -> None:
        if not self.pets:
            return
        self.clock = max(self.clock, now_ms())
        now = self.clock
        edges = [None, NOW, NOW - DAY_MS + 1, NOW + 2 * DAY_MS]
        asked: list[tuple[Any, tuple[Condition, ...], bool]] = []
        """Each list, and whether its pages are read too: those of every record and of one time bound (the bounds
        are the counts' concern)."""
        for (caller, grantees), conditions in itertools.product(CALLERS, (shared_conditions, seen_conditions)):
            asked.append((PET_RECORDS, conditions("id", caller, grantees, now), True))
            for below, at_least in itertools.product(edges, edges[:3]):
                paged = at_least is None and below in (None, NOW)
                asked.append((VACCINATIONS, conditions("pet_id", caller, grantees, now, below, at_least), paged))

        async def count() -> list[tuple[int, list[list[Any]]]]:
            """Each list's count, and its records' ids as each form of its shared condition reads them."""
            read = []
            async with self.store.transaction(write=False) as tx:
                for collection, conditions, paged in asked:
                    forms = [conditions, tuple(looked_up_each(condition) for condition in conditions)]
                    pages = []
                    for form in forms if paged else ():
                        page = PageQuery(conditions=form, sort=(SortKey("id"),), limit=1000, offset=0)
                        pages.append([row["id"] for row in await tx.list(collection, page)])
                    read.append((int(await tx.count(collection, conditions)), pages))
            return read

        for (collection, conditions, paged), (counted, pages) in zip(asked, self.call(count), strict=True):
            assert shared_count_scope(collection, conditions) is not None
            expected = self._expected(collection, conditions)
            assert counted == len(expected), conditions
            assert pages == ([expected, expected] if paged else []), conditions

    def _expected(self, collection: Any, conditions: tuple[Condition, ...]) -> list[Any]:
        """The ids of the records that the conditions let through, in order."""
        with_own = conditions[0].operator is Operator.OWNED_OR_SHARED
        if with_own:
            now, *grantees = conditions[0].values
            owners = set(grantees)
        else:
            owners = set(conditions[0].values)
            now, *grantees = conditions[1].values
        below = next((c.values[0] for c in conditions if c.operator is Operator.BELOW), None)
        at_least = next((c.values[0] for c in conditions if c.operator is Operator.AT_LEAST), None)
        visible = {
            pet_id
            for (pet_id, grantee), share in self.shares.items()
            if grantee in grantees and (share["expires_at"] is None or share["expires_at"] > now)
        }

        def seen(key: uuid.UUID, owner: str) -> bool:
            return (with_own and owner in owners) or (key in visible and owner not in owners)

        if collection is PET_RECORDS:
            return sorted(pet["id"] for pet in self.pets if seen(pet["id"], pet["owner_id"]))
        return sorted(
            row["id"]
            for row in self.vaccinations.values()
            if seen(row["pet_id"], row["owner_id"])
            and (below is None or row["due_at"] < below)
            and (at_least is None or row["due_at"] >= min(at_least, below if below is not None else at_least))
        )


def looked_up_each(condition: Condition) -> Condition:
    """The condition in the form that looks each record up in the shares (as the list planner may
    choose): the page must hold the same records."""
    each = LOOKED_UP_EACH.get(condition.operator)
    return condition if each is None else msgspec.structs.replace(condition, operator=each)


@pytest.mark.hypothesis
def test_grantees_kept_counts_equal_the_records_counted(
    database_url: str, blocking_store: tuple[Store, Callable[..., Any]], stateful_part: int
) -> None:
    run_machine_on_store(GrantCounts, database_url, blocking_store)


async def test_a_list_without_access_reads_the_shares_only_when_the_kept_counts_hold_any(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing shared with the caller, a list without `access` is their own records: the kept sizes that plan
    it say so and give its total, so that it reads two statements (those sizes and the page). With a share, the
    shares' count is a third."""
    await wipe(database_url)
    store = open_store(settings_of(database_url, tmp_path))
    try:
        pets = [pet_row(owner=ALICE) for _ in range(3)]
        async with store.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, [*pets, pet_row(owner=BOB)])

        async def statements_for(caller: str, grantees: tuple[str, ...]) -> tuple[int, int, int]:
            async with store.transaction(write=False) as tx:
                sent = 0
                fetch = tx.fetch

                async def counted(statement: Any) -> Any:
                    nonlocal sent
                    sent += 1
                    return await fetch(statement)

                monkeypatch.setattr(tx, "fetch", counted)
                conditions = seen_conditions("id", caller, grantees, now_ms())
                total = await tx.count(PET_RECORDS, conditions)
                query = PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=10, offset=0)
                page = await tx.list(PET_RECORDS, query)
                return total, len(page), sent

        assert await statements_for(BOB, (BOB, CLINIC)) == (1, 1, 2)
        async with store.transaction(write=True) as tx:
            await tx.insert(SHARES, share_row(pets[0], CLINIC, None))
        assert await statements_for(BOB, (BOB, CLINIC)) == (2, 2, 3)
    finally:
        await store.close()


PETS_AT_ONCE, ROUNDS = 4, 6
VET = "vet@clinic.example"


@pytest.mark.only_on("postgresql")
async def test_concurrent_shares_and_vaccinations_leave_exact_totals(client: AsyncTestClient[Any]) -> None:
    """On PostgreSQL, where writers run at once: each round, an owner's pets are shared with a clinic (some until
    tomorrow), their shares deleted and made again, while vaccinations of the same pets are created and deleted
    (the vet writes some, under a care share). After each round the clinic's totals, from the kept counts, equal
    those of the same lists with a filter that every record meets (which makes the service count the rows)."""
    admin, alice = auth(ADMIN, admin=True), auth(ALICE)
    vet = {"Authorization": f"Bearer {token(VET, groups=['clinic'])}"}
    vaccine = await client.post(
        "/v1/vaccines", json={"name": "Rabies", "petType": "Dog", "duration": 30}, headers=admin
    )
    assert vaccine.status_code == 201, vaccine.text
    pets = []
    for number in range(PETS_AT_ONCE):
        pet = await client.post("/v1/pets", json={"name": f"Rex {number}", "petType": "Dog"}, headers=alice)
        assert pet.status_code == 201, pet.text
        pets.append(pet.json())
    shares: dict[str, str] = {}
    vaccinations: list[str] = []

    async def reshare(pet: dict[str, Any], round_number: int) -> None:
        if pet["id"] in shares:
            deleted = await client.delete(f"/v1/pet-shares/{shares.pop(pet['id'])}", headers=alice)
            assert deleted.status_code == 200, deleted.text
        body: dict[str, Any] = {"petId": pet["id"], "grantee": "group:clinic", "access": "care"}
        if round_number % 2:
            body["expiresAt"] = "2099-01-01T00:00:00Z"
        made = await client.post("/v1/pet-shares", json=body, headers=alice)
        assert made.status_code == 201, made.text
        shares[pet["id"]] = made.json()["id"]

    async def vaccinate(pet: dict[str, Any], day: int, headers: dict[str, str]) -> None:
        body = {"petId": pet["id"], "vaccineId": vaccine.json()["id"], "appliedAt": f"2025-01-{day:02d}T10:00:00Z"}
        made = await client.post("/v1/pet-vaccination", json=body, headers=headers)
        if made.status_code == 201:
            vaccinations.append(made.json()["id"])
        else:
            assert made.status_code in (400, 404), made.text

    async def unvaccinate() -> None:
        if vaccinations:
            gone = await client.delete(f"/v1/pet-vaccination/{vaccinations.pop(0)}", headers=admin)
            assert gone.status_code in (200, 404), gone.text

    for round_number in range(ROUNDS):
        writes = []
        for number, pet in enumerate(pets):
            writes.append(reshare(pet, round_number))
            writes.append(vaccinate(pet, 1 + (number + round_number) % 28, alice))
            writes.append(vaccinate(pet, 2 + number, vet))
            writes.append(unvaccinate())
        await asyncio.gather(*writes)
        every_record = {"createdFrom": "1900-01-01T00:00:00Z"}
        for path, params in (
            ("/v1/pets", {}),
            ("/v1/pets", {"access": ""}),
            ("/v1/pet-vaccination", {}),
            ("/v1/pet-vaccination", {"dueTo": "2025-01-20T00:00:00Z"}),
            ("/v1/pet-vaccination", {"dueFrom": "2025-01-10T00:00:00Z", "dueTo": "2025-02-20T00:00:00Z"}),
            ("/v1/pet-vaccination", {"access": "", "dueTo": "2025-01-20T00:00:00Z"}),
        ):
            # Without `access` (""), the vet's own records are counted with those shared with them.
            asked = {key: value for key, value in {"access": "shared", **params}.items() if value}
            kept = await client.get(path, params=asked, headers=vet)
            counted = await client.get(path, params={**asked, **every_record}, headers=vet)
            assert kept.status_code == counted.status_code == 200, kept.text
            assert kept.json()["totalCount"] == counted.json()["totalCount"], (round_number, path, params)
            assert kept.json()["totalCount"] == len(counted.json()["items"]), (round_number, path, params)
