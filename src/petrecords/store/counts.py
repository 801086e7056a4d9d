"""The kept counts: how many records of each resource each owner has in each partition, changed in the
transaction of every write (see tables.record_counts), and read instead of a count when a list allows."""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import (
    Collection,
    Condition,
    Operator,
    Row,
)
from petrecords.store.records import values_of
from petrecords.tables import (
    ALL_OWNERS,
    record_counts,
)


def count_upsert(insert: Callable[[sa.Table], Any], *, slot: sa.ColumnElement[int] | None = None) -> sa.Insert:
    """The change of kept counts, with the dialect's INSERT that supports ON CONFLICT DO UPDATE; in the slot that
    `slot` says, if given, else in the slot of the `slot` parameter."""
    values: dict[str, Any] = values_of(record_counts)
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
def kept_count_select(partitions: int | None) -> sa.Select[Any]:
    conditions = [record_counts.c.resource == sa.bindparam("resource"), record_counts.c.scope == sa.bindparam("scope")]
    if partitions is not None:
        conditions.append(record_counts.c.partition.in_([sa.bindparam(f"partition_{i}") for i in range(partitions)]))
    return sa.select(sa.func.coalesce(sa.func.sum(record_counts.c.count), 0)).where(*conditions)


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
