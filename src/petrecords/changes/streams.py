"""What bounds a live change stream: the tickets that open one from a browser page (EventSource cannot send a
token), how many a caller may hold at once, and when one ends."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import math
import os
import secrets
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import msgspec

from petrecords.auth import Caller
from petrecords.errors import RateLimited, Unauthenticated
from petrecords.store.base import Store
from petrecords.values import now_ms

TICKET_SECONDS = 60
"""How long a ticket may wait for its stream."""
_TICKET_BYTES = 32
_PURGED_PER_ISSUE = 100


def _digest(ticket: str) -> str:
    # Kept by its hash: the database never holds what opens a stream.
    return hashlib.sha256(ticket.encode("utf-8", "surrogatepass")).hexdigest()


class Tickets:
    """Stream tickets, kept in the database so that any instance redeems what another issued; each opens one
    stream, once, within TICKET_SECONDS of its issue, for the caller it was issued to."""

    def __init__(self, store: Callable[[], Store]) -> None:
        self._store = store

    async def issue(self, caller: Caller) -> tuple[str, int]:
        """A new ticket for `caller`, and when it expires (epoch milliseconds)."""
        ticket = secrets.token_urlsafe(_TICKET_BYTES)
        now = now_ms()
        expires_at = now + TICKET_SECONDS * 1000
        async with self._store().transaction(write=True) as tx:
            await tx.keep_ticket(_digest(ticket), msgspec.json.encode(caller), expires_at_ms=expires_at)
            await tx.purge_expired_tickets(now_ms=now, limit=_PURGED_PER_ISSUE)
        return ticket, expires_at

    async def redeem(self, ticket: str) -> Caller:
        """The caller of a ticket, which is then gone; 401 for one used before, expired or altered."""
        async with self._store().transaction(write=True) as tx:
            kept = await tx.take_ticket(_digest(ticket), now_ms=now_ms())
        if kept is None:
            raise Unauthenticated(
                "The stream ticket is not valid: each opens one stream, once, within a minute.", token_sent=True
            )
        return msgspec.json.decode(kept, type=Caller)


def stream_deadline(caller: Caller, *, leeway_seconds: float) -> float:
    """When a caller's stream must end (seconds since 1970): its token's expiry, plus the clock-skew allowance."""
    return caller.expires_at + leeway_seconds if math.isfinite(caller.expires_at) else math.inf


class Slot:
    """One stream's place among its caller's, given back once: when the stream ends, is closed, or is dropped
    without ever being read (a client that went before its first event)."""

    def __init__(self, release: Callable[[], None]) -> None:
        self._release: Callable[[], None] | None = release

    def give_back(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def around(self, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """The stream's frames, holding the slot until they end."""
        return _Held(frames, self)

    def __del__(self) -> None:
        self.give_back()


class _Held:
    def __init__(self, frames: AsyncIterator[bytes], slot: Slot) -> None:
        self._frames = frames
        self._slot = slot

    def __aiter__(self) -> _Held:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await anext(self._frames)
        except BaseException:
            self._slot.give_back()
            raise

    async def aclose(self) -> None:
        self._slot.give_back()
        close = getattr(self._frames, "aclose", None)
        if close is not None:
            await close()


class StreamSlots:
    """How many live streams each caller holds in this instance, at most `limit` each.

    Under `petrecords serve` the workers of an instance share a directory: in each caller's folder, a worker that
    holds some of their streams keeps a file named after its process with how many, counted while that process
    lives, so that a worker that dies takes its streams out of the count with it. Taking a slot reads one file per
    worker, not one per stream: with a file per stream, a caller's thousandth stream read a thousand of them with
    the event loop held (seconds of it for a thousand streams opened together). An app that runs alone counts its
    own."""

    def __init__(self, limit: int, *, directory: Path | None, retry_after_seconds: int) -> None:
        self._limit = limit
        self._directory = directory
        self._retry_after = retry_after_seconds
        self._held: dict[str, int] = {}
        if directory is not None:
            # Left by a worker that died and whose process id this one now has (a worker restarted): it counted
            # streams that this worker does not hold.
            for kept in directory.glob(f"*/{os.getpid()}.streams"):
                kept.unlink(missing_ok=True)
        # The collector gives back a slot dropped unread on whichever thread it runs, the database's own among them.
        self._guard = threading.RLock()
        """Over the counts and what is left to write, for every thread."""
        self._thread = threading.local()
        """Whether the thread holds one of the folders' locks (`locking`)."""
        self._unwritten: set[tuple[Path, str]] = set()
        """Callers whose count changed here and is yet to be written, with their folder."""

    def take(self, caller: str) -> Slot:
        """One of the caller's slots; 429 when every one is taken."""
        if self._directory is None:
            if self._held.get(caller, 0) >= self._limit:
                raise RateLimited(self._retry_after)
            self._count(caller, +1)
            return Slot(lambda: self._give_back(caller))
        folder = self._directory / hashlib.sha256(caller.encode()).hexdigest()[:32]
        folder.mkdir(parents=True, exist_ok=True)
        try:
            with self._holding(folder):
                if self._held_by_others(folder) + self._held.get(caller, 0) >= self._limit:
                    raise RateLimited(self._retry_after)
                held = self._count(caller, +1)
                try:
                    self._keep_count(folder, held)
                except BaseException:
                    self._count(caller, -1)
                    self._write_later(folder, caller)  # the file may hold anything now
                    raise
        finally:
            self._write_given_back()
        return Slot(lambda: self._give_back_shared(folder, caller))

    def _count(self, caller: str, change: int) -> int:
        with self._guard:
            held = self._held[caller] = self._held.get(caller, 0) + change
            if not held:
                del self._held[caller]
            return held

    def _give_back(self, caller: str) -> None:
        self._count(caller, -1)

    def _give_back_shared(self, folder: Path, caller: str) -> None:
        self._count(caller, -1)
        self._write_later(folder, caller)
        # The collector may give back a slot dropped unread at any allocation, this thread holding a folder's lock:
        # waiting there for a second lock could wait for good (its own folder's, or another worker's that waits
        # for this one), so the count is written once the lock held is let go.
        if not self._locking:
            self._write_given_back()

    def _write_given_back(self) -> None:
        while not self._locking:
            with self._guard:
                if not self._unwritten:
                    return
                folder, caller = self._unwritten.pop()
            try:
                with self._holding(folder):
                    # Read under the folder's lock, which every change of the count is written under after it.
                    self._keep_count(folder, self._held.get(caller, 0))
            except OSError:
                # The directory gone, no descriptors left: the next slot taken here tries again. The caller's
                # slot is given back in any case.
                self._write_later(folder, caller)
                return

    def _write_later(self, folder: Path, caller: str) -> None:
        with self._guard:
            self._unwritten.add((folder, caller))

    @property
    def _locking(self) -> bool:
        return getattr(self._thread, "locking", False)

    @contextlib.contextmanager
    def _holding(self, folder: Path) -> Iterator[None]:
        self._thread.locking = True  # before the lock is taken: the collector may run as soon as it is
        try:
            with _locked(folder):
                yield
        finally:
            self._thread.locking = False

    @staticmethod
    def _keep_count(folder: Path, held: int) -> None:
        mine = folder / f"{os.getpid()}.streams"
        if held:
            mine.write_text(str(held))
        else:
            mine.unlink(missing_ok=True)

    @staticmethod
    def _held_by_others(folder: Path) -> int:
        held = 0
        for kept in folder.glob("*.streams"):
            if not kept.stem.isdigit() or int(kept.stem) == os.getpid():
                continue  # this worker's count is the one it holds; a name of no process is no worker's
            if _alive(int(kept.stem)):
                # Written under the lock this is read under: whole, unless the disk refused it, when the worker
                # is counted as holding none rather than refusing its caller's streams for good.
                with contextlib.suppress(OSError, ValueError):
                    held += int(kept.read_text())
            else:
                kept.unlink(missing_ok=True)
        return held


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
