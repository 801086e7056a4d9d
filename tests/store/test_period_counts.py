"""The counts kept by period of a time column (a vaccination's due date, tables.period_counts) give exactly what
counting the records gives, for every bound of a list on that column, on both databases.

A hypothesis state machine writes vaccinations through the store (creates, due dates moved across days, runs of
days and the epoch, moves to another owner, deletions) and after each step compares the store's count of every
kind of list the kept counts answer (below an instant, from one, between two; every owner's or one owner's) with a
count of its own model: instants are drawn at and around the edges of the periods, before and after 1970. Then
concurrent writers on PostgreSQL, and the overdue lists through HTTP, against the rows counted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis.stateful import Bundle, consumes, initialize, invariant, rule
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.resources.fields import DAY_MS
from petrecords.store.base import Condition, Operator, Row, Store
from petrecords.store.counts import kept_count_scope
from petrecords.tables import PERIOD_SIZES, PERIOD_SPAN, PERIOD_UNIT_MS
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from tests.conftest import StoreMachine, run_machine_on_store
from tests.conftest import test_settings as settings_of
from tests.support import ADMIN, ALICE, BOB, NOW, PET_RECORDS, auth, pet_row, vaccination_row, vaccine_row, wipe

VACCINATIONS = PET_VACCINATIONS.collection
OWNERS = (ALICE, BOB)
PERIOD_EDGES = [PERIOD_UNIT_MS * PERIOD_SPAN**size for size in range(PERIOD_SIZES)]
CHECKED_INSTANTS = 4


@st.composite
def instants(draw: st.DrawFn) -> int:
    """An instant at, just before or just after the edge of a period of some size, near today or the epoch."""
    edge = draw(st.sampled_from(PERIOD_EDGES))
    around = draw(st.sampled_from([0, NOW]))
    steps = draw(st.integers(-3, 3))
    nudge = draw(st.sampled_from([-1, 0, 1, PERIOD_UNIT_MS // 2, -PERIOD_UNIT_MS // 2, DAY_MS // 2, -DAY_MS // 2]))
    return around - around % edge + steps * edge + nudge


def bounds(below: int | None, at_least: int | None, owner: str | None) -> tuple[Condition, ...]:
    conditions = []
    if owner is not None:
        conditions.append(Condition(("owner_id",), Operator.EQUAL, (owner,)))
    if below is not None:
        conditions.append(Condition(("due_at",), Operator.BELOW, (below,)))
    if at_least is not None:
        conditions.append(Condition(("due_at",), Operator.AT_LEAST, (at_least,)))
    return tuple(conditions)


class PeriodCounts(StoreMachine):
    """Vaccinations written through the store; every kind of count checked against the model after each step."""

    vaccinations = Bundle("vaccinations")

    def __init__(self) -> None:
        super().__init__()
        self.model: dict[uuid.UUID, Row] = {}
        self.pets: dict[str, Row] = {}

    @initialize()
    def empty(self) -> None:
        pets = {owner: pet_row(owner=owner) for owner in OWNERS}
        self.write_vaccine_and_pets(pets.values())
        self.pets = pets

    @rule(target=vaccinations, owner=st.sampled_from(OWNERS), due_ats=st.lists(instants(), min_size=1, max_size=4))
    def create(self, owner: str, due_ats: list[int]) -> Any:
        rows = [vaccination_row(self.pets[owner], self.vaccine, due_at) for due_at in due_ats]

        async def write(tx: Any) -> None:
            await tx.insert_many(VACCINATIONS, rows)

        self.write(write)
        self.model.update((row["id"], row) for row in rows)
        return multiple_ids(rows)

    @rule(record_ids=vaccinations, due_at=instants(), owner=st.sampled_from(OWNERS))
    def move(self, record_ids: list[uuid.UUID], due_at: int, owner: str) -> None:
        """A new due date, and the owner of the pet it follows (a pet's transfer moves its vaccinations so)."""
        for record_id in record_ids:
            previous = self.model.get(record_id)
            if previous is None:
                continue
            row = {**previous, "due_at": due_at, "owner_id": owner, "pet_id": self.pets[owner]["id"]}

            async def write(tx: Any, row: Row = row, previous: Row = previous) -> None:
                await tx.update(VACCINATIONS, row, previous=previous)

            self.write(write)
            self.model[record_id] = row

    @rule(record_ids=consumes(vaccinations))
    def delete(self, record_ids: list[uuid.UUID]) -> None:
        rows = [self.model.pop(record_id) for record_id in record_ids if record_id in self.model]

        async def write(tx: Any) -> None:
            for row in rows:
                await tx.delete(VACCINATIONS, row)

        self.write(write)

    @invariant()
    def kept_counts_are_exact(self) -> None:
        if not self.pets:
            return
        # At and around a few of the stored instants (where an off-by-one shows), spread over what is stored.
        stored = sorted({row["due_at"] for row in self.model.values()})
        some = stored[:: max(1, len(stored) // CHECKED_INSTANTS)]
        edges = sorted({due_at + nudge for due_at in some for nudge in (-1, 0, 1)} | {0, NOW})
        cases = [(below, None) for below in edges] + [(None, at_least) for at_least in edges[::2]]
        cases += [(edges[-1 - i], edges[i]) for i in range(0, len(edges), 3)]
        asked = [bounds(below, at_least, owner) for owner in (None, *OWNERS) for below, at_least in cases]
        for conditions, count in zip(asked, self._counts(asked), strict=True):
            assert kept_count_scope(VACCINATIONS, conditions) is not None
            owner, below, at_least = None, None, None
            for condition in conditions:
                if condition.operator is Operator.EQUAL:
                    owner = condition.values[0]
                elif condition.operator is Operator.BELOW:
                    below = condition.values[0]
                else:
                    at_least = condition.values[0]
            expected = sum(
                1
                for row in self.model.values()
                if (owner is None or row["owner_id"] == owner)
                and (below is None or row["due_at"] < below)
                and (at_least is None or row["due_at"] >= at_least)
            )
            assert count == expected, (owner, below, at_least)

    def _counts(self, asked: list[tuple[Condition, ...]]) -> list[int]:
        async def count() -> list[int]:
            async with self.store.transaction(write=False) as tx:
                return [int(await tx.count(VACCINATIONS, conditions)) for conditions in asked]

        counts: list[int] = self.call(count)
        return counts


def multiple_ids(rows: list[Row]) -> list[uuid.UUID]:
    return [row["id"] for row in rows]


@pytest.mark.hypothesis
def test_kept_counts_by_period_equal_the_records_counted(
    database_url: str, blocking_store: tuple[Store, Callable[..., Any]], stateful_part: int
) -> None:
    run_machine_on_store(PeriodCounts, database_url, blocking_store)


WRITERS, WRITES_EACH = 8, 25


@pytest.mark.only_on("postgresql")
async def test_concurrent_writers_leave_exact_counts(database_url: str, tmp_path: Path) -> None:
    """Writers on their own connections at once, each creating, moving and deleting vaccinations whose due dates
    share days: the counts afterwards are what the rows say."""
    await wipe(database_url)
    store = open_store(settings_of(database_url, tmp_path))
    vaccine, pets = vaccine_row(), {owner: pet_row(owner=owner) for owner in OWNERS}
    try:
        async with store.transaction(write=True) as tx:
            await tx.insert(VACCINES.collection, vaccine)
            for pet in pets.values():
                await tx.insert(PET_RECORDS, pet)

        async def writer(number: int) -> None:
            for write in range(WRITES_EACH):
                owner = OWNERS[(number + write) % 2]
                row = vaccination_row(pets[owner], vaccine, NOW + (write % 5) * DAY_MS // 2)
                async with store.transaction(write=True) as tx:
                    await tx.insert(VACCINATIONS, row)
                if write % 3 == 0:
                    other = OWNERS[(number + write + 1) % 2]
                    moved = {**row, "owner_id": other, "pet_id": pets[other]["id"], "due_at": row["due_at"] - DAY_MS}
                    async with store.transaction(write=True) as tx:
                        await tx.update(VACCINATIONS, moved, previous=row)
                elif write % 3 == 1:
                    async with store.transaction(write=True) as tx:
                        await tx.delete(VACCINATIONS, row)

        await asyncio.gather(*(writer(number) for number in range(WRITERS)))
        async with store.transaction(write=False) as tx:
            for owner in (None, *OWNERS):
                for below in range(NOW - 2 * DAY_MS, NOW + 3 * DAY_MS, DAY_MS // 4):
                    kept = await tx.count(VACCINATIONS, bounds(below, None, owner))
                    # With a condition that every record meets and the kept counts do not answer, the rows are counted.
                    every_record = Condition(("applied_at",), Operator.AT_LEAST, (-(2**62),))
                    counted_conditions = [*bounds(below, None, owner), every_record]
                    assert kept_count_scope(VACCINATIONS, tuple(counted_conditions)) is None
                    counted = await tx.count(VACCINATIONS, tuple(counted_conditions))
                    assert kept == counted, (owner, below)
    finally:
        await store.close()


async def test_the_overdue_lists_totals_through_http(client: AsyncTestClient[Any]) -> None:
    """The overdue list's total as the admin and as an owner, with and without a lower bound, equals the total of
    the same list with a filter that matches every record (which makes the service count the rows)."""
    admin = auth(ADMIN, admin=True)
    vaccine = await client.post(
        "/v1/vaccines", json={"name": "Rabies", "petType": "Dog", "duration": 365}, headers=admin
    )
    assert vaccine.status_code == 201, vaccine.text
    for owner, applied in ((ALICE, "2024-01-0{}T10:00:00Z"), (BOB, "2025-06-0{}T23:59:59.999Z")):
        pet = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog", "ownerId": owner}, headers=admin)
        assert pet.status_code == 201, pet.text
        for day in range(1, 8):
            body = {"petId": pet.json()["id"], "vaccineId": vaccine.json()["id"], "appliedAt": applied.format(day)}
            created = await client.post("/v1/pet-vaccination", json=body, headers=admin)
            assert created.status_code == 201, created.text
    every_record = {"appliedAtMin": "1900-01-01T00:00:00Z"}
    for headers in (admin, auth(ALICE), auth(BOB)):
        for params in (
            {"dueTo": "2025-01-03T10:00:00Z"},
            {"dueTo": "2026-06-04T00:00:00Z", "dueFrom": "2025-01-05T00:00:00Z"},
            {"dueFrom": "2026-06-03T23:59:59.999Z"},
            {"dueTo": "2030-01-01T00:00:00Z"},
        ):
            kept = await client.get("/v1/pet-vaccination", params=params, headers=headers)
            counted = await client.get("/v1/pet-vaccination", params={**params, **every_record}, headers=headers)
            assert kept.status_code == counted.status_code == 200, kept.text
            assert kept.json()["totalCount"] == counted.json()["totalCount"], (headers, params)
            assert len(kept.json()["items"]) == kept.json()["totalCount"]
