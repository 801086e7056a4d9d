"""The per-process rate limiter (petrecords.ratelimit.LocalRateLimiter), on a controlled clock."""

from __future__ import annotations

import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from petrecords import ratelimit
from petrecords.ratelimit import LocalRateLimiter, create_rate_limiter


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def monotonic_ns(self) -> int:
        return round(self.now * 1_000_000_000)

    def as_module(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(monotonic=self.monotonic, monotonic_ns=self.monotonic_ns)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    # Only the rate limit module's view of the clock: the event loop keeps the real one.
    monkeypatch.setattr(ratelimit, "time", fake.as_module())
    return fake


async def _burst(limiter: LocalRateLimiter, caller: str, limit: int) -> int:
    """How many requests in a row are allowed (stopping at `limit` + 1)."""
    allowed = 0
    while allowed <= limit and await limiter.hit(caller) is None:
        allowed += 1
    return allowed


class TestLocalRateLimiter:
    @pytest.mark.parametrize("per_minute", [1, 2, 3, 5, 60])
    async def test_allows_per_minute_at_once_then_refuses(self, clock: FakeClock, per_minute: int) -> None:
        limiter = LocalRateLimiter(per_minute)
        for _ in range(per_minute):
            assert await limiter.hit("alice@example.com") is None
        retry_after = await limiter.hit("alice@example.com")
        assert retry_after is not None
        assert 1 <= retry_after <= 60

    @pytest.mark.parametrize("per_minute", [17, 100, 6000, 10_000])
    async def test_burst_is_exactly_per_minute(self, clock: FakeClock, per_minute: int) -> None:
        assert await _burst(LocalRateLimiter(per_minute), "alice@example.com", per_minute) == per_minute

    @given(
        per_minute=st.integers(min_value=1, max_value=2000),
        start=st.floats(min_value=0.0, max_value=1e7, allow_nan=False, allow_infinity=False),
    )
    async def test_burst_is_exactly_per_minute_at_any_time(self, per_minute: int, start: float) -> None:
        fake = FakeClock(start)
        original = ratelimit.time
        ratelimit.time = fake.as_module()  # type: ignore[assignment]
        try:
            assert await _burst(LocalRateLimiter(per_minute), "alice@example.com", per_minute) == per_minute
        finally:
            ratelimit.time = original

    async def test_callers_are_independent(self, clock: FakeClock) -> None:
        limiter = LocalRateLimiter(2)
        assert await limiter.hit("alice@example.com") is None
        assert await limiter.hit("alice@example.com") is None
        assert await limiter.hit("alice@example.com") is not None
        assert await limiter.hit("bob@example.com") is None
        assert await limiter.hit("bob@example.com") is None
        assert await limiter.hit("bob@example.com") is not None
        assert await limiter.hit("alice@example.com") is not None

    async def test_retry_after_is_enough(self, clock: FakeClock) -> None:
        limiter = LocalRateLimiter(3)  # one request every 20 s
        for _ in range(3):
            assert await limiter.hit("alice@example.com") is None
        retry_after = await limiter.hit("alice@example.com")
        assert retry_after == 20
        clock.now += retry_after - 0.5
        assert await limiter.hit("alice@example.com") is not None
        clock.now += 0.5
        assert await limiter.hit("alice@example.com") is None
        assert await limiter.hit("alice@example.com") is not None

    async def test_retry_after_is_at_least_one_second(self, clock: FakeClock) -> None:
        limiter = LocalRateLimiter(6000)  # one request every 10 ms
        for _ in range(6000):
            await limiter.hit("alice@example.com")
        retry_after = await limiter.hit("alice@example.com")
        assert retry_after == 1

    async def test_refused_requests_do_not_count(self, clock: FakeClock) -> None:
        limiter = LocalRateLimiter(2)
        await limiter.hit("alice@example.com")
        await limiter.hit("alice@example.com")
        for _ in range(50):
            assert await limiter.hit("alice@example.com") is not None
        clock.now += 30.0  # one interval
        assert await limiter.hit("alice@example.com") is None

    async def test_refills_at_the_configured_rate(self, clock: FakeClock) -> None:
        limiter = LocalRateLimiter(60)
        assert await _burst(limiter, "alice@example.com", 60) == 60
        clock.now += 10.0
        assert await _burst(limiter, "alice@example.com", 60) == 10
        clock.now += 3600.0  # a long pause refills the bucket, never beyond per_minute
        assert await _burst(limiter, "alice@example.com", 60) == 60

    async def test_real_clock(self) -> None:
        limiter = LocalRateLimiter(3)
        assert [await limiter.hit("carol@example.com") for _ in range(3)] == [None, None, None]
        retry_after = await limiter.hit("carol@example.com")
        assert retry_after is not None
        assert retry_after >= 1


class TestCreateRateLimiter:
    def test_zero_turns_it_off(self) -> None:
        assert create_rate_limiter(per_minute=0, redis_url=None) is None

    def test_local_without_redis(self) -> None:
        assert isinstance(create_rate_limiter(per_minute=10, redis_url=None), LocalRateLimiter)
