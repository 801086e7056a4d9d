"""Page-1 list queries walk an index in the requested order instead of sorting the table, and filtered counts
read only the matching part of an index.

Only the count may grow with the table; the page itself reads `limit` rows from an index. (A pet's
vaccinations in an order its index does not keep are a handful of rows, sorted.) A list with an embedded
record reads it in the page's own query, never with a statement per item.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg
import msgspec
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from petrecords.app import open_store
from petrecords.auth import Caller
from petrecords.config import Settings, configured_lists
from petrecords.resources.fields import DAY_MS, Context
from petrecords.resources.listing import list_records, parse_list_query
from petrecords.shares import PET_SHARES
from petrecords.store import grants
from petrecords.store.base import Collection, Condition, Operator, PageQuery, SortKey, Viewer
from petrecords.store.changelog import changes_after_select, changes_values
from petrecords.store.counts import period_count_inserts
from petrecords.store.postgres import PostgresTransaction
from petrecords.store.postgres.reads import _counted_in_blocks, _reads_whole_table, _scope_reads_whole_table
from petrecords.store.postgres.statements import _DIALECT, _arguments, _changes_page, _compiled
from petrecords.store.queries import TrigramSearch, count_statement, list_statement, matching_rows_statement
from petrecords.store.records import Statement
from petrecords.store.sqlite import SqliteTransaction
from petrecords.text import match_key
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from petrecords.values import new_record_id
from tests.support import ALICE, PET_RECORDS, VACCINATION_CLINIC_FIELDS_UNSET, pet_row, wipe

VACCINATIONS = PET_VACCINATIONS.collection
NOW = 1_795_000_000_000
A_PET = Condition(("pet_id",), Operator.IN, (uuid.UUID(int=1),))
OVERDUE = Condition(("due_at",), Operator.BELOW, (NOW,))

OWNER = "alice@example.com"
OWNED = Condition(("owner_id",), Operator.EQUAL, (OWNER,))
DOGS = Condition(("pet_type",), Operator.IN, ("Dog",))
BY_CREATED = (SortKey("created_at"), SortKey("id"))
# The filters of a clinic's record (contract v4 sections 2 and 10.2).
IN_ERROR = Condition(("status",), Operator.IN, ("entered-in-error",))
BOOSTERS = Condition(("dose_type",), Operator.IN, ("booster",))
A_TAG = Condition(("rabies_tag",), Operator.EQUAL, ("R-2026-0042",))
A_LOT = Condition(("lot_number",), Operator.EQUAL, ("A123-45/B",))
# `deceased=true` compares with the least safe integer, which the store sends as 64 bits; sent here as the column's
# own 32, the least of those gives the same plan.
DECEASED = Condition(("deceased_at",), Operator.AT_LEAST, (-(2**31),))


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
    "vaccinations: admin, entered in error": _page_one(VACCINATIONS, IN_ERROR),
    "vaccinations: admin, boosters": _page_one(VACCINATIONS, BOOSTERS),
}


async def _plan(
    database_url: str, statement: sa.ClauseElement, values: dict[str, Any], *, forbid: tuple[str, ...]
) -> str:
    """The database's plan of the statement with these values, its lines joined by " | ". On PostgreSQL, the
    planner settings in `forbid` are turned off: on a small table the planner rightly prefers scanning (and
    sorting), so forbidding them shows whether an index can serve the query."""
    if database_url.startswith("sqlite"):
        compiled = statement.compile(
            dialect=sqlite.dialect(paramstyle="named"), compile_kwargs={"render_postcompile": True}
        )
        params = {**compiled.params, **values}
        params = {key: value.hex if isinstance(value, uuid.UUID) else value for key, value in params.items()}
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {compiled}", params))
        finally:
            connection.close()
    dialect = postgresql.dialect(paramstyle="pyformat")
    # As the store compiles: the connections have standard-conforming strings, so the LIKE escape is one `\`.
    dialect._backslash_escapes = False
    compiled = statement.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    params = {**compiled.params, **values}
    names = list(params)
    positional = str(compiled) % {key: f"${index + 1}" for index, key in enumerate(names)}
    connection = await asyncpg.connect(database_url)
    try:
        for setting in forbid:
            await connection.execute(f"SET {setting} = off")
        rows = await connection.fetch(f"EXPLAIN {positional}", *(_pg_value(params[key]) for key in names))
    finally:
        await connection.close()
    return " | ".join(row[0] for row in rows)


async def _generic_plan(
    database_url: str, statement: sa.ClauseElement, values: dict[str, Any], *, forbid: tuple[str, ...] = ()
) -> str:
    """PostgreSQL's generic plan of the statement as the store compiles it, which knows no parameter's value, its
    lines joined by " | "; with the planner settings in `forbid` turned off, as `_plan` does."""
    compiled = statement.compile(dialect=_DIALECT)
    params = {**compiled.params, **values}
    arguments = [params[name] for name in compiled.positiontup or ()]
    connection = await asyncpg.connect(database_url)
    try:
        # EXPLAIN of the statement itself would plan it with the values given: EXPLAIN EXECUTE shows the plan that a
        # prepared statement keeps.
        await connection.execute(f"PREPARE any_value AS {compiled}")
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        for setting in forbid:
            await connection.execute(f"SET {setting} = off")
        listed = f"({', '.join(map(_literal, arguments))})" if arguments else ""
        rows = await connection.fetch(f"EXPLAIN EXECUTE any_value{listed}")
    finally:
        await connection.close()
    return " | ".join(row[0] for row in rows)


def _literal(value: Any) -> str:
    """A parameter's value as SQL, for EXECUTE (which takes no parameters of its own)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list | tuple):
        return f"ARRAY[{', '.join(map(_literal, value))}]"
    return "'" + str(value).replace("'", "''") + "'"


@pytest.mark.parametrize("name", list(PAGE_ONE_QUERIES))
async def test_page_one_reads_an_index_in_order(database_url: str, name: str) -> None:
    collection, query = PAGE_ONE_QUERIES[name]
    plan = await _plan(
        database_url, *list_statement(collection, query), forbid=("enable_seqscan", "enable_bitmapscan", "enable_sort")
    )
    if database_url.startswith("sqlite"):
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        # "FOR LAST TERM" sorts only rows that tie on the index's order (id after a descending field).
        assert "TEMP B-TREE FOR ORDER BY" not in plan, plan
        return
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
    "vaccinations entered in error": (VACCINATIONS, (IN_ERROR,)),
    "boosters": (VACCINATIONS, (BOOSTERS,)),
    "the doses of a rabies tag": (VACCINATIONS, (A_TAG,)),
    "the doses of a lot": (VACCINATIONS, (A_LOT,)),
    # What a rabies tag's uniqueness looks for: the completed doses of the tag applied in a year.
    "the completed doses of a tag in a year": (
        VACCINATIONS,
        (
            A_TAG,
            Condition(("status",), Operator.EQUAL, ("completed",)),
            Condition(("applied_at",), Operator.AT_LEAST, (NOW - 365 * 86_400_000,)),
            Condition(("applied_at",), Operator.BELOW, (NOW,)),
        ),
    ),
    "deceased pets": (PET_RECORDS, (DECEASED,)),
}


@pytest.mark.parametrize("name", list(FILTERED_COUNTS))
async def test_a_filtered_count_reads_an_index(database_url: str, name: str) -> None:
    """Counts that the kept counts cannot answer read only the matching part of an index."""
    collection, conditions = FILTERED_COUNTS[name]
    plan = await _plan(database_url, *count_statement(collection, conditions), forbid=("enable_seqscan",))
    if database_url.startswith("sqlite"):
        assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, plan
        assert "SEARCH" in plan, plan
        return
    assert "Index" in plan, plan


A_PETS_VACCINATIONS = {"the owner's": (A_PET, OWNED), "an admin's": (A_PET,)}


@pytest.mark.parametrize("caller", list(A_PETS_VACCINATIONS))
@pytest.mark.parametrize("part", ["page", "count"])
async def test_a_pets_vaccinations_are_read_from_the_pets_index(database_url: str, caller: str, part: str) -> None:
    """The web front end's call, `?petId=…&sort=appliedAt&order=desc`, finds the pet's few rows by the pet.
    The owner's index also keeps the applied order, and SQLite once chose it: it walked every vaccination of
    the owner to pick one pet's (1.8 s for the page and 1.4 s for the count at a million, all one owner's)."""
    conditions = A_PETS_VACCINATIONS[caller]
    query = PageQuery(
        conditions=conditions, sort=(SortKey("applied_at", descending=True), SortKey("id")), limit=20, offset=0
    )
    statement = list_statement(VACCINATIONS, query) if part == "page" else count_statement(VACCINATIONS, conditions)
    plan = await _plan(database_url, *statement, forbid=("enable_seqscan", "enable_bitmapscan"))
    assert re.search(r"\bix_pet_vaccinations_pet_id_\w+", plan), plan
    assert "ix_pet_vaccinations_owner_id" not in plan, plan


async def test_a_pets_vaccinations_are_three_statements_however_many_there_are(
    database_url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether anything is shared with the caller (one index search), the count, and one page query with the
    vaccines joined in: never a statement per item."""
    await wipe(database_url)
    pet = pet_row(owner=ALICE, pet_type="Dog")
    vaccines = [
        {
            "id": new_record_id(),
            "created_at": pet["created_at"],
            "created_by": "admin@example.com",
            "modified_at": pet["created_at"],
            "modified_by": "admin@example.com",
            "name": name,
            "name_key": match_key(name),
            "description": None,
            "description_key": None,
            "pet_type": "Dog",
            "duration": 365,
            "revision": 1,
        }
        for name in ("Rabies", "DHPP", "Leptospirosis")
    ]
    doses = [
        {
            "id": new_record_id(),
            "created_at": pet["created_at"],
            "created_by": ALICE,
            "modified_at": pet["created_at"],
            "modified_by": ALICE,
            "owner_id": ALICE,
            "pet_id": pet["id"],
            "vaccine_id": vaccines[index % 3]["id"],
            "applied_at": pet["created_at"] - index * 365 * DAY_MS,
            "due_at": pet["created_at"] - (index - 1) * 365 * DAY_MS,
            "notes": None,
            "revision": 1,
            **VACCINATION_CLINIC_FIELDS_UNSET,
        }
        for index in range(12)
    ]
    store = open_store(settings)
    try:
        async with store.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, [pet])
            await tx.insert_many(VACCINES.collection, vaccines)
            await tx.insert_many(VACCINATIONS, doses)
        request = parse_list_query(
            PET_VACCINATIONS,
            [("order", "desc"), ("sort", "appliedAt"), ("petId", str(pet["id"]))],
            context=Context.configured(configured_lists(settings), now_ms=0),
            default_page_size=20,
            max_page_size=100,
        )
        async with store.transaction(write=False) as tx:
            statements: list[Statement] = []
            fetch = tx.fetch  # type: ignore[attr-defined]

            async def counted(statement: Statement) -> Any:
                statements.append(statement)
                return await fetch(statement)

            monkeypatch.setattr(tx, "fetch", counted)
            page = await list_records(tx=tx, caller=Caller(ALICE, False), resource=PET_VACCINATIONS, request=request)
    finally:
        await store.close()
    assert page.total_count == 12
    assert [item["vaccine"]["name"] for item in page.items] == [vaccines[index % 3]["name"] for index in range(12)]
    assert len(statements) == 3, statements


VET = "vet@clinic.example"
VETS_GRANTEES = (VET, "group:clinic-42")
NOT_THE_VETS = Condition(("owner_id",), Operator.DIFFERS, VETS_GRANTEES)
"""Not the vet's own: neither theirs nor their clinic's (resources/access.py)."""
GRANTEE_QUERIES = {
    "pets shared with a clinic's vet": (
        PET_RECORDS,
        (NOT_THE_VETS, Condition(("id",), Operator.SHARED, (NOW, *VETS_GRANTEES))),
    ),
    "a vet's pets, own or shared": (
        PET_RECORDS,
        (Condition(("owner_id", "id"), Operator.OWNED_OR_SHARED, (NOW, *VETS_GRANTEES)),),
    ),
    "what is overdue among a clinic's patients": (
        VACCINATIONS,
        (NOT_THE_VETS, Condition(("pet_id",), Operator.SHARED, (NOW, *VETS_GRANTEES)), OVERDUE),
    ),
    "a vet's overdue vaccinations, own or shared": (
        VACCINATIONS,
        (Condition(("owner_id", "pet_id"), Operator.OWNED_OR_SHARED, (NOW, *VETS_GRANTEES)), OVERDUE),
    ),
}


@pytest.mark.parametrize("name", list(GRANTEE_QUERIES))
@pytest.mark.parametrize("part", ["page", "count"])
async def test_a_grantees_lists_read_indexes_only(database_url: str, name: str, part: str) -> None:
    """A grantee's lists find the pets shared with them through the shares' grantee index, and those pets and their
    vaccinations by their keys: no table is read whole, whatever the number of shares of other grantees."""
    collection, conditions = GRANTEE_QUERIES[name]
    sort = (SortKey("due_at"), SortKey("id")) if collection is VACCINATIONS else BY_CREATED
    query = PageQuery(conditions=conditions, sort=sort, limit=20, offset=0)
    statement = list_statement(collection, query) if part == "page" else count_statement(collection, conditions)
    plan = await _plan(database_url, *statement, forbid=("enable_seqscan",))
    if database_url.startswith("sqlite"):
        whole = [line for line in plan.split(" | ") if line.startswith("SCAN") and "INDEX" not in line]
        assert not whole, plan
        assert "ix_pet_shares_grantee" in plan, plan
        return
    assert "Seq Scan" not in plan, plan
    assert "ix_pet_shares_grantee" in plan, plan


FEED_READERS = {"a non-admin": OWNER, "an admin": None}
FEED_CHANGES = 20_000


@pytest.mark.parametrize("resources", [None, ("pets",)], ids=["every resource", "one resource"])
@pytest.mark.parametrize("reader", list(FEED_READERS))
async def test_a_feed_page_reads_index_ranges_in_order_whatever_the_plan(
    database_url: str, reader: str, resources: tuple[str, ...] | None
) -> None:
    """A page of the change feed reads its index ranges in order (the log's, or each of the reader's owner
    ranges) and whether changes are held back by one index search, never a whole index or the whole log. On
    PostgreSQL this holds in the generic plan of a prepared statement too, which knows no parameter's value: with
    the log all one owner's, that plan once walked the (xid, position) index past every change to find that
    owner's, and read the whole log to find none held back: seconds a page at a million changes."""
    await wipe(database_url)
    await _fill_the_log(database_url)
    reader_email = FEED_READERS[reader]
    viewer = None if reader_email is None else Viewer(email=reader_email, grantees=(reader_email, "clinic-42"))
    transaction = SqliteTransaction if database_url.startswith("sqlite") else PostgresTransaction
    grantees = None if viewer is None else transaction.readers_value(viewer.grantees)
    values = changes_values((0, 0), 100, viewer, resources, grantees)
    count = None if resources is None else len(resources)
    if database_url.startswith("sqlite"):
        statement = changes_after_select(SqliteTransaction.horizon, by_reader=reader_email is not None, resources=count)
        plan = await _plan(database_url, statement, values, forbid=())
        assert "SCAN changes" not in plan, plan
        # Each range starts at the cursor (on the owner's index, or on the log's rowid where, as here, the
        # statistics say the owner has most changes): written as a row value, SQLite read each from its first.
        searches = [line for line in plan.split(" | ") if line.startswith("SEARCH changes")]
        assert searches, plan
        assert all(re.search(r"\((rowid|.* AND position)>\?\)$", line) for line in searches), plan
        assert "TEMP B-TREE" not in plan.split("UNION")[0], plan
        # The resource filter is not an index to read: SQLite once read every change of the resource by it.
        assert "ix_changes_resource" not in plan, plan
        if reader_email is not None:
            # The reader's share windows lead the shared records' range: SQLite once read every change after the
            # cursor by the log's own index, and looked each up in the windows.
            assert "ix_changes_xid_position" not in plan, plan
            assert "SEARCH share_windows USING INDEX ix_share_windows_grantee_shared_key" in plan, plan
        return
    plan = await _generic_plan(database_url, _changes_page(by_reader=reader_email is not None, resources=count), values)
    assert "Seq Scan on changes" not in plan, plan
    # The grantees' windows are found by their index (a bitmap of it, when the planner likes): never the log's.
    assert "Bitmap Heap Scan on changes" not in plan, plan
    assert "Gather" not in plan, plan
    assert "ix_changes_resource" not in plan, plan
    if reader_email is not None:
        assert "ix_changes_owner_after_xid_position" in plan, plan
        assert "ix_changes_owner_before_xid_position" in plan, plan


async def test_a_live_hubs_poll_reads_the_range_of_the_log_whatever_the_plan(database_url: str) -> None:
    """A poll for the callers streaming (`changes_seen_by`) reads the log's range after its cursor, by the
    (xid, position) index, and filters it: never an owner's index, whose range is every change that owner ever
    had. On PostgreSQL in the generic plan of the prepared statement too."""
    await wipe(database_url)
    await _fill_the_log(database_url)
    # The last 300 changes: on SQLite by position; on PostgreSQL by transaction (100 changes each, see below).
    last_xid = 1_000 + (FEED_CHANGES - 1) // 100
    values = {
        "after_xid": last_xid - 2,
        "after_position": 0,
        "through_xid": last_xid + 1,
        "through_position": 0,
        "readers": [OWNER],
        "limit": 500,
    }
    if database_url.startswith("sqlite"):
        values.update(after_xid=0, after_position=FEED_CHANGES - 300, through_position=FEED_CHANGES)
        statement = SqliteTransaction.changes_seen_by_statement
        plan = await _plan(database_url, statement, {**values, "readers": f'["{OWNER}"]'}, forbid=())
        assert re.search(
            r"SEARCH changes USING (INTEGER PRIMARY KEY \(rowid>\?|INDEX ix_changes_xid_position .*position>\?)", plan
        ), plan
        assert "owner" not in plan, plan
        return
    plan = await _generic_plan(database_url, PostgresTransaction.changes_seen_by_statement, values)
    assert "ix_changes_xid_position" in plan, plan
    assert "owner" not in plan.split("Filter")[0], plan
    assert "Seq Scan on changes" not in plan, plan


async def _fill_the_log(database_url: str) -> None:
    """Changes of one owner's records, enough for the planners' statistics to say so."""
    rows = [
        {
            "xid": 0 if database_url.startswith("sqlite") else 1_000 + index // 100,
            "resource": "pets",
            "record_id": uuid.uuid4(),
            "action": "created",
            "version": 1,
            "at": NOW,
            "by": OWNER,
            "owner_before": None,
            "owner_after": OWNER,
            "record": b"{}",
        }
        for index in range(FEED_CHANGES)
    ]
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            connection.executemany(
                "INSERT INTO changes (xid, resource, record_id, action, version, at, by, owner_before, owner_after,"
                " record) VALUES (:xid, :resource, :record_id, :action, :version, :at, :by, :owner_before,"
                " :owner_after, :record)",
                [{**row, "record_id": row["record_id"].hex} for row in rows],
            )
            connection.commit()
            connection.execute("ANALYZE")
        finally:
            connection.close()
        return
    connection = await asyncpg.connect(database_url)
    try:
        await connection.copy_records_to_table(
            "changes", records=[tuple(row.values()) for row in rows], columns=list(rows[0])
        )
        await connection.execute("ANALYZE changes")
    finally:
        await connection.close()


def _trigram_search(database_url: str) -> TrigramSearch:
    return TrigramSearch.FTS5 if database_url.startswith("sqlite") else TrigramSearch.GIN


def _searched(pattern: str, *columns: str) -> Condition:
    return Condition(columns or ("name_key",), Operator.LIKE, (pattern,))


SEARCHES = {
    "pets: owner": (PET_RECORDS, (OWNED, _searched("%rex 12%"))),
    "pets: admin": (PET_RECORDS, (_searched("%rex 12%"),)),
    "pets: owner and one type": (PET_RECORDS, (OWNED, DOGS, _searched("%rex 12%"))),
    "pets: owner, a run between wildcards": (PET_RECORDS, (OWNED, _searched("%r_x 12%ab%"))),
    "vaccines: name or description": (VACCINES.collection, (_searched("%rabies%", "name_key", "description_key"),)),
}
SEARCH_INDEXES = {"pets": "ix_pets_name_key_trigrams", "vaccines": "ix_vaccines_(name|description)_key_trigrams"}


SEARCHED_PETS = 3000
WORDS = ("rex", "tom", "bella", "max", "luna", "coco", "milo", "daisy", "oscar", "ruby")


@pytest.fixture
async def many_pets(database_url: str, settings: Settings) -> None:
    """Thousands of one owner's pets (a few of others'), with the planner's statistics of them: what a caller
    with many records searches, where the owner's index holds nearly every row."""
    await wipe(database_url)
    rows = [
        pet_row(f"{WORDS[number % len(WORDS)]} {number}", owner=OWNER if number % 50 else "bob@example.com")
        for number in range(SEARCHED_PETS)
    ]
    store = open_store(settings)
    try:
        async with store.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, rows)
    finally:
        await store.close()
    if not database_url.startswith("sqlite"):
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute("ANALYZE pets")
        finally:
            await connection.close()


@pytest.mark.usefixtures("many_pets")
@pytest.mark.parametrize("name", list(SEARCHES))
@pytest.mark.parametrize("part", ["page", "count"])
async def test_a_search_of_three_characters_reads_the_trigram_index(database_url: str, name: str, part: str) -> None:
    """`search` with a literal run of three or more characters reads its candidates from the trigram index
    (the FTS5 table, first, on SQLite; the GIN index on PostgreSQL), then only those records, by rowid or
    by their tuple ids on PostgreSQL, with the pattern itself checked on each. The statement's shape fixes
    that order, whatever the planner estimates a pattern to match."""
    collection, conditions = SEARCHES[name]
    search = _trigram_search(database_url)
    query = PageQuery(conditions=conditions, sort=BY_CREATED, limit=20, offset=0)
    statement = (
        list_statement(collection, query, search=search)
        if part == "page"
        else count_statement(collection, conditions, search=search)
    )
    table = collection.table.name
    # A table of a few thousand rows, or the few vaccines of a catalogue, PostgreSQL would rather scan.
    plan = await _plan(database_url, *statement, forbid=("enable_seqscan",))
    if database_url.startswith("sqlite"):
        assert plan.startswith(f"SCAN {table}_search VIRTUAL TABLE"), plan
        assert f"SEARCH {table} USING INTEGER PRIMARY KEY (rowid=?)" in plan, plan
        return
    assert re.search(rf"Bitmap Index Scan on {SEARCH_INDEXES[table]}\b", plan), plan
    # Then by tuple id (or the same bitmap again): never a walk of a B-tree index of the table, filtering.
    assert not re.search(r"Index (Only )?Scan using", plan), plan


@pytest.mark.parametrize("pattern", ["%re%", "%r%", "%re%ab%", "%r_x%"])
async def test_a_shorter_search_leaves_the_trigram_index_alone(database_url: str, pattern: str) -> None:
    """With no literal run of three characters there is no trigram to look up: such a search reads the owner's
    index as before, bounded by the statement timeout (tests/api/test_statement_timeout.py)."""
    conditions = (OWNED, _searched(pattern))
    plan = await _plan(
        database_url,
        *count_statement(PET_RECORDS, conditions, search=_trigram_search(database_url)),
        forbid=("enable_seqscan",),
    )
    assert "pets_search" not in plan, plan
    assert "ix_pets_owner_id" in plan, plan


@pytest.mark.only_on("postgresql")
@pytest.mark.usefixtures("many_pets")
@pytest.mark.parametrize("pattern", ["%r%", "%zq%"])
async def test_a_long_reads_slice_of_the_whole_table_reads_its_range_of_blocks_alone(
    database_url: str, pattern: str
) -> None:
    """Where the records a long read's count checks are nearly the whole table (an owner with nearly every record,
    searching what no index serves), each of its slices reads one range of the table's blocks (a TID range scan),
    not the table again. Where an index narrows them (an owner with few of the records), the count does not read
    the table by ranges of blocks, which would read all of it."""
    conditions = (OWNED, _searched(pattern))
    statement, values = matching_rows_statement(PET_RECORDS, conditions, search=TrigramSearch.GIN)
    assert isinstance(statement, sa.Select)
    in_blocks = _counted_in_blocks(statement, PET_RECORDS.table)
    few = (Condition(("owner_id",), Operator.EQUAL, ("bob@example.com",)), _searched(pattern))
    connection = await asyncpg.connect(database_url)
    try:
        assert await _scope_reads_whole_table(connection, PET_RECORDS, conditions)
        assert not await _scope_reads_whole_table(connection, PET_RECORDS, few)
        arguments = _arguments(in_blocks, values | {"first_row": (8, 0), "past_row": (16, 0)})
        sliced = " | ".join(row[0] for row in await connection.fetch(f"EXPLAIN {in_blocks[0]}", *arguments))
    finally:
        await connection.close()
    assert "Tid Range Scan on pets" in sliced, sliced
    assert "Seq Scan" not in sliced, sliced


def test_a_plan_reads_a_table_whole_where_a_sequential_scan_of_it_is_among_its_nodes() -> None:
    def scan(node: str, relation: str, *children: dict[str, Any]) -> dict[str, Any]:
        return {"Node Type": node, "Relation Name": relation, "Plans": list(children)}

    parallel = [
        {"Plan": {"Node Type": "Aggregate", "Plans": [{"Node Type": "Gather", "Plans": [scan("Seq Scan", "pets")]}]}}
    ]
    assert _reads_whole_table(parallel, "pets")
    assert not _reads_whole_table(parallel, "vaccines")
    bitmap = [{"Plan": scan("Bitmap Heap Scan", "pets", {"Node Type": "Bitmap Index Scan"})}]
    assert not _reads_whole_table(bitmap, "pets")
    joined = [{"Plan": {"Node Type": "Hash Join", "Plans": [scan("Index Scan", "pets"), scan("Seq Scan", "shares")]}}]
    assert not _reads_whole_table(joined, "pets")


EACH_FORMS = {Operator.SHARED: Operator.SHARED_EACH, Operator.OWNED_OR_SHARED: Operator.OWNED_OR_SHARED_EACH}


@pytest.mark.parametrize("name", list(GRANTEE_QUERIES))
async def test_a_grantees_page_walked_in_order_looks_each_record_up(database_url: str, name: str) -> None:
    """The page that walks its order (Operator.SHARED_EACH, OWNED_OR_SHARED_EACH: the store's choice when the shared
    records are a large part of all) looks each record it passes up in the shares by the record's key. PostgreSQL
    would rather hash every share of the grantees first, whatever the page's LIMIT: at 95,000 shares of a clinic,
    50-70 ms for a page that passes fifty records, 0.2 ms looked up."""
    collection, conditions = GRANTEE_QUERIES[name]
    each = tuple(
        msgspec.structs.replace(c, operator=EACH_FORMS[c.operator]) if c.operator in EACH_FORMS else c
        for c in conditions
    )
    sort = (SortKey("due_at"), SortKey("id")) if collection is VACCINATIONS else BY_CREATED
    statement = list_statement(collection, PageQuery(conditions=each, sort=sort, limit=20, offset=0))
    plan = await _plan(database_url, *statement, forbid=())
    if database_url.startswith("sqlite"):
        assert "CORRELATED" in plan, plan
        return
    assert "SubPlan" in plan, plan
    assert "hashed SubPlan" not in plan, plan


@pytest.mark.parametrize("with_own", [False, True], ids=["shared", "own or shared"])
async def test_a_grantees_count_up_to_an_instant_leads_with_the_records_of_its_hour_in_any_plan(
    database_url: str, with_own: bool
) -> None:
    """The count of a clinic's overdue vaccinations reads the kept counts of the whole periods before the bound, and
    the records of the bound's own hour with their shares: each of the hour's records (by the due-date index) is
    looked up in the shares by its pet. On PostgreSQL in the plan made for any value too (the plan a cached prepared
    statement takes after five runs), which led with every share of the grantee when the two were joined: 300 ms a
    count at a clinic with 95,000 shares, where a plan made for each run's values took 2-3 ms to make."""
    shared = grants.SharedCount(now=NOW, grantees=(VET,), below=NOW, at_least=NOW - 30 * DAY_MS, with_own=with_own)
    statement = grants.shared_count_select(VACCINATIONS, 1, below=True, at_least=True, with_own=with_own)
    values = grants.shared_count_values(VACCINATIONS, shared, [VET])
    if database_url.startswith("sqlite"):
        plan = await _plan(database_url, statement, values, forbid=())
        assert "CORRELATED SCALAR SUBQUERY" in plan, plan
        assert "SEARCH pet_vaccinations USING INDEX ix_pet_vaccinations_due_at_id" in plan, plan
        return
    plan = await _generic_plan(database_url, statement, values)
    # For each bound: the hour's records by the number of their hour (a bitmap of it, with the due-date index too or
    # not, or a scan of it), and for each of them, its shares by its pet.
    each_looked_up = (
        r"Scan (?:on|using) ix_pet_vaccinations_due_at_hour[^|]*\|(?:[^|]*\|){0,4}?\s+SubPlan \d+ \|"
        r"\s+->  Aggregate[^|]*\|"
        r"\s+->  Index (Only )?Scan using \w+ on pet_shares[^|]*\|"
        r"\s+Index Cond: \([^|]*pet_id = pet_vaccinations(_\d)?\.pet_id"
    )
    assert len(re.findall(each_looked_up, plan)) == 2, plan


PLANNED_PETS = 12_000
"""Pets of 2,000 owners, each with five vaccinations due over twenty years, half of them shared (with a clinic's
group, or one of 1,000 users): a clinic's records in the shape bench/shares.py gives them, at a fiftieth of the
size. Enough that a range of two unknown due dates (a two-hundredth of the vaccinations, 300) costs more to look up
in the shares than the plans made for each run's values do."""


@pytest.fixture(params=[(21, 2000), (3, 1)], ids=["due over 21 years", "due over 3 years, one owner"])
async def many_due_dates(database_url: str, request: pytest.FixtureRequest) -> None:
    """PLANNED_PETS pets, their vaccinations and shares, the kept counts of them, and the planner's statistics; the
    due dates spread over the years the parameter gives (the last after NOW), the pets among its number of owners."""
    years, owners = request.param
    await wipe(database_url)
    # Each statement with its arguments; $1 is always NOW.
    statements: list[tuple[str, list[Any]]] = [
        # Pets (parameter 2) among owners (parameter 3).
        (
            "INSERT INTO pets (id, created_at, created_by, modified_at, modified_by, owner_id, name, name_key, "
            "pet_type, revision) SELECT gen_random_uuid(), $1, o, $1, o, o, 'rex ' || n, 'rex ' || n, 'Dog', 1 "
            "FROM generate_series(1, $2::int) AS g(n), "
            "LATERAL (SELECT 'owner' || n % $3::int || '@example.com' AS o) x",
            [NOW, PLANNED_PETS, owners],
        ),
        # One vaccine for them all.
        (
            "INSERT INTO vaccines (id, created_at, created_by, modified_at, modified_by, name, name_key, pet_type, "
            "duration, revision) VALUES (gen_random_uuid(), $1, 'admin@example.com', $1, 'admin@example.com', "
            "'Rabies', 'rabies', 'Dog', 365, 1)",
            [NOW],
        ),
        # Every other pet shared: with the clinic's group, or with one of 1,000 users.
        (
            "INSERT INTO pet_shares (id, created_at, created_by, modified_at, modified_by, owner_id, pet_id, grantee, "
            "access, expires_at, revision) SELECT gen_random_uuid(), $1, owner_id, $1, owner_id, owner_id, id, "
            "CASE WHEN random() < 0.5 THEN 'group:clinic-42' ELSE 'user' || (random() * 1000)::int || "
            "'@example.com' END, 'read', NULL, 1 FROM pets WHERE random() < 0.5",
            [NOW],
        ),
        # Five vaccinations a pet, due in hours spread over the years (parameter 2) before the instant and the year
        # after.
        (
            "INSERT INTO pet_vaccinations (id, created_at, created_by, modified_at, modified_by, owner_id, pet_id, "
            "vaccine_id, applied_at, due_at, notes, revision) SELECT gen_random_uuid(), $1, owner_id, $1, owner_id, "
            "owner_id, pet_id, vaccine_id, due - 86400000, due, NULL, 1 FROM (SELECT p.owner_id, p.id AS pet_id, "
            "v.id AS vaccine_id, $1 + 365 * 86400000::bigint - (random() * $2::int * 365 * 24)::bigint * 3600000 "
            "- (random() * 3600000)::bigint AS due FROM pets p, generate_series(1, 5), vaccines v) AS doses",
            [NOW, years],
        ),
    ]
    counts = [*period_count_inserts(VACCINATIONS), *grants.grant_count_inserts(PET_SHARES.collection, now=NOW)]
    connection = await asyncpg.connect(database_url)
    try:
        for statement, arguments in statements:
            await connection.execute(statement, *arguments)
        for insert in counts:
            sql, names, fixed = _compiled(insert)
            await connection.execute(sql, *(fixed[name] for name in names))
        await connection.execute("ANALYZE")
    finally:
        await connection.close()


COUNTS_UP_TO_AN_INSTANT = {
    "an admin's overdue vaccinations": lambda: count_statement(VACCINATIONS, (OVERDUE,)),
    "a vet's overdue vaccinations, own or shared": lambda: _clinic_count(with_own=True),
    "what is overdue among a clinic's patients": lambda: _clinic_count(with_own=False),
}


def _clinic_count(*, with_own: bool) -> Statement:
    shared = grants.SharedCount(now=NOW, grantees=VETS_GRANTEES[::-1], below=NOW, with_own=with_own)
    statement = grants.shared_count_select(VACCINATIONS, 2, below=True, at_least=False, with_own=with_own)
    return statement, grants.shared_count_values(VACCINATIONS, shared, list(VETS_GRANTEES[::-1]))


@pytest.mark.long  # sixty thousand vaccinations written, with their shares and counts, for each parameter
@pytest.mark.only_on("postgresql")
@pytest.mark.usefixtures("many_due_dates")
async def test_a_prepared_count_up_to_an_instant_keeps_the_plan_for_any_value(database_url: str) -> None:
    """PostgreSQL plans a prepared statement with each run's values five times, then keeps the plan it made for any
    value if that plan is expected to cost no more: else it plans every run again. A count up to an instant reads
    the records of the instant's hour by the hour's number (tables.hour_indexed), which the plan for any value
    expects to be a few; by their range it expected a two-hundredth of the table, and a clinic's count was planned
    for every request (1.4 ms at 1,000,000 vaccinations, for 0.6 ms of running it). With the records of one owner
    due over three years (the benchmark's), the plans made for seen values expected fewer rows of the kept counts
    than the plan for any value, and every run was planned again (0.5-0.85 ms, for 0.14-0.5 ms of running it): the
    values are unseen by the planner (counts.Unseen)."""
    plans: dict[str, dict[str, int]] = {}
    connection = await asyncpg.connect(database_url)
    try:
        for name, make in COUNTS_UP_TO_AN_INSTANT.items():
            statement, values = make()
            sql, names, fixed = _compiled(statement)
            arguments = [{**fixed, **values}[parameter] for parameter in names]
            prepared = await connection.prepare(sql)
            totals = {await prepared.fetchval(*arguments) for _ in range(12)}
            assert len(totals) == 1, (name, totals)
            row = await connection.fetchrow(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = $1", prepared.get_name()
            )
            plans[name] = dict(row)
    finally:
        await connection.close()
    assert plans == {name: {"generic_plans": 7, "custom_plans": 5} for name in COUNTS_UP_TO_AN_INSTANT}
