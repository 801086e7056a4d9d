"""What is due is read from indexes (contract section 14 at a city's scale): a page of `GET /v1/due` walks the index
of its order, for an admin, an owner and a clinic's vet; its exact total is read from kept counts and the records
of the bound's own hour; a pet's due rows (its status, and what each write of its doses rewrites) are found by the
pet. So the cost grows with the page and with the caller's pets, never with the table."""

from __future__ import annotations

import re
import uuid

import pytest

from petrecords.due import TIE_BREAKERS, pet_and_rows_select
from petrecords.due_pages import granted_page, granted_page_statement, items_select
from petrecords.due_rows import DUE_DOSES
from petrecords.store import grants
from petrecords.store.base import Condition, Operator, PageQuery, SortKey
from petrecords.store.queries import count_statement, list_statement
from tests.store.test_query_plans import NOW, OWNED, VET, VETS_GRANTEES, _generic_plan, _plan

DUE = DUE_DOSES.collection
BEFORE_NOW = Condition(("due_at",), Operator.BELOW, (NOW,))
BY_DUE_DATE = (SortKey("due_at"), *(SortKey(column) for column in TIE_BREAKERS))
A_PET = Condition(("pet_id",), Operator.EQUAL, (uuid.UUID(int=1),))
NOT_THE_VETS = Condition(("owner_id",), Operator.DIFFERS, (VET,))


def _reads_whole(line: str) -> bool:
    """A line of SQLite's plan that reads a table whole (a constant row is none)."""
    return line.startswith("SCAN") and "INDEX" not in line and "CONSTANT ROW" not in line


PAGES = {
    "an admin's": (BEFORE_NOW,),
    "an owner's": (OWNED, BEFORE_NOW),
    "a vet's, own or shared, walked in order": (
        Condition(("owner_id", "pet_id"), Operator.OWNED_OR_SHARED_EACH, (NOW, *VETS_GRANTEES)),
        BEFORE_NOW,
    ),
    "a clinic's patients, walked in order": (
        NOT_THE_VETS,
        Condition(("pet_id",), Operator.SHARED_EACH, (NOW, *VETS_GRANTEES)),
        BEFORE_NOW,
    ),
}


@pytest.mark.parametrize("items", [False, True], ids=["rows", "items"])
@pytest.mark.parametrize("name", list(PAGES))
async def test_page_one_walks_the_due_date_index_in_order(database_url: str, name: str, items: bool) -> None:
    """The page's rows, and its items as `GET /v1/due` reads them (items_select: only what an item shows)."""
    query = PageQuery(conditions=PAGES[name], sort=BY_DUE_DATE, limit=100, offset=0)
    statement, values = list_statement(DUE, query)
    if items:
        statement = items_select(statement)
    plan = await _plan(database_url, statement, values, forbid=("enable_seqscan", "enable_bitmapscan", "enable_sort"))
    if database_url.startswith("sqlite"):
        assert re.search(r"SEARCH due_doses USING (COVERING )?INDEX ix_due_doses_\w*due_at", plan), plan
        assert "TEMP B-TREE" not in plan, plan
        assert not [line for line in plan.split(" | ") if _reads_whole(line)], plan
        return
    assert re.search(r"Index (Only )?Scan using ix_due_doses_\w*due_at\w* on due_doses", plan), plan
    assert "Seq Scan" not in plan, plan
    assert not re.search(r"(^|->)\s*Sort\s+\(", plan), plan


COUNTS = {"an admin's": (BEFORE_NOW,), "an owner's": (OWNED, BEFORE_NOW)}


@pytest.mark.parametrize("name", list(COUNTS))
async def test_the_total_is_read_from_kept_counts(database_url: str, name: str) -> None:
    """The whole periods before the bound from period_counts, the bound's own hour from the due-date index."""
    plan = await _plan(database_url, *count_statement(DUE, COUNTS[name]), forbid=("enable_seqscan",))
    assert "period_counts" in plan, plan
    if database_url.startswith("sqlite"):
        assert not [line for line in plan.split(" | ") if _reads_whole(line)], plan
        return
    assert "Seq Scan" not in plan, plan


@pytest.mark.parametrize("with_own", [False, True], ids=["shared", "own or shared"])
async def test_a_vets_total_is_read_from_the_grantees_kept_counts(database_url: str, with_own: bool) -> None:
    shared = grants.SharedCount(now=NOW, grantees=(VET,), below=NOW, at_least=None, with_own=with_own)
    statement = grants.shared_count_select(DUE, 1, below=True, at_least=False, with_own=with_own)
    values = grants.shared_count_values(DUE, shared, [VET])
    if database_url.startswith("sqlite"):
        plan = await _plan(database_url, statement, values, forbid=())
    else:
        # The plan a prepared statement keeps, for any value: the one that runs after its first five. Scans forbidden,
        # as the other plans' are: the tables the test reads may be empty, and were analysed so while other tests
        # ran, and an empty table's scan rightly costs nothing.
        plan = await _generic_plan(database_url, statement, values, forbid=("enable_seqscan",))
    assert "period_counts" in plan, plan
    if database_url.startswith("sqlite"):
        assert not [line for line in plan.split(" | ") if _reads_whole(line)], plan
        return
    assert "Seq Scan" not in plan, plan


REMINDERS = {
    "not reminded, due before now and the due-soon days": (
        Condition(("reminded",), Operator.EQUAL, ("none",)),
        Condition(("due_at",), Operator.BELOW, (NOW + 30 * 86_400_000,)),
    ),
    "reminded due-soon, due before now": (
        Condition(("reminded",), Operator.EQUAL, ("due-soon",)),
        Condition(("due_at",), Operator.BELOW, (NOW,)),
    ),
}


@pytest.mark.parametrize("name", list(REMINDERS))
async def test_what_is_left_to_remind_is_a_range_of_an_index(database_url: str, name: str) -> None:
    """What reminders (contract section 15) will read: the rows whose moment has come, in dueAt order."""
    query = PageQuery(conditions=REMINDERS[name], sort=(SortKey("due_at"), SortKey("id")), limit=100, offset=0)
    plan = await _plan(
        database_url, *list_statement(DUE, query), forbid=("enable_seqscan", "enable_bitmapscan", "enable_sort")
    )
    assert "ix_due_doses_reminded_due_at_id" in plan, plan
    if database_url.startswith("sqlite"):
        assert "TEMP B-TREE" not in plan, plan
        return
    assert not re.search(r"(^|->)\s*Sort\s+\(", plan), plan


async def test_a_pets_rows_are_found_by_the_pet(database_url: str) -> None:
    """What the status endpoint reads, and each write of the pet's doses rewrites."""
    query = PageQuery(conditions=(A_PET,), sort=(SortKey("id"),), limit=100_000, offset=0)
    plan = await _plan(database_url, *list_statement(DUE, query), forbid=("enable_seqscan", "enable_bitmapscan"))
    assert "ix_due_doses_pet_id_id" in plan, plan


GRANTED_PAGES = {
    "a vet's, own or shared": (Condition(("owner_id", "pet_id"), Operator.OWNED_OR_SHARED, (NOW, *VETS_GRANTEES)),),
    "a clinic's patients": (NOT_THE_VETS, Condition(("pet_id",), Operator.SHARED, (NOW, *VETS_GRANTEES))),
    "a clinic's dogs due this year": (
        NOT_THE_VETS,
        Condition(("pet_type",), Operator.IN, ("Dog",)),
        Condition(("due_at",), Operator.AT_LEAST, (NOW - 365 * 86_400_000,)),
        Condition(("pet_id",), Operator.SHARED, (NOW, *VETS_GRANTEES)),
    ),
}


@pytest.mark.parametrize("name", list(GRANTED_PAGES))
async def test_a_grantees_page_walks_the_grantees_own_rows(database_url: str, name: str) -> None:
    """Each of the vet's keys walks its own rows in the page's order (the clinic's, the vet's own shares, their own
    pets' rows), up to the page's depth; a grantee's arm reads its index alone (it holds what an item shows), and no
    row is looked up by id or sorted: the arms' few rows are merged by the service (due.granted_rows)."""
    page = granted_page((*GRANTED_PAGES[name], BEFORE_NOW), BY_DUE_DATE, 100)
    assert page is not None
    plan = await _plan(
        database_url, *granted_page_statement(page, limit=100, offset=0), forbid=("enable_seqscan", "enable_bitmapscan")
    )
    arms = len(page.grantees) + len(page.owners)
    if database_url.startswith("sqlite"):
        lines = plan.split(" | ")
        grantees = [
            line for line in lines if re.match(r"SEARCH due_grants USING COVERING INDEX ix_due_grants_grantee_", line)
        ]
        owners = [
            line for line in lines if re.match(r"SEARCH due_doses USING (COVERING )?INDEX ix_due_doses_owner_id_", line)
        ]
        assert (len(grantees), len(owners)) == (len(page.grantees), len(page.owners)), plan
        assert "TEMP B-TREE" not in plan, plan
        assert not [line for line in lines if _reads_whole(line) and not line.startswith("SCAN anon_")], plan
        assert "autoindex_due_doses" not in plan, plan
        return
    assert "Seq Scan" not in plan, plan
    walks = re.findall(r"Limit [^|]*\|\s*->\s*Index (?:Only )?Scan using ix_due_(grants_grantee|doses_owner_id)_", plan)
    assert len(walks) == arms, plan
    assert len(re.findall(r"Index Only Scan using ix_due_grants_grantee_", plan)) == len(page.grantees), plan
    assert "Sort  (" not in plan, plan
    assert "pk_due_doses" not in plan, plan


async def test_a_pets_status_reads_the_pet_and_its_rows_by_the_pet(database_url: str) -> None:
    """The status's one statement: the pet by its id, its due rows by the pet's index."""
    plan = await _plan(database_url, pet_and_rows_select(), {"record_id": uuid.UUID(int=1)}, forbid=("enable_seqscan",))
    assert "ix_due_doses_pet_id_id" in plan, plan
    if database_url.startswith("sqlite"):
        assert not [line for line in plan.split(" | ") if _reads_whole(line)], plan
        return
    assert "Seq Scan" not in plan, plan
