"""VerifiedTokenCache: a token is verified once and then remembered until its expiry or until the keys may have
changed, never beyond."""

from __future__ import annotations

import math
import time

import pytest

from petrecords.auth import Caller, VerifiedTokenCache
from petrecords.errors import Unauthenticated
from tests.support import token


class CountingVerifier:
    """Accepts tokens listed in `valid`, counting every verification it is asked for."""

    def __init__(self, *valid: str) -> None:
        self.valid = set(valid)
        self.calls = 0
        self.keys_version = 0
        self.keys_checked_until = math.inf

    async def verify(self, presented: str) -> Caller:
        self.calls += 1
        if presented not in self.valid:
            raise Unauthenticated("bad", token_sent=True)
        return Caller(email="alice@example.com", is_admin=False)


async def test_a_good_token_is_verified_once() -> None:
    good = token(ttl=600)
    inner = CountingVerifier(good)
    cache = VerifiedTokenCache(inner)
    for _ in range(5):
        assert await cache.verify(good) == Caller(email="alice@example.com", is_admin=False)
    assert inner.calls == 1


async def test_a_bad_token_is_checked_every_time() -> None:
    inner = CountingVerifier()
    cache = VerifiedTokenCache(inner)
    for _ in range(3):
        with pytest.raises(Unauthenticated):
            await cache.verify(token(ttl=600))
    assert inner.calls == 3


async def test_an_expired_entry_is_verified_again(monkeypatch: pytest.MonkeyPatch) -> None:
    good = token(ttl=60)
    inner = CountingVerifier(good)
    cache = VerifiedTokenCache(inner)
    await cache.verify(good)
    later = time.time() + 61
    monkeypatch.setattr(time, "time", lambda: later)
    inner.valid.clear()  # what the real verifier says once the token has expired
    with pytest.raises(Unauthenticated):
        await cache.verify(good)
    assert inner.calls == 2


async def test_the_cache_is_bounded_and_drops_the_oldest() -> None:
    tokens = [token(f"user{number}@example.com", ttl=600) for number in range(4)]
    inner = CountingVerifier(*tokens)
    cache = VerifiedTokenCache(inner, max_entries=3)
    for presented in tokens:
        await cache.verify(presented)
    assert inner.calls == 4
    await cache.verify(tokens[3])
    assert inner.calls == 4
    await cache.verify(tokens[0])  # dropped when the fourth arrived
    assert inner.calls == 5


async def test_every_kept_token_is_forgotten_when_the_keys_change() -> None:
    tokens = [token(f"user{number}@example.com", ttl=600) for number in range(3)]
    inner = CountingVerifier(*tokens)
    cache = VerifiedTokenCache(inner)
    for presented in tokens:
        await cache.verify(presented)
    inner.keys_version += 1  # a JWKS fetched anew: the key of tokens[0] left the set
    inner.valid.discard(tokens[0])
    with pytest.raises(Unauthenticated):
        await cache.verify(tokens[0])
    await cache.verify(tokens[1])
    assert inner.calls == 5
    await cache.verify(tokens[1])  # kept again, under the new keys
    assert inner.calls == 5


async def test_a_token_is_kept_no_longer_than_the_keys_are_known_current(monkeypatch: pytest.MonkeyPatch) -> None:
    good = token(ttl=600)
    inner = CountingVerifier(good)
    inner.keys_checked_until = time.time() + 30
    cache = VerifiedTokenCache(inner)
    await cache.verify(good)
    await cache.verify(good)
    assert inner.calls == 1
    later = time.time() + 31
    monkeypatch.setattr(time, "time", lambda: later)
    await cache.verify(good)  # verified again: which is when the verifier looks at its keys again
    assert inner.calls == 2
