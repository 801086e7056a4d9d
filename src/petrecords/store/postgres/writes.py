"""Pipelined writes: a transaction's deferred writes combined into as few statements, and round trips, as their
size allows."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.store.postgres.statements import _TRANSACTION_ID, _arguments, _compiled

_PARAMETER = re.compile(r"\$(\d+)")
_COMBINED_PARAMETERS = 32767
"""The most parameters one statement may have (the protocol counts them in 16 bits, signed)."""
_ROWS_ALONE = 64
"""A write with more rows than this goes alone, as one prepared statement run for each row."""


@functools.lru_cache(maxsize=256)
def _combinable(sql: str) -> bool:
    """Whether a write can be part of a combined statement: one with no literal (whose text could hold `$n`)
    and no subquery (which would see the rows as they were before the statement, not after the writes
    combined ahead of it)."""
    return "'" not in sql and "SELECT" not in sql


@functools.lru_cache(maxsize=1024)
def _renumbered(sql: str, offset: int) -> str:
    return _PARAMETER.sub(lambda number: f"${int(number[1]) + offset}", sql) if offset else sql


def _with(parts: Sequence[str]) -> str:
    # PostgreSQL runs the data-modifying statements of a WITH that the main query does not read from last to
    # first: listed backwards, they run in the order they were made (tests/store/test_postgres_store.py shows it).
    statements = ", ".join(f"w{index} AS ({sql})" for index, sql in enumerate(reversed(parts)))
    # The main query answers the id of the transaction, which the store must know before it sends the COMMIT,
    # whose answer may be lost (see PostgresStore.settle). It runs before the writes, and so assigns the id just
    # before they would, once the transaction holds every lock it takes (see PostgresTransaction.lock).
    return f"WITH {statements} SELECT {_TRANSACTION_ID}"


Batch = tuple[str, Sequence[Any], bool]
"""A statement, its arguments, and whether they are one list of arguments per run (else one run)."""

Deferred = tuple[sa.ClauseElement, dict[str, Any] | Sequence[dict[str, Any]]]
"""A deferred write: its statement, and its parameters (or one set of them per row)."""

Planned = tuple[str, tuple[tuple[int, int, int], ...], bool]
"""A statement of a plan, the rows whose arguments it takes (index of the write, first row, end of rows), in order,
and whether it runs once for each of those rows (else once for all of them)."""


@functools.lru_cache(maxsize=256)
def _plan(shape: tuple[tuple[sa.ClauseElement, int], ...]) -> tuple[Planned, ...]:
    """The statements of deferred writes of this shape (each write's statement and number of rows), as few as
    possible, in their order: consecutive writes are combined into one statement, each a part of its WITH. Made
    once per shape: a create's writes are the same statements every time, and so is their combined text, which
    keeps asyncpg's cache of prepared statements hitting."""
    planned: list[Planned] = []
    parts: list[str] = []
    taken: list[tuple[int, int, int]] = []
    width = 0

    def close() -> None:
        nonlocal width
        if parts:
            planned.append((_with(parts), tuple(taken), False))
            parts.clear()
            taken.clear()
            width = 0

    for index, (statement, count) in enumerate(shape):
        sql, names, _ = _compiled(statement)
        if count > _ROWS_ALONE or not _combinable(sql):
            close()
            planned.append((sql, ((index, 0, count),), True))
            continue
        for row in range(count):
            if width + len(names) > _COMBINED_PARAMETERS:
                close()
            parts.append(_renumbered(sql, width))
            width += len(names)
            if taken and taken[-1][0] == index and taken[-1][2] == row:
                taken[-1] = (index, taken[-1][1], row + 1)
            else:
                taken.append((index, row, row + 1))
    close()
    return tuple(planned)


def _batches(deferred: Sequence[Deferred]) -> list[Batch]:
    """Deferred writes as the statements of their plan (see `_plan`), with their arguments."""
    listed = [[rows] if isinstance(rows, dict) else rows for _, rows in deferred]
    plan = _plan(tuple((statement, len(rows)) for (statement, _), rows in zip(deferred, listed, strict=True)))
    batches: list[Batch] = []
    for sql, taken, many in plan:
        if many:
            index, first, end = taken[0]
            compiled = _compiled(deferred[index][0])
            batches.append((sql, [_arguments(compiled, row) for row in listed[index][first:end]], True))
            continue
        arguments: list[Any] = []
        for index, first, end in taken:
            compiled = _compiled(deferred[index][0])
            for row in listed[index][first:end]:
                arguments.extend(_arguments(compiled, row))
        batches.append((sql, arguments, False))
    return batches
