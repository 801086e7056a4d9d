"""A write of a dose reads its pet's doses (the due rows it keeps, contract section 14) through the pet's index, on a
database the planner has no statistics of: on SQLite, a query that also named the status took the index on the
status and read every completed dose of every pet, in a transaction that holds the one writer."""

from __future__ import annotations

import uuid
from typing import Any, cast

from petrecords.due_rows import pet_doses
from petrecords.store.base import Collection, PageQuery, Row, Transaction
from petrecords.store.queries import list_statement
from tests.store.test_query_plans import _plan


class _Recording:
    """Records the list queries made through it, and finds nothing."""

    def __init__(self) -> None:
        self.queries: list[tuple[Collection, PageQuery]] = []

    async def list(self, collection: Collection, query: PageQuery) -> list[Row]:
        self.queries.append((collection, query))
        return []


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
