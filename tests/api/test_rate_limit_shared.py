"""Rate limits shared through Redis by several instances (contract section 7)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import auth, redis_is_up

REDIS_URL = "redis://127.0.0.1:6379/0"
MakeClient = Callable[[Settings], AsyncTestClient[Any]]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _someone() -> str:
    # A caller of its own: the budget in Redis outlives the test.
    return f"caller-{uuid.uuid4().hex[:12]}@example.com"


class TestSharedRateLimit:
    async def test_two_instances_share_one_budget(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        if not redis_is_up():
            pytest.fail("Redis at 127.0.0.1:6379 is required for this test")
        settings = make_settings(rate_limit=3, redis_url=REDIS_URL)
        caller = auth(_someone())
        async with make_client(settings) as first, make_client(settings) as second:
            statuses = [
                (await first.get("/v1/pets", headers=caller)).status_code,
                (await second.get("/v1/pets", headers=caller)).status_code,
                (await first.get("/v1/pets", headers=caller)).status_code,
            ]
            limited = await second.get("/v1/pets", headers=caller)
            other_caller = await second.get("/v1/pets", headers=auth(_someone()))

        assert statuses == [200, 200, 200]
        assert limited.status_code == 429
        assert limited.json()["code"] == 987
        assert int(limited.headers["retry-after"]) >= 1
        assert other_caller.status_code == 200

    async def test_redis_outage_falls_back_to_the_process_limit(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings(rate_limit=2, redis_url=f"redis://127.0.0.1:{_closed_port()}/0")
        caller = auth(_someone())
        async with make_client(settings) as client:
            statuses = [(await client.get("/v1/pets", headers=caller)).status_code for _ in range(3)]

        assert statuses == [200, 200, 429]
