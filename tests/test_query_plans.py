"""Page-1 list queries walk an index in the requested order instead of sorting the table.

Only the count may grow with the table; the page itself reads `limit` rows from an index.
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

from petrecords.store.base import PetFilter, PetPageQuery, SortField, SortKey
from petrecords.store.sql import list_statement

BY_CREATED = (SortKey(SortField.CREATED_AT), SortKey(SortField.ID))
OWNER = "alice@example.com"

PAGE_ONE_QUERIES = {
    "admin, default order": PetPageQuery(filter=PetFilter(), sort=BY_CREATED, limit=20, offset=0),
    "owner, default order": PetPageQuery(filter=PetFilter(owner_id=OWNER), sort=BY_CREATED, limit=20, offset=0),
    "owner and one type": PetPageQuery(
        filter=PetFilter(owner_id=OWNER, pet_types=("Dog",)), sort=BY_CREATED, limit=20, offset=0
    ),
    "admin, one type": PetPageQuery(filter=PetFilter(pet_types=("Dog",)), sort=BY_CREATED, limit=20, offset=0),
    "owner, by name": PetPageQuery(
        filter=PetFilter(owner_id=OWNER), sort=(SortKey(SortField.NAME), SortKey(SortField.ID)), limit=20, offset=0
    ),
    "admin, newest modified first": PetPageQuery(
        filter=PetFilter(),
        sort=(SortKey(SortField.MODIFIED_AT, descending=True), SortKey(SortField.ID)),
        limit=20,
        offset=0,
    ),
}


def _compiled(query: PetPageQuery, dialect: sa.Dialect) -> tuple[str, dict[str, Any]]:
    statement, values = list_statement(query)
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return str(compiled), {**compiled.params, **values}


@pytest.mark.parametrize("name", list(PAGE_ONE_QUERIES))
async def test_page_one_reads_an_index_in_order(database_url: str, name: str) -> None:
    query = PAGE_ONE_QUERIES[name]
    if database_url.startswith("sqlite"):
        sql, params = _compiled(query, sqlite.dialect(paramstyle="named"))
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            plan = " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params))
        finally:
            connection.close()
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        # "FOR LAST TERM" sorts only rows that tie on the index's order (id after a descending field).
        assert "TEMP B-TREE FOR ORDER BY" not in plan, plan
        return

    sql, params = _compiled(query, postgresql.dialect(paramstyle="pyformat"))
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
