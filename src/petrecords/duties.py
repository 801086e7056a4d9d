"""What an instance does besides answering requests: keeping the change log within its retention, and
publishing it to NATS JetStream. Every instance runs both; a lease in the database lets one do each at a
time, and another take over within seconds when that one stops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors

from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from petrecords.resources.feed import change_wire
from petrecords.store.base import Change, Store
from petrecords.store.faults import DATABASE_ERRORS
from petrecords.values import now_ms

log = logging.getLogger("petrecords.duties")

DAY_MS = 86_400_000
StoreLookup = Callable[[], Store | None]


STORE_ERRORS: tuple[type[BaseException], ...] = (DatabaseUnavailable, *DATABASE_ERRORS)
PUBLISHING_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError, nats.errors.Error, *STORE_ERRORS)


class Retention:
    """Removes changes older than the retention, oldest first, in small batches (each its own short
    transaction), once a minute."""

    INTERVAL_SECONDS = 60.0
    BATCH = 1000
    LEASE = "changes-retention"

    def __init__(self, settings: Settings, store: StoreLookup, *, instance: str) -> None:
        self._days = settings.changes_retention_days
        self._store = store
        self._instance = instance

    async def run(self) -> None:
        while True:
            with contextlib.suppress(*STORE_ERRORS):
                await self.purge()
            await asyncio.sleep(self.INTERVAL_SECONDS)

    async def purge(self, *, now: int | None = None) -> int:
        """Remove what has expired, if this instance holds the lease; how many changes were removed."""
        store = self._store()
        if self._days == 0 or store is None:
            return 0
        now = now_ms() if now is None else now
        async with store.transaction(write=True) as tx:
            until = now + int(2 * self.INTERVAL_SECONDS * 1000)
            if not await tx.take_lease(self.LEASE, holder=self._instance, now_ms=now, until_ms=until):
                return 0
        removed = 0
        while True:
            async with store.transaction(write=True) as tx:
                batch = await tx.purge_changes(before_ms=now - self._days * DAY_MS, limit=self.BATCH)
            removed += batch
            if batch < self.BATCH:
                return removed
            await asyncio.sleep(0)  # let requests in between batches


def subject_of(change: Change) -> str:
    return f"petrecords.{change.resource}.{change.action}"


def message_id(change: Change) -> str:
    """The same for every delivery of one change, so that JetStream drops a repeat within its window."""
    return f"{change.resource}:{change.record_id}:{change.version}"


class Publisher:
    """Publishes every committed change to NATS JetStream, at least once, in commit order, from the change
    log: a write never waits for NATS, and NATS being away delays messages without losing any. The cursor of
    the last change JetStream acknowledged is kept in the database, so that a publisher that dies (or loses
    its lease) is taken over from there; what it sent after that cursor is sent again and dropped by
    JetStream's duplicate window, by `Nats-Msg-Id`."""

    LEASE = "nats-publisher"
    LEASE_SECONDS = 10.0
    POLL_SECONDS = 0.2
    BATCH = 200
    STREAM = "PETRECORDS"
    RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)

    def __init__(self, settings: Settings, store: StoreLookup, *, instance: str) -> None:
        if settings.nats_url is None:
            raise ValueError("no NATS URL")
        self._url = settings.nats_url
        self._store = store
        self._instance = instance
        self._failures = 0

    async def run(self) -> None:
        while True:
            try:
                await self._publish_while_connected()
            except PUBLISHING_ERRORS as exc:
                self._failures += 1
                if self._failures == 1:
                    log.warning("publishing changes to NATS paused: %s", type(exc).__name__)
            await asyncio.sleep(self.RETRY_SECONDS[min(self._failures, len(self.RETRY_SECONDS)) - 1])

    async def _publish_while_connected(self) -> None:
        connection = await nats.connect(
            self._url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0, name="petrecords"
        )
        try:
            stream = connection.jetstream(timeout=2)
            await self._ensure_stream(stream)
            if self._failures:
                log.info("publishing changes to NATS again")
            self._failures = 0
            while True:
                if not await self.publish_once(stream):
                    await asyncio.sleep(self.POLL_SECONDS)
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _ensure_stream(self, stream: Any) -> None:
        try:
            await stream.stream_info(self.STREAM)
        except nats.js.errors.NotFoundError:
            await stream.add_stream(name=self.STREAM, subjects=["petrecords.>"])

    async def publish_once(self, stream: Any) -> bool:
        """Publish the next changes, if this instance holds the lease; whether there were any."""
        store = self._store()
        if store is None:
            return False
        now = now_ms()
        async with store.transaction(write=True) as tx:
            until = now + int(self.LEASE_SECONDS * 1000)
            if not await tx.take_lease(self.LEASE, holder=self._instance, now_ms=now, until_ms=until):
                return False
        async with store.transaction(write=False) as tx:
            cursor = await tx.state_cursor(self.LEASE)
            batch = list(await tx.changes_after(cursor, limit=self.BATCH, reader=None, resources=None))
        if not batch:
            return False
        for change in batch:
            await stream.publish(
                subject_of(change),
                msgspec.json.encode(change_wire(change)),
                headers={"Nats-Msg-Id": message_id(change)},
            )
        async with store.transaction(write=True) as tx:
            await tx.set_state_cursor(self.LEASE, batch[-1].cursor, holder=self._instance)
        return True


class Duties:
    """The background duties of one process, started with the app and stopped with it."""

    def __init__(self, settings: Settings, store: StoreLookup, *, instance: str) -> None:
        self._jobs: list[Callable[[], Any]] = [Retention(settings, store, instance=instance).run]
        if settings.nats_url:
            self._jobs.append(Publisher(settings, store, instance=instance).run)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(job()) for job in self._jobs]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
