"""PostgreSQL's own statements, and every statement compiled once by SQLAlchemy's asyncpg dialect for asyncpg
to run (see the package's docstring): the change feed's horizon, advisory locks, a transaction's id."""

from __future__ import annotations

import functools
import hashlib
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.sql.compiler import SQLCompiler

from petrecords.store.changelog import AFTER_POSITION, AFTER_XID, changes_after_select
from petrecords.tables import changes

_DIALECT = asyncpg_dialect.dialect()  # type: ignore[no-untyped-call]
# What SQLAlchemy finds out on its first connection and the connections' settings fix: string literals (the
# LIKE escape character) are standard-conforming, their backslashes not doubled.
_DIALECT._backslash_escapes = False
_TRY_LOCK = sa.select(sa.func.pg_try_advisory_xact_lock(sa.bindparam("key", type_=sa.BigInteger())))


def _as_bigint(value: sa.ColumnElement[object]) -> sa.ColumnElement[int]:
    """An xid8 as a bigint (through its text: PostgreSQL has no direct cast)."""
    return sa.cast(sa.cast(value, sa.Text()), sa.BigInteger())


# The first transaction id that a write of this database still in flight may hold: the oldest of the ids the
# statement's snapshot holds in progress, or, with none in progress, the first id not yet assigned. The
# snapshot's own xmin would do, but it counts the transactions of every database of the server: a long write
# in another database (a batch job, a migration, a session left idle in a transaction) would stall the feed
# here for as long as it lasts. An id is left out only when the server's activity shows it held by a session
# of another database; an id that has ended since the snapshot was taken is not shown, and so still counts,
# which can only hold the horizon back, never move it past a write of ours. Activity gives 32-bit ids, which
# identify a transaction in progress without ambiguity (the server keeps them within 2^31 of each other).
_HORIZON = sa.literal_column(
    """coalesce(
  (SELECT min(running::text::bigint) FROM pg_snapshot_xip(pg_current_snapshot()) AS running
   WHERE NOT EXISTS (
     SELECT 1 FROM pg_stat_get_activity(NULL) AS activity
     WHERE activity.backend_xid::text::bigint = (running::text::bigint & 4294967295)
       AND activity.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()))),
  pg_snapshot_xmax(pg_current_snapshot())::text::bigint)""",
    sa.BigInteger(),
)


# The write of this database in flight with the oldest transaction id: the one the horizon waits for (ids of other
# databases are left out of it, see _HORIZON). Older means a greater age of its id, in the server's own arithmetic.
_OLDEST_WRITE_IN_FLIGHT = sa.text(
    "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8, pid, state, application_name "
    "FROM pg_stat_activity "
    "WHERE datid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND backend_xid IS NOT NULL "
    "ORDER BY age(backend_xid) DESC LIMIT 1"
)


@functools.lru_cache(maxsize=64)
def _changes_page(*, by_reader: bool, resources: int | None, owners: int = 1) -> sa.Select[Any]:
    """The changes after a cursor as `changes_after_select` reads them, each row after a first column that says
    whether changes after the cursor have committed at or past the horizon (held back); one row with that
    column alone when there are none before it. One statement, one snapshot, one horizon."""
    horizon = sa.select(_HORIZON.label("first")).cte("horizon")
    first = sa.select(horizon.c.first).scalar_subquery()
    page = changes_after_select(
        first, by_reader=by_reader, resources=resources, dialect="postgresql", owners=owners
    ).subquery("page")
    # The first change after both the cursor and the horizon, as one bound of the (xid, position) index, read in
    # its order: an index search that stops at the first row. As an EXISTS with two bounds, PostgreSQL scanned
    # the whole log when nothing was held back (seconds at a million changes).
    behind = first > AFTER_XID
    start = sa.tuple_(
        sa.case((behind, first - 1), else_=AFTER_XID),
        sa.case((behind, sa.literal(2**63 - 1, sa.BigInteger())), else_=AFTER_POSITION),
    )
    first_held = (
        sa.select(changes.c.xid)
        .where(sa.tuple_(changes.c.xid, changes.c.position) > start)
        .order_by(changes.c.xid, changes.c.position)
        .limit(1)
        .scalar_subquery()
    )
    held_back = sa.select(first_held.is_not(None).label("held_back")).subquery()
    return (
        sa.select(held_back.c.held_back, *page.c)
        .select_from(held_back.outerjoin(page, sa.true()))
        .order_by(page.c.xid, page.c.position)
    )


@functools.lru_cache(maxsize=64)
def _take_locks(shared: tuple[bool, ...]) -> sa.Select[Any]:
    """One statement that takes advisory locks in the order given: they assign no transaction id, unlike row
    locks, so a write transaction gets its id only at its first write, once it holds every lock it needs."""
    take = [
        (sa.func.pg_advisory_xact_lock_shared if one else sa.func.pg_advisory_xact_lock)(
            sa.bindparam(f"key_{index}", type_=sa.BigInteger())
        )
        for index, one in enumerate(shared)
    ]
    return sa.select(*take)


def lock_key(resource: str, record_id: uuid.UUID) -> int:
    digest = hashlib.blake2b(f"record\x00{resource}".encode() + record_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


Compiled = tuple[str, tuple[str, ...], dict[str, Any]]
"""The SQL of a statement (with $n parameters), the names of its parameters in the order of their
numbers, and the values of those that the statement fixes itself."""


@functools.lru_cache(maxsize=1024)
def _compiled(statement: sa.ClauseElement) -> Compiled:
    compiled = statement.compile(dialect=_DIALECT)
    if not isinstance(compiled, SQLCompiler):
        raise TypeError(f"not a SQL statement: {statement!r}")
    if compiled.post_compile_params or compiled.literal_execute_params:
        raise ValueError("a statement whose SQL depends on its parameters' values cannot be compiled once")
    fixed = {name: value for name, value in compiled.params.items() if not compiled.binds[name].required}
    return str(compiled), tuple(compiled.positiontup or ()), fixed


def _arguments(compiled: Compiled, values: dict[str, Any]) -> list[Any]:
    _, names, fixed = compiled
    if fixed:
        values = {**fixed, **values}
    return [values[name] for name in names]


def as_asyncpg_runs_it(statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> tuple[str, list[Any]]:
    """A statement's SQL, compiled once (see `_compiled`), and its arguments in the order of its parameters."""
    compiled = _compiled(statement)
    return compiled[0], _arguments(compiled, values or {})


_TRANSACTION_ID = "pg_current_xact_id()::text::bigint"
_TRANSACTION_ID_IF_ASSIGNED = "SELECT pg_current_xact_id_if_assigned()::text::bigint"
