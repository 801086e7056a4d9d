"""The change log published to NATS JetStream, at least once and in commit order: a duty of every instance, done
by the holder of a lease."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import urllib.parse
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors

from petrecords.changes.change import change_id, change_wire
from petrecords.config import Settings
from petrecords.duties import STORE_ERRORS, StoreLookup
from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.store.base import Change, Store
from petrecords.values import now_ms

log = logging.getLogger("petrecords.duties")
"""The duties' log, as before they had modules of their own."""

PUBLISHING_ERRORS: tuple[type[BaseException], ...] = (OSError, TimeoutError, nats.errors.Error, *STORE_ERRORS)


def subject_of(change: Change) -> str:
    return f"petrecords.{change.resource}.{change.action}"


def message_id(change: Change) -> str:
    """The same for every delivery of one change, so that JetStream drops a repeat within its window."""
    return change_id(change)


def shown_url(url: str) -> str:
    """A URL as a log line may show it: without a user or password."""
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


class Publisher:
    """Publishes every committed change to NATS JetStream, at least once, in commit order, from the change
    log: a write never waits for NATS, and NATS being away delays messages without losing any.

    One instance publishes at a time, the holder of a lease in the database, renewed while it publishes and
    taken over by another instance within LEASE_SECONDS of the holder's death. The cursor of the last change
    JetStream acknowledged is kept in the database after every batch; a publish that fails or times out ends
    the connection before the cursor moves, and the batch is sent again. What was sent twice is dropped by
    JetStream by its `Nats-Msg-Id`, within the stream's duplicate window; and a publisher that starts (after
    a reconnection, a takeover or a restart, however long after) first looks at the stream's last message and
    goes on after that change, so that what an earlier publisher sent before it could move the cursor is not
    sent again at all."""

    LEASE = "nats-publisher"
    LEASE_SECONDS = 10.0
    RENEW_SECONDS = 3.0
    """How often the holder renews its lease; others try to take it as often."""
    POLL_SECONDS = 0.2
    BATCH = 200
    DUPLICATE_WINDOW_SECONDS = 300.0
    """The window of the stream this service creates: sends repeated by overlapping publishers (a holder that
    stalled past its lease and its successor) come within seconds of each other."""
    TIMEOUT_SECONDS = 2.0
    RETRY_SECONDS = (0.5, 1.0, 2.0, 5.0)
    WARN_SECONDS = 60.0
    """While publishing is paused, it says so again this often, with the number of changes waiting."""

    def __init__(self, settings: Settings, store: StoreLookup, *, instance: str, metrics: Metrics) -> None:
        if settings.nats_url is None:
            raise ValueError("no NATS URL")
        self._url = settings.nats_url
        self.stream_name = settings.nats_stream
        self._store = store
        self._instance = instance
        self._metrics = metrics
        self._failures = 0
        self._warned_at: float | None = None
        """When (monotonic) it last said that publishing is paused; None while it publishes."""
        self._connect_error: Exception | None = None
        """Why the last attempt to connect failed, as nats-py reports it."""
        self._lease_until = 0
        """Until when (epoch milliseconds) this instance holds the lease, as far as it knows."""
        self._next_lease_attempt = 0
        self._last_in_stream: str | None = None
        """The message id of the stream's last message, when this publisher has not yet gone past it."""

    async def run(self) -> None:
        while True:
            try:
                await self._publish_while_connected()
            except PUBLISHING_ERRORS as exc:
                await self._pause(exc)
            except Exception as exc:
                # A bug must not end publishing for the life of the process: it is logged, counted and tried again.
                self._metrics.duty_failures.labels("publisher").inc()
                log.exception("publishing changes to NATS failed")
                await self._pause(exc)

    async def _pause(self, exc: BaseException) -> None:
        """After a failed round: say so (see `_say_paused`), then wait longer the more rounds failed in a row."""
        self._failures += 1
        await self._say_paused(exc)
        await asyncio.sleep(self.RETRY_SECONDS[min(self._failures, len(self.RETRY_SECONDS)) - 1])

    async def _say_paused(self, exc: BaseException) -> None:
        """Warn that publishing is paused, why, and how many changes wait for it: at once, then every
        WARN_SECONDS while it stays paused. The number is in /metrics too."""
        if self._warned_at is not None and time.monotonic() - self._warned_at < self.WARN_SECONDS:
            return
        waiting = await self.unpublished()
        # Timed when said, after the count: a slow count (the first, which opens a connection) would otherwise
        # bring the next warning closer than WARN_SECONDS.
        self._warned_at = time.monotonic()
        if waiting is not None:
            self._metrics.nats_unpublished.set(waiting)
        cause = self._connect_error if isinstance(exc, nats.errors.NoServersError) and self._connect_error else exc
        if isinstance(cause, DatabaseUnavailable):
            reason = f"the database is unavailable: {cause.cause}, {cause.detail}" if cause.detail else cause.cause
        else:
            reason = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        log.warning(
            "publishing changes to NATS paused (%s: %s); %s committed changes wait to be published",
            shown_url(self._url),
            reason,
            "an unknown number of" if waiting is None else waiting,
            extra={"fields": {"nats_url": shown_url(self._url), "unpublished_changes": waiting}},
        )

    async def unpublished(self) -> int | None:
        """How many committed changes have not been published yet (None: the database cannot say)."""
        store = self._store()
        if store is None:
            return None
        try:
            async with store.transaction(write=False) as tx:
                return await tx.count_changes_after(await tx.state_cursor(self.LEASE))
        except STORE_ERRORS:
            return None

    async def _note_connect_error(self, error: Exception) -> None:
        """nats-py would log each error of a connection with its traceback; the publisher keeps the last to say
        why it cannot connect."""
        self._connect_error = error

    async def _publish_while_connected(self) -> None:
        self._connect_error = None
        # Bounded twice: without a limit on attempts, nats-py tries to connect again for ever, even with
        # reconnection off; and the whole attempt has a time limit of its own.
        async with asyncio.timeout(3 * self.TIMEOUT_SECONDS):
            connection = await nats.connect(
                self._url,
                connect_timeout=self.TIMEOUT_SECONDS,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0,
                name="petrecords",
                error_cb=self._note_connect_error,
            )
        try:
            stream = connection.jetstream(timeout=self.TIMEOUT_SECONDS)
            await self._ensure_stream(stream)
            while True:
                # Another publisher may have sent more than its cursor says since this one last looked: the lease
                # is taken as anew, which looks at the stream's last message.
                self._lease_until = self._next_lease_attempt = 0
                try:
                    await self._publish_while_the_database_answers(stream)
                except STORE_ERRORS as exc:
                    # The database is away, not NATS: the connection to NATS is kept, and publishing goes on from
                    # the database's cursor once it answers again. (A new connection each time made the warning
                    # and its end be said twice a second.)
                    await self._pause(exc)
        finally:
            with contextlib.suppress(Exception):
                await connection.close()

    async def _publish_while_the_database_answers(self, stream: Any) -> None:
        while True:
            published = await self.publish_once(stream)
            if self._warned_at is not None:
                log.info("publishing changes to NATS again", extra={"fields": {"nats_url": shown_url(self._url)}})
            self._failures = 0
            self._warned_at = None
            if not published:
                await asyncio.sleep(self.POLL_SECONDS)

    async def _ensure_stream(self, stream: Any) -> None:
        try:
            await stream.stream_info(self.stream_name)
        except nats.js.errors.NotFoundError:
            await stream.add_stream(
                name=self.stream_name, subjects=["petrecords.>"], duplicate_window=self.DUPLICATE_WINDOW_SECONDS
            )

    async def _hold_lease(self, store: Store, stream: Any) -> bool:
        """Whether this instance holds the lease, renewing it (or trying to take it) every RENEW_SECONDS."""
        now = now_ms()
        if now < self._next_lease_attempt:
            return now < self._lease_until
        held = now < self._lease_until
        until = now + int(self.LEASE_SECONDS * 1000)
        async with store.transaction(write=True) as tx:
            taken = await tx.take_lease(self.LEASE, holder=self._instance, now_ms=now, until_ms=until)
        if taken and not held:
            try:
                self._last_in_stream = await self._last_message_id(stream)
            except BaseException:
                # Held, but where the stream ends is not known: the next attempt, at once, finds out.
                self._lease_until = 0
                raise
        self._lease_until = until if taken else 0
        self._next_lease_attempt = now + int(self.RENEW_SECONDS * 1000)
        return taken

    async def _last_message_id(self, stream: Any) -> str | None:
        info = await stream.stream_info(self.stream_name)
        if not info.state.last_seq:
            return None
        try:
            message = await stream.get_msg(self.stream_name, seq=info.state.last_seq)
        except nats.js.errors.NotFoundError:
            return None  # removed meanwhile (the stream's limits): the duplicate window has to do
        headers = message.headers or {}
        found = headers.get("Nats-Msg-Id")
        return found if isinstance(found, str) else None

    async def publish_once(self, stream: Any) -> bool:
        """Publish the next changes, if this instance holds the lease; whether there were any."""
        store = self._store()
        if store is None or not await self._hold_lease(store, stream):
            return False
        async with store.transaction(write=False) as tx:
            cursor = await tx.state_cursor(self.LEASE)
            batch = list(await tx.changes_after(cursor, limit=self.BATCH, reader=None, resources=None))
        if not batch:
            self._metrics.nats_unpublished.set(0)
            return False
        unsent = batch
        if self._last_in_stream is not None:
            # At most one batch can have been sent past the kept cursor: look for its last change in this one.
            ids = [message_id(change) for change in batch]
            if self._last_in_stream in ids:
                unsent = batch[ids.index(self._last_in_stream) + 1 :]
            self._last_in_stream = None
        for change in unsent:
            await stream.publish(
                subject_of(change),
                msgspec.json.encode(change_wire(change)),
                headers={"Nats-Msg-Id": message_id(change)},
            )
        async with store.transaction(write=True) as tx:
            if not await tx.set_state_cursor(self.LEASE, batch[-1].cursor, holder=self._instance):
                self._lease_until = 0  # taken over: the new holder goes on from the cursor
        return True
