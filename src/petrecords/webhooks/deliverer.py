"""Delivery, a duty of every instance: each enabled webhook gets the changes its owner's feed holds, one at a time,
in commit order, from its `position` on.

One instance delivers a webhook at a time: the holder of the webhook's lease in the database (`webhook:{id}`),
renewed while it delivers and taken over by another instance once it lapses (LEASE_SECONDS, or longer when a
delivery may take longer: see lease_ms). Each webhook an instance holds is a task of its own, so a receiver that
hangs holds that task and one connection, and nothing else; an instance holds at most MOST_AT_ONCE.

What is acknowledged, and the state of the retries, are kept in the webhook's row (no write of the record: its
revision, ETag and history do not move), together with the attempts' log, once per batch of changes and at each
failure. A crash between a receiver's answer and that save sends the unsaved changes again (at least once). A
client's write of the webhook (a position moved back, enabled again, a new URL or secret) bumps its revision: a
save made against the revision before it is dropped, and delivery goes on from what the client wrote."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import msgspec

from petrecords.auth import Caller
from petrecords.changes.change import change_id, decode_cursor, encode_cursor, viewer_of
from petrecords.config import Settings
from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.requests import Body
from petrecords.resources.service import replace_record
from petrecords.store.base import (
    Change,
    Condition,
    Cursor,
    Lock,
    Operator,
    PageQuery,
    Row,
    SortKey,
    Store,
    Transaction,
    Viewer,
)
from petrecords.store.faults import DATABASE_ERRORS
from petrecords.values import now_ms
from petrecords.webhooks.delivery import Attempt, Sender, delivery_body
from petrecords.webhooks.events import EventSelection
from petrecords.webhooks.log import keep_attempts, purge_attempts
from petrecords.webhooks.resource import SYSTEM, WEBHOOKS, shared_resolver
from petrecords.webhooks.schedule import RetrySchedule

log = logging.getLogger("petrecords.webhooks")

StoreLookup = Callable[[], Store | None]
STORE_ERRORS: tuple[type[BaseException], ...] = (DatabaseUnavailable, *DATABASE_ERRORS)

LEASE_PREFIX = "webhook:"
"""A webhook's lease is named `webhook:{id}`."""
FELL_BEHIND = "It fell behind the kept changes: changes after its position were removed (changes retention)."


def failing_for(hours: float) -> str:
    return f"Its deliveries failed for {hours:g} hours without a success."


@dataclass
class _Progress:
    """What a deliverer has done since its last save."""

    revision: int
    acknowledged: Cursor | None = None
    attempts: list[tuple[Change, Attempt, int]] = field(default_factory=list)
    failures: int = 0
    first_failed_at: int | None = None
    next_attempt_at: int | None = None


class WebhookDeliveries:
    """Delivers every enabled webhook that this instance holds the lease of; looks for more every SCAN_SECONDS."""

    LEASE_SECONDS = 20.0
    LEASE_MARGIN_SECONDS = 10.0
    """A lease outlasts an attempt (the timeout) by at least this much."""
    SCAN_SECONDS = 2.0
    """How often an instance looks for webhooks that no one delivers; with LEASE_SECONDS, a takeover within 25 s."""
    POLL_SECONDS = 0.5
    """How often a deliverer with nothing to send looks for new changes (one read of the database)."""
    BATCH = 500
    """Changes read at once. Each read ends with a save (a write transaction), so that fewer, larger reads leave
    the one-at-a-time loop more of its time: at 300 changes/s, a save every 1.7 s rather than every third of one."""
    SAVE_SECONDS = 1.0
    """A deliverer saves what was acknowledged at least this often while it delivers."""
    MOST_AT_ONCE = 1000
    PURGE_SECONDS = 3600.0
    FIRST_PURGE_SECONDS = 60.0
    """How long after an instance starts it first purges: not in the moments of its start, when it has more to do,
    and whatever the clock the event loop counts from."""
    PURGE_BATCH = 1000
    PURGE_LEASE = "webhook-deliveries-retention"

    def __init__(
        self,
        settings: Settings,
        store: StoreLookup,
        *,
        resources: ResourceSet,
        instance: str,
        metrics: Metrics,
        sender: Sender | None = None,
    ) -> None:
        self._settings = settings
        self._store = store
        self._resources = resources
        self._instance = instance
        self._metrics = metrics
        self._sender = sender
        self._schedule = RetrySchedule.from_settings(settings)
        self._running: dict[uuid.UUID, asyncio.Task[None]] = {}
        self._leases: dict[uuid.UUID, int] = {}
        """Until when (epoch milliseconds) this instance holds each webhook's lease, as far as it knows."""
        self._purged_at = 0.0

    @property
    def lease_ms(self) -> int:
        """Long enough for an attempt begun just before a renewal to end within it."""
        timeout = self._settings.webhooks_timeout_seconds
        return int(max(self.LEASE_SECONDS, timeout + self.LEASE_MARGIN_SECONDS) * 1000)

    @property
    def delivering(self) -> frozenset[uuid.UUID]:
        """The webhooks this instance delivers now."""
        return frozenset(self._running)

    async def run(self) -> None:
        own_sender = self._sender is None
        self._purged_at = asyncio.get_running_loop().time() - self.PURGE_SECONDS + self.FIRST_PURGE_SECONDS
        if self._sender is None:
            self._sender = Sender(self._settings, resolver=shared_resolver())
        try:
            while True:
                try:
                    await self.scan()
                except STORE_ERRORS:
                    pass  # the database is away: the next round tries again
                except Exception:
                    self._metrics.duty_failures.labels("webhooks").inc()
                    log.exception("looking for webhooks to deliver failed; trying again in %g s", self.SCAN_SECONDS)
                await asyncio.sleep(self.SCAN_SECONDS)
        finally:
            await self.stop_delivering()
            if own_sender:
                await self._sender.aclose()

    async def stop_delivering(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._running.clear()

    async def scan(self) -> None:
        """Start delivering each enabled webhook whose lease this instance can take."""
        store = self._store()
        if store is None:
            return
        await self._purge(store)
        offset = 0
        while len(self._running) < self.MOST_AT_ONCE:
            query = PageQuery(
                conditions=(Condition(("enabled",), Operator.EQUAL, (True,)),),
                sort=(SortKey("id"),),
                limit=self.MOST_AT_ONCE,
                offset=offset,
            )
            async with store.transaction(write=False) as tx:
                rows = await tx.list(WEBHOOKS.collection, query)
            for row in rows:
                webhook_id = row["id"]
                if webhook_id in self._running or len(self._running) >= self.MOST_AT_ONCE:
                    continue
                if await self._take(store, webhook_id):
                    task = asyncio.get_running_loop().create_task(
                        self._deliver(webhook_id), name=f"petrecords webhook {webhook_id}"
                    )
                    self._running[webhook_id] = task
            if len(rows) < self.MOST_AT_ONCE:
                return
            offset += len(rows)

    async def _take(self, store: Store, webhook_id: uuid.UUID) -> bool:
        """Take or renew the webhook's lease; whether this instance holds it now."""
        now = now_ms()
        async with store.transaction(write=True) as tx:
            taken = await tx.take_lease(
                _lease_of(webhook_id), holder=self._instance, now_ms=now, until_ms=now + self.lease_ms
            )
        if taken:
            self._leases[webhook_id] = now + self.lease_ms
        return taken

    async def _hold(self, store: Store, webhook_id: uuid.UUID, *, for_ms: int) -> bool:
        """Whether this instance holds the webhook's lease for at least `for_ms` more, renewing it when less than
        half of it is left (a write, so not at every look for changes)."""
        left = self._leases.get(webhook_id, 0) - now_ms()
        if left >= max(for_ms, self.lease_ms // 2):
            return True
        return await self._take(store, webhook_id)

    async def _purge(self, store: Store) -> None:
        """Purge once an hour."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._purged_at < self.PURGE_SECONDS:
            return
        self._purged_at = loop.time()
        await self.purge(store, now=now_ms())

    async def purge(self, store: Store, *, now: int) -> int:
        """Remove the attempts older than the log keeps, and the leases of the webhooks that are gone, on the
        instance that holds the purge's lease; how many attempts were removed."""
        async with store.transaction(write=True) as tx:
            until = now + int(2 * self.PURGE_SECONDS * 1000)
            if not await tx.take_lease(self.PURGE_LEASE, holder=self._instance, now_ms=now, until_ms=until):
                return 0
        removed = 0
        while True:
            async with store.transaction(write=True) as tx:
                removed_now = await purge_attempts(tx, now=now, limit=self.PURGE_BATCH)
            removed += removed_now
            if removed_now < self.PURGE_BATCH:
                break
            await asyncio.sleep(0)
        await self._drop_leases_of_gone(store, now=now)
        return removed

    async def _drop_leases_of_gone(self, store: Store, *, now: int) -> None:
        """A webhook's lease row outlives its deletion (a deliverer may have renewed it since): once it has lapsed,
        it goes here."""
        after = ""
        while True:
            async with store.transaction(write=True) as tx:
                names = await tx.lapsed_leases(LEASE_PREFIX, after=after, now_ms=now, limit=self.PURGE_BATCH)
                ids = {webhook_id: name for name in names if (webhook_id := _webhook_of(name)) is not None}
                query = PageQuery(
                    conditions=(Condition(("id",), Operator.IN, tuple(ids)),),
                    sort=(SortKey("id"),),
                    limit=len(ids),
                    offset=0,
                )
                kept = {row["id"] for row in await tx.list(WEBHOOKS.collection, query)} if ids else set()
                for webhook_id, name in ids.items():
                    if webhook_id not in kept:
                        await tx.drop_lease(name, now_ms=now)
            if len(names) < self.PURGE_BATCH:
                return
            after = names[-1]
            await asyncio.sleep(0)

    async def _deliver(self, webhook_id: uuid.UUID) -> None:
        """Deliver one webhook for as long as this instance holds its lease and it stays enabled."""
        try:
            while True:
                try:
                    wait = await self.deliver_once(webhook_id)
                except STORE_ERRORS:
                    wait = self.POLL_SECONDS * 4  # the database is away: delivery pauses
                except Exception:
                    self._metrics.duty_failures.labels("webhooks").inc()
                    log.exception("delivering webhook %s failed; trying again", webhook_id)
                    wait = self.SCAN_SECONDS
                if wait is None:
                    return
                if wait > 0:
                    await asyncio.sleep(wait)
        finally:
            self._running.pop(webhook_id, None)
            self._leases.pop(webhook_id, None)

    async def deliver_once(self, webhook_id: uuid.UUID) -> float | None:
        """Deliver what is due now: how long to wait before the next call, or None when this instance no longer
        delivers the webhook (gone, disabled, or its lease lost)."""
        store = self._store()
        if store is None:
            return self.POLL_SECONDS
        sender = self._sender
        if sender is None:
            raise RuntimeError("the deliveries have not started")
        if not await self._hold(store, webhook_id, for_ms=0):
            return None
        async with store.transaction(write=False) as tx:
            row = await tx.get(WEBHOOKS.collection, webhook_id)
            if row is None or not row["enabled"]:
                return None
            now = now_ms()
            next_attempt_at: int | None = row["next_attempt_at"]
            if next_attempt_at is not None and next_attempt_at > now:
                # Woken before the lease lapses, to renew it, and to see a client's write.
                return min((next_attempt_at - now) / 1000, self.LEASE_SECONDS / 4)
            start = await _start_of(tx, row)
            purged = await tx.purged_through()
            changes: Sequence[Change] = ()
            if start >= purged:
                changes, _ = await tx.changes_page(start, limit=self.BATCH, reader=_viewer(row), resources=None)
                # Looked at after the read too: retention may have removed changes meanwhile (see feed_page).
                purged = await tx.purged_through()
            # Read again once the changes are: each statement of a PostgreSQL read sees what was committed before
            # it, and a client's write of the webhook committed since the first read may come before some of them
            # in the log. Those are then seen through the webhook as written (its owner's groups, its events, its
            # secrets), by a read that begins after that write, rather than delivered through what it was.
            latest = await tx.get(WEBHOOKS.collection, webhook_id)
        if latest is None:
            return None
        if latest["revision"] != row["revision"]:
            return 0
        if start < purged:
            await self._disable(store, row, FELL_BEHIND)
            return None
        if not changes:
            return self.POLL_SECONDS
        progress = _Progress(
            revision=row["revision"],
            # Kept from the first save on, so that the start stays known once retention removes the created change.
            acknowledged=start if row["position"] is None else None,
            failures=row["failures"],
            first_failed_at=row["first_failed_at"],
            next_attempt_at=row["next_attempt_at"],
        )
        selection = EventSelection(msgspec.json.decode(row["events"]))
        secrets = _secrets(row, now_ms())
        loop = asyncio.get_running_loop()
        saved_at = loop.time()
        for change in changes:
            if not selection.selects(change.resource, change.action):
                progress.acknowledged = change.cursor
                continue
            # Held for the whole attempt: no other instance may start on this webhook meanwhile.
            attempt_ms = int((self._settings.webhooks_timeout_seconds + self.LEASE_MARGIN_SECONDS / 2) * 1000)
            if not await self._hold(store, webhook_id, for_ms=attempt_ms):
                await self._save(store, webhook_id, progress)
                return None  # taken over: the new holder goes on from what was saved
            attempt = await sender.deliver(
                url=row["url"], secrets=secrets, message_id=change_id(change), body=delivery_body(change)
            )
            at = now_ms()
            progress.attempts.append((change, attempt, at - attempt.duration_ms))
            if attempt.succeeded:
                progress.acknowledged = change.cursor
                progress.failures, progress.first_failed_at, progress.next_attempt_at = 0, None, None
                if loop.time() - saved_at >= self.SAVE_SECONDS:
                    if not await self._save(store, webhook_id, progress):
                        return 0
                    saved_at = loop.time()
                continue
            progress.failures += 1
            first = progress.first_failed_at if progress.first_failed_at is not None else at
            progress.first_failed_at = first
            progress.next_attempt_at = self._schedule.next_attempt_at(failed_at_ms=at, failures=progress.failures)
            if not await self._save(store, webhook_id, progress):
                return 0
            if at - first >= self._schedule.disable_after_ms:
                await self._disable(store, row, failing_for(self._settings.webhooks_disable_after_hours))
                return None
            return max(0.0, (progress.next_attempt_at - now_ms()) / 1000)
        await self._save(store, webhook_id, progress)
        return 0

    async def _save(self, store: Store, webhook_id: uuid.UUID, progress: _Progress) -> bool:
        """Keep what was acknowledged, the retries' state and the attempts' log; False when the webhook was written
        since it was read (its revision moved), or went, or another instance took it over: then only the log is
        kept, and delivery goes on from what is stored."""
        attempts, progress.attempts = progress.attempts, []
        async with store.transaction(write=True) as tx:
            await tx.lock([Lock(self._resources.rank(WEBHOOKS), WEBHOOKS.name, webhook_id)])
            now = now_ms()
            held = await tx.take_lease(
                _lease_of(webhook_id), holder=self._instance, now_ms=now, until_ms=now + self.lease_ms
            )
            current = await tx.get(WEBHOOKS.collection, webhook_id)
            await keep_attempts(tx, webhook_id=webhook_id, attempts=attempts)
            if held:
                self._leases[webhook_id] = now + self.lease_ms
            if not held or current is None or current["revision"] != progress.revision:
                return False
            moved: Row = {
                **current,
                "failures": progress.failures,
                "first_failed_at": progress.first_failed_at,
                "next_attempt_at": progress.next_attempt_at,
            }
            if progress.acknowledged is not None:
                moved["position"] = encode_cursor(progress.acknowledged)
            await tx.update(WEBHOOKS.collection, moved, previous=current)
        return True

    async def _disable(self, store: Store, row: Row, reason: str) -> None:
        """Disable a webhook, as a write by the service (a change its owner sees), unless it was written since."""
        body = Body(values={"enabled": False, "disabled_reason": reason}, sent=frozenset(), document={})
        async with store.transaction(write=True) as tx:
            current = await tx.get(WEBHOOKS.collection, row["id"])
            if current is None or current["revision"] != row["revision"] or not current["enabled"]:
                return
            await replace_record(
                tx=tx,
                caller=SYSTEM,
                resource=WEBHOOKS,
                resources=self._resources,
                record_id=str(row["id"]),
                body=body,
                if_match=None,
                settings=self._settings,
            )
        log.warning(
            "webhook %s disabled: %s",
            row["id"],
            reason,
            extra={"fields": {"webhook_id": str(row["id"]), "owner": row["owner_id"]}},
        )


async def _start_of(tx: Transaction, row: Row) -> Cursor:
    """Where a webhook's delivery goes on: after its position, or, while it has none, after its created change."""
    if row["position"] is not None:
        return decode_cursor("position", row["position"])
    created = await tx.history(WEBHOOKS.name, row["id"], limit=1, offset=0)
    return created[0].cursor if created else await tx.purged_through()


def _lease_of(webhook_id: uuid.UUID) -> str:
    return f"{LEASE_PREFIX}{webhook_id}"


def _webhook_of(lease: str) -> uuid.UUID | None:
    """The webhook whose lease this is, or None for a name that names none."""
    try:
        return uuid.UUID(lease.removeprefix(LEASE_PREFIX))
    except ValueError:
        return None


def _viewer(row: Row) -> Viewer | None:
    """Whose feed the webhook delivers: its owner's, with the role and groups of the token that last wrote it."""
    groups = tuple(msgspec.json.decode(row["owner_groups"]))
    return viewer_of(Caller(email=row["owner_id"], is_admin=row["sees_all"], groups=groups))


def _secrets(row: Row, now: int) -> list[str]:
    """The current secret, and the one before it while a rotation's overlap lasts."""
    previous, until = row["previous_secret"], row["previous_secret_until"]
    return [row["secret"], previous] if previous is not None and until is not None and until > now else [row["secret"]]
