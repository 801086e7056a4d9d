"""Where each caller's reads must start, kept in Redis (petrecords.store.replicas.ReadPositions): the greatest
position recorded wins, a caller's reads start at the greatest of their names' (their address and their groups,
which shares name), and a Redis that does not answer makes every read the primary's."""

from __future__ import annotations

import socket
import uuid

import pytest

from petrecords.store.replicas import ReadPositions
from tests.support import redis_is_up

REDIS_URL = "redis://127.0.0.1:6379/0"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _someone() -> str:
    return f"positions-{uuid.uuid4().hex[:12]}@example.com"


def _require_redis() -> None:
    if not redis_is_up():
        pytest.fail("Redis at 127.0.0.1:6379 is required for this test")


async def test_the_greatest_position_is_kept() -> None:
    _require_redis()
    positions = ReadPositions(REDIS_URL, max_lag_seconds=5)
    caller = _someone()
    try:
        assert await positions.record((caller,), 0x2_0000_0010)
        assert await positions.record((caller,), 0x1_FFFF_FFFF)  # a slower instance's older write
        required = await positions.required((caller,))
        # None only while Redis may have lost positions still needed (a Redis that never held any).
        assert required in (None, 0x2_0000_0010)
        assert await positions.record((caller,), 0x2_0000_0011)
        assert await positions.required((caller,)) in (None, 0x2_0000_0011)
        assert await positions.required((_someone(),)) in (None, 0)
    finally:
        await positions.close()


async def test_a_caller_reads_from_the_greatest_position_of_their_names() -> None:
    _require_redis()
    positions = ReadPositions(REDIS_URL, max_lag_seconds=5)
    caller, member, group = _someone(), _someone(), f"group:positions-{uuid.uuid4().hex[:12]}"
    try:
        assert await positions.record((caller,), 0x3_0000_0001)  # the caller's own write
        # A share's write: its grantees, the caller among them, and a group.
        assert await positions.record((caller, group), 0x3_0000_0005)
        assert await positions.record((group,), 0x3_0000_0002)  # an older one, recorded later
        assert await positions.required((caller,)) in (None, 0x3_0000_0005)
        assert await positions.required((member, group)) in (None, 0x3_0000_0005)
        assert await positions.required((member,)) in (None, 0)
        assert await positions.required(()) in (None, 0)
    finally:
        await positions.close()


async def test_a_redis_that_does_not_answer_sends_reads_to_the_primary() -> None:
    positions = ReadPositions(f"redis://127.0.0.1:{_closed_port()}/0", max_lag_seconds=5)
    try:
        assert not await positions.record((_someone(),), 1)
        assert await positions.required((_someone(),)) is None
    finally:
        await positions.close()
