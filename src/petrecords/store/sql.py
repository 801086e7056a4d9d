"""Statements over the declared collections, and the transaction logic both SQL stores run them with.

Statements are built once per collection and query shape (which conditions, how many values each has, the
sort) with named parameters, and reused: building and hashing a SQLAlchemy statement for every request costs
more than running it. Each store compiles each statement once for its database and runs it on its driver.
"""

from __future__ import annotations

import abc
import collections
import enum
import functools
import itertools
import random
import uuid
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import partial
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.db import head_revision
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import (
    Change,
    Collection,
    Condition,
    Cursor,
    Join,
    Lock,
    NewChange,
    Operator,
    PageQuery,
    Row,
    SortKey,
    Store,
    StoredResponse,
    Transaction,
)
from petrecords.store.faults import DATABASE_ERRORS, raise_translated
from petrecords.store.pages import BLOCK, PageAnchors, SortKeyValues, seek_position, uniform_direction
from petrecords.tables import (
    ALL_OWNERS,
    SHARED,
    changes,
    idempotency_keys,
    record_counts,
    search_table_name,
    service_state,
)

Statement = tuple[sa.ClauseElement, dict[str, Any]]
"""A statement and the values of its parameters."""


def _values_of(table: sa.Table, *, but: tuple[str, ...] = ()) -> dict[str, sa.BindParameter[Any]]:
    """A named parameter for each column of `table` (by the column's name), for VALUES or SET."""
    return {column.name: sa.bindparam(column.name, type_=column.type) for column in table.c if column.name not in but}


def _uuid(value: Any) -> Any:
    """A stored UUID as a UUID, whichever form the driver returned it in (SQLite's is hex)."""
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(hex=value)


class Reader:
    """How the rows of a table's queries become Rows: its own columns, then each join's."""

    def __init__(self, table: sa.Table, joins: tuple[Join, ...] = ()) -> None:
        self.columns: list[sa.ColumnElement[Any]] = list(table.c)
        self._names = [column.name for column in table.c]
        self._uuid_names = [column.name for column in table.c if isinstance(column.type, sa.Uuid)]
        self._joins = [(join.name, reader_of(join.target)) for join in joins]
        self.from_clause: sa.FromClause = table
        for join in joins:
            target = join.target.table
            self.columns.extend(target.c)
            self.from_clause = self.from_clause.join(target, target.c.id == table.c[join.column])

    @property
    def width(self) -> int:
        return len(self._names)

    def row(self, values: Sequence[Any], start: int = 0) -> Row:
        row: Row = dict(zip(self._names, values[start : start + self.width], strict=True))
        for name in self._uuid_names:
            if (value := row[name]) is not None:
                row[name] = _uuid(value)
        offset = start + self.width
        for name, reader in self._joins:
            row[name] = reader.row(values, offset)
            offset += reader.width
        return row


@functools.lru_cache(maxsize=64)
def reader_of(collection: Collection) -> Reader:
    """The reader of a collection's records, with their joined records."""
    return Reader(collection.table, collection.joins)


@functools.lru_cache(maxsize=64)
def table_reader(table: sa.Table) -> Reader:
    """The reader of a table's own columns."""
    return Reader(table)


@functools.lru_cache(maxsize=256)
def select_by_id(collection: Collection) -> sa.Select[Any]:
    reader = reader_of(collection)
    table = collection.table
    record_id = sa.bindparam("record_id", type_=table.c.id.type)
    return sa.select(*reader.columns).select_from(reader.from_clause).where(table.c.id == record_id)


@functools.lru_cache(maxsize=64)
def insert_statement(collection: Collection) -> sa.Insert:
    return sa.insert(collection.table).values(_values_of(collection.table))


@functools.lru_cache(maxsize=64)
def update_statement(collection: Collection) -> sa.Update:
    table = collection.table
    return (
        sa.update(table)
        .where(table.c.id == sa.bindparam("record_id", type_=table.c.id.type))
        .values(_values_of(table, but=("id",)))
    )


@functools.lru_cache(maxsize=64)
def delete_statement(collection: Collection) -> sa.Delete:
    table = collection.table
    return sa.delete(table).where(table.c.id == sa.bindparam("record_id", type_=table.c.id.type))


@functools.lru_cache(maxsize=64)
def referrers_statement(collection: Collection, column: str, *, exists: bool) -> sa.Select[Any]:
    table = collection.table
    condition = table.c[column] == sa.bindparam("record_id", type_=table.c[column].type)
    if exists:
        return sa.select(sa.literal(1)).select_from(table).where(condition).limit(1)
    return sa.select(*table.c).where(condition).order_by(table.c.id)


def record_values(collection: Collection, row: Row) -> dict[str, Any]:
    """The parameters of an insert or update: the row's value of each column of the table."""
    return {column.name: row.get(column.name) for column in collection.table.c}


_IDEMPOTENCY_KEY_IS = (idempotency_keys.c.caller == sa.bindparam("caller")) & (
    idempotency_keys.c.key == sa.bindparam("key")
)
SELECT_IDEMPOTENT_RESPONSE = sa.select(
    idempotency_keys.c.resource,
    idempotency_keys.c.request_hash,
    idempotency_keys.c.status,
    idempotency_keys.c.body,
    idempotency_keys.c.location,
    idempotency_keys.c.etag,
    idempotency_keys.c.expires_at,
).where(_IDEMPOTENCY_KEY_IS)
_EXPIRED_IDEMPOTENCY_KEYS = (
    sa.select(idempotency_keys.c.caller, idempotency_keys.c.key)
    .where(idempotency_keys.c.expires_at <= sa.bindparam("now_ms"))
    .limit(sa.bindparam("limit"))
)
PURGE_EXPIRED_IDEMPOTENCY_KEYS = sa.delete(idempotency_keys).where(
    sa.tuple_(idempotency_keys.c.caller, idempotency_keys.c.key).in_(_EXPIRED_IDEMPOTENCY_KEYS)
)

# Alembic's own table, which tables.py does not describe.
SCHEMA_VERSION = sa.select(sa.column("version_num", sa.String())).select_from(sa.table("alembic_version"))


def idempotency_upsert(insert: Callable[[sa.Table], Any]) -> sa.Insert:
    """Keep a response for a key, over an expired one kept before, with the dialect's INSERT … ON CONFLICT."""
    statement = insert(idempotency_keys).values(_values_of(idempotency_keys))
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[idempotency_keys.c.caller, idempotency_keys.c.key],
        set_={column.name: statement.excluded[column.name] for column in idempotency_keys.c if not column.primary_key},
    )
    return upsert


def count_upsert(insert: Callable[[sa.Table], Any], *, slot: sa.ColumnElement[int] | None = None) -> sa.Insert:
    """The change of kept counts, with the dialect's INSERT that supports ON CONFLICT DO UPDATE; in the slot that
    `slot` says, if given, else in the slot of the `slot` parameter."""
    values: dict[str, Any] = _values_of(record_counts)
    if slot is not None:
        values["slot"] = slot
    # Inline: without it, a slot that the database computes would be returned (as part of the key), for nothing.
    statement = insert(record_counts).values(values).inline()
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[
            record_counts.c.resource,
            record_counts.c.scope,
            record_counts.c.partition,
            record_counts.c.slot,
        ],
        set_={
            "count": record_counts.c.count + statement.excluded.count,
            "writes": record_counts.c.writes + statement.excluded.writes,
        },
    )
    return upsert


# The data's version: it grows with every write through any instance (see tables.record_counts).
WRITES_VERSION = sa.select(sa.func.coalesce(sa.func.sum(record_counts.c.writes), 0)).where(
    record_counts.c.scope == ALL_OWNERS
)


# --- the change log ----------------------------------------------------------------------------------

CHANGE_COLUMNS = (
    changes.c.xid,
    changes.c.position,
    changes.c.resource,
    changes.c.record_id,
    changes.c.action,
    changes.c.version,
    changes.c.at,
    changes.c.by,
    changes.c.owner_before,
    changes.c.owner_after,
    changes.c.record,
)
_change_cursor = sa.tuple_(changes.c.xid, changes.c.position)
AFTER_XID = sa.bindparam("after_xid", type_=sa.BigInteger())
AFTER_POSITION = sa.bindparam("after_position", type_=sa.BigInteger())
AFTER_CURSOR = _change_cursor > sa.tuple_(AFTER_XID, AFTER_POSITION)
_OF_RECORD = (changes.c.resource == sa.bindparam("resource")) & (
    changes.c.record_id == sa.bindparam("record_id", type_=changes.c.record_id.type)
)
SELECT_HISTORY = (
    sa.select(*CHANGE_COLUMNS)
    .where(_OF_RECORD)
    .order_by(changes.c.version)
    .limit(sa.bindparam("limit"))
    .offset(sa.bindparam("offset"))
)
COUNT_HISTORY = sa.select(sa.func.count()).select_from(changes).where(_OF_RECORD)
SELECT_LAST_CHANGE = sa.select(*CHANGE_COLUMNS).where(_OF_RECORD).order_by(changes.c.version.desc()).limit(1)
_STATE_IS = service_state.c.name == sa.bindparam("name")
SELECT_STATE_CURSOR = sa.select(service_state.c.xid, service_state.c.position).where(_STATE_IS)


def change_insert(xid: sa.ColumnElement[int]) -> sa.Insert:
    """Keep one change, with the dialect's id of the writing transaction."""
    values = _values_of(changes, but=("position", "xid"))
    # Inline: the position the database gives it is not returned, as nothing reads it.
    return sa.insert(changes).values(xid=xid, **values).inline()


Horizon = sa.ColumnElement[int] | None
"""The first transaction id that a transaction still in flight may hold; None where every change has the same
transaction id (SQLite's one writer: 0), and the position alone orders the log."""


def _past_cursor(horizon: Horizon) -> list[Any]:
    """The changes after a cursor, as the start of a range of the (xid, position) index or of an owner's."""
    if horizon is None:
        # Equalities and one range on the position: SQLite seeks a row-value range only on the columns its
        # other bound names too, and read every change (of the owner) from the first to find those after the
        # cursor: 13 ms a poll at 200,000 changes, 0.8 ms this way. A cursor with another xid matches no change
        # either way.
        return [changes.c.xid == AFTER_XID, changes.c.position > AFTER_POSITION]
    return [AFTER_CURSOR]


def _below(horizon: Horizon) -> list[Any]:
    return [] if horizon is None else [changes.c.xid < horizon]


def after_cursor(horizon: Horizon, owner: tuple[sa.Column[Any], sa.ColumnElement[Any]] | None = None) -> list[Any]:
    """The changes after a cursor and below the horizon, as one range of the (xid, position) index, or of an
    owner's (owner, xid, position) index."""
    if owner is None:
        return [*_past_cursor(horizon), *_below(horizon)]
    if horizon is None:
        return [owner[0] == owner[1], *_past_cursor(None)]
    # One owner's changes as one range of that owner's index, bounded on its leading column and read in its
    # order. Written as `owner = value`, PostgreSQL's generic plan of the prepared statement, which cannot tell a
    # rare owner from a common one, walked the whole (xid, position) index instead.
    column, value = owner
    return [
        sa.tuple_(column, changes.c.xid, changes.c.position) > sa.tuple_(value, AFTER_XID, AFTER_POSITION),
        sa.tuple_(column, changes.c.xid) < sa.tuple_(value, horizon),
    ]


def changes_after_select(horizon: Horizon, *, by_reader: bool, resources: int | None) -> sa.Select[Any]:
    """The changes after a cursor, below `horizon`, in order. For a reader: the union of three index ranges
    (shared records, records they own after the write, records they owned before it), each read in order, so
    that the few changes of one caller among many are found without reading the others."""

    def branch(owner: tuple[sa.Column[Any], sa.ColumnElement[Any]] | None = None) -> sa.Select[Any]:
        where = after_cursor(horizon, owner)
        order: tuple[sa.ColumnElement[Any], ...] = (changes.c.xid, changes.c.position)
        if owner is not None:
            order = (owner[0], *order)
        if resources is not None:
            # For one owner, compared as an expression, so that no index of `resource` can serve it: the owner's
            # range is the one to read. Given the choice, SQLite read every change of the resource through the
            # history's index (70 ms at 200,000 changes) to find a reader who has none.
            resource: sa.ColumnElement[Any] = changes.c.resource
            if owner is not None:
                resource = resource.op("||")(sa.literal("", changes.c.resource.type))
            where.append(resource.in_([sa.bindparam(f"resource_{i}") for i in range(resources)]))
        return sa.select(*CHANGE_COLUMNS).where(*where).order_by(*order).limit(sa.bindparam("limit"))

    if not by_reader:
        return branch()
    reader: sa.BindParameter[str] = sa.bindparam("reader")
    branches = (
        branch((changes.c.owner_after, sa.literal(SHARED, changes.c.owner_after.type))),
        branch((changes.c.owner_after, reader)),
        branch((changes.c.owner_before, reader)),
    )
    # A change of a record the reader owned before and after is in the last two ranges: UNION keeps it once
    # (filtering it out of the last range instead made PostgreSQL read that range whole, with a sort).
    union = sa.union(*(sa.select(*one.subquery().c) for one in branches)).subquery()
    return sa.select(*union.c).order_by(union.c.xid, union.c.position).limit(sa.bindparam("limit"))


def changes_seen_by_select(
    horizon: Horizon, readers_in: Callable[[sa.ColumnElement[Any]], sa.ColumnElement[bool]]
) -> sa.Select[Any]:
    """The changes after a cursor and at or before another, in order, that any of a set of callers may see: of
    shared records, or of records one of them owned before or after the write (`readers_in`: whether a column
    holds one of them, in the dialect's form of a list given as one parameter). The range is read whole (a live
    hub's poll: a fraction of a second of the log) and filtered, so that only the changes some subscriber may
    see come out of the database. The upper bound is a cursor read before, under the horizon: nothing up to it
    is in flight any more, so no bound on the horizon is needed."""
    through_position = sa.bindparam("through_position", type_=sa.BigInteger())
    if horizon is None:
        through = changes.c.position <= through_position
    else:
        through = _change_cursor <= sa.tuple_(sa.bindparam("through_xid", type_=sa.BigInteger()), through_position)
    cursor_range = [*_past_cursor(horizon), through]
    # The owners as expressions, which no index serves: the range of the log is the one to read, however many
    # changes the planner thinks these callers have (a generic plan cannot know).
    owner_after, owner_before = (
        column.op("||")(sa.literal("", column.type)) for column in (changes.c.owner_after, changes.c.owner_before)
    )
    seen = sa.or_(
        owner_after == sa.literal(SHARED, changes.c.owner_after.type), readers_in(owner_after), readers_in(owner_before)
    )
    return (
        sa.select(*CHANGE_COLUMNS)
        .where(*cursor_range, seen)
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


def changes_values(cursor: Cursor, limit: int, reader: str | None, resources: tuple[str, ...] | None) -> dict[str, Any]:
    """The values of the parameters of `changes_after_select`."""
    values: dict[str, Any] = {"after_xid": cursor[0], "after_position": cursor[1], "limit": limit}
    if reader is not None:
        values["reader"] = reader
    values.update({f"resource_{i}": name for i, name in enumerate(resources or ())})
    return values


def head_select(horizon: Horizon) -> sa.Select[Any]:
    return (
        sa.select(changes.c.xid, changes.c.position)
        .where(*_below(horizon))
        .order_by(changes.c.xid.desc(), changes.c.position.desc())
        .limit(1)
    )


def oldest_changes_select(horizon: Horizon) -> sa.Select[Any]:
    return (
        sa.select(changes.c.xid, changes.c.position, changes.c.at)
        .where(*_below(horizon))
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


def committed_after_select(horizon: Horizon) -> sa.Select[Any]:
    """The cursors of the changes after a cursor, committed whether or not past the horizon."""
    return (
        sa.select(changes.c.xid, changes.c.position)
        .where(*_past_cursor(horizon))
        .order_by(changes.c.xid, changes.c.position)
        .limit(sa.bindparam("limit"))
    )


def count_after_select(horizon: Horizon) -> sa.Select[Any]:
    """How many changes follow a cursor, committed whether or not past the horizon."""
    return sa.select(sa.func.count()).select_from(changes).where(*_past_cursor(horizon))


PURGE_CHANGES = sa.delete(changes).where(
    _change_cursor
    <= sa.tuple_(
        sa.bindparam("through_xid", type_=sa.BigInteger()), sa.bindparam("through_position", type_=sa.BigInteger())
    )
)


def state_upserts(insert: Callable[[sa.Table], Any]) -> tuple[sa.Insert, sa.Insert]:
    """(set a cursor, take a lease) in the dialect's INSERT … ON CONFLICT."""
    cursor_values: dict[str, Any] = {
        "name": sa.bindparam("name"),
        "xid": sa.bindparam("xid"),
        "position": sa.bindparam("position"),
    }
    set_cursor = insert(service_state).values(cursor_values)
    set_cursor = set_cursor.on_conflict_do_update(
        index_elements=[service_state.c.name],
        set_={"xid": set_cursor.excluded.xid, "position": set_cursor.excluded.position},
    )
    lease_values: dict[str, Any] = {
        "name": sa.bindparam("name"),
        "holder": sa.bindparam("holder"),
        "lease_until": sa.bindparam("until"),
    }
    lease = insert(service_state).values(lease_values)
    lease = lease.on_conflict_do_update(
        index_elements=[service_state.c.name],
        set_={"holder": lease.excluded.holder, "lease_until": lease.excluded.lease_until},
        where=(service_state.c.lease_until < sa.bindparam("now")) | (service_state.c.holder == lease.excluded.holder),
    ).returning(service_state.c.holder)
    return set_cursor, lease


SET_LEASED_CURSOR = (
    sa.update(service_state)
    .where(_STATE_IS, service_state.c.holder == sa.bindparam("holder"))
    .values(xid=sa.bindparam("xid"), position=sa.bindparam("position"))
    .returning(service_state.c.name)
)


def change_of(row: Sequence[Any]) -> Change:
    """A change from the columns of CHANGE_COLUMNS, in order."""
    xid, position, resource, record_id, action, version, at, by, owner_before, owner_after, record = row
    return Change(
        cursor=(xid, position),
        resource=resource,
        record_id=_uuid(record_id),
        action=action,
        version=version,
        at=at,
        by=by,
        owner_before=owner_before,
        owner_after=owner_after,
        record=bytes(record),
    )


# --- lists and counts ------------------------------------------------------------------------------

Shape = tuple[tuple[tuple[str, ...], Operator, int, bool], ...]
"""What a list's conditions look like, without their values: which columns, which operator, how many values,
and whether a trigram index could give the candidates (one LIKE pattern with a literal run of three or more
characters)."""

TRIGRAM = 3
"""The characters of a trigram: the shortest literal run of a pattern that a trigram index can look up."""


def trigram_runs(pattern: str) -> list[str]:
    """The literal runs of a LIKE pattern (escape `\\`) that are long enough to look up by their trigrams:
    the text between wildcards, with its escapes resolved. A value that matches holds each of them."""
    runs, current, index = [], [], 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            current.append(pattern[index + 1])
            index += 2
            continue
        if char in "%_":
            runs.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    runs.append("".join(current))
    return [run for run in runs if len(run) >= TRIGRAM]


def fts5_query(pattern: str) -> str:
    """An FTS5 query for the rows that hold every trigram run of `pattern`: one quoted phrase per run (the
    trigram tokenizer reads a phrase as a substring), so that nothing in the text is read as query syntax."""
    return " AND ".join('"' + run.replace('"', '""') + '"' for run in trigram_runs(pattern))


def _by_trigrams(condition: Condition) -> bool:
    return (
        condition.operator is Operator.LIKE and len(condition.values) == 1 and bool(trigram_runs(condition.values[0]))
    )


def shape_of(conditions: tuple[Condition, ...]) -> Shape:
    return tuple(
        (condition.columns, condition.operator, len(condition.values), _by_trigrams(condition))
        for condition in conditions
    )


def condition_values(conditions: tuple[Condition, ...]) -> dict[str, Any]:
    return {
        f"c{index}_{position}": value
        for index, condition in enumerate(conditions)
        for position, value in enumerate(condition.values)
    }


class TrigramSearch(enum.Enum):
    """How a database reads the candidates of a substring pattern over a collection's searchable columns from
    their trigram index: first, whatever the planner estimates the pattern's matches to be (PostgreSQL's
    generic plan takes a pattern to match 0.5 % of the rows, and would rather walk the page's order and filter,
    which reads every row of a caller's when few match), then only those records, where the other conditions
    and the pattern itself are checked."""

    GIN = "gin"
    """PostgreSQL: the tuple ids of the pattern's matches from the GIN (pg_trgm) indexes, gathered once (an
    InitPlan), then read by tuple id, in the statement's own snapshot."""
    FTS5 = "fts5"
    """SQLite: the matches of the collection's FTS5 trigram table, joined to the records by rowid."""


def _trigram_values(
    collection: Collection, conditions: tuple[Condition, ...], search: TrigramSearch | None
) -> dict[str, Any]:
    """The value of the FTS5 query that `_narrowed_source` adds, if it adds one."""
    if search is TrigramSearch.FTS5 and collection.searchable:
        for index, condition in enumerate(conditions):
            if condition.columns == collection.searchable and _by_trigrams(condition):
                return {f"c{index}_trigrams": fts5_query(condition.values[0])}
    return {}


def _narrowed_source(
    collection: Collection, shape: Shape, source: sa.FromClause, search: TrigramSearch | None
) -> tuple[sa.FromClause, list[sa.ColumnElement[bool]]]:
    """The FROM of a list or count, and the conditions it adds, with the trigram index that serves its first
    pattern over the collection's searchable columns (the pattern's own condition still decides)."""
    if search is None or not collection.searchable:
        return source, []
    table = collection.table
    for index, (columns, operator, count, by_trigrams) in enumerate(shape):
        if not by_trigrams or columns != collection.searchable:
            continue
        if search is TrigramSearch.GIN:
            candidates = table.alias("candidates")
            matching = _condition(candidates, index, columns, operator, count, by_trigrams)
            tuple_ids: sa.Select[Any] = (
                sa.select(sa.literal_column("candidates.ctid")).select_from(candidates).where(matching)
            )
            tuple_id: sa.ColumnElement[Any] = sa.literal_column(f"{table.name}.ctid")
            return source, [tuple_id == sa.func.any(sa.func.array(tuple_ids.scalar_subquery()))]
        name = search_table_name(table.name)
        index_table = sa.table(name, sa.column("rowid", sa.Integer()))
        rowid = sa.literal_column(f"{table.name}.rowid", sa.Integer())
        match = sa.literal_column(name).op("MATCH", is_comparison=True)(sa.bindparam(f"c{index}_trigrams"))
        return sa.join(index_table, source, rowid == index_table.c.rowid), [match]
    return source, []


def _condition(
    table: sa.FromClause, index: int, columns: tuple[str, ...], operator: Operator, count: int, _by_trigrams: bool
) -> sa.ColumnElement[bool]:
    def value(position: int, column: str) -> sa.BindParameter[Any]:
        column_type = table.c[column].type
        if isinstance(column_type, sa.Integer) and not isinstance(column_type, sa.BigInteger):
            # A filter's bound may be any safe integer, beyond the 32 bits of such a column on PostgreSQL, whose
            # driver refuses to send it as one; compared as 64 bits, it simply matches or not.
            column_type = sa.BigInteger()
        return sa.bindparam(f"c{index}_{position}", type_=column_type)

    first = table.c[columns[0]]
    if operator is Operator.NEVER:
        return sa.false()
    if operator is Operator.IN:
        return first.in_([value(position, columns[0]) for position in range(count)])
    if operator is Operator.LIKE:
        return sa.and_(
            *(
                sa.or_(*(table.c[column].like(value(position, column), escape="\\") for column in columns))
                for position in range(count)
            )
        )
    bound = value(0, columns[0])
    comparisons = {
        Operator.EQUAL: first == bound,
        Operator.AT_LEAST: first >= bound,
        Operator.BELOW: first < bound,
        Operator.AT_MOST: first <= bound,
    }
    return comparisons[operator]


def _conditions(table: sa.Table, shape: Shape) -> list[sa.ColumnElement[bool]]:
    return [_condition(table, index, *parts) for index, parts in enumerate(shape)]


def _sort_expressions(table: sa.Table, key: SortKey) -> list[sa.ColumnElement[Any]]:
    column = table.c[key.column]
    if key.rank is None:
        return [column]
    # SQL lower() folds only ASCII on both databases; ranked values are ordered in Python instead.
    rank = sa.case({value: index for index, value in enumerate(key.rank)}, value=column)
    return [sa.func.coalesce(rank, len(key.rank)), sa.func.lower(column)]


def _sort_columns(table: sa.Table, sort: tuple[SortKey, ...]) -> tuple[list[sa.ColumnElement[Any]], list[bool]]:
    """The expressions a list is ordered by, and whether each is descending."""
    expressions, directions = [], []
    for key in sort:
        for expression in _sort_expressions(table, key):
            expressions.append(expression)
            directions.append(key.descending)
    return expressions, directions


@functools.lru_cache(maxsize=1024)
def _list_select(
    collection: Collection,
    shape: Shape,
    sort: tuple[SortKey, ...],
    *,
    keys_only: bool,
    after: bool,
    search: TrigramSearch | None,
) -> sa.Select[Any]:
    table = collection.table
    reader = reader_of(collection)
    expressions, directions = _sort_columns(table, sort)
    source, conditions = _narrowed_source(collection, shape, table if keys_only else reader.from_clause, search)
    conditions.extend(_conditions(table, shape))
    if after:
        # Rows after a sort key: one row-value comparison, which an index on the sort columns serves.
        row = sa.tuple_(*expressions)
        key = sa.tuple_(*(sa.bindparam(f"after_{index}", type_=e.type) for index, e in enumerate(expressions)))
        conditions.append(row < key if directions[0] else row > key)
    return (
        sa.select(*(expressions if keys_only else reader.columns))
        .select_from(source)
        .where(*conditions)
        .order_by(*(e.desc() if d else e.asc() for e, d in zip(expressions, directions, strict=True)))
        .limit(sa.bindparam("limit"))
        .offset(sa.bindparam("offset"))
    )


def list_statement(
    collection: Collection,
    query: PageQuery,
    *,
    keys_only: bool = False,
    after_key: SortKeyValues | None = None,
    search: TrigramSearch | None = None,
) -> Statement:
    """The page's rows (or only their sort keys); with `after_key`, only rows after that sort key."""
    statement = _list_select(
        collection,
        shape_of(query.conditions),
        query.sort,
        keys_only=keys_only,
        after=after_key is not None,
        search=search,
    )
    values = condition_values(query.conditions) | _trigram_values(collection, query.conditions, search)
    values["limit"], values["offset"] = query.limit, query.offset
    values.update({f"after_{index}": value for index, value in enumerate(after_key or ())})
    return statement, values


def sort_directions(collection: Collection, query: PageQuery) -> list[bool]:
    return _sort_columns(collection.table, query.sort)[1]


def kept_count_scope(collection: Collection, conditions: tuple[Condition, ...]) -> tuple[str, Condition | None] | None:
    """(scope, partition condition) when the kept counts answer how many records match, else None: when the
    conditions are at most one owner and at most one set of values of the counted column."""
    scope, partitions = ALL_OWNERS, None
    for condition in conditions:
        column = condition.columns[0] if len(condition.columns) == 1 else None
        if (
            column is not None
            and column == collection.owner_column
            and condition.operator is Operator.EQUAL
            and scope == ALL_OWNERS
        ):
            scope = condition.values[0]
        elif (
            column is not None
            and column == collection.counted_by
            and condition.operator is Operator.IN
            and partitions is None
        ):
            partitions = condition
        else:
            return None
    return scope, partitions


@functools.lru_cache(maxsize=256)
def _kept_count_select(partitions: int | None) -> sa.Select[Any]:
    conditions = [record_counts.c.resource == sa.bindparam("resource"), record_counts.c.scope == sa.bindparam("scope")]
    if partitions is not None:
        conditions.append(record_counts.c.partition.in_([sa.bindparam(f"partition_{i}") for i in range(partitions)]))
    return sa.select(sa.func.coalesce(sa.func.sum(record_counts.c.count), 0)).where(*conditions)


@functools.lru_cache(maxsize=256)
def _counted_select(collection: Collection, shape: Shape, search: TrigramSearch | None) -> sa.Select[Any]:
    source, conditions = _narrowed_source(collection, shape, collection.table, search)
    conditions.extend(_conditions(collection.table, shape))
    return sa.select(sa.func.count()).select_from(source).where(*conditions)


def count_statement(
    collection: Collection, conditions: tuple[Condition, ...], *, search: TrigramSearch | None = None
) -> Statement:
    """The number of records that match: from the kept counts when the conditions allow, else counted."""
    kept = kept_count_scope(collection, conditions)
    if kept is None:
        counted = condition_values(conditions) | _trigram_values(collection, conditions, search)
        return _counted_select(collection, shape_of(conditions), search), counted
    scope, partitions = kept
    values: dict[str, Any] = {"resource": collection.name, "scope": scope}
    if partitions is not None:
        values.update({f"partition_{i}": value for i, value in enumerate(partitions.values)})
    return _kept_count_select(None if partitions is None else len(partitions.values)), values


CountChange = tuple[str, str, str, int]
"""(resource, scope, partition, change in the number of records)."""


def count_changes(
    collection: Collection, removed: Iterable[Row], added: Iterable[Row]
) -> collections.Counter[tuple[str, str, str]]:
    """What a write does to the kept counts. The every-owner rows of the partitions touched stay even when their
    count does not change: the write is counted in one of them."""
    changes: collections.Counter[tuple[str, str, str]] = collections.Counter()
    for rows, sign in ((removed, -1), (added, 1)):
        for row in rows:
            partition = str(row[collection.counted_by]) if collection.counted_by else ""
            changes[(collection.name, ALL_OWNERS, partition)] += sign
            if collection.owner_column is not None:
                changes[(collection.name, row[collection.owner_column], partition)] += sign
    return changes


class SqlTransaction(Transaction):
    """The statements of one transaction; subclasses say how to run them.

    The transaction begins on its first statement, so that a request holds no connection (or, on SQLite, the
    process's connection) while it is still reading and checking its input. The kept counts a transaction
    changes are written last, in one fixed order, so that concurrent writers lock counter rows alike and
    cannot deadlock.
    """

    page_anchors: PageAnchors
    trigram_search: TrigramSearch
    """How the database finds the candidates of a substring pattern (see TrigramSearch)."""
    counter_slots = 1
    """Rows over which each kept count is spread (see tables.record_counts); a transaction writes its count changes
    in one of them, at random unless `change_count` chooses."""
    change_count: sa.Insert
    """The dialect's `count_upsert`."""
    idempotency_insert: sa.Insert
    """The dialect's `idempotency_upsert`."""

    defers_writes = False
    """Whether writes wait for the transaction's next read or its commit, to go to the database together
    (see `_write_deferred`); else each runs when it is made."""

    def __init__(self, *, write: bool) -> None:
        self.write = write
        self.begun = False
        self._count_changes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._counted: set[tuple[str, str, str]] = set()
        self._deferred: list[tuple[sa.ClauseElement, dict[str, Any] | Sequence[dict[str, Any]]]] = []

    async def __aenter__(self) -> SqlTransaction:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        commit = exc_type is None
        try:
            if commit and self._counted:
                await self._write_counts()
            if commit and self._deferred:
                await self._write_deferred(last=True)
        except BaseException:
            commit = False
            raise
        finally:
            self._deferred.clear()
            if self.begun:
                self.begun = False
                await self._end(commit=commit)

    async def _write_deferred(self, *, last: bool) -> None:
        """Run the deferred writes, in the order they were made. `last`: nothing follows them but the commit."""
        deferred, self._deferred = self._deferred, []
        for statement, rows in deferred:
            await self._execute_now(statement, rows)

    @abc.abstractmethod
    async def _begin(self) -> None: ...

    @abc.abstractmethod
    async def _end(self, *, commit: bool) -> None: ...

    @abc.abstractmethod
    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of a query, as sequences of column values."""

    @abc.abstractmethod
    async def _execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Run a statement that returns no rows, once (with the given parameters), or once per row of them."""

    async def execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if self.defers_writes:
            self._deferred.append((statement, rows))
        else:
            await self._execute_now(statement, rows)

    async def _execute_now(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if not self.begun:
            await self._begin()
            self.begun = True
        try:
            await self._execute(statement, rows)
        except DATABASE_ERRORS as exc:
            raise_translated(exc)

    async def lock(self, locks: Sequence[Lock]) -> None:
        """Nothing to do where there is one writer (SQLite): a write transaction holds the database."""

    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        rows = await self.fetch((select_by_id(collection), {"record_id": record_id}))
        return reader_of(collection).row(rows[0]) if rows else None

    async def insert(self, collection: Collection, row: Row) -> None:
        await self.execute(insert_statement(collection), record_values(collection, row))
        self._count(count_changes(collection, (), [row]))

    async def insert_many(self, collection: Collection, rows: Sequence[Row]) -> None:
        await self.execute(insert_statement(collection), [record_values(collection, row) for row in rows])
        self._count(count_changes(collection, (), rows))

    async def update(self, collection: Collection, row: Row, *, previous: Row) -> None:
        values = record_values(collection, row)
        values["record_id"] = values.pop("id")
        await self.execute(update_statement(collection), values)
        self._count(count_changes(collection, [previous], [row]))

    async def delete(self, collection: Collection, row: Row) -> None:
        await self.execute(delete_statement(collection), {"record_id": row["id"]})
        self._count(count_changes(collection, [row], ()))

    async def referrers(self, collection: Collection, column: str, record_id: uuid.UUID) -> Sequence[Row]:
        rows = await self.fetch((referrers_statement(collection, column, exists=False), {"record_id": record_id}))
        reader = table_reader(collection.table)
        return [reader.row(row) for row in rows]

    async def has_referrer(self, collection: Collection, column: str, record_id: uuid.UUID) -> bool:
        return bool(await self.fetch((referrers_statement(collection, column, exists=True), {"record_id": record_id})))

    def _count(self, changes: collections.Counter[tuple[str, str, str]]) -> None:
        self._count_changes.update(changes)
        self._counted.update(changes)

    async def _write_counts(self) -> None:
        slot = random.randrange(self.counter_slots)  # noqa: S311 - spreads lock contention, not a secret
        keys = sorted(key for key in self._counted if self._count_changes[key] or key[1] == ALL_OWNERS)
        rows = [
            {
                "resource": resource,
                "scope": scope,
                "partition": partition,
                "slot": slot,
                "count": self._count_changes[(resource, scope, partition)],
                "writes": 0,
            }
            for resource, scope, partition in keys
        ]
        # The transaction counts itself once, in its first every-owner row: the data's version moves.
        next(row for row in rows if row["scope"] == ALL_OWNERS)["writes"] = 1
        self._count_changes.clear()
        self._counted.clear()
        await self.execute(self.change_count, rows)

    async def count(self, collection: Collection, conditions: tuple[Condition, ...]) -> int:
        return int((await self.fetch(count_statement(collection, conditions, search=self.trigram_search)))[0][0])

    async def list(self, collection: Collection, query: PageQuery) -> Sequence[Row]:
        after_key = None
        if query.offset >= BLOCK and uniform_direction(sort_directions(collection, query)):
            version = await self.data_version()
            if version is not None:
                anchors = self.page_anchors.of(version, (collection.name, query.conditions, query.sort))
                after_key, remaining = await seek_position(
                    anchors, query.offset, partial(self._key_at, collection, query)
                )
                query = msgspec.structs.replace(query, offset=remaining)
        reader = reader_of(collection)
        statement = list_statement(collection, query, after_key=after_key, search=self.trigram_search)
        return [reader.row(row) for row in await self.fetch(statement)]

    async def _key_at(
        self, collection: Collection, query: PageQuery, after_key: SortKeyValues | None, skip: int
    ) -> SortKeyValues | None:
        one_row = msgspec.structs.replace(query, limit=1, offset=skip)
        statement = list_statement(collection, one_row, keys_only=True, after_key=after_key, search=self.trigram_search)
        rows = await self.fetch(statement)
        return tuple(rows[0]) if rows else None

    async def data_version(self) -> Hashable | None:
        """A value that changes whenever the stored records may have; None when there is no cheap one."""
        return None

    # --- the change log ---------------------------------------------------------------------------------

    horizon: Horizon
    change_insert: sa.Insert
    changes_seen_by_statement: sa.Select[Any]
    """`changes_seen_by_select` in the dialect's form."""
    state_upserts: tuple[sa.Insert, sa.Insert]

    async def record_change(self, change: NewChange) -> None:
        values = msgspec.structs.asdict(change)
        await self.execute(self.change_insert, values)

    async def history(self, resource: str, record_id: uuid.UUID, *, limit: int, offset: int) -> Sequence[Change]:
        values = {"resource": resource, "record_id": record_id, "limit": limit, "offset": offset}
        return [change_of(row) for row in await self.fetch((SELECT_HISTORY, values))]

    async def count_history(self, resource: str, record_id: uuid.UUID) -> int:
        return int((await self.fetch((COUNT_HISTORY, {"resource": resource, "record_id": record_id})))[0][0])

    async def last_change(self, resource: str, record_id: uuid.UUID) -> Change | None:
        rows = await self.fetch((SELECT_LAST_CHANGE, {"resource": resource, "record_id": record_id}))
        return change_of(rows[0]) if rows else None

    async def changes_after(
        self, cursor: Cursor, *, limit: int, reader: str | None, resources: tuple[str, ...] | None
    ) -> Sequence[Change]:
        statement = _changes_after(
            self.horizon, by_reader=reader is not None, resources=None if resources is None else len(resources)
        )
        values = changes_values(cursor, limit, reader, resources)
        return [change_of(row) for row in await self.fetch((statement, values))]

    async def changes_seen_by(
        self, cursor: Cursor, *, through: Cursor, readers: Sequence[str], limit: int
    ) -> Sequence[Change]:
        values = {
            "after_xid": cursor[0],
            "after_position": cursor[1],
            "through_xid": through[0],
            "through_position": through[1],
            "readers": self.readers_value(readers),
            "limit": limit,
        }
        return [change_of(row) for row in await self.fetch((self.changes_seen_by_statement, values))]

    @staticmethod
    def readers_value(readers: Sequence[str]) -> Any:
        """A list of callers as `changes_seen_by_statement` takes it."""
        raise NotImplementedError

    async def head_cursor(self) -> Cursor:
        rows = await self.fetch((_head(self.horizon), {}))
        found = (rows[0][0], rows[0][1]) if rows else (0, 0)
        return max(found, await self.purged_through())

    async def committed_after(self, cursor: Cursor, *, limit: int) -> Sequence[Cursor]:
        values = {"after_xid": cursor[0], "after_position": cursor[1], "limit": limit}
        return [(row[0], row[1]) for row in await self.fetch((_committed_after(self.horizon), values))]

    async def count_changes_after(self, cursor: Cursor) -> int:
        values = {"after_xid": cursor[0], "after_position": cursor[1]}
        return int((await self.fetch((_count_after(self.horizon), values)))[0][0])

    async def purged_through(self) -> Cursor:
        return await self.state_cursor(PURGED)

    async def state_cursor(self, name: str) -> Cursor:
        rows = await self.fetch((SELECT_STATE_CURSOR, {"name": name}))
        return (rows[0][0], rows[0][1]) if rows else (0, 0)

    async def purge_changes(self, *, before_ms: int, limit: int) -> int:
        oldest = await self.fetch((_oldest(self.horizon), {"limit": limit}))
        expired = list(itertools.takewhile(lambda row: row[2] < before_ms, oldest))
        if not expired:
            return 0
        through = (expired[-1][0], expired[-1][1])
        await self.execute(PURGE_CHANGES, {"through_xid": through[0], "through_position": through[1]})
        await self.execute(self.state_upserts[0], {"name": PURGED, "xid": through[0], "position": through[1]})
        return len(expired)

    async def take_lease(self, name: str, *, holder: str, now_ms: int, until_ms: int) -> bool:
        values = {"name": name, "holder": holder, "until": until_ms, "now": now_ms}
        return bool(await self.fetch((self.state_upserts[1], values)))

    async def set_state_cursor(self, name: str, cursor: Cursor, *, holder: str) -> bool:
        values = {"name": name, "holder": holder, "xid": cursor[0], "position": cursor[1]}
        return bool(await self.fetch((SET_LEASED_CURSOR, values)))

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        """Make concurrent holders of the same key exclusive; the default relies on a single writer."""

    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        await self._hold_idempotency_key(caller, key)
        held = {"caller": caller, "key": key}
        rows = await self.fetch((SELECT_IDEMPOTENT_RESPONSE, held))
        if not rows:
            return None
        resource, request_hash, status, body, location, etag, expires_at = rows[0]
        if expires_at <= now_ms:
            # Free again, and replaced when the new response is kept. Not deleted here: that would be a write
            # before the request has taken the locks of what it writes (see Transaction.lock).
            return None
        return StoredResponse(
            resource=resource, request_hash=request_hash, status=status, body=bytes(body), location=location, etag=etag
        )

    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None:
        await self.execute(
            self.idempotency_insert,
            {
                "caller": caller,
                "key": key,
                "resource": response.resource,
                "request_hash": response.request_hash,
                "status": response.status,
                "body": response.body,
                "location": response.location,
                "etag": response.etag,
                "expires_at": expires_at_ms,
            },
        )

    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_IDEMPOTENCY_KEYS, {"now_ms": now_ms, "limit": limit})


class SqlStore(Store):
    """What both SQL stores share: readiness means the database answers and its schema is at head."""

    def __init__(self) -> None:
        self.head = head_revision()
        """The schema revision this version of the service runs on."""

    async def schema_is_current(self) -> bool:
        try:
            async with self.transaction(write=False) as tx:
                rows = await tx.fetch((SCHEMA_VERSION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            return False
        return bool(rows) and rows[0][0] == self.head

    @abc.abstractmethod
    def transaction(self, *, write: bool, single: bool = False, caller: str | None = None) -> SqlTransaction: ...


PURGED = "changes-purged"
"""The service state that holds the cursor of the last change retention removed."""


@functools.lru_cache(maxsize=64)
def _changes_after(horizon: Horizon, *, by_reader: bool, resources: int | None) -> sa.Select[Any]:
    return changes_after_select(horizon, by_reader=by_reader, resources=resources)


@functools.lru_cache(maxsize=8)
def _head(horizon: Horizon) -> sa.Select[Any]:
    return head_select(horizon)


@functools.lru_cache(maxsize=8)
def _oldest(horizon: Horizon) -> sa.Select[Any]:
    return oldest_changes_select(horizon)


@functools.lru_cache(maxsize=8)
def _committed_after(horizon: Horizon) -> sa.Select[Any]:
    return committed_after_select(horizon)


@functools.lru_cache(maxsize=8)
def _count_after(horizon: Horizon) -> sa.Select[Any]:
    return count_after_select(horizon)
