"""Reminders in the change feed (contract section 15): when a dose's moment comes, a change that says so, `due-soon`
at its dueAt minus PETRECORDS_DUE_SOON_DAYS days, `overdue` at its dueAt.

The doses that may be reminded are the due rows (petrecords.due_rows): each living pet's latest completed dose of each
group, kept in the transaction of every write that moves it, so that a reminder is only written while it is true (a
booster, a dose entered in error or deleted, a death remove the row). Each row remembers the last reminder written for
its dueAt in `reminded`, which the keeper sets back to `none` when dueAt moves; so a pass reads two ranges of the index
(reminded, due_at, id), the rows not reminded whose due-soon moment has come and those reminded due-soon whose dueAt
has come, and never the rows that wait or are done.

Every instance runs the duty. A batch is written in one transaction that holds the batch's pets, as a write of
their vaccinations does, reads the rows again (on SQLite, where a write transaction holds the whole database, it
reads them once, in that transaction), and sets `reminded` by a compare-and-set (one statement for each action)
before it keeps the changes of the rows it set (one statement): of two instances, or of a pass that crashed and the
next, each reminder is written once. Holding the pets also puts the reminder in the change log's order after
the write that made it true, and before any write that ends it. An instance whose batch set no row (another took
them) leaves the range to that one until its next pass, rather than reading the same batches in turn. On SQLite a
burst (Reminders.APART_AT) is written in the order of its pets, a part of the range at a time (ReadAhead).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import math
import os
import sys
import threading
import time
import uuid
from asyncio.subprocess import PIPE
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.config import Settings
from petrecords.due_rows import DUE_DOSES, due_doses, statements_of
from petrecords.duties import wait_seconds
from petrecords.errors import DatabaseUnavailable
from petrecords.pets import PETS
from petrecords.registry import RESOURCES
from petrecords.reminders_apart import ReminderOrder, ReminderReport
from petrecords.resources.kept import keep_notices
from petrecords.resources.locks import reference_locks
from petrecords.store.base import Condition, Lock, Operator, PageQuery, Row, SortKey, Store, Transaction
from petrecords.store.records import Statement, padded, stored_uuid
from petrecords.store.sqlite import SqliteStore
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.values import now_ms

BY = "system@petrecords.invalid"
"""Who a reminder is by: no one who can sign in."""
NOT_YET, DUE_SOON, OVERDUE = "none", "due-soon", "overdue"
"""The values of `reminded`: nothing written for the row's dueAt yet, then each reminder as it is written."""
REMINDER_ACTIONS = (DUE_SOON, OVERDUE)
"""The actions of the changes that remind: they write nothing."""
DAY_MS = 86_400_000
LEAST_LATE_MS = DAY_MS
"""However few the due-soon days (0: no due-soon reminder), an overdue moment is not skipped for the first day after
it, so that a dose written just after its dueAt, or an outage of minutes, still brings it."""

StoreLookup = Callable[[], Store | None]


Due = tuple[uuid.UUID, uuid.UUID, int, str]
"""A due row as a pass reads it: (id, pet_id, due_at, reminded), all that what it is owed needs. Read whole, as dicts
of their dozen columns with three UUIDs each, the rows cost a pass more than the rest of its Python."""


def owed(due_at: int, reminded: str, *, now: int, soon_ms: int) -> tuple[str, bool] | None:
    """What a due row is owed at `now`: the value its `reminded` takes, and whether a change says so (False: the
    moment is more than the due-soon days past, and is skipped); None while no moment has come."""
    if reminded == OVERDUE:
        return None
    if due_at <= now:
        # No due-soon once dueAt has passed: its overdue only.
        return OVERDUE, now - due_at <= max(soon_ms, LEAST_LATE_MS)
    if reminded == NOT_YET and due_at - soon_ms <= now:
        return DUE_SOON, True  # its moment is less than the due-soon days past, as dueAt has not come
    return None


_READ = (due_doses.c.id, due_doses.c.pet_id, due_doses.c.due_at, due_doses.c.reminded)


def _range_select(*, backward: bool) -> sa.Select[Any]:
    due_at, row_id = due_doses.c.due_at, due_doses.c.id
    return (
        sa.select(*_READ)
        .where(
            due_doses.c.reminded == sa.bindparam("reminded", type_=due_doses.c.reminded.type),
            due_at <= sa.bindparam("due_until", type_=due_at.type),
        )
        .order_by(*((due_at.desc(), row_id.desc()) if backward else (due_at, row_id)))
        .limit(sa.bindparam("limit", type_=sa.Integer()))
    )


_RANGES = {backward: _range_select(backward=backward) for backward in (False, True)}


def reminder_range(reminded: str, due_until: int, limit: int, *, backward: bool = False) -> Statement:
    """The first `limit` rows of the index's range (reminded, dueAt up to `due_until`), in its order or (`backward`)
    from its end."""
    return _RANGES[backward], {"reminded": reminded, "due_until": due_until, "limit": limit}


_RANGE_COUNT = sa.select(sa.func.count()).where(
    due_doses.c.reminded == sa.bindparam("reminded", type_=due_doses.c.reminded.type),
    due_doses.c.due_at <= sa.bindparam("due_until", type_=due_doses.c.due_at.type),
)


def owed_count(reminded: str, due_until: int) -> Statement:
    """How many rows of the index's range (reminded, dueAt up to `due_until`) there are."""
    return _RANGE_COUNT, {"reminded": reminded, "due_until": due_until}


def paced_rest(*, remaining: int, seconds_per_row: float, seconds_left: float, batch: int, most: float) -> float:
    """How long to rest after a batch so that the `remaining` rows, at `seconds_per_row`, end when `seconds_left`
    have passed: the time to spare shared between the batches left, at most `most`; none when there is none."""
    if remaining <= 0 or batch <= 0:
        return 0.0
    spare = seconds_left - remaining * seconds_per_row
    return min(max(spare, 0.0) / math.ceil(remaining / batch), most)


@dataclasses.dataclass
class Pace:
    """A burst's pass spread over the time the contract leaves it (Reminders.SPREAD_SECONDS): what it owed when it
    began, by when (time.monotonic()) it means to have written it, and what it has written so far and in how long."""

    owed: int
    ends_by: float
    done: int = 0
    working: float = 0.0

    def rest_after(self, taken: int, took: float, batch: int, *, most: float, left: int | None = None) -> float:
        """The rest after a batch that set `taken` rows in `took` seconds; `left`: the rows still owed, as counted
        (by default, what the pass owed when it began less what it has set)."""
        self.done += taken
        self.working += took
        if left is not None:
            self.owed = self.done + left
        if not self.done:
            return 0.0
        per_row = self.working / self.done
        seconds_left = self.ends_by - time.monotonic()
        return paced_rest(
            remaining=self.owed - self.done, seconds_per_row=per_row, seconds_left=seconds_left, batch=batch, most=most
        )


@dataclasses.dataclass
class ReadAhead:
    """A burst's rows of one range on SQLite, read `size` at a time in the range's order and written in the order of
    their pets (Reminders.READ_AHEAD)."""

    size: int
    rows: list[Due] = dataclasses.field(default_factory=list)
    ended: bool = False
    """The last read found fewer than `size`: what the range held then is all in `rows`."""

    async def take(self, store: Store, reminded: str, due_until: int, count: int) -> list[Due]:
        """The next `count` rows, the range read again from its beginning where fewer are left and it had more: the
        rows left come again, since no batch has set them, with those whose moment has come since."""
        if len(self.rows) < count and not self.ended:
            async with store.transaction(write=False) as tx:
                read = _read(await statements_of(tx).fetch(reminder_range(reminded, due_until, self.size)))
            self.ended = len(read) < self.size
            self.rows = sorted(read, key=lambda row: (row[1], row[0]))
        taken, self.rows = self.rows[:count], self.rows[count:]
        return taken


@functools.lru_cache(maxsize=16)
def _rows_select(count: int) -> sa.Select[Any]:
    ids = [sa.bindparam(f"id_{index}", type_=due_doses.c.id.type) for index in range(count)]
    return sa.select(*_READ).where(due_doses.c.id.in_(ids))


def rows_by_id(ids: Sequence[uuid.UUID]) -> Statement:
    """These due rows (at least one), read again. The ids are padded (records.padded), so that a few statements serve
    every size of batch."""
    every = padded(ids)
    return _rows_select(len(every)), {f"id_{index}": row_id for index, row_id in enumerate(every)}


def _read(rows: Sequence[Sequence[Any]]) -> list[Due]:
    return [(stored_uuid(row[0]), stored_uuid(row[1]), int(row[2]), str(row[3])) for row in rows]


def _by_id(ids: Sequence[uuid.UUID]) -> PageQuery:
    return PageQuery(
        conditions=(Condition(("id",), Operator.IN, tuple(ids)),), sort=(SortKey("id"),), limit=len(ids), offset=0
    )


_DOSES_ALONE = dataclasses.replace(PET_VACCINATIONS.collection, joins=())
"""The vaccinations without the records they embed: a batch's doses embed a few vaccines, each read once."""


async def doses_alone(tx: Transaction, ids: Sequence[uuid.UUID]) -> list[Row]:
    return list(await tx.list(_DOSES_ALONE, _by_id(ids)))


def embedded_locks(doses: Sequence[Row]) -> list[Lock]:
    """Shared holds of the records these doses embed. A reminder shows its dose with them as they are where it
    comes in the change log: a vaccine's write holds the vaccine, but not the pets a pass holds, and without these
    a vaccine renamed between the pass's read and its COMMIT came in the log before a reminder showing its old name."""
    joined = [join.column for join in PET_VACCINATIONS.collection.joins]
    # Each record a batch embeds once: its doses embed a few vaccines between them.
    embedded = {tuple(dose[column] for column in joined) for dose in doses}
    return [
        lock
        for values in embedded
        for lock in reference_locks(RESOURCES, PET_VACCINATIONS, dict(zip(joined, values, strict=True)))
    ]


async def shown_doses(tx: Transaction, doses: Sequence[Row]) -> dict[uuid.UUID, Row]:
    """These doses (read alone), each with the records it embeds (as PET_VACCINATIONS.collection reads them), by
    id: the embedded records are read once each, where a join would read and build one for every dose."""
    for join in PET_VACCINATIONS.collection.joins:
        named = sorted({dose[join.column] for dose in doses})
        embedded = {row["id"]: row for row in await tx.list(join.target, _by_id(named))} if named else {}
        for dose in doses:
            dose[join.name] = embedded[dose[join.column]]
    return {dose["id"]: dose for dose in doses}


class Reminders:
    """Writes the reminders whose moment has come, in batches of BATCH doses (each batch its own transaction); every
    instance's duties (petrecords.duties) run a pass, then the next when the first moment it knows of comes, or
    `interval_seconds` later if that is sooner (`next_wait`).

    On SQLite a pass that has anything to write runs on a thread of its own, with a store of its own: the batches'
    statements and their COMMIT (its sync, about 20 ms) ran on the worker's event loop, which served no request
    meanwhile. There SQLite lets go of Python's lock while it works, and the loop goes on; the pass's store is one
    more connection to the file, queued for the one writer as another process's is; a burst (APART_AT) is written by a
    process of its own. Only one such pass runs at a time
    of every process that serves the file (SqliteStore.alone): two, one in each of a server's two workers, took the
    one writer in turn, each with its own pages to read, and cost the requests about half as much CPU again as one
    writing everything (bench/results/2026-12-06-one-pass-at-a-time.md). Between its batches it empties
    the write-ahead log once that has passed LOG_BYTES: with reads by id always under way, SQLite never starts the
    log again from its beginning while batches follow one another. On PostgreSQL a batch's time is round trips,
    which leave the loop free already."""

    BATCH = 1_000
    """The most doses a transaction reminds: their pets held, their rows set in one statement, their vaccinations
    read in one and their changes kept in one. On SQLite a pass of 100,000 took 16.6-18.1 s of CPU in batches of at
    most 500 (about 380 on average, sized as below) and 14.0 s in batches of 1,000: a batch's COMMIT and its
    statements' pages cost nearly as much for a few rows as for many."""
    LEAST_BATCH = 50
    BATCH_SECONDS = 0.2
    """On SQLite, how long a batch may hold the one writer: a pass starts at LEAST_BATCH doses a batch, and doubles
    the batch after one that took less than half of this, up to BATCH, or halves it after one that took more than
    twice as long, so that the API's writes, which wait for the writer behind it, wait no longer where the machine is
    slow. Each batch ends in a COMMIT and its sync (about 20 ms): sized to 50 ms, as when the pass ran on the event
    loop and held it, a third of a pass was COMMITs. On PostgreSQL every batch is BATCH."""
    REST: Mapping[str, float] = MappingProxyType({"sqlite": 0.1, "postgresql": 0.0})
    """After a batch, the duty rests this many times as long as the batch took. On SQLite the rests are the API's
    writes' turns at the one writer, which the instances' passes would otherwise take in turn with each other. On
    PostgreSQL a batch's work is the database's, in its own processes, and its rows are held for it alone: resting
    would only leave the reminders later (bench/results/2026-12-06-reminders-in-60s.md)."""

    LOG_BYTES = 64 << 20
    """On SQLite, how far the write-ahead log may grow before the pass empties it between two batches
    (SqliteStore.empty_log): unbounded, it reached 0.8-1.5 GB during a pass of 100,000 reminders, and kept that size."""

    APART_AT = 5_000
    """On SQLite, how many doses owed make a pass run in a process of its own rather than on a thread of the worker's
    (reminders_apart): there its Python shared the worker's interpreter lock with the event loop, which served get by
    id at 0.5-0.65 of its rate while a burst of 100,000 was written; in a process of its own, the kernel shares the
    machine's cores between them: 100,000 were written in 38.8-40.7 s where 56.7-57.5 s, get by id at 0.57-0.66 of its
    rate meanwhile where 0.53-0.54 (bench/results/2026-12-06-a-burst-in-a-process.md). Below this, the process's start
    (about 0.6 s of CPU) would cost more than it saves."""

    SPREAD_SECONDS = 50.0
    """A pass that begins with APART_AT doses or more owed (a burst) rests between its batches so as to end about this
    long after their first moment, where it would end sooner: the contract gives 60 s, and the same work spread
    thinner takes less from the requests meanwhile; the 10 s left are for a pass that falls behind, which then rests
    no more. 100,000 on PostgreSQL, spread over 40 s: written in 37.7 s where 27.6-31.2 s, get by id at 0.54 of its
    rate meanwhile where 0.44-0.49 (bench/results/2026-12-06-a-burst-in-a-process.md); on SQLite over 50 s, written
    in 50.2-50.6 s (bench/results/2026-12-06-burst-by-pet.md)."""
    MOST_PACED_REST = 2.0
    """The longest such a rest: the pass looks at its time again after each batch."""

    READ_AHEAD = 20_000
    """On SQLite, how many rows of a range a burst reads at a time (ReadAhead) to write them in the order of their
    pets rather than of their moments: the change log's index by pet (`shared_key`) then takes its entries in order,
    as does its index by record where doses were entered with their pets, where in the order of their moments every
    reminder wrote a page of each at random. A pass of 100,000 in one process wrote 1.5 GB to the write-ahead log
    where 3.3 GB, in 13-16 s of CPU where 17-20 s (bench/results/2026-12-06-burst-by-pet.md).
    The rows are read again by id in the batch's write transaction, as on PostgreSQL; of 20,000 rows, a read ahead
    keeps a few megabytes."""

    CACHE_KIB = 64 << 10
    """On SQLite, the page cache of each of the pass's connections (SQLite's default: 2,000 KiB). A batch of 1,000
    reminders writes some 2,000 pages (a leaf of the change log's index by owner for nearly each), which did not fit:
    pages were read again and again, 3.6-3.7 GB in a pass of 100,000 where 1.6 GB with this, and its system CPU
    was 4.3-4.9 s where 2.9-3.2 s (bench/results/2026-12-06-a-pass-with-room.md). Each connection's grows only as
    it reads pages: the pass writes on one, and reads its ranges on another."""

    TUNING = (
        "BATCH",
        "LEAST_BATCH",
        "BATCH_SECONDS",
        "LOG_BYTES",
        "APART_AT",
        "SPREAD_SECONDS",
        "MOST_PACED_REST",
        "READ_AHEAD",
        "CACHE_KIB",
    )
    """The numbers above, which a pass in a process of its own is given as this one has them (with REST's)."""

    def __init__(
        self,
        settings: Settings,
        store: StoreLookup,
        *,
        interval_seconds: float | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self._settings = settings
        self._soon_ms = settings.due_soon_days * DAY_MS
        self._ranges = ((NOT_YET, self._soon_ms), (DUE_SOON, 0))
        """The pass's two ranges, in its order: (the rows' `reminded`, how long before dueAt their moment is)."""
        self._store = store
        self.interval_seconds = settings.reminders_interval_seconds if interval_seconds is None else interval_seconds
        """The longest between two passes: PETRECORDS_REMINDERS_INTERVAL_SECONDS (10 by default, well within the 60
        seconds the contract gives, with room for a pass that has many to write). A moment that another instance's
        write brings closer is seen at the next pass, at most this long after the last."""
        self._clock = clock
        self.processes = 0
        """On SQLite: how many passes this instance has run in a process of their own."""
        self._elsewhere = False
        """On SQLite: the last pass found another one writing (Reminders.remind), which goes on until nothing is left
        to write and then waits for the next moment; this one looks again `interval_seconds` later, in case that
        process has stopped."""

    LEAST_WAIT_SECONDS = 0.2
    """The least time between two passes: a moment already come (rows another instance is writing, or that came as
    the pass ended) or a step of the clock starts the next pass this long after the last, never at once."""

    async def next_wait(self) -> float:
        """How long to wait after a pass: until the first moment to come within `interval_seconds`, at least
        LEAST_WAIT_SECONDS."""
        store = self._store()
        if store is None or self._elsewhere:
            return self.interval_seconds
        now = self._clock()
        async with store.transaction(write=False) as tx:
            moment = await self._first_moment(tx, now + int(self.interval_seconds * 1000))
        return wait_seconds(now, moment, most=self.interval_seconds, least=self.LEAST_WAIT_SECONDS)

    async def _first_moment(self, tx: Transaction, until: int) -> int | None:
        """The first moment, up to `until`, of a row of either of the pass's ranges: the first row of each, by the
        ranges' index."""
        moments = [
            due_at - soon_ms
            for reminded, soon_ms in self._ranges
            for _, _, due_at, _ in _read(await statements_of(tx).fetch(reminder_range(reminded, until + soon_ms, 1)))
        ]
        return min(moments, default=None)

    async def remind(self, *, now: int | None = None) -> int:
        """Write what has come by `now` (the clock's at each batch, by default); how many reminders were written."""
        store = self._store()
        if store is None:
            return 0
        if not isinstance(store, SqliteStore):
            return await self._remind(store, now, threading.Event())
        async with store.transaction(write=False) as tx:
            first = await self._first_moment(tx, self._clock() if now is None else now)
        if first is None:
            self._elsewhere = False  # nothing is being written: this one waits for the next moment too
            return 0  # the pass of nearly every interval: no thread, no connections opened
        if await self._owed_by(store, now) >= self.APART_AT:
            # Looked at first: a process started only to find the lock held cost about 0.6 s of CPU.
            self._elsewhere = store.held_elsewhere("reminders")
            return 0 if self._elsewhere else await self._remind_in_a_process(now)
        stop = threading.Event()
        running = asyncio.get_running_loop().run_in_executor(None, self._remind_on_a_thread, now, stop)
        try:
            # Shielded: a cancelled duty (the process stopping) tells the pass to end after its batch, which then
            # closes its store, rather than leaving a write transaction open on the thread.
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            stop.set()
            raise

    def settings_of_a_pass(self) -> dict[str, object]:
        """The settings a pass in another process needs, by name (reminders_apart.ReminderOrder)."""
        settings = self._settings
        return {
            "database_url": settings.resolved_database_url,
            "data_dir": str(settings.data_dir),
            "due_soon_days": settings.due_soon_days,
            "sqlite_busy_timeout_ms": settings.sqlite_busy_timeout_ms,
            "db_statement_timeout_seconds": settings.db_statement_timeout_seconds,
            "reminders_interval_seconds": settings.reminders_interval_seconds,
            "log_level": settings.log_level,
        }

    STOP_WAIT_SECONDS = 10.0
    """How long a duty that is cancelled waits for the pass's process to end its batch before it kills it."""

    def order_of_a_pass(self, now: int | None, *, parent: int) -> ReminderOrder:
        """What a pass in a process of its own (reminders_apart) is given: this duty's settings and numbers, the
        moment it writes up to, and the process it ends with."""
        return ReminderOrder(
            settings=self.settings_of_a_pass(),
            tuning={name: getattr(self, name) for name in self.TUNING} | {"REST": self.REST.get("sqlite", 0.0)},
            now=now,
            parent=parent,
        )

    async def _remind_in_a_process(self, now: int | None) -> int:
        """A SQLite pass in a process of its own (reminders_apart): how many reminders it wrote."""
        order = self.order_of_a_pass(now, parent=os.getpid())
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "petrecords.reminders_apart", stdin=PIPE, stdout=PIPE
        )
        self.processes += 1
        try:
            said, _ = await asyncio.shield(child.communicate(msgspec.json.encode(order)))
        except asyncio.CancelledError:
            # The process stopping: the pass ends after its batch, as on a thread; killed if it takes too long.
            if child.returncode is None:
                child.terminate()
                try:
                    await asyncio.wait_for(child.wait(), self.STOP_WAIT_SECONDS)
                except TimeoutError:
                    child.kill()
            raise
        if child.returncode != 0:
            raise RuntimeError(f"the reminders pass's process ended with exit code {child.returncode}")
        report = msgspec.json.decode(said, type=ReminderReport)
        if report.unavailable is not None:
            raise DatabaseUnavailable(cause=report.unavailable)
        self._elsewhere = not report.held
        return report.written

    def _remind_on_a_thread(self, now: int | None, stop: threading.Event) -> int:
        """A SQLite pass on this thread, with an event loop of its own."""
        written, held = asyncio.run(self.remind_alone(now, stop))
        self._elsewhere = not held
        return written

    async def remind_alone(self, now: int | None, stop: threading.Event) -> tuple[int, bool]:
        """A SQLite pass with a store of its own, if no other process is writing the reminders (SqliteStore.alone):
        how many reminders it wrote, and whether it could."""
        settings = self._settings
        store = SqliteStore(
            settings.resolved_database_url,
            busy_timeout_ms=settings.sqlite_busy_timeout_ms,
            statement_timeout_seconds=settings.db_statement_timeout_seconds,
            cache_kib=self.CACHE_KIB,
        )
        try:
            with store.alone("reminders") as held:
                return (await self._remind(store, now, stop) if held else 0), held
        finally:
            await store.close()

    async def _remind(self, store: Store, given: int | None, stop: threading.Event) -> int:
        """A pass on this store, until there is nothing left to write or `stop` is set."""
        written = 0
        sized = store.dialect == "sqlite"
        rest = self.REST.get(store.dialect, 0.0)
        batch = min(self.LEAST_BATCH, self.BATCH) if sized else self.BATCH
        pace = await self._pace(store, given)
        # The rows not reminded whose due-soon moment (or dueAt) has come, then those reminded due-soon whose dueAt
        # has come. Each row a batch reads leaves its range (or another instance's batch took it), so each read
        # starts from the range's beginning.
        for reminded, soon_ms in self._ranges:
            backward = False
            ahead = ReadAhead(self.READ_AHEAD) if sized and pace is not None else None
            while not stop.is_set():
                # The clock is read again for each batch: a pass that writes many moments at once (an import's doses
                # due the same minute) takes those that come while it writes, rather than leaving them to a pass
                # up to an interval later.
                now = self._clock() if given is None else given
                started = time.monotonic()
                if isinstance(store, SqliteStore) and ahead is None:
                    statement = reminder_range(reminded, now + soon_ms, batch, backward=backward)
                    found, taken, told = await self._read_and_remind(store, statement, now)
                    took = time.monotonic() - started
                else:
                    # Rows read before their write transaction (a burst's read ahead on SQLite; on PostgreSQL every
                    # batch's), which reads them again.
                    if ahead is not None:
                        found = await ahead.take(store, reminded, now + soon_ms, batch)
                    else:
                        statement = reminder_range(reminded, now + soon_ms, batch, backward=backward)
                        async with store.transaction(write=False, single=True) as tx:
                            found = _read(await statements_of(tx).fetch(statement))
                    taken = told = 0
                    writing = time.monotonic()
                    if found:
                        async with store.transaction(write=True) as tx:
                            taken, told = await self._remind_batch(tx, found, now, read_again=True)
                    took = time.monotonic() - writing
                if isinstance(store, SqliteStore):
                    # After the batch's time is taken, which sizes its hold of the writer: this copy is what SQLite's
                    # own checkpoints after each COMMIT would do, had readers let them finish.
                    await store.empty_log(past_bytes=self.LOG_BYTES)
                if not found:
                    break
                written += told
                if len(found) < batch:
                    break
                if sized and took < self.BATCH_SECONDS / 2:
                    batch = min(batch * 2, self.BATCH)
                elif sized and took > self.BATCH_SECONDS * 2:
                    batch = max(batch // 2, min(self.LEAST_BATCH, self.BATCH))
                if not taken and ahead is None:
                    if backward:
                        # Taken from both ends: the others write what is left of this range. The next pass goes on
                        # if they stopped.
                        return written
                    # Another instance set these rows first and is writing this range from its beginning: this one
                    # goes on from the range's end, so that the two write disjoint batches at once (on PostgreSQL;
                    # on SQLite their reads and records' JSON) rather than reading the same ones in turn.
                    backward = True
                # The batch's whole time (its read, and on SQLite the log emptied after it), where `took` is its
                # hold of the writer alone.
                spent = time.monotonic() - started
                pause = rest * spent
                if pace is not None:
                    # Where several instances write a burst at once (PostgreSQL), what this one has written is not
                    # what is left: that is counted again, so that each rests for the burst's pace, not its share's.
                    left = None if sized else await self._owed_by(store, given)
                    pause = max(pause, pace.rest_after(taken, spent, batch, most=self.MOST_PACED_REST, left=left))
                if pause and sized:
                    # Ended by `stop`, so that a process stopping need not wait for the rest to end.
                    await asyncio.to_thread(stop.wait, pause)
                elif pause:
                    await asyncio.sleep(pause)  # on the duty's loop: a cancelled duty ends it
        return written

    def _coming_by(self, given: int | None) -> int:
        """`given`, or, where the pass reads the clock, an interval from now: a duty wakes at the first moment it
        knows of, when a burst's other moments, a few milliseconds later, have not come, and the pass goes on reading
        the clock and writes them all."""
        return self._clock() + int(self.interval_seconds * 1000) if given is None else given

    async def _pace(self, store: Store, given: int | None) -> Pace | None:
        """The pace of a burst (Pace), or None for a pass that begins with fewer than APART_AT owed by then
        (`_coming_by`)."""
        now = self._clock() if given is None else given
        async with store.transaction(write=False) as tx:
            owed = await self._owed_count(tx, self._coming_by(given))
            if owed < self.APART_AT:
                return None
            first = await self._first_moment(tx, now)
        if first is None:
            return None
        return Pace(owed=owed, ends_by=time.monotonic() + (first - now) / 1000 + self.SPREAD_SECONDS)

    async def _owed_count(self, tx: Transaction, now: int) -> int:
        """How many rows of the pass's ranges are owed by `now`: a count over their index."""
        sql = statements_of(tx)
        owed = 0
        for reminded, soon_ms in self._ranges:
            counted = await sql.fetch(owed_count(reminded, now + soon_ms))
            owed += int(counted[0][0])
        return owed

    async def _owed_by(self, store: Store, given: int | None) -> int:
        """How many doses are owed reminders by `given` (`_coming_by`), in a read of their own."""
        async with store.transaction(write=False) as tx:
            return await self._owed_count(tx, self._coming_by(given))

    async def _read_and_remind(self, store: Store, statement: Statement, now: int) -> tuple[list[Due], int, int]:
        """Where one write transaction at a time holds the database (SQLite): the batch's rows read in the
        transaction that reminds them, which no write can change before it commits, so that they need not be read
        again; the rows, how many this batch set and how many reminders it wrote."""
        async with store.transaction(write=True) as tx:
            found = _read(await statements_of(tx).fetch(statement))
            taken, told = await self._remind_batch(tx, found, now, read_again=False) if found else (0, 0)
        return found, taken, told

    async def _remind_batch(
        self, tx: Transaction, found: Sequence[Due], now: int, *, read_again: bool
    ) -> tuple[int, int]:
        """Remind the doses of these due rows that are still owed, holding their pets: how many rows this batch set,
        and how many reminders it wrote. `read_again`: the rows were read before this transaction began."""
        rows = list(found)
        alone: list[Row] = []
        if read_again:
            ids = [row[0] for row in found]
            pets = {row[1] for row in found}
            await tx.lock([Lock(RESOURCES.rank(PETS), PETS.name, pet) for pet in pets])
            # Read again once the pets are held: a write of their doses, or another instance's batch, has committed.
            # A dose moved to another pet meanwhile waits for the next batch, which holds that pet.
            rows = [row for row in _read(await statements_of(tx).fetch(rows_by_id(ids))) if row[1] in pets]
            # The doses cannot change while their pets are held; what they embed can, until it is held too.
            if rows:
                alone = await doses_alone(tx, [row[0] for row in rows])
            await tx.lock(embedded_locks(alone))
        owing: dict[tuple[str, str], list[uuid.UUID]] = {}
        actions: dict[uuid.UUID, tuple[str, bool]] = {}
        for row_id, _, due_at, reminded in rows:
            due = owed(due_at, reminded, now=now, soon_ms=self._soon_ms)
            if due is not None:
                owing.setdefault((reminded, due[0]), []).append(row_id)
                actions[row_id] = due
        # Set by a compare-and-set, a statement for each (reminded, action): the pets are held, so that a row's dueAt
        # cannot move meanwhile (every write of due rows holds their pet), and another instance's batch that read
        # the same rows sets none of them.
        taken: set[uuid.UUID] = set()
        for (reminded, action), owed_ids in owing.items():
            taken |= await tx.set_all_if(
                DUE_DOSES.collection, owed_ids, expected={"reminded": reminded}, values={"reminded": action}
            )
        told = [row[0] for row in rows if row[0] in taken and actions[row[0]][1]]
        if not told:
            return len(taken), 0
        told_ids = set(told)
        doses = await shown_doses(
            tx, [dose for dose in alone if dose["id"] in told_ids] if read_again else await doses_alone(tx, told)
        )
        # A row written again as `none` though its dose was reminded for this dueAt (a booster after it entered in
        # error, say): the change log still has that reminder at the dose's version, which a new dueAt moves.
        again = [row[0] for row in rows if row[0] in doses and row[3] == NOT_YET]
        kept = await tx.kept_actions(PET_VACCINATIONS.name, again, REMINDER_ACTIONS) if again else set()
        written = 0
        for action in REMINDER_ACTIONS:
            notices = [
                dose
                for row_id in told
                if actions[row_id][0] == action
                and (dose := doses.get(row_id)) is not None
                and (row_id, action, dose["revision"]) not in kept
            ]
            await keep_notices(tx=tx, resource=PET_VACCINATIONS, rows=notices, action=action, by=BY, at=now)
            written += len(notices)
        return len(taken), written
