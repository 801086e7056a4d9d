"""The scale-out store: PostgreSQL through asyncpg, with a connection pool per process.

Every statement is compiled once (per statement object: the fixed ones of sql.py, and one per list or
count query shape) from the SQLAlchemy schema by SQLAlchemy's asyncpg dialect, and run on asyncpg
directly, which prepares it once per connection. SQLAlchemy's per-execution work (greenlet hops, cache
keys, result wrapping) costs more than a primary-key lookup itself.

Reads run without an explicit transaction: under READ COMMITTED every statement has a snapshot of its
own anyway, so BEGIN and COMMIT would only add round trips. A write request runs in one transaction,
committed when it ends normally and rolled back when it raises.

A connection that broke, or whose state is unknown (a client-side timeout, a cancellation), is
terminated at once; the pool opens a new one when one is next needed, as it does for a connection that
the other end closed while it sat in the pool. The server's own errors (its statement timeout, a lock it
could not take) leave the connection usable.

Behind PgBouncer in transaction pooling (PETRECORDS_DB_POOLER=transaction) a client connection has no
session of its own: each transaction may run on another server connection. Nothing the store relies on
outlives a transaction there (advisory locks are transaction-scoped, the change feed's horizon is read in
the statement that uses it, statements are prepared unnamed), and the statement timeout is set per
transaction: `SET LOCAL` in the round trip of `BEGIN` for a write; a read, which runs without a
transaction, is bounded by the client, whose cancel request PgBouncer passes on to the server connection
running it. Such a connection is not terminated, which would leave the statement running on the server,
but recovered in the background once the cancel has been answered (or terminated if it is not).

Every session is bounded on the server (see `session_bounds`), so that one whose client has gone (a host lost,
a partition) ends within seconds: left idle in its transaction, it would keep its locks, and the change feed of
every instance would wait for its transaction id, for the two hours that the server's TCP keepalive takes by
default. A session goes after PETRECORDS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS idle inside a transaction, and
a connection whose client has gone silent after about PETRECORDS_DB_TCP_TIMEOUT_SECONDS (keepalives, and
tcp_user_timeout for what it sends). Behind PgBouncer, which refuses startup parameters it does not know, the
first is set by a statement (per session in session pooling, per transaction in transaction pooling) and the
TCP settings are PgBouncer's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import hashlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any

import asyncpg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import asyncpg as asyncpg_dialect
from sqlalchemy.sql.compiler import SQLCompiler

from petrecords.config import Settings
from petrecords.db import postgres_connect_args, postgres_dsn, statement_timeout_ms
from petrecords.errors import DatabaseUnavailable, IdempotencyInProgress
from petrecords.store.base import Change, Collection, Condition, Cursor, Lock, Principal, Viewer, WriteInFlight
from petrecords.store.changelog import (
    AFTER_POSITION,
    AFTER_XID,
    SEEN_BY_SEPARATOR,
    change_insert,
    change_of,
    changes_after_select,
    changes_seen_by_select,
    shared_at_select,
    state_upserts,
    window_statements,
)
from petrecords.store.counts import WRITES_VERSION, count_upsert
from petrecords.store.faults import (
    DATABASE_ERRORS,
    TIMEOUT,
    PoolTimeout,
    raise_translated,
    unavailable,
    unconfirmed,
)
from petrecords.store.grants import PlanSizes
from petrecords.store.pages import PageAnchors
from petrecords.store.queries import TrigramSearch, checked_by_unindexed_patterns, matching_rows_statement
from petrecords.store.records import Statement
from petrecords.store.replicas import ReadReplicas
from petrecords.store.sql import SqlStore, SqlTransaction, idempotency_upsert
from petrecords.tables import changes, period_counts

log = logging.getLogger("petrecords.replicas")
outcomes_log = logging.getLogger("petrecords.store")
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


def session_bounds(settings: Settings) -> dict[str, str]:
    """The server's settings that end a session whose client has gone (see the module's docstring): idle inside a
    transaction, or silent. Keepalives begin after half the TCP timeout and end it with three probes."""
    tcp_seconds = settings.db_tcp_timeout_seconds
    return {
        "idle_in_transaction_session_timeout": str(int(settings.db_idle_in_transaction_timeout_seconds * 1000)),
        "tcp_keepalives_idle": str(max(1, tcp_seconds // 2)),
        "tcp_keepalives_interval": str(max(1, tcp_seconds // 6)),
        "tcp_keepalives_count": "3",
        "tcp_user_timeout": str(tcp_seconds * 1000),
    }


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


_TRANSACTION_ID = "pg_current_xact_id()::text::bigint"
_TRANSACTION_ID_IF_ASSIGNED = "SELECT pg_current_xact_id_if_assigned()::text::bigint"


def _with(parts: Sequence[str]) -> str:
    # PostgreSQL runs the data-modifying statements of a WITH that the main query does not read from last to
    # first: listed backwards, they run in the order they were made (tests/test_postgres_store.py shows it).
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


def _terminate(connection: Any) -> None:
    """Close a pooled connection at once, which gives it back to the pool (that opens a new one when needed)."""
    with contextlib.suppress(asyncpg.InterfaceError):  # it is closed already, and back in the pool
        connection.terminate()


def _usable(connection: Any) -> bool:
    try:
        return not connection.is_closed()
    except asyncpg.InterfaceError:  # closed, and back in the pool
        return False


def _broken(exc: BaseException) -> bool:
    """Whether a connection that raised `exc` may be in an unknown state: anything but the server's own errors."""
    return not isinstance(exc, asyncpg.PostgresError) or isinstance(exc, asyncpg.PostgresConnectionError)


def _session_ended(exc: BaseException) -> bool:
    """Whether `exc` ended the session: the connection broke, or the server ended it (a connection exception, an
    operator's intervention, its idle-in-transaction bound). A COMMIT that raised it may have committed; one that
    failed otherwise rolled back."""
    sqlstate = getattr(exc, "sqlstate", None) or ""
    return _broken(exc) or sqlstate[:2] in ("08", "57") or sqlstate == "25P03"


def _cut_short(exc: BaseException) -> bool:
    """Whether `exc` cut a statement short on the client's side: asyncpg then sends the server a cancel request."""
    return isinstance(exc, TimeoutError | asyncio.CancelledError)


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


Session = tuple[int, datetime.datetime]
"""A session of the server: the process id of its backend, and when that began (a process id is used again)."""
_SESSION = "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"


class _Connection(asyncpg.Connection):  # type: ignore[misc]
    """A pooled connection, and the session of the server it is to, where a write may be sent outside a
    transaction (see PostgresTransaction._write_deferred): what ends that session if the write's answer is lost."""

    session: Session | None = None


async def _set_up(connection: _Connection, *, statements: str, session: bool) -> None:
    """What a new connection of the pool runs first: `statements` (settings of the session, in one round trip),
    and, with `session`, a look at its session."""
    if statements:
        await connection.execute(statements)
    if session:
        row = await connection.fetchrow(_SESSION)
        connection.session = (row[0], row[1])


_WAIT_FOR_AN_END_MS = 1000
"""How long one attempt to end a session waits for its backend to exit."""
_END_TRANSACTION = (
    "SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity WHERE backend_xid::text::bigint = ($1 & 4294967295)"
)
"""Ends the session whose transaction has the id $1 (32 bits of it: pg_stat_activity's, see _HORIZON), if one has."""
_TRANSACTION_STATUS = "SELECT pg_xact_status(CAST(CAST($1 AS bigint) AS text)::xid8)"
_END_SESSION = "SELECT pg_terminate_backend(pid, $3) FROM pg_stat_activity WHERE pid = $1 AND backend_start = $2"


async def _transaction_outcome(connection: Any, *, xid: int) -> bool | None:
    """Whether the transaction `xid` committed; None while it is in progress. A session that still holds it (its
    COMMIT may still be on its way) is ended first: then it never commits."""
    status = await connection.fetchval(_TRANSACTION_STATUS, xid)
    if status == "in progress":
        # Refused for a session of another role (a pooler's own): the bounds of its session end it then.
        with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
            await connection.fetch(_END_TRANSACTION, xid, _WAIT_FOR_AN_END_MS)
        status = await connection.fetchval(_TRANSACTION_STATUS, xid)
    return {"committed": True, "aborted": False}.get(status)


_CHANGE_KEPT = sa.select(
    sa.exists().where(
        changes.c.resource == sa.bindparam("resource"),
        changes.c.record_id == sa.bindparam("record_id", type_=changes.c.record_id.type),
        changes.c.version == sa.bindparam("version"),
    )
)


async def _statement_outcome(connection: Any, *, session: Session, change: dict[str, Any]) -> bool | None:
    """Whether a write sent on its own (a transaction of its own) in `session` committed, by the `change` it keeps,
    once that session has ended (ended here if need be); None when it could not be ended."""
    ended = await connection.fetch(_END_SESSION, *session, _WAIT_FOR_AN_END_MS)
    if not all(row[0] for row in ended):
        return None
    compiled = _compiled(_CHANGE_KEPT)
    return bool(await connection.fetchval(compiled[0], *_arguments(compiled, change)))


Outcome = Callable[[Any], Awaitable[bool | None]]
"""What became of a write whose commit went unanswered, asked on a connection of its own: True committed, False
not, None not known yet."""


async def _keep_session(_connection: Any) -> None:
    """What the pool does to a connection given back (asyncpg has rolled back a transaction left open):
    nothing. The store leaves no session state behind (no SET, LISTEN, cursors or session-level locks), so
    asyncpg's default reset (RESET ALL and more) would only cost a round trip per request."""


class PostgresTransaction(SqlTransaction):
    counter_slots = 32
    defers_writes = True
    # A transaction's count changes go to the slot of its server connection (its process id modulo the slots), not
    # to a random one: transactions in flight at once run on distinct connections, and the connections a pool opens
    # have mostly consecutive process ids, so that up to `counter_slots` concurrent writers seldom share a row and
    # wait for one another's commit on its lock. (Eight random slots had a quarter of twenty concurrent creators
    # waiting so: bench/results/2026-11-24-create-on-postgresql.md.)
    count_slot = sa.func.pg_backend_pid() % counter_slots
    change_count = count_upsert(postgresql.insert, slot=count_slot)
    change_period_count = count_upsert(postgresql.insert, period_counts, slot=count_slot)
    idempotency_insert = idempotency_upsert(postgresql.insert)
    # Changes are ordered by the id of their transaction, which a transaction gets at its first write, after
    # it holds the locks of every record it writes (see `lock`): of two transactions that write one record, the
    # later has the greater id. A reader never passes the oldest transaction of this database still in flight
    # (see _HORIZON), so no change can later appear behind a cursor it has handed out.
    horizon = _HORIZON
    change_insert = change_insert(_as_bigint(sa.func.pg_current_xact_id()))
    changes_seen_by_statement = changes_seen_by_select(
        _HORIZON,
        lambda column: column == sa.any_(sa.bindparam("readers", type_=postgresql.ARRAY(sa.String()))),
        lambda grantee: sa.func.string_agg(grantee, SEEN_BY_SEPARATOR),
    )
    window_statements = window_statements(
        _as_bigint(sa.func.pg_current_xact_id()),
        sa.func.currval(sa.func.pg_get_serial_sequence("changes", "position")),
    )
    shared_at_statement = shared_at_select("postgresql")
    dialect_name = "postgresql"
    state_upserts = state_upserts(postgresql.insert)
    trigram_search = TrigramSearch.GIN
    probe_search = None

    @staticmethod
    def readers_value(readers: Sequence[str]) -> Any:
        return list(readers)

    def __init__(self, store: PostgresStore, *, write: bool, caller: Principal | None = None) -> None:
        super().__init__(write=write)
        self._store = store
        self._caller = caller
        self._replica_allowed = caller is not None and not write
        self._source = store
        """The store whose connection this transaction holds: the primary's, or a replica's."""
        self.long_read_turns = store.long_read_turns
        self._connection: Any = None
        self._open_transaction = False
        self._recover = False
        """The connection was cut short and is recovered in the background (see PostgresStore.recover)."""
        self._wrote = False
        """Whether a write was sent: a COMMIT that goes unanswered may then have changed something."""
        self._xid: int | None = None
        """The id of the transaction, once a write has assigned it (see `_with`)."""
        self.page_anchors = store.page_anchors
        self.plan_sizes = store.plan_sizes

    async def data_version(self) -> Hashable:
        return int((await self.fetch((WRITES_VERSION, {})))[0][0])

    @property
    def _turn_rests(self) -> bool:
        # A replica answered: its long read took nothing from the primary's cores, nor did it rest between slices.
        return self._source is self._store

    def _after_error(self, connection: Any, exc: BaseException) -> None:
        if not _broken(exc):
            return
        if self._store.recovers_cut_short and _cut_short(exc):
            self._recover = True
        else:
            _terminate(connection)

    async def _begin(self, *, then: str = "") -> None:
        """Take a connection (a replica's, for a read that may have one), and for a write begin its transaction,
        with the statements of `then` (which take no parameters) in the same round trip."""
        replicas = self._store.replicas
        if self._replica_allowed and self._caller is not None and replicas is not None:
            chosen = await replicas.acquire(self._caller.grantees)
            if chosen is not None:
                self._source, self._connection = chosen
                return
        self._source = self._store
        connection = await self._store.acquire()
        if self.write:
            begin = self._store.begin_statement
            try:
                await connection.execute(f"{begin}; {then}" if then else begin)
            except BaseException as exc:
                self._after_error(connection, exc)
                if not self._recover and _usable(connection) and connection.is_in_transaction():
                    _terminate(connection)  # BEGIN ran, what followed failed: nothing of it is to be kept
                recover, self._recover = self._recover, False
                await self._store.give_back(connection, recover=recover)
                raise_translated(exc)
            self._open_transaction = True
        self._connection = connection

    def _concerned(self) -> tuple[str, ...]:
        """Whose reads must see what this transaction wrote, once it has committed, on a replica: its caller's,
        and those of the grantees of the shares it wrote (see store/replicas.py)."""
        names = set(self.regranted)
        if self._caller is not None:
            names.add(self._caller.email)
        return tuple(names)

    async def _end(self, *, commit: bool) -> None:
        connection, in_transaction = self._connection, self._open_transaction
        self._connection, self._open_transaction = None, False
        replicas, committed, position = self._store.replicas, False, None
        concerned = self._concerned()
        unanswered: BaseException | None = None
        try:
            if not in_transaction or self._recover:
                pass
            elif commit:
                if self._wrote and self._xid is None:
                    # Written by statements that answer nothing (run once per row, or reads that write): asked now,
                    # before the COMMIT. None: nothing was changed after all.
                    self._xid = await connection.fetchval(_TRANSACTION_ID_IF_ASSIGNED)
                try:
                    status = await connection.execute("COMMIT")
                except DATABASE_ERRORS as exc:
                    if not _session_ended(exc) or self._xid is None:
                        raise
                    self._after_error(connection, exc)
                    unanswered = exc
                else:
                    # COMMIT of a transaction a failed statement aborted answers ROLLBACK, not an error.
                    if status != "COMMIT":
                        raise RuntimeError("a write transaction was rolled back at its commit")
                    committed = True
                    if concerned and replicas is not None:
                        position = await replicas.position_after_commit(connection)
            elif _usable(connection):
                try:
                    await connection.execute("ROLLBACK")
                except DATABASE_ERRORS:
                    # A failed rollback changes nothing for the client: the error that led to it is the answer.
                    # The connection, in an unknown state, is not reused; the server ends the transaction when
                    # it goes.
                    _terminate(connection)
        except BaseException as exc:
            self._after_error(connection, exc)
            raise_translated(exc)
        finally:
            recover, self._recover = self._recover, False
            await self._source.give_back(connection, recover=recover)
        if unanswered is not None and self._xid is not None:
            # With the connection gone: the answer decides whether this returns (it committed) or raises.
            await self._store.settle(unanswered, functools.partial(_transaction_outcome, xid=self._xid))
            committed = True
        if committed and concerned and replicas is not None:
            # With the connection back in the pool: this may wait, when Redis does not answer.
            await replicas.wrote(concerned, position)

    async def _open(self) -> Any:
        if not self.begun:
            await self._begin()
            self.begun = True
        return self._connection

    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        if self._deferred:
            await self._write_deferred(last=False)
        return await self._fetch(statement)

    async def _fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        compiled = _compiled(statement[0])
        arguments = _arguments(compiled, statement[1])
        connection = await self._open()
        if isinstance(statement[0], sa.sql.expression.UpdateBase):
            self._wrote = True  # a write that returns rows (a lease taken, a ticket taken)
        # A read outside a transaction has no statement timeout on the server behind a transaction pooler.
        timeout = None if self._open_transaction else self._source.read_timeout
        try:
            rows: list[Any] = await connection.fetch(compiled[0], *arguments, timeout=timeout)
        except BaseException as exc:
            self._after_error(connection, exc)
            if self._source is self._store or not isinstance(exc, DATABASE_ERRORS):
                raise_translated(exc)
            return await self._again_on_the_primary(statement, exc)
        return rows

    async def count_long_read(
        self, collection: Collection, conditions: tuple[Condition, ...], search: TrigramSearch | None
    ) -> int:
        """In slices, in a transaction of its own (one snapshot for the whole count), resting after each slice in
        proportion to its time, so that the count takes no more than `long_read_share` of a core: one statement
        would take a whole one from everyone else's requests, for as long as it runs. Where PostgreSQL would read
        the whole table for the records the count checks, a slice is LONG_READ_BLOCKS of the table's blocks,
        whatever they hold; else (an index narrows them) LONG_READ_SLICE matching records, through a cursor. The
        statement timeout bounds the count as a whole, rests included. A replica, or a transaction already open,
        counts in one statement."""
        share = self._store.long_read_share
        if share >= 1:
            return await self.count_at_once(collection, conditions, search)
        connection = await self._open()
        if self._open_transaction or self._source is not self._store:
            return await self.count_at_once(collection, conditions, search)
        matching, values = matching_rows_statement(collection, conditions, search=search)
        if not isinstance(matching, sa.Select):
            raise TypeError(f"not a select: {matching!r}")
        deadline = time.monotonic() + self._store.statement_timeout_seconds
        # Whether a statement is under way: a failure then may leave the connection in an unknown state.
        sending = True
        try:
            # A cursor planned for every row, as a count is, not for the first tenth of them; and each slice of
            # blocks planned with its values, where a plan for any value checks the pattern through like_escape()
            # on every record (7.4 ms against 2.8 ms for 512 blocks of a million pets).
            # Idle between its slices for as long as the statement timeout allows (it holds no transaction id, which
            # the change feed would wait for): longer than the sessions' bound.
            await connection.execute(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL cursor_tuple_fraction = 1; "
                "SET LOCAL plan_cache_mode = force_custom_plan; "
                f"SET LOCAL idle_in_transaction_session_timeout = {self._store.statement_timeout_ms}"
            )
            slices = (
                _BlockSlices(connection, matching, values, collection.table)
                if await _scope_reads_whole_table(connection, collection, conditions)
                else _MatchSlices(connection, _compiled(matching), values)
            )
            await slices.start()
            counted = 0
            while True:
                started = time.monotonic()
                remaining_ms = max(1, int((deadline - started) * 1000))
                await connection.execute(f"SET LOCAL statement_timeout = {remaining_ms}")
                counted_now, done = await slices.next()
                counted += counted_now
                if done:
                    await connection.execute("COMMIT")
                    return counted
                sending = False
                rest = (time.monotonic() - started) * (1 / share - 1)
                if time.monotonic() + rest >= deadline:
                    raise _PastTheDeadline()
                await _rest(rest)
                if self._turn is not None:
                    self._turn.rested += rest
                sending = True
        except BaseException as exc:
            if sending and _broken(exc):
                self._after_error(connection, exc)
                raise_translated(exc)
            # The connection is sound, within the count's transaction (or after it failed): ended here.
            try:
                await connection.execute("ROLLBACK")
            except BaseException as failed:
                self._after_error(connection, failed)
            if isinstance(exc, _PastTheDeadline):
                raise DatabaseUnavailable(
                    cause=TIMEOUT, detail="a long read's count ran past the statement timeout"
                ) from None
            raise_translated(exc)

    async def _again_on_the_primary(self, statement: Statement, exc: BaseException) -> Sequence[Sequence[Any]]:
        """A replica failed a read (it went away, or cancelled the statement in a conflict with its recovery):
        the primary answers it, and the rest of the transaction. It has everything the replica had."""
        replica, connection = self._source, self._connection
        log.warning("a read replica failed a read, reading from the primary: %s", type(exc).__name__)
        if self._store.replicas is not None:
            self._store.replicas.failed(replica)
        recover, self._recover = self._recover, False
        await replica.give_back(connection, recover=recover)
        # Holding nothing now: the statement begins the transaction again, on the primary.
        self._connection, self._source, self._replica_allowed, self.begun = None, self._store, False, False
        return await self.fetch(statement)

    async def _execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        # Every write is deferred (see `_write_deferred`); one that is not goes the same way, on its own.
        self._deferred.append((statement, rows))
        await self._write_deferred(last=False)

    async def _send(self, connection: Any, batch: Batch) -> None:
        sql, arguments, many = batch
        self._wrote = True
        try:
            if many:
                await connection.executemany(sql, arguments)
            else:
                self._xid = await connection.fetchval(sql, *arguments)
        except BaseException as exc:
            self._after_error(connection, exc)
            raise

    async def _write_deferred(self, *, last: bool) -> None:
        """The deferred writes in as few round trips as their size allows (see `_batches`). A transaction that
        has read nothing and ends with one such statement needs no BEGIN and COMMIT: on its own, the statement
        is a transaction. (Its writes hold no lock it could have taken before them.)"""
        deferred, self._deferred = self._deferred, []
        batches = _batches(deferred)
        alone = last and not self.begun and len(batches) == 1 and not batches[0][2] and self._store.writes_alone
        if not alone:
            connection = await self._open()
            try:
                for batch in batches:
                    await self._send(connection, batch)
            except DATABASE_ERRORS as exc:
                raise_translated(exc)
            return
        connection = await self._store.acquire()
        session: Session | None = connection.session
        replicas, position, concerned = self._store.replicas, None, self._concerned()
        unanswered: BaseException | None = None
        try:
            await self._send(connection, batches[0])
            if concerned and replicas is not None:
                position = await replicas.position_after_commit(connection)
        except DATABASE_ERRORS as exc:
            if not _broken(exc):
                raise_translated(exc)
            unanswered = exc  # it may have run, and committed on its own
        finally:
            recover, self._recover = self._recover, False
            await self._store.give_back(connection, recover=recover)
        if unanswered is not None:
            change = next((rows for statement, rows in deferred if statement is self.change_insert), None)
            outcome = None
            if session is not None and isinstance(change, dict):
                outcome = functools.partial(_statement_outcome, session=session, change=change)
            await self._store.settle(unanswered, outcome)
        if concerned and replicas is not None:
            await replicas.wrote(concerned, position)

    async def lock(self, locks: Sequence[Lock]) -> None:
        if not locks:
            return
        # A record held both ways is held exclusively.
        exclusive = {(one.rank, one.resource, one.record_id) for one in locks if not one.shared}
        ordered = sorted(
            {one for one in locks if not one.shared or (one.rank, one.resource, one.record_id) not in exclusive}
        )
        if not self.begun:
            # BEGIN and the locks in one round trip: a simple query may hold several statements, but no
            # parameters, and the keys are integers of our own.
            take = ", ".join(
                f"pg_advisory_xact_lock{'_shared' if one.shared else ''}({lock_key(one.resource, one.record_id):d})"
                for one in ordered
            )
            await self._begin(then=f"SELECT {take}")
            self.begun = True
            return
        # Writes deferred so far wait until the locks are held: they give the transaction its id.
        values = {f"key_{index}": lock_key(one.resource, one.record_id) for index, one in enumerate(ordered)}
        await self._fetch((_take_locks(tuple(one.shared for one in ordered)), values))

    async def changes_page(
        self, cursor: Cursor, *, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> tuple[Sequence[Change], bool]:
        statement = _changes_page(
            by_reader=reader is not None,
            resources=None if resources is None else len(resources),
            owners=1 if reader is None else len(reader.grantees),
        )
        rows = await self.fetch((statement, self.changes_values(cursor, limit, reader, resources)))
        found = [change_of(tuple(row)[1:]) for row in rows if row[1] is not None]
        return found, not rows[0][0]

    async def oldest_write_in_flight(self) -> WriteInFlight | None:
        rows = await self.fetch((_OLDEST_WRITE_IN_FLIGHT, {}))
        if not rows:
            return None
        seconds, process, state, application = rows[0]
        return WriteInFlight(seconds=seconds, process=process, state=state, application=application)

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        # Held until this transaction ends; a second request with the same key meanwhile is told so
        # at once instead of waiting and then replaying.
        digest = hashlib.blake2b(f"idempotency\x00{caller}\x00{key}".encode(), digest_size=8).digest()
        lock_key = int.from_bytes(digest, "big", signed=True)
        rows = await self.fetch((_TRY_LOCK, {"key": lock_key}))
        if not rows[0][0]:
            raise IdempotencyInProgress()


class PostgresStore(SqlStore):
    dialect = "postgresql"

    def __init__(self, settings: Settings, *, url: str | None = None) -> None:
        super().__init__()
        self._dsn = postgres_dsn(url or settings.resolved_database_url)
        self._connect_args = postgres_connect_args(settings)
        timeout_ms = statement_timeout_ms(settings)
        pooler = settings.db_pooler
        bounds = session_bounds(settings)
        idle_ms = bounds["idle_in_transaction_session_timeout"]
        if pooler == "none":
            self._connect_args["server_settings"] = {**self._connect_args["server_settings"], **bounds}
        self.begin_statement = "BEGIN"
        if pooler == "transaction":
            # In the round trip of BEGIN: a simple query may hold several statements.
            self.begin_statement = (
                f"BEGIN; SET LOCAL statement_timeout = {timeout_ms}; "
                f"SET LOCAL idle_in_transaction_session_timeout = {idle_ms}"
            )
        self.statement_timeout_seconds = settings.db_statement_timeout_seconds
        self.statement_timeout_ms = timeout_ms
        self.long_read_share = settings.long_read_share
        self.read_timeout: float | None = settings.db_statement_timeout_seconds if pooler == "transaction" else None
        """The client's bound on a read outside a transaction, when the server has none (None: the default)."""
        self.writes_alone = pooler != "transaction"
        """Whether writes that read nothing may run as one statement outside BEGIN and COMMIT: not where the
        statement timeout holds only inside a transaction (SET LOCAL)."""
        self.recovers_cut_short = pooler == "transaction"
        """Whether a connection cut short is recovered rather than terminated: only the client's cancel request
        can end its statement on the server, where nothing else bounds it."""
        # In session pooling a client connection keeps one server connection throughout, until it is closed.
        settings_of_session = ""
        if pooler == "session":
            settings_of_session = (
                f"SET statement_timeout = {timeout_ms}; SET idle_in_transaction_session_timeout = {idle_ms}"
            )
        self._set_up = functools.partial(
            _set_up, statements=settings_of_session, session=self.writes_alone and url is None
        )
        self._recovering: set[asyncio.Task[None]] = set()
        self._size = settings.db_pool_size
        self.replicas: ReadReplicas[PostgresStore] | None = None
        if url is None and settings.database_read_urls:
            replicas = [PostgresStore(settings, url=replica_url) for replica_url in settings.database_read_urls]
            self.replicas = ReadReplicas(settings, self, replicas)
        self._wait_seconds = settings.db_connect_timeout_seconds
        """The longest wait for a connection: for a pooled one to come free, or for a new one to be set up."""
        self._pool: Any = None
        self._pool_lock = asyncio.Lock()
        self._checked_out = 0
        self.page_anchors = PageAnchors()
        self.plan_sizes = PlanSizes()

    @property
    def read_connections(self) -> int:
        return self._size

    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> PostgresTransaction:
        # Reads run without BEGIN and COMMIT anyway (see the module's docstring).
        return PostgresTransaction(self, write=write, caller=caller)

    async def _open_pool(self) -> Any:
        # On first use: the pool belongs to the event loop of the process's server worker. It opens
        # connections only when they are needed, so that creating it cannot fail while the database is away.
        async with self._pool_lock:
            if self._pool is None:
                self._pool = await asyncpg.create_pool(
                    self._dsn,
                    min_size=0,
                    max_size=self._size,
                    reset=_keep_session,
                    init=self._set_up,
                    connection_class=_Connection,
                    **self._connect_args,
                )
        return self._pool

    async def acquire(self) -> Any:
        """A connection of the pool, for one transaction, or DatabaseUnavailable within the wait allowed."""
        pool = self._pool if self._pool is not None else await self._open_pool()
        try:
            async with asyncio.timeout(self._wait_seconds):
                connection = await pool.acquire()
        except DATABASE_ERRORS as exc:
            # Acquiring sets up a new connection when the pool has no open one free: the server's refusals of a
            # connection (a database that does not accept connections, a role without CONNECT) are outages.
            error = unavailable(exc, connecting=True)
            if isinstance(exc, TimeoutError) and self._checked_out >= self._size:
                # Every connection was in use all along: the wait was for one of them, not for the database.
                pool_timeout = PoolTimeout(f"no pooled connection came free within {self._wait_seconds:g} s")
                error = unavailable(pool_timeout)
            if error is None:
                raise
            raise error from exc
        self._checked_out += 1
        return connection

    async def release(self, connection: Any) -> None:
        try:
            await self._pool.release(connection, timeout=self._wait_seconds)
        except DATABASE_ERRORS:
            pass  # asyncpg has terminated the connection instead; the pool opens a new one when it needs one
        finally:
            self._checked_out -= 1

    async def give_back(self, connection: Any, *, recover: bool) -> None:
        if not recover:
            await self.release(connection)
            return
        task = asyncio.get_running_loop().create_task(self.recover(connection))
        self._recovering.add(task)
        task.add_done_callback(self._recovering.discard)

    async def recover(self, connection: Any) -> None:
        """Give back a connection whose statement was cut short, once the server has answered asyncpg's cancel
        request (the next statement waits for that), with no transaction left open on it; terminated instead
        when that does not happen within the connect timeout."""
        try:
            async with asyncio.timeout(self._wait_seconds):
                await connection.execute("ROLLBACK")
        except Exception:  # whatever went wrong, the connection is not reused
            _terminate(connection)
        except BaseException:
            _terminate(connection)
            raise
        finally:
            await self.release(connection)

    async def settle(self, unanswered: BaseException, outcome: Outcome | None) -> None:
        """After a write whose commit went unanswered (`unanswered`: a connection that broke or timed out): return
        when it committed after all, else raise the 503 that says what became of it, changed nothing or not known.
        Asked on connections of its own (the pool's may all be in use, or broken), for up to the statement timeout,
        the database being away meanwhile; `outcome` None: there is no asking."""
        error = unavailable(unanswered)
        if error is None:
            raise unanswered
        committed = None
        deadline = time.monotonic() + self.statement_timeout_seconds
        while outcome is not None and (remaining := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(remaining):
                    connection = await asyncpg.connect(self._dsn, **self._connect_args)
                    try:
                        committed = await outcome(connection)
                    finally:
                        connection.terminate()
            except DATABASE_ERRORS:
                committed = None
            if committed is not None:
                break
            await asyncio.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
        said = {True: "it committed", False: "it changed nothing", None: "what became of it is not known"}[committed]
        outcomes_log.warning(
            "a write's commit went unanswered (%s): %s",
            error.cause,
            said,
            extra={"fields": {"cause": error.cause, "detail": error.detail, "committed": committed}},
        )
        if committed:
            return
        raise (error if committed is False else unconfirmed(error)) from unanswered

    def pool_figures(self) -> dict[str, int]:
        idle = 0 if self._pool is None else self._pool.get_idle_size()
        return {"size": self._size, "checked_out": self._checked_out, "overflow": 0, "idle": idle}

    async def close(self) -> None:
        if self.replicas is not None:
            await self.replicas.close()
        if self._recovering:
            await asyncio.wait(self._recovering)
        if self._pool is None:
            return
        try:
            # Gracefully, once every connection has come back, which the server's draining lets happen.
            await asyncio.wait_for(self._pool.close(), self._wait_seconds)
        except DATABASE_ERRORS:
            self._pool.terminate()
