"""Turns for long reads: how many of them an instance runs at once.

A search that no index serves reads every record its other conditions let through, and keeps a core of the
database busy while it does. Two of them on a two-core machine took both cores, and the quickest requests of
everyone else (a get by id) waited behind them: 2.5 × their p99 alone (bench/results/
2026-11-27-long-searches-one-process.md). A long read waits here for a turn, without using a core, so that
the others keep the rest of the machine.

Under `petrecords serve` the workers of an instance share a directory: a turn is an exclusive `flock` of one of
`limit` files in it, which the kernel lets go when the process that held it ends. An app that runs alone (as in
tests) counts its own turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import math
import time
from pathlib import Path
from typing import IO

from petrecords.errors import DatabaseUnavailable
from petrecords.store.faults import POOL, TIMEOUT

POLL_SECONDS = 0.005
"""How often a waiting read tries the turns again: a long read takes tens of milliseconds at the least."""


class Turn:
    """One turn, held until given back (at the end of the transaction that took it), and then for as long as it
    owes a rest."""

    def __init__(self, turns: LongReadTurns, index: int) -> None:
        self._turns = turns
        self._index: int | None = index
        self._taken_at = time.monotonic()
        self.rested = 0.0
        """Seconds of the turn spent resting already (a count's rests between its slices)."""

    def give_back(self, *, rest: bool = True) -> None:
        """Give the turn back: at once, or after the rest it owes (`rest` False: it owes none, as when a replica
        answered the long read and the primary's cores had nothing to rest from)."""
        index = self._index
        if index is None:
            return
        self._index = None
        owed = self._turns.rest_owed(held=time.monotonic() - self._taken_at, rested=self.rested) if rest else 0.0
        if owed > 0:
            try:
                # The answer goes out now; the next long read waits for the rest.
                asyncio.get_running_loop().call_later(owed, self._turns.give_back, index)
                return
            except RuntimeError:  # no event loop to rest in: given back at once
                pass
        self._turns.give_back(index)


class LongReadTurns:
    """At most `limit` long reads at once; a read that finds none free waits for one up to `wait_seconds` (then
    503, as a statement past its timeout is), and at most `max_waiting` of a process wait at once (a waiting read
    holds its connection: the others are answered 503 at once, so that the quick reads keep the rest).

    With a `share` below 1, a turn given back stays taken for a rest in proportion to the time it was held and
    not resting, so that long reads one after another keep a turn busy for at most that share of the time:
    without it, a search whose count ends within its first slice (10,000 to 20,000 records on PostgreSQL) never
    rests, and the next one takes the turn at once."""

    def __init__(
        self,
        limit: int,
        *,
        directory: Path | None = None,
        wait_seconds: float = math.inf,
        max_waiting: int = 1,
        share: float = 1.0,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"a share of a core is in (0, 1], not {share}")
        self.limit = limit
        self.share = share
        self._wait_seconds = wait_seconds
        self._max_waiting = max_waiting
        self._waiting = 0
        self._held: set[int] = set()
        self._files: list[IO[bytes]] | None = None
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
            self._files = [(directory / f"turn-{index}").open("ab") for index in range(limit)]

    @property
    def held(self) -> int:
        """Turns this process holds now."""
        return len(self._held)

    async def take(self) -> Turn:
        index = self._take_free()
        if index is not None:
            return Turn(self, index)
        if self._waiting >= self._max_waiting:
            raise DatabaseUnavailable(cause=POOL, detail="too many long reads are waiting for a turn")
        deadline = time.monotonic() + self._wait_seconds
        self._waiting += 1
        try:
            while index is None:
                if time.monotonic() >= deadline:
                    raise DatabaseUnavailable(cause=TIMEOUT, detail="a long read waited past the statement timeout")
                await asyncio.sleep(POLL_SECONDS)
                index = self._take_free()
        finally:
            self._waiting -= 1
        return Turn(self, index)

    def _take_free(self) -> int | None:
        for index in range(self.limit):
            if index in self._held:
                continue
            if self._files is not None:
                try:
                    fcntl.flock(self._files[index], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
            self._held.add(index)
            return index
        return None

    def rest_owed(self, *, held: float, rested: float) -> float:
        """Seconds a turn held for `held` seconds, `rested` of them resting, must still rest: at most half of what
        a read waits for a turn, so that a read that begins to wait as the rest begins is not refused for it."""
        return min((held - rested) * (1 / self.share - 1) - rested, self._wait_seconds / 2)

    def give_back(self, index: int) -> None:
        self._held.discard(index)
        if self._files is not None:
            fcntl.flock(self._files[index], fcntl.LOCK_UN)

    def close(self) -> None:
        for file in self._files or ():
            with contextlib.suppress(OSError):
                file.close()
        self._files = None
