"""Per-caller rate limits: a token bucket of `per_minute` requests, refilled at that rate.

Both limiters run GCRA, which keeps one number per caller: the time at which its bucket is full again.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from typing import Protocol

logger = logging.getLogger("petrecords.ratelimit")

WINDOW_SECONDS = 60
_WINDOW_NS = WINDOW_SECONDS * 1_000_000_000


class RateLimiter(Protocol):
    async def hit(self, caller: str) -> int | None:
        """Count one request; None when allowed, else the whole seconds to wait before retrying."""
        ...


class LocalRateLimiter:
    """The limit of one process, over at most `max_entries` callers at once.

    A caller whose bucket is full again is forgotten. Past `max_entries` callers with a spent bucket (a flood from
    made-up addresses, on the public paths), the ones first seen longest ago are forgotten too, down to three
    quarters of it, so that memory stays bounded and the pruning's cost spread over the requests that caused it.
    """

    MAX_ENTRIES = 100_000

    def __init__(self, per_minute: int, *, max_entries: int = MAX_ENTRIES) -> None:
        # Whole nanoseconds, rounded down: sums stay exact, so a full burst of `per_minute` always fits.
        self._interval_ns = _WINDOW_NS // per_minute
        self._full_at: dict[str, int] = {}
        self._max_entries = max_entries

    async def hit(self, caller: str) -> int | None:
        now = time.monotonic_ns()
        new_full_at = max(self._full_at.get(caller, now), now) + self._interval_ns
        if new_full_at - now > _WINDOW_NS:
            return max(1, math.ceil((new_full_at - now - _WINDOW_NS) / 1e9))
        self._full_at[caller] = new_full_at
        if len(self._full_at) > self._max_entries:
            self._prune(now)
        return None

    def _prune(self, now: int) -> None:
        kept = {name: at for name, at in self._full_at.items() if at > now}
        excess = len(kept) - self._max_entries * 3 // 4
        if excess > 0:
            kept = dict(itertools.islice(kept.items(), excess, None))
        self._full_at = kept

    def __len__(self) -> int:
        """How many callers it keeps a bucket for."""
        return len(self._full_at)


# Times in microseconds of the Redis server's clock, so that instances with skewed clocks agree.
_GCRA_SCRIPT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000000 + tonumber(now_parts[2])
local interval = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local full_at = tonumber(redis.call('GET', KEYS[1]) or now)
if full_at < now then full_at = now end
local new_full_at = full_at + interval
if new_full_at - now > window then
  return new_full_at - now - window
end
redis.call('SET', KEYS[1], new_full_at, 'PX', math.ceil((new_full_at - now) / 1000) + 1)
return 0
"""


class RedisRateLimiter:
    """One limit shared by every instance that uses the same Redis.

    When Redis does not answer, requests are counted by the process's own limiter instead and Redis is
    tried again after a pause: an outage degrades the limit, it never fails requests.
    """

    _RETRY_AFTER_OUTAGE_SECONDS = 5.0

    def __init__(self, url: str, per_minute: int, *, timeout_seconds: float = 0.25, key_prefix: str = "") -> None:
        # Imported here: a process without Redis does not pay for the client's import (a quarter of a second).
        import redis.asyncio
        import redis.exceptions

        self._outage = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
        self._client = redis.asyncio.from_url(
            url, socket_timeout=timeout_seconds, socket_connect_timeout=timeout_seconds
        )
        self._script = self._client.register_script(_GCRA_SCRIPT)
        self._interval_us = WINDOW_SECONDS * 1_000_000 // per_minute
        self._window_us = WINDOW_SECONDS * 1_000_000
        self._fallback = LocalRateLimiter(per_minute)
        self._redis_down_until = 0.0
        self._key_prefix = f"petrecords:rate:{key_prefix}"

    async def hit(self, caller: str) -> int | None:
        if time.monotonic() < self._redis_down_until:
            return await self._fallback.hit(caller)
        try:
            wait_us = int(
                await self._script(keys=[self._key_prefix + caller], args=[self._interval_us, self._window_us])
            )
        except self._outage as exc:
            logger.warning("rate limit store unavailable, counting in this process for now: %s", type(exc).__name__)
            self._redis_down_until = time.monotonic() + self._RETRY_AFTER_OUTAGE_SECONDS
            return await self._fallback.hit(caller)
        return None if wait_us <= 0 else max(1, math.ceil(wait_us / 1_000_000))

    async def close(self) -> None:
        await self._client.aclose()


def create_rate_limiter(*, per_minute: int, redis_url: str | None, key_prefix: str = "") -> RateLimiter | None:
    """A limit of `per_minute` requests per key, in Redis when it is configured; `key_prefix` keeps the keys of
    one limit apart from another's there."""
    if per_minute <= 0:
        return None
    if redis_url:
        return RedisRateLimiter(redis_url, per_minute, key_prefix=key_prefix)
    return LocalRateLimiter(per_minute)
