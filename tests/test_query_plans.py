"""Page-1 list queries walk an index in the requested order instead of sorting the table, and filtered counts
read only the matching part of an index.

Only the count may grow with the table; the page itself reads `limit` rows from an index. (A pet's
vaccinations in an order its index does not keep are a handful of rows, sorted.)
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from petrecords.store.base import Collection, Condition, Operator, PageQuery, SortKey
from petrecords.store.sql import count_statement, list_statement
from petrecords.vaccinations import PET_VACCINATIONS
from tests.support import PET_RECORDS

VACCINATIONS = PET_VACCINATIONS.collection
NOW = 1_795_000_000_000
A_PET = Condition(("pet_id",), Operator.IN, (uuid.UUID(int=1),))
OVERDUE = Condition(("due_at",), Operator.BELOW, (NOW,))

OWNER = "alice@example.com"
OWNED = Condition(("owner_id",), Operator.EQUAL, (OWNER,))
DOGS = Condition(("pet_type",), Operator.IN, ("Dog",))
BY_CREATED = (SortKey("created_at"), SortKey("id"))


def _page_one(
    collection: Collection, *conditions: Condition, sort: tuple[SortKey, ...] = BY_CREATED
) -> tuple[Collection, PageQuery]:
    return collection, PageQuery(conditions=conditions, sort=sort, limit=20, offset=0)


PAGE_ONE_QUERIES = {
    "pets: admin, default order": _page_one(PET_RECORDS),
    "pets: owner, default order": _page_one(PET_RECORDS, OWNED),
    "pets: owner and one type": _page_one(PET_RECORDS, OWNED, DOGS),
    "pets: admin, one type": _page_one(PET_RECORDS, DOGS),
    "pets: owner, by name": _page_one(PET_RECORDS, OWNED, sort=(SortKey("name_key"), SortKey("id"))),
    "pets: admin, newest modified first": _page_one(
        PET_RECORDS, sort=(SortKey("modified_at", descending=True), SortKey("id"))
    ),
    "vaccinations: a pet's, newest applied first": _page_one(
        VACCINATIONS, OWNED, A_PET, sort=(SortKey("applied_at", descending=True), SortKey("id"))
    ),
    "vaccinations: owner, default order": _page_one(VACCINATIONS, OWNED),
    "vaccinations: admin, overdue by due date": _page_one(
        VACCINATIONS, OVERDUE, sort=(SortKey("due_at"), SortKey("id"))
    ),
    "vaccinations: owner, overdue by due date": _page_one(
        VACCINATIONS, OWNED, OVERDUE, sort=(SortKey("due_at"), SortKey("id"))
    ),
    "vaccinations: admin, applied in a range": _page_one(
        VACCINATIONS,
        Condition(("applied_at",), Operator.AT_LEAST, (NOW - 86_400_000,)),
        Condition(("applied_at",), Operator.AT_MOST, (NOW,)),
        sort=(SortKey("applied_at"), SortKey("id")),
    ),
    "vaccinations: due from a date": _page_one(
        VACCINATIONS, Condition(("due_at",), Operator.AT_LEAST, (NOW,)), sort=(SortKey("due_at"), SortKey("id"))
    ),
}


def _compiled(collection: Collection, query: PageQuery, dialect: sa.Dialect) -> tuple[str, dict[str, Any]]:
    statement, values = list_statement(collection, query)
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return str(compiled), {**compiled.params, **values}


@pytest.mark.parametrize("name", list(PAGE_ONE_QUERIES))
async def test_page_one_reads_an_index_in_order(database_url: str, name: str) -> None:
    collection, query = PAGE_ONE_QUERIES[name]
    if database_url.startswith("sqlite"):
        sql, params = _compiled(collection, query, sqlite.dialect(paramstyle="named"))
        params = {key: value.hex if isinstance(value, uuid.UUID) else value for key, value in params.items()}
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            plan = " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        finally:
            connection.close()
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        # "FOR LAST TERM" sorts only rows that tie on the index's order (id after a descending field).
        assert "TEMP B-TREE FOR ORDER BY" not in plan, plan
        return

    sql, params = _compiled(collection, query, postgresql.dialect(paramstyle="pyformat"))
    connection = await asyncpg.connect(database_url)
    try:
        # On a small table the planner rightly prefers scanning and sorting; forbid both to see whether an
        # index can deliver the rows in order.
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
            await connection.execute(f"SET {setting} = off")
        names = list(params)
        positional = sql % {key: f"${index + 1}" for index, key in enumerate(names)}
        rows = await connection.fetch(f"EXPLAIN {positional}", *(_pg_value(params[key]) for key in names))
    finally:
        await connection.close()
    plan = " | ".join(row[0] for row in rows)
    assert "Index" in plan, plan
    # An incremental sort orders only rows that tie on the index's order (id after a descending field).
    assert not re.search(r"(^|->)\s*Sort\s+\(", plan), plan


def _pg_value(value: Any) -> Any:
    return value if not isinstance(value, uuid.UUID) else str(value)


FILTERED_COUNTS = {
    "vaccinations of a pet": (VACCINATIONS, (OWNED, A_PET)),
    "overdue vaccinations (admin)": (VACCINATIONS, (OVERDUE,)),
    "overdue vaccinations of an owner": (VACCINATIONS, (OWNED, OVERDUE)),
    "vaccinations applied in a range": (
        VACCINATIONS,
        (
            Condition(("applied_at",), Operator.AT_LEAST, (NOW - 86_400_000,)),
            Condition(("applied_at",), Operator.AT_MOST, (NOW,)),
        ),
    ),
}


@pytest.mark.parametrize("name", list(FILTERED_COUNTS))
async def test_a_filtered_count_reads_an_index(database_url: str, name: str) -> None:
    """Counts that the kept counts cannot answer read only the matching part of an index."""
    collection, conditions = FILTERED_COUNTS[name]
    statement, values = count_statement(collection, conditions)
    if database_url.startswith("sqlite"):
        compiled = statement.compile(dialect=sqlite.dialect(paramstyle="named"))
        params = {**compiled.params, **values}
        params = {key: value.hex if isinstance(value, uuid.UUID) else value for key, value in params.items()}
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            plan = " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {compiled}", params))
        finally:
            connection.close()
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "SEARCH" in plan, plan
        return
    compiled = statement.compile(dialect=postgresql.dialect(paramstyle="pyformat"))
    params = {**compiled.params, **values}
    names = list(params)
    positional = str(compiled) % {key: f"${index + 1}" for index, key in enumerate(names)}
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute("SET enable_seqscan = off")
        rows = await connection.fetch(f"EXPLAIN {positional}", *(_pg_value(params[key]) for key in names))
    finally:
        await connection.close()
    plan = " | ".join(row[0] for row in rows)
    assert "Index" in plan, plan
