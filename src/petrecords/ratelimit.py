"""Per-caller rate limits."""

from __future__ import annotations

import math
import time
from typing import Protocol


class RateLimiter(Protocol):
    def hit(self, caller: str) -> int | None:
        """Count one request; None when allowed, else the seconds to wait before retrying."""
        ...


class LocalRateLimiter:
    """A token bucket per caller (GCRA): `per_minute` requests at once, refilled at that rate.

    GCRA keeps one number per caller, the time at which its bucket is full again.
    """

    _PRUNE_AT = 10_000

    def __init__(self, per_minute: int) -> None:
        self._interval = 60.0 / per_minute
        self._window = 60.0
        self._full_at: dict[str, float] = {}

    def hit(self, caller: str) -> int | None:
        now = time.monotonic()
        full_at = max(self._full_at.get(caller, now), now)
        new_full_at = full_at + self._interval
        if new_full_at - now > self._window:
            return max(1, math.ceil(new_full_at - now - self._window))
        self._full_at[caller] = new_full_at
        if len(self._full_at) > self._PRUNE_AT:
            self._full_at = {name: at for name, at in self._full_at.items() if at > now}
        return None
