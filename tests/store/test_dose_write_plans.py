"""A write of a dose reads its pet's doses (the due rows it keeps, contract section 14) through the pet's index, on a
database the planner has no statistics of: on SQLite, a query that also named the status took the index on the
status and read every completed dose of every pet, in a transaction that holds the one writer."""

from __future__ import annotations

import re
import uuid
from typing import Any, cast

from petrecords.auth import Caller
from petrecords.due_rows import pet_doses
from petrecords.resources.checks import check_unique
from petrecords.store.base import Collection, Condition, PageQuery, Row, Transaction
from petrecords.store.queries import count_statement, list_statement
from petrecords.vaccinations import COMPLETED, PET_VACCINATIONS
from tests.store.test_query_plans import _plan


class _Recording:
    """Records the list queries made through it, and finds nothing."""

    def __init__(self) -> None:
        self.queries: list[tuple[Collection, PageQuery]] = []
        self.counts: list[tuple[Collection, tuple[Condition, ...]]] = []

    async def list(self, collection: Collection, query: PageQuery) -> list[Row]:
        self.queries.append((collection, query))
        return []

    async def count(self, collection: Collection, conditions: tuple[Condition, ...]) -> int:
        self.counts.append((collection, conditions))
        return 0


async def test_a_pets_doses_are_read_through_its_index(database_url: str) -> None:
    recording = _Recording()
    await pet_doses(cast(Transaction, recording), uuid.uuid4())

    assert len(recording.queries) == 1
    plans: list[str] = []
    for collection, query in recording.queries:
        statement: Any = list_statement(collection, query)
        plans.append(await _plan(database_url, *statement, forbid=("enable_seqscan", "enable_bitmapscan")))
    plan = plans[0]
    if database_url.startswith("sqlite"):
        assert "SEARCH pet_vaccinations USING INDEX ix_pet_vaccinations_pet_id_owner_id_applied_at_id (pet_id=?)" in (
            plan
        ), plan
        return
    assert "ix_pet_vaccinations_pet_id_owner_id_applied_at_id" in plan, plan
    assert "Seq Scan" not in plan, plan


async def test_a_rabies_tags_dose_that_year_is_found_through_the_tags_index(database_url: str) -> None:
    """A create with a rabies tag counts the other completed doses with the tag that calendar year (Unique's
    `within`, vaccinations._completed_that_year): through an index on the tag, never every completed dose of the
    year, whose index on the status a planner without statistics could prefer."""
    recording = _Recording()
    row = {"id": uuid.uuid4(), "rabies_tag": "R-2026-0042", "applied_at": 1_780_000_000_000, "status": COMPLETED}
    await check_unique(
        tx=cast(Transaction, recording), caller=Caller("alice@example.com", False), resource=PET_VACCINATIONS, row=row
    )

    assert not recording.queries
    assert len(recording.counts) == 1
    statement: Any = count_statement(*recording.counts[0])
    plan = await _plan(database_url, *statement, forbid=("enable_seqscan", "enable_bitmapscan"))
    if database_url.startswith("sqlite"):
        assert re.search(
            r"SEARCH pet_vaccinations USING INDEX ix_pet_vaccinations_rabies_tag\w* \(rabies_tag=", plan
        ), plan
        return
    assert re.search(r"Index (Only )?Scan using ix_pet_vaccinations_rabies_tag\w* on pet_vaccinations", plan), plan
    assert "Index Cond: ((rabies_tag)" in plan, plan
    assert "Seq Scan" not in plan, plan
