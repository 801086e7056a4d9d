"""Reads answered by PostgreSQL streaming replicas, never staler than what their caller has written, nor than
the shares that name them.

Read-your-writes across instances, and every share as its last write left it. A caller's next request may
reach any instance, and existing clients send nothing but their token, so where a caller's reads must start is
kept where every instance sees it: in Redis (PETRECORDS_REDIS_URL), under a name, as the primary's WAL position
right after the last committed write that concerns it (`pg_current_wal_lsn()`, read after COMMIT returned: at
or past the commit record). A write concerns its caller's name, and, when it writes shares (makes, changes or
deletes one, or deletes or transfers what one shares), the name of every grantee of those shares as they were
and as they are: a user's e-mail address, or `group:NAME`, which every member's token lists. A read for a
caller may be answered by a replica only when, on the connection that will run it and before it runs,
`pg_last_wal_replay_lsn()` is at or past

  - the greatest position of the caller's names (their e-mail address and their groups): the replica has
    replayed the caller's last write and the last change of every share naming them, so the read's snapshot
    (taken later, on the same server) grants what the primary's would; and
  - the floor: the primary's position as this process sampled it at the oldest moment still within the last
    PETRECORDS_DATABASE_READ_MAX_LAG_SECONDS. A replica short of it is more than that far behind and is
    skipped, and so is one that does not answer.

The floor is also what covers the positions Redis no longer has: a write committed more than the bound ago
lies at or before every floor now in use, so a position need only be kept that long (its key expires after
twice the bound), and when Redis loses its data (a restart without persistence) replicas answer no read
until the bound has passed on Redis's own clock since it was found empty. When Redis does not answer, reads
go to the primary; when a write's position cannot be recorded, the write's answer waits (at most the
bound) until every replica has replayed it, so that no replica can answer that caller, or a grantee of a share
it wrote, stale afterwards.

A share's expiry needs no position: it is a time in the share, which the replica's snapshot holds, compared with
this process's clock. A read asks Redis for every name of its caller in one round trip, as it asked for the
caller's alone, so that a get by id costs what it did; a write records all of its names in one round trip too.

Every duration is measured on one clock (this process's monotonic clock, or Redis's), never compared across
hosts. Conditional reads and the change feed are never sent here: see PostgresTransaction.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa

from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Principal
from petrecords.store.faults import DATABASE_ERRORS
from petrecords.store.sql import SqlTransaction


class PooledStore(Protocol):
    """What the replicas ask of a PostgreSQL store, the primary's or a replica's: transactions, and connections
    of its pool."""

    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> SqlTransaction: ...

    async def acquire(self) -> Any: ...

    async def release(self, connection: Any) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=PooledStore)

log = logging.getLogger("petrecords.replicas")

POLL_SECONDS = 0.25
"""How often each process samples the primary's position and each replica's replay."""
PROBE_SECONDS = 1.0
"""The longest wait for a replica's answer to a probe: one that takes longer is skipped for now."""
REDIS_SECONDS = 0.25
REDIS_RETRY_SECONDS = 5.0

PRIMARY_POSITION = "SELECT (pg_current_wal_lsn() - '0/0')::bigint"
REPLAYED_POSITION = "SELECT (pg_last_wal_replay_lsn() - '0/0')::bigint"
"""NULL on a server that is not a standby: such a server never answers as a replica."""
_PRIMARY_POSITION = sa.text(PRIMARY_POSITION)
_REPLAYED_POSITION = sa.text(REPLAYED_POSITION)

_RECORD = """
local since = redis.call('GET', KEYS[#KEYS])
if not since then redis.call('SET', KEYS[#KEYS], redis.call('TIME')[1], 'NX') end
for index = 1, #KEYS - 1 do
  local kept = redis.call('GET', KEYS[index])
  if not kept or kept < ARGV[1] then redis.call('SET', KEYS[index], ARGV[1], 'EX', ARGV[2]) end
end
return 1
"""
"""Keep, for each name, the greater of its positions (16 hex digits: compared as strings, in number order)."""

_REQUIRED = """
local now = tonumber(redis.call('TIME')[1])
local since = redis.call('GET', KEYS[#KEYS])
if not since then
  redis.call('SET', KEYS[#KEYS], now, 'NX')
  return -1
end
if now - tonumber(since) <= tonumber(ARGV[1]) then return -1 end
local most = ''
for index = 1, #KEYS - 1 do
  local kept = redis.call('GET', KEYS[index])
  if kept and kept > most then most = kept end
end
return most
"""
"""The greatest position of the names ('' when none has one), or -1 while Redis may have lost positions still
needed."""

_SINCE = "petrecords:read-positions:since"


def _position_key(name: str) -> str:
    # A user's own writes and the shares naming them under one key: the greater is what their reads need.
    return f"petrecords:read-position:{name}"


class ReadPositions:
    """The position of each name (a caller, a grantee) in Redis, shared by every instance."""

    def __init__(self, url: str, *, max_lag_seconds: float) -> None:
        # Imported here: a process without Redis does not pay for the client's import (a quarter of a second).
        import redis.asyncio
        import redis.exceptions

        self._outage = (redis.exceptions.RedisError, OSError)
        self._client = redis.asyncio.from_url(url, socket_timeout=REDIS_SECONDS, socket_connect_timeout=REDIS_SECONDS)
        self._record = self._client.register_script(_RECORD)
        self._required = self._client.register_script(_REQUIRED)
        self._ttl = math.ceil(2 * max_lag_seconds) + 1
        self._guard = math.ceil(max_lag_seconds) + 1
        self._down_until = 0.0

    def _failed(self, exc: BaseException) -> None:
        if time.monotonic() >= self._down_until:
            log.warning("read positions unavailable in Redis, reading from the primary: %s", type(exc).__name__)
        self._down_until = time.monotonic() + REDIS_RETRY_SECONDS

    async def record(self, names: tuple[str, ...], position: int) -> bool:
        """Whether the position of each of the names is now at least `position`."""
        if time.monotonic() < self._down_until:
            return False
        try:
            keys = [*map(_position_key, names), _SINCE]
            await self._record(keys=keys, args=[f"{position:016x}", self._ttl])
        except self._outage as exc:
            self._failed(exc)
            return False
        return True

    async def required(self, names: tuple[str, ...]) -> int | None:
        """The greatest position of the names (0 when none is kept), or None when it cannot be known now."""
        if time.monotonic() < self._down_until:
            return None
        try:
            kept = await self._required(keys=[*map(_position_key, names), _SINCE], args=[self._guard])
        except self._outage as exc:
            self._failed(exc)
            return None
        if kept == -1:
            return None
        return int(kept, 16) if kept else 0

    async def close(self) -> None:
        await self._client.aclose()


class Replica(Generic[S]):
    def __init__(self, store: S) -> None:
        self.store = store
        self.replayed: int | None = None
        """What it had replayed when last asked; None while it does not answer (or is not a standby)."""


def _position(value: Any) -> int | None:
    return None if value is None else int(value)


class ReadReplicas(Generic[S]):
    """The replicas of one process, with what it knows of how far behind each is."""

    def __init__(self, settings: Settings, primary: S, replicas: Sequence[S]) -> None:
        if settings.redis_url is None:
            raise ValueError("read replicas need PETRECORDS_REDIS_URL")
        self._primary = primary
        self._replicas = [Replica(store) for store in replicas]
        self._turn = itertools.count()
        self._max_lag = settings.database_read_max_lag_seconds
        self._positions = ReadPositions(settings.redis_url, max_lag_seconds=self._max_lag)
        self._samples: collections.deque[tuple[float, int]] = collections.deque()
        """(when, the primary's position then), oldest first, over the last max lag and a little more."""
        self._poller: asyncio.Task[None] | None = None

    def _start(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        while True:
            await asyncio.gather(self._sample_primary(), *(self._probe(replica) for replica in self._replicas))
            await asyncio.sleep(POLL_SECONDS)

    async def _sample_primary(self) -> None:
        # The moment is taken before the question: the answer is at least the position at that moment.
        moment = time.monotonic()
        try:
            async with asyncio.timeout(PROBE_SECONDS), self._primary.transaction(write=False) as tx:
                rows = await tx.fetch((_PRIMARY_POSITION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            return  # no sample: once the window holds none, replicas answer nothing
        position = _position(rows[0][0])
        if position is None:
            return
        self._samples.append((moment, position))
        while self._samples and self._samples[0][0] < moment - self._max_lag - 2 * POLL_SECONDS:
            self._samples.popleft()

    async def _probe(self, replica: Replica[S]) -> None:
        try:
            async with asyncio.timeout(PROBE_SECONDS), replica.store.transaction(write=False) as tx:
                rows = await tx.fetch((_REPLAYED_POSITION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            replica.replayed = None
            return
        replica.replayed = _position(rows[0][0])

    def _floor(self) -> int | None:
        """The primary's position at the oldest sample within the bound; None when there is none."""
        since = time.monotonic() - self._max_lag
        return next((position for moment, position in self._samples if moment >= since), None)

    async def acquire(self, names: tuple[str, ...]) -> tuple[S, Any] | None:
        """A replica's store and a connection of it that has replayed everything a caller known by `names` (their
        e-mail address and their groups) must see; None when no replica may answer (the primary does)."""
        self._start()
        floor = self._floor()
        if floor is None or not any(
            replica.replayed is not None and replica.replayed >= floor for replica in self._replicas
        ):
            return None  # known to be behind or away, all of them: not worth asking Redis
        position = await self._positions.required(names)
        if position is None:
            return None
        needed = max(floor, position)
        start = next(self._turn)
        for offset in range(len(self._replicas)):
            replica = self._replicas[(start + offset) % len(self._replicas)]
            # What the poller saw is a lower bound of the replay now: skip a replica seen behind without asking.
            if replica.replayed is None or replica.replayed < needed:
                continue
            store = replica.store
            try:
                connection = await store.acquire()
            except DatabaseUnavailable:
                replica.replayed = None
                continue
            try:
                replayed = _position(await connection.fetchval(REPLAYED_POSITION, timeout=PROBE_SECONDS))
            except DATABASE_ERRORS:
                connection.terminate()
                await store.release(connection)
                replica.replayed = None
                continue
            if replayed is not None and replayed >= needed:
                return store, connection
            await store.release(connection)
        return None

    def failed(self, store: S) -> None:
        """A replica that failed a read answers no more until the poller finds it answering again."""
        for replica in self._replicas:
            if replica.store is store:
                replica.replayed = None

    async def position_after_commit(self, connection: Any) -> int | None:
        """The primary's position once a write committed on `connection`: at or past the end of its commit
        record, since COMMIT has returned. None when it cannot be had (the write is done all the same)."""
        try:
            return _position(await connection.fetchval(PRIMARY_POSITION))
        except DATABASE_ERRORS:
            connection.terminate()
            return None

    async def wrote(self, names: tuple[str, ...], position: int | None) -> None:
        """Record that the reads of the callers known by any of `names` must see `position`. When that cannot be
        recorded, wait until every replica has replayed it, or until the bound has passed, after which every
        floor is past it."""
        self._start()
        if position is not None and await self._positions.record(names, position):
            return
        deadline = time.monotonic() + self._max_lag + 2 * POLL_SECONDS
        while time.monotonic() < deadline:
            if position is not None and all(
                replica.replayed is not None and replica.replayed >= position for replica in self._replicas
            ):
                return
            await asyncio.sleep(POLL_SECONDS / 2)

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        for replica in self._replicas:
            await replica.store.close()
        await self._positions.close()
