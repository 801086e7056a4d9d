"""Live changes: a process follows the change log for its subscribers, one query per poll whatever their
number, and sends each one the changes its caller may see as Server-Sent Events."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import random
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from itertools import takewhile
from pathlib import Path

import msgspec

from petrecords.changes.change import change_wire, encode_cursor, sees
from petrecords.store.base import Change, Cursor, Store, Viewer
from petrecords.tables import SHARED

POLL_SECONDS = 0.2
"""How often a process looks for new changes while it has live subscribers."""
POLL_BATCH = 500
COMMITTED_AT_OPEN = 10_000
"""At most this many changes that committed before a stream opened, while an older write was still in
flight (they follow the stream's start cursor), are kept out of it."""
KEEP_ALIVE_SPREAD = 0.75
"""The shortest wait for a keep-alive comment, as a fraction of the configured interval."""
KEEP_ALIVE_TICK = 1.0
"""Comments fall due on a grid of this many seconds (at most a quarter of the interval): the streams due at one
point send theirs together, in one wake of the event loop and of the HTTP server's threads. Each on a timer of its
own, a thousand idle streams cost their workers three times the CPU."""
BUFFERED_CHANGES = 4096
"""Recent changes a process keeps for its live subscribers; one further behind catches up from the database."""


class ChangeHub:
    """Follows the change log for a process's live subscribers: one query per poll, whatever their number.

    The hub keeps the most recent changes that its subscribers may see, in order: every change while an
    administrator subscribes, else those of the shared catalogue, of records one of its subscribers' callers
    owned before or after the write, and those that a share let one of their grantees see (a caller, or one of
    their groups), so that the writes of everyone else are never read out of the database. For each grantee it
    knows from which cursor on it holds all of theirs; a subscriber reads what follows its own cursor from there,
    filtered for it, and one that is further behind (it resumed from an old cursor, fell behind, or its changes
    were let go) reads from the database until it has caught up.
    """

    def __init__(
        self, store: Callable[[], Store | None], *, keep_alive_seconds: float, stopping_file: Path | None = None
    ) -> None:
        self._store = store
        self._stopping_file = stopping_file
        """Appears when the server shuts down: the streams end then, so that its workers can stop."""
        self._keep_alive_seconds = keep_alive_seconds
        """How often a live stream with nothing to say sends a comment (the contract asks for at least every
        15 s; proxies that close quiet connections sooner want it more often)."""
        self._buffer: collections.deque[Change] = collections.deque()
        self._by_owner: dict[str, collections.deque[Change]] = {}
        """The buffer's changes by each owner they had before or after the write ('' for shared records): a
        subscriber reads only those of its own and the shared ones, so that streams of callers who own none of
        the writes cost nothing per change."""
        self._buffered: set[Cursor] = set()
        self._polled_through: Cursor | None = None
        """Every change up to this cursor has been polled (None: not yet): kept if a subscriber polled for may
        see it."""
        self._complete_after: Cursor | None = None
        """The cursor of the last change the buffer let go (at first, the head of the log when polling began)."""
        self._let_go: dict[str, Cursor | None] = {}
        """For each caller with a live stream here, and for shared records: the buffer holds every change of
        theirs after this cursor (None: not known yet). It moves on when the buffer lets one of theirs go, and a
        caller's first stream starts it where the polls have got to, since they read for the callers streaming
        then. A stream behind it reads from the database."""
        self._streams_of: dict[str, int] = {}
        """How many live streams each caller has here: the polls read their changes, `_let_go` keeps their
        entries."""
        self._admin_streams = 0
        self._admin_since: Cursor | None = None
        """While administrators stream, the polls read every change: the buffer holds each one after this
        cursor (and after the last it let go)."""
        self._frames: dict[Cursor, bytes] = {}
        """The event of each buffered change that a stream sent, encoded once for every stream that sends it."""
        self._waiting: dict[str | None, set[asyncio.Future[None]]] = {}
        """The streams waiting for changes, by the caller they read for (None: administrators): a poll wakes
        only those whose callers may see one of its changes, not every stream of the process."""
        self._subscribers = 0
        self._poller: asyncio.Task[None] | None = None
        self._polled = asyncio.Event()
        """Set once a poll has read where the log's head is (`_polled_through` known), and when streams end."""
        self._closed = asyncio.Event()

    @property
    def subscribers(self) -> int:
        return self._subscribers

    async def close(self) -> None:
        """End every live stream (the process is shutting down) and stop polling."""
        self._end_streams()
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller

    async def follow(
        self,
        cursor: Cursor,
        *,
        reader: Viewer | None,
        resources: tuple[str, ...] | None,
        already: frozenset[Cursor] = frozenset(),
    ) -> AsyncIterator[Change | None]:
        """The changes after `cursor` that `reader` (None: an administrator) may see, as they commit, but those
        in `already` (committed before the stream opened); None when there has been nothing to send for the
        keep-alive interval."""
        self._open_stream(reader)
        self._start_polling()
        loop = asyncio.get_running_loop()

        def next_comment() -> float:
            return self.comment_due(loop.time())

        # When the stream, quiet since, sends a comment: a wake that brings it nothing (another resource's change,
        # the hub's first poll) does not put that off.
        comment_due = next_comment()
        try:
            # Until the first poll, a stream would read the log itself: a thousand clients reconnecting at once
            # made a thousand reads that held the pool past its timeout (503s), and the poll waited behind them.
            while not self._polled.is_set():
                if not await self._polled_by(comment_due):
                    yield None
                    comment_due = next_comment()
            while not self._closed.is_set():
                changes, cursor = await self._after(cursor, reader=reader, resources=resources)
                for change in changes:
                    if change.cursor not in already:
                        yield change
                        comment_due = next_comment()
                if not changes and not await self._wait_for_more(cursor, reader, comment_due):
                    yield None
                    comment_due = next_comment()
        finally:
            self._close_stream(reader)

    async def _polled_by(self, deadline: float) -> bool:
        """Wait until the hub has polled once (or the streams end); False when the loop's clock reached
        `deadline` first."""
        try:
            async with asyncio.timeout_at(deadline):
                await self._polled.wait()
        except TimeoutError:
            return False
        return True

    def _end_streams(self) -> None:
        self._closed.set()
        self._polled.set()
        self._wake(None)

    def _open_stream(self, reader: Viewer | None) -> None:
        self._subscribers += 1
        if reader is None:
            self._admin_streams += 1
            if self._admin_streams == 1:
                self._admin_since = self._polled_through
            return
        for key in reader.grantees:
            self._streams_of[key] = self._streams_of.get(key, 0) + 1
            self._let_go.setdefault(key, self._polled_through)

    def _close_stream(self, reader: Viewer | None) -> None:
        self._subscribers -= 1
        if reader is None:
            self._admin_streams -= 1
            if not self._admin_streams:
                self._admin_since = None
            return
        for key in reader.grantees:
            self._streams_of[key] -= 1
            if not self._streams_of[key]:
                del self._streams_of[key], self._let_go[key]

    def _held_after(self, reader: Viewer | None) -> Cursor | None:
        """The cursor after which the buffer holds every change that `reader` may see (None: not known)."""
        if reader is None:
            if self._complete_after is None or self._admin_since is None:
                return None
            return max(self._complete_after, self._admin_since)
        held = [self._let_go.get(key) for key in (*reader.grantees, SHARED)]
        return None if any(cursor is None for cursor in held) else max(held)  # type: ignore[type-var]

    async def _after(
        self, cursor: Cursor, *, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> tuple[list[Change], Cursor]:
        """The next changes after `cursor` for this subscriber, and the cursor it has then read up to (past the
        changes it may not see)."""
        held_after, polled_through = self._held_after(reader), self._polled_through
        if held_after is not None and polled_through is not None and cursor >= held_after:
            if polled_through <= cursor:
                return [], cursor
            if reader is None:
                following = _after_cursor(self._buffer, cursor)
            else:
                # Every change the reader may see is among these (sees()); filtered below as any other.
                merged = {
                    change.cursor: change
                    for key in (*reader.grantees, SHARED)
                    for change in _after_cursor(self._by_owner.get(key, ()), cursor)
                }
                following = [merged[key] for key in sorted(merged)]
            wanted = [change for change in following if _wanted(change, reader, resources)]
            return wanted, polled_through
        store = self._store()
        if store is None:
            return [], cursor
        async with store.transaction(write=False) as tx:
            found = list(await tx.changes_after(cursor, limit=POLL_BATCH, reader=reader, resources=resources))
        if found:
            return found, found[-1].cursor
        # Nothing it may see before the database's horizon, which is past where the buffer holds all of the
        # reader's (that was read before, and a reader's horizon only moves forward): the rest comes from there.
        return [], max(cursor, held_after) if held_after is not None else cursor

    def frame(self, change: Change | None) -> bytes:
        """The Server-Sent Event of a change (or a keep-alive comment), the same bytes for every stream."""
        if change is None:
            return event_stream_frame(None)
        encoded = self._frames.get(change.cursor)
        if encoded is None:
            encoded = event_stream_frame(change)
            if change.cursor in self._buffered:
                self._frames[change.cursor] = encoded
        return encoded

    def keep_alive_interval(self) -> float:
        """A quiet stream's wait for its next comment before `comment_due` brings it onto the grid: at most the
        configured interval, at least three quarters of it, drawn for each wait so that streams opened together
        (a client reconnecting its thousand streams) do not all send at once ever after."""
        return self._keep_alive_seconds * random.uniform(KEEP_ALIVE_SPREAD, 1.0)  # noqa: S311 - spreads timers, not a secret

    def comment_due(self, now: float) -> float:
        """When a stream that is quiet from `now` on sends its comment: the last point of the grid within the
        interval drawn, so at least half the configured interval on and at most all of it."""
        tick = min(KEEP_ALIVE_TICK, self._keep_alive_seconds / 4)
        return math.floor((now + self.keep_alive_interval()) / tick) * tick

    async def _wait_for_more(self, cursor: Cursor, reader: Viewer | None, deadline: float) -> bool:
        """Wait until changes after `cursor` that `reader` may see may have come; False when the loop's clock
        reached `deadline` first."""
        polled_through = self._polled_through
        if (polled_through is not None and polled_through > cursor) or self._closed.is_set():
            return True
        waiter = asyncio.get_running_loop().create_future()
        keys: tuple[str | None, ...] = (None,) if reader is None else reader.grantees
        for key in keys:
            self._waiting.setdefault(key, set()).add(waiter)
        try:
            async with asyncio.timeout_at(deadline):
                await waiter
        except TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(waiter)
                    if not waiting:
                        del self._waiting[key]
        return True

    def _wake(self, readers: set[str] | None) -> None:
        """Wake the streams of these callers and of administrators; None: every stream."""
        if readers is None or SHARED in readers:
            groups = list(self._waiting.values())
        else:
            groups = [self._waiting[key] for key in (None, *readers) if key in self._waiting]
        for waiting in groups:
            for waiter in waiting:
                if not waiter.done():
                    waiter.set_result(None)

    def _start_polling(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        # Polling, not LISTEN/NOTIFY: it works through any connection pooler, and costs one indexed query per
        # interval per process while someone listens.
        while self._subscribers and not self._closed.is_set():
            if self._stopping_file is not None and self._stopping_file.exists():
                self._end_streams()
                break
            got = 0
            with contextlib.suppress(Exception):  # an outage: the subscribers wait, the next poll tries again
                got = await self._poll_once()
            await asyncio.sleep(0 if got == POLL_BATCH else POLL_SECONDS)
        self._buffer.clear()
        self._by_owner.clear()
        self._buffered.clear()
        self._frames.clear()
        self._polled_through = self._complete_after = self._admin_since = None
        if not self._closed.is_set():  # a stream opened after the end ends at once
            self._polled.clear()
        self._let_go = dict.fromkeys(self._let_go)

    async def _poll_once(self) -> int:
        store = self._store()
        if store is None:
            return 0
        async with store.transaction(write=False) as tx:
            last = self._polled_through
            if last is None:
                last = await tx.head_cursor()
                self._start_buffer(last)
            # The callers streaming now: one who starts while this poll is under way is not among them.
            readers = None if self._admin_streams else sorted(self._streams_of)
            if readers is None:
                found = list(await tx.changes_after(last, limit=POLL_BATCH, reader=None, resources=None))
                through = found[-1].cursor if found else last
            else:
                head = await tx.head_cursor()
                # Most polls find the log where the last one left it: nothing to read.
                found = (
                    list(await tx.changes_seen_by(last, through=head, readers=readers, limit=POLL_BATCH))
                    if head > last
                    else []
                )
                through = found[-1].cursor if len(found) == POLL_BATCH else max(head, last)
        self._keep(found, through=through, polled_for=readers)
        return len(found)

    def _start_buffer(self, head: Cursor) -> None:
        """Start keeping changes after `head`, the last one committed: none of them has been let go yet."""
        self._polled_through = self._complete_after = head
        self._polled.set()
        self._let_go[SHARED] = head
        for reader, let_go in self._let_go.items():
            if let_go is None:
                self._let_go[reader] = head
        if self._admin_streams:
            self._admin_since = head

    def _keep(self, found: list[Change], *, through: Cursor | None = None, polled_for: list[str] | None = None) -> None:
        """Add polled changes to the buffer (every change up to `through` polled, for the callers `polled_for`,
        None: for everyone), let the oldest go beyond its size, and wake the streams of those who may see them."""
        if found:
            self._wake(set().union(*(_owners(change) for change in found)))
        self._buffer.extend(found)
        for change in found:
            self._buffered.add(change.cursor)
            for owner in _owners(change):
                self._by_owner.setdefault(owner, collections.deque()).append(change)
        if through is None:
            through = found[-1].cursor if found else self._polled_through
        self._polled_through = through
        if polled_for is not None and through is not None:
            # Those who began to stream while the poll was under way: it did not read their changes.
            polled = set(polled_for)
            for reader, let_go in self._let_go.items():
                if reader != SHARED and reader not in polled:
                    self._let_go[reader] = _later(let_go, through)
            if self._admin_streams:
                self._admin_since = _later(self._admin_since, through)
        while len(self._buffer) > BUFFERED_CHANGES:
            oldest = self._buffer.popleft()
            self._complete_after = oldest.cursor
            self._buffered.discard(oldest.cursor)
            self._frames.pop(oldest.cursor, None)
            for owner in _owners(oldest):
                if owner in self._let_go:
                    self._let_go[owner] = _later(self._let_go[owner], oldest.cursor)
                # The oldest change of the buffer is the oldest of each of its owners' too.
                kept = self._by_owner[owner]
                kept.popleft()
                if not kept:
                    del self._by_owner[owner]


def _later(known: Cursor | None, cursor: Cursor) -> Cursor:
    """`cursor`, or the one already known when that is later: where a buffer holds everything from only moves on."""
    return cursor if known is None else max(known, cursor)


def _owners(change: Change) -> set[str]:
    """Whose the change is, as the buffer files it: its owners before and after the write, and the grantees that a
    share let see it."""
    return {owner for owner in (change.owner_before, change.owner_after, *change.seen_by) if owner is not None}


def _after_cursor(changes: Sequence[Change] | collections.deque[Change], cursor: Cursor) -> list[Change]:
    """The changes after `cursor` of changes in cursor order, read from the newest back: a subscriber that keeps
    up is a few changes behind the end, and a scan from the start per subscriber per poll made a thousand
    streams cost the writers most of a core."""
    following = list(takewhile(lambda change: change.cursor > cursor, reversed(changes)))
    following.reverse()
    return following


def _wanted(change: Change, reader: Viewer | None, resources: tuple[str, ...] | None) -> bool:
    return sees(reader, change) and (resources is None or change.resource in resources)


def event_stream_frame(change: Change | None) -> bytes:
    """One Server-Sent Event: the change (id: its cursor, event: its action), or a keep-alive comment."""
    if change is None:
        return b": keep-alive\n\n"
    data = msgspec.json.encode(change_wire(change))
    return b"id: %s\nevent: %s\ndata: %s\n\n" % (encode_cursor(change.cursor).encode(), change.action.encode(), data)


def new_instance_id() -> str:
    return uuid.uuid4().hex
