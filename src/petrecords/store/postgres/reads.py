"""Long reads: a count in slices, resting between them, so that it takes no more than its share of a core."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import Collection, Condition
from petrecords.store.postgres.statements import _DIALECT, Compiled, _arguments, _compiled
from petrecords.store.queries import checked_by_unindexed_patterns, matching_rows_statement

LONG_READ_SLICE = 20_000
"""The matching records a long read's count moves over before it rests, where an index narrows the records it
reads: a few milliseconds of one core."""
LONG_READ_BLOCKS = 512
"""The table's blocks (of 8 KiB) a long read's count reads before it rests, where it reads the whole table: 4 MiB,
some 25,000 pets, a few milliseconds of one core however few of them match."""
_LONG_READ_CURSOR = "long_read"


def _reads_whole_table(plan: Any, table: str) -> bool:
    """Whether a plan (EXPLAIN's, as JSON) reads `table` from end to end."""
    if isinstance(plan, list):
        return any(_reads_whole_table(node, table) for node in plan)
    if not isinstance(plan, dict):
        return False
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") == table:
        return True
    return any(_reads_whole_table(node, table) for node in (plan.get("Plan"), *plan.get("Plans", ())))


async def _scope_reads_whole_table(connection: Any, collection: Collection, conditions: tuple[Condition, ...]) -> bool:
    """Whether PostgreSQL reads the whole table for the records a long read's patterns are checked on: those the
    other conditions let through. (Its plan for the count itself may read a trigram index from end to end instead,
    for a pattern too short to hold a trigram, and then the whole table's worth of records all the same.)"""
    statement, values = matching_rows_statement(collection, checked_by_unindexed_patterns(collection, conditions))
    compiled = _compiled(statement)
    plan = await connection.fetchval(f"EXPLAIN (FORMAT JSON) {compiled[0]}", *_arguments(compiled, values))
    return _reads_whole_table(json.loads(plan), collection.table.name)


@functools.lru_cache(maxsize=64)
def _counted_in_blocks(matching: sa.Select[Any], table: sa.Table) -> Compiled:
    """How many of `matching`'s records are stored in the blocks of `table` from the one of `first_row` to the one
    before `past_row` (row ids, as (block, 0)): PostgreSQL reads those blocks alone (a TID range scan)."""
    row_id = f"{_DIALECT.identifier_preparer.format_table(table)}.ctid"
    in_range = sa.text(f"{row_id} >= CAST(:first_row AS tid) AND {row_id} < CAST(:past_row AS tid)")
    in_blocks = matching.where(in_range).subquery()
    return _compiled(sa.select(sa.func.count()).select_from(in_blocks))


class _BlockSlices:
    """A count's slices as ranges of LONG_READ_BLOCKS of the table's blocks, up to its size in the count's
    snapshot. (A record the snapshot sees was stored before it was taken, in a block the table had then; and
    the count's lock on the table keeps VACUUM from cutting blocks off its end.)"""

    def __init__(self, connection: Any, matching: sa.Select[Any], values: dict[str, Any], table: sa.Table) -> None:
        self._connection, self._values, self._table = connection, values, table
        self._counted = _counted_in_blocks(matching, table)
        self._blocks = 0
        self._next_block = 0

    async def start(self) -> None:
        name = _DIALECT.identifier_preparer.format_table(self._table)
        self._blocks = int(
            await self._connection.fetchval(
                "SELECT pg_relation_size(CAST($1 AS regclass)) / current_setting('block_size')::bigint", name
            )
        )

    async def next(self) -> tuple[int, bool]:
        first = self._next_block
        self._next_block = first + LONG_READ_BLOCKS
        values = self._values | {"first_row": (first, 0), "past_row": (self._next_block, 0)}
        counted = await self._connection.fetchval(self._counted[0], *_arguments(self._counted, values))
        return int(counted), self._next_block >= self._blocks


class _MatchSlices:
    """A count's slices as LONG_READ_SLICE matching records each, through a cursor."""

    def __init__(self, connection: Any, matching: Compiled, values: dict[str, Any]) -> None:
        self._connection, self._compiled, self._values = connection, matching, values

    async def start(self) -> None:
        sql, arguments = self._compiled[0], _arguments(self._compiled, self._values)
        await self._connection.execute(f"DECLARE {_LONG_READ_CURSOR} NO SCROLL CURSOR FOR {sql}", *arguments)

    async def next(self) -> tuple[int, bool]:
        status = await self._connection.execute(f"MOVE FORWARD {LONG_READ_SLICE} IN {_LONG_READ_CURSOR}")
        moved = int(status.rpartition(" ")[2])
        return moved, moved < LONG_READ_SLICE


class _PastTheDeadline(Exception):
    """A long read's count would end past the statement timeout."""


async def _rest(seconds: float) -> None:
    """A long read's rest between two slices of its count, its core left to everyone else."""
    await asyncio.sleep(seconds)
