"""A transaction on PostgreSQL: reads outside BEGIN and COMMIT, writes deferred and pipelined, advisory locks,
long reads in slices, and reads on replicas (see the package's docstring)."""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from petrecords.errors import DatabaseUnavailable, IdempotencyInProgress
from petrecords.store.base import Change, Collection, Condition, Cursor, Lock, Principal, Viewer, WriteInFlight
from petrecords.store.bookkeeping import idempotency_upsert
from petrecords.store.changelog import (
    SEEN_BY_SEPARATOR,
    change_insert,
    change_of,
    changes_seen_by_select,
    shared_at_select,
    state_upserts,
    window_statements,
)
from petrecords.store.counts import WRITES_VERSION, count_upsert
from petrecords.store.faults import DATABASE_ERRORS, TIMEOUT, raise_translated
from petrecords.store.postgres import reads
from petrecords.store.postgres.connections import (
    Session,
    _broken,
    _cut_short,
    _session_ended,
    _statement_outcome,
    _terminate,
    _transaction_outcome,
    _usable,
)
from petrecords.store.postgres.reads import _BlockSlices, _MatchSlices, _PastTheDeadline, _scope_reads_whole_table
from petrecords.store.postgres.statements import (
    _HORIZON,
    _OLDEST_WRITE_IN_FLIGHT,
    _TRANSACTION_ID_IF_ASSIGNED,
    _TRY_LOCK,
    _arguments,
    _as_bigint,
    _changes_page,
    _compiled,
    _take_locks,
    lock_key,
)
from petrecords.store.postgres.writes import Batch, _batches
from petrecords.store.queries import TrigramSearch, matching_rows_statement
from petrecords.store.records import Statement
from petrecords.store.sql import SqlTransaction
from petrecords.tables import period_counts

if TYPE_CHECKING:
    from petrecords.store.postgres.pool import PostgresStore

log = logging.getLogger("petrecords.replicas")


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
                f"SET LOCAL idle_in_transaction_session_timeout = {self._store.long_read_idle_ms}"
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
                await reads._rest(rest)  # through its module, where tests replace it
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
