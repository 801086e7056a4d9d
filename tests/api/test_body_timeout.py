"""The body deadline (contract section 7): a body that stalls is answered 408/984 and the connection closed.

The app is driven through raw ASGI messages here, because an HTTP client sends whole bodies: the client of
these tests sends the start of a body and then nothing, as a stalled or deliberately slow client does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import ALICE, auth

# A body's deadline, kept by the edge before a handler or a database is reached.
pytestmark = pytest.mark.only_on("sqlite")

MakeClient = Callable[[Settings], AsyncTestClient[Any]]
Message = dict[str, Any]
DEADLINE = 0.3
# Far beyond DEADLINE: only a service that never answers reaches it.
GIVE_UP_SECONDS = 30.0


class StalledClient:
    """A client that sends `parts` of a body and then nothing more, ever (until the app gives up)."""

    def __init__(self, parts: Sequence[bytes]) -> None:
        self._parts = list(parts)
        self._silence = asyncio.Event()
        self.sent: list[Message] = []

    async def receive(self) -> Message:
        if self._parts:
            return {"type": "http.request", "body": self._parts.pop(0), "more_body": True}
        await self._silence.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        start = next(message for message in self.sent if message["type"] == "http.response.start")
        status: int = start["status"]
        return status

    @property
    def headers(self) -> dict[str, str]:
        start = next(message for message in self.sent if message["type"] == "http.response.start")
        return {bytes(name).decode().lower(): bytes(value).decode() for name, value in start["headers"]}

    @property
    def body(self) -> Any:
        return json.loads(b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body"))


class CompleteClient(StalledClient):
    """A client that sends its body in `parts` and then says it is complete."""

    async def receive(self) -> Message:
        message = await super().receive()
        if message["type"] == "http.request" and not self._parts:
            message["more_body"] = False
        return message


def _scope(method: str, path: str, headers: dict[str, str]) -> Message:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(name.lower().encode(), value.encode()) for name, value in headers.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def _send_stalled(
    client: AsyncTestClient[Any],
    parts: Sequence[bytes],
    *,
    method: str = "POST",
    path: str = "/v1/pets",
    headers: dict[str, str] | None = None,
) -> tuple[StalledClient, float]:
    """The app's answer to a request whose body stops after `parts`, and how long it took."""
    sent_headers = {"Content-Type": "application/json", "Content-Length": "1000", **(headers or {})}
    return await _exchange(client, _scope(method, path, sent_headers), StalledClient, parts)


async def _exchange(
    client: AsyncTestClient[Any],
    scope: Message,
    peer_type: Callable[[Sequence[bytes]], StalledClient],
    parts: Sequence[bytes],
) -> tuple[StalledClient, float]:
    async def run() -> tuple[StalledClient, float]:
        peer = peer_type(parts)
        started = time.monotonic()
        async with asyncio.timeout(GIVE_UP_SECONDS):
            await client.app(scope, peer.receive, peer.send)  # type: ignore[arg-type]
        return peer, time.monotonic() - started

    # On the loop the app and its database connections live on: the test client's, not the test's.
    return client.blocking_portal.call(run)


@pytest.fixture
def deadline_settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings(body_timeout_seconds=DEADLINE)


class TestBodyDeadline:
    async def test_a_stalled_body_is_408_with_connection_close(
        self, make_client: MakeClient, deadline_settings: Settings
    ) -> None:
        async with make_client(deadline_settings) as client:
            stalled, elapsed = await _send_stalled(client, [b'{"name": "Re'], headers=auth())

        assert stalled.status == 408
        assert stalled.body == {"code": 984, "message": f"The request body did not arrive within {DEADLINE:g} seconds."}
        assert stalled.headers["content-type"].startswith("application/json")
        assert stalled.headers["connection"] == "close"
        assert stalled.headers["x-request-id"]
        assert stalled.headers["x-content-type-options"] == "nosniff"
        assert stalled.headers["cache-control"] == "no-store"
        assert elapsed >= DEADLINE

    async def test_a_body_that_never_starts_is_408(self, make_client: MakeClient, deadline_settings: Settings) -> None:
        async with make_client(deadline_settings) as client:
            stalled, _ = await _send_stalled(client, [], headers=auth())

        assert stalled.status == 408
        assert stalled.body["code"] == 984

    async def test_replace_has_the_same_deadline(self, make_client: MakeClient, deadline_settings: Settings) -> None:
        async with make_client(deadline_settings) as client:
            stalled, _ = await _send_stalled(
                client, [b"{"], method="PUT", path="/v1/pets/01890a5d-ac96-774b-bcce-b302099a8057", headers=auth()
            )

        assert stalled.status == 408
        assert stalled.body["code"] == 984

    async def test_nothing_is_created(self, make_client: MakeClient, deadline_settings: Settings) -> None:
        async with make_client(deadline_settings) as client:
            await _send_stalled(client, [b'{"name": "Rex", "petType": "Dog"'], headers=auth())
            listed = await client.get("/v1/pets", headers=auth(ALICE, admin=True))

        assert listed.json()["totalCount"] == 0

    async def test_a_body_that_arrives_in_pieces_in_time_is_read(
        self, make_client: MakeClient, settings: Settings
    ) -> None:
        pieces = [b'{"name": ', b'"Rex", ', b'"petType": "Dog"}']
        headers = {**auth(), "Content-Type": "application/json"}
        async with make_client(settings) as client:
            complete, _ = await _exchange(client, _scope("POST", "/v1/pets", headers), CompleteClient, pieces)

        assert complete.status == 201


class TestCheckOrder:
    """The deadline applies where the body is read: after the token (401) and the rate limit (429). A stalled
    body would make each of these a 408 if it were read first."""

    async def test_no_token_is_401_at_once(self, make_client: MakeClient, deadline_settings: Settings) -> None:
        async with make_client(deadline_settings) as client:
            stalled, _ = await _send_stalled(client, [b"{"])

        assert stalled.status == 401

    async def test_rate_limited_caller_is_429_at_once(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(body_timeout_seconds=DEADLINE, rate_limit=1)) as client:
            await client.get("/v1/pets", headers=auth())
            stalled, _ = await _send_stalled(client, [b"{"], headers=auth())

        assert stalled.status == 429

    async def test_declared_oversized_body_is_413_at_once(
        self, make_client: MakeClient, deadline_settings: Settings
    ) -> None:
        async with make_client(deadline_settings) as client:
            stalled, _ = await _send_stalled(client, [b"{"], headers={**auth(), "Content-Length": "100000"})

        assert stalled.status == 413
