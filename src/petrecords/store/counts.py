"""The kept counts: how many records of each resource each owner has in each partition, and in each period of a
time column, changed in the transaction of every write (see tables.record_counts and tables.period_counts), and
read instead of a count when a list allows."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.visitors import InternalTraversal

from petrecords.store.base import (
    Collection,
    Condition,
    Operator,
    Row,
)
from petrecords.store.records import values_of
from petrecords.tables import (
    ALL_OWNERS,
    PERIOD_SIZES,
    PERIOD_SPAN,
    PERIOD_UNIT_MS,
    Text,
    hour_of,
    period_counts,
    period_of,
    record_counts,
)


class Unseen(sa.ColumnElement[Any]):
    """A parameter of a kept count whose value PostgreSQL's planner does not see: `(SELECT CAST($n AS type))` there.

    A prepared statement is planned for its values five times, then kept with a plan for any value when that plan
    is expected to cost no more than theirs. Seen, the values made the plans of a count's periods look cheaper
    than the plan for any value (the same scans of the same indexes), and PostgreSQL planned every run again:
    most of the database's work for a count. Unseen, every plan expects the same rows, and the one kept
    is used. Only for statements whose plan does not depend on their values. Elsewhere, a plain parameter."""

    inherit_cache = True
    # Read from the class by SQLAlchemy to key its cache of compiled statements; never changed.
    _traverse_internals = [("parameter", InternalTraversal.dp_clauseelement)]  # noqa: RUF012

    def __init__(self, name: str, type_: sa.types.TypeEngine[Any]) -> None:
        self.parameter = sa.bindparam(name, type_=type_)
        self.type = type_


@compiles(Unseen)
def _seen(element: Unseen, compiler: Any, **kw: Any) -> str:
    return str(compiler.process(element.parameter, **kw))


@compiles(Unseen, "postgresql")
def _unseen(element: Unseen, compiler: Any, **kw: Any) -> str:
    # Typed here: a subquery's bare parameter would be text.
    return f"(SELECT {compiler.process(sa.cast(element.parameter, element.type), **kw)})"


def count_upsert(
    insert: Callable[[sa.Table], Any], table: sa.Table = record_counts, *, slot: sa.ColumnElement[int] | None = None
) -> sa.Insert:
    """The change of kept counts in `table`, with the dialect's INSERT that supports ON CONFLICT DO UPDATE; in the
    slot that `slot` says, if given, else in the slot of the `slot` parameter."""
    values: dict[str, Any] = values_of(table)
    if slot is not None:
        values["slot"] = slot
    # Inline: without it, a slot that the database computes would be returned (as part of the key), for nothing.
    statement = insert(table).values(values).inline()
    added = [name for name in ("count", "writes") if name in table.c]
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=list(table.primary_key.columns),
        set_={name: table.c[name] + statement.excluded[name] for name in added},
    )
    return upsert


# The data's version: it grows with every write through any instance (see tables.record_counts).
WRITES_VERSION = sa.select(sa.func.coalesce(sa.func.sum(record_counts.c.writes), 0)).where(
    record_counts.c.scope == ALL_OWNERS
)


@dataclass(frozen=True)
class KeptCount:
    """Which kept counts answer how many records match a list's conditions."""

    scopes: tuple[str, ...]
    """An owner, or ALL_OWNERS; or several owners (a caller's own records: theirs and their groups'), summed."""
    partitions: Condition | None = None
    """The values of the counted column (Collection.counted_by) that the records have, when the list names some."""
    below: int | None = None
    """An instant that the counted time column (Collection.counted_over) is below, when the list bounds it so."""
    at_least: int | None = None
    """An instant that the counted time column is at or after, when the list bounds it so."""


def kept_count_scope(collection: Collection, conditions: tuple[Condition, ...]) -> KeptCount | None:
    """The kept counts that answer how many records match, else None: when the conditions are at most one owner
    (or one set of owners), and either at most one set of values of the counted column or at most a lower and an
    upper bound of the counted time column."""
    scopes: tuple[str, ...] = (ALL_OWNERS,)
    partitions = None
    bounds: dict[Operator, int] = {}
    for condition in conditions:
        column = condition.columns[0] if len(condition.columns) == 1 else None
        if column is None:
            return None
        if (
            column == collection.owner_column
            and condition.operator in (Operator.EQUAL, Operator.IN)
            and scopes == (ALL_OWNERS,)
        ):
            scopes = tuple(dict.fromkeys(condition.values))
        elif column == collection.counted_by and condition.operator is Operator.IN and partitions is None:
            partitions = condition
        elif not took_time_bound(collection, condition, bounds):
            return None
    if partitions is not None and bounds:
        return None
    return KeptCount(scopes, partitions, *time_range(bounds))


def took_time_bound(collection: Collection, condition: Condition, bounds: dict[Operator, int]) -> bool:
    """Whether the condition is a lower or an upper bound of the counted time column, not yet in `bounds`: then it
    is now."""
    if (
        condition.columns == (collection.counted_over,)
        and condition.operator in (Operator.BELOW, Operator.AT_LEAST)
        and condition.operator not in bounds
    ):
        bounds[condition.operator] = int(condition.values[0])
        return True
    return False


def time_range(bounds: dict[Operator, int]) -> tuple[int | None, int | None]:
    """(below, at least) of the bounds taken."""
    below, at_least = bounds.get(Operator.BELOW), bounds.get(Operator.AT_LEAST)
    if below is not None and at_least is not None:
        # An empty range counts as one that starts where it ends: the difference of counts is never negative.
        at_least = min(at_least, below)
    return below, at_least


def summed(table: sa.Table, *conditions: sa.ColumnElement[bool]) -> sa.Select[Any]:
    """The sum of the kept counts of `table` (record_counts or period_counts) in the rows that meet the conditions."""
    return sa.select(sa.func.coalesce(sa.func.sum(table.c["count"]), 0)).where(*conditions)


def in_scopes(column: sa.ColumnElement[Any], scopes: int) -> sa.ColumnElement[bool]:
    """The column holds one of the scopes of the parameters `scope_{i}`; of parameter `scope` when there is one (an
    owner, or every owner), as it was written before a caller's own records could be several owners'."""
    if scopes == 1:
        return column == Unseen("scope", column.type)
    return column.in_([Unseen(f"scope_{index}", column.type) for index in range(scopes)])


def scope_values(scopes: tuple[str, ...]) -> dict[str, str]:
    if len(scopes) == 1:
        return {"scope": scopes[0]}
    return {f"scope_{index}": scope for index, scope in enumerate(scopes)}


@functools.lru_cache(maxsize=256)
def kept_count_select(partitions: int | None, scopes: int = 1) -> sa.Select[Any]:
    resource, scope, partition = record_counts.c.resource, record_counts.c.scope, record_counts.c.partition
    conditions = [resource == Unseen("resource", resource.type), in_scopes(scope, scopes)]
    if partitions is not None:
        conditions.append(partition.in_([Unseen(f"partition_{i}", partition.type) for i in range(partitions)]))
    return summed(record_counts, *conditions)


PeriodKey = tuple[str, str, int, int]
PERIOD_KEY = ("resource", "scope", "size", "period")
"""The columns of a PeriodKey in tables.period_counts."""


def periods_of(instant_ms: int) -> tuple[int, ...]:
    """The periods of each size (see tables.period_counts) that an instant falls in, the smallest first."""
    unit = instant_ms // PERIOD_UNIT_MS
    return tuple(unit // PERIOD_SPAN**size for size in range(PERIOD_SIZES))


def period_changes(
    collection: Collection, removed: Iterable[Row], added: Iterable[Row]
) -> collections.Counter[PeriodKey]:
    """What a write does to the kept counts by period of the collection's counted time column (none without one)."""
    changes: collections.Counter[PeriodKey] = collections.Counter()
    column = collection.counted_over
    if column is None:
        return changes
    for rows, sign in ((removed, -1), (added, 1)):
        for row in rows:
            scopes = (ALL_OWNERS,) if collection.owner_column is None else (ALL_OWNERS, row[collection.owner_column])
            for size, period in enumerate(periods_of(row[column])):
                for scope in scopes:
                    changes[(collection.name, scope, size, period)] += sign
    return changes


def period_count_inserts(collection: Collection) -> list[sa.Insert]:
    """The kept counts by period of the collection's records as they are (none without a counted time column), for
    a table of them that is empty: a load's."""
    if collection.counted_over is None:
        return []
    table = collection.table
    instant = table.c[collection.counted_over]
    scopes: list[sa.ColumnElement[Any]] = [sa.literal(ALL_OWNERS, Text)]
    if collection.owner_column is not None:
        scopes.append(table.c[collection.owner_column])
    inserts = []
    for size in range(PERIOD_SIZES):
        period = period_of(instant, size)
        for scope in scopes:
            grouped = [column for column in (scope,) if isinstance(column, sa.Column)]
            select = (
                sa.select(
                    sa.literal(collection.name, Text),
                    scope,
                    sa.literal(size, sa.SmallInteger()),
                    period,
                    sa.literal(0, sa.SmallInteger()),
                    sa.func.count(),
                )
                .select_from(table)
                .group_by(*grouped, period)
            )
            inserts.append(sa.insert(period_counts).from_select([*PERIOD_KEY, "slot", "count"], select))
    return inserts


def kept_count_inserts(collection: Collection) -> list[sa.Insert]:
    """The kept counts of a collection's records as they are, for tables of them that are empty (a load's; see
    tables.record_counts and tables.period_counts): per owner and partition, and for every owner; one slot, and
    each every-owner row counting one write, so that the data's version moves."""
    table = collection.table
    partition: sa.ColumnElement[Any] = sa.literal("", Text)
    if collection.counted_by is not None:
        counted = table.c[collection.counted_by]
        # Grouped as stored where it is text already: the indexes that lead with it serve the grouping, which
        # otherwise sorts every record (in as much memory as the page cache).
        partition = counted if isinstance(counted.type, sa.String) else sa.cast(counted, Text)
    scopes: list[tuple[sa.ColumnElement[Any], int]] = [(sa.literal(ALL_OWNERS, Text), 1)]
    if collection.owner_column is not None:
        scopes.append((table.c[collection.owner_column], 0))
    inserts = []
    for scope, writes in scopes:
        grouped = [column for column in (scope, partition) if isinstance(column, sa.Column)]
        select = (
            sa.select(
                sa.literal(collection.name, Text),
                scope,
                partition,
                sa.literal(0, sa.SmallInteger()),
                sa.func.count(),
                sa.literal(writes, sa.BigInteger()),
            )
            .select_from(table)
            .group_by(*grouped)
        )
        columns = ["resource", "scope", "partition", "slot", "count", "writes"]
        inserts.append(sa.insert(record_counts).from_select(columns, select))
    return inserts + period_count_inserts(collection)


def _counted_before(collection: Collection, bound: str, *, owned: bool, scopes: int) -> sa.ColumnElement[int]:
    """How many records have the counted time column before the instant of parameter `bound`: the whole periods
    before its hour, from the largest size down (at most PERIOD_SPAN of each size but the largest), and the records
    of its hour that come before it. Parameters `{bound}_{name}` (see `before_values`)."""

    column = collection.table.c[collection.counted_over or ""]
    same_hour = in_its_hour(column, bound)
    if owned and collection.owner_column is not None:
        owner = collection.table.c[collection.owner_column]
        same_hour.append(in_scopes(owner, scopes))
    of_its_hour = sa.select(sa.func.count()).select_from(collection.table).where(*same_hour).scalar_subquery()
    return whole_periods_before(bound, in_scopes(period_counts.c.scope, scopes)) + of_its_hour


def in_its_hour(column: sa.ColumnElement[Any], bound: str) -> list[sa.ColumnElement[bool]]:
    """The records whose time `column` is in the hour of the instant of parameter `bound`, before it: by the range,
    and by the hour's number, which an index serves (tables.hour_indexed)."""
    hour = hour_of(column)
    return [
        column >= Unseen(f"{bound}_unit_start", column.type),
        column < Unseen(f"{bound}_instant", column.type),
        hour == Unseen(f"{bound}_period_0", hour.type),
    ]


def whole_periods_before(bound: str, scope: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
    """The kept counts, in the scopes that `scope` selects, of the whole periods before the smallest period of the
    instant of parameter `bound`: of each size, those from the first within the instant's period of the next size
    up (of the largest, from the epoch's first) to the instant's own. Parameters `{bound}_{name}` (see
    `before_values`)."""

    def periods(size: int) -> sa.ScalarSelect[Any]:
        resource, period = period_counts.c.resource, period_counts.c.period
        conditions = [
            resource == Unseen("resource", resource.type),
            scope,
            # Written in: a value the plans see alike.
            period_counts.c.size == sa.literal_column(str(size), period_counts.c.size.type),
            period < Unseen(f"{bound}_period_{size}", period.type),
        ]
        if size < PERIOD_SIZES - 1:
            conditions.append(period >= Unseen(f"{bound}_first_{size}", period.type))
        return summed(period_counts, *conditions).scalar_subquery()

    total: sa.ColumnElement[Any] = periods(PERIOD_SIZES - 1)
    for size in reversed(range(PERIOD_SIZES - 1)):
        total = total + periods(size)
    return total


def before_values(bound: str, instant_ms: int) -> dict[str, int]:
    periods = periods_of(instant_ms)
    values = {f"{bound}_unit_start": periods[0] * PERIOD_UNIT_MS, f"{bound}_instant": instant_ms}
    for size, period in enumerate(periods):
        values[f"{bound}_period_{size}"] = period
        if size < PERIOD_SIZES - 1:
            values[f"{bound}_first_{size}"] = periods[size + 1] * PERIOD_SPAN
    return values


def kept_in_range(
    collection: Collection, *, below: bool, at_least: bool, owned: bool, scopes: int = 1
) -> sa.ColumnElement[Any]:
    """How many records of parameter `scope` (or `scope_{i}`, see `in_scopes`) have the counted time column within
    the bounds given (parameters as `before_values` names them, "below" and "at_least"), from the kept counts: every
    one without a bound."""
    everything = kept_count_select(None, scopes).scalar_subquery()
    count = _counted_before(collection, "below", owned=owned, scopes=scopes) if below else everything
    if at_least:
        count = count - _counted_before(collection, "at_least", owned=owned, scopes=scopes)
    return count


@functools.lru_cache(maxsize=64)
def period_count_select(
    collection: Collection, *, below: bool, at_least: bool, owned: bool, scopes: int = 1
) -> sa.Select[Any]:
    """`kept_in_range` as one statement, so that it reads one snapshot."""
    return sa.select(kept_in_range(collection, below=below, at_least=at_least, owned=owned, scopes=scopes))


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
