"""The ASGI edge around any app: what it adds to every answer, and the answer when the app gives none."""

from __future__ import annotations

import json
from typing import Any

import pytest

from petrecords.http import Message, Receive, Send, ServiceEdge
from petrecords.metrics import Metrics


def _scope(path: str = "/v1/pets") -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": path, "headers": [(b"x-request-id", b"edge-1")], "state": {}}


async def _nothing() -> Message:
    return {"type": "http.disconnect"}


async def _run(app: Any, path: str = "/v1/pets") -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    edge = ServiceEdge(app, metrics=Metrics(), store=lambda: None, log_requests=False)
    await edge(_scope(path), _nothing, send)
    return sent


def _headers(start: Message) -> dict[bytes, list[bytes]]:
    headers: dict[bytes, list[bytes]] = {}
    for name, value in start["headers"]:
        headers.setdefault(bytes(name), []).append(bytes(value))
    return headers


async def _answers_ok(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def _crashes(scope: Any, receive: Receive, send: Send) -> None:
    raise RuntimeError("a bug outside the framework's error handling")


async def _answers_nothing(scope: Any, receive: Receive, send: Send) -> None:
    return None


async def _crashes_midway(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    raise RuntimeError("after the answer started")


class TestServerHeader:
    async def test_names_the_service_once(self) -> None:
        start, _ = await _run(_answers_ok)

        assert _headers(start)[b"server"] == [b"petrecords"]

    async def test_on_operational_paths_too(self) -> None:
        start, _ = await _run(_answers_ok, "/healthz")

        assert _headers(start)[b"server"] == [b"petrecords"]


class TestNoAnswerFromTheApp:
    @pytest.mark.parametrize("app", [_crashes, _answers_nothing], ids=["crash", "no answer"])
    async def test_is_a_service_error_500(self, app: Any) -> None:
        start, body = await _run(app)

        assert start["status"] == 500
        assert json.loads(body["body"]) == {"code": 500, "message": "Internal server error."}
        headers = _headers(start)
        assert headers[b"content-type"] == [b"application/json"]
        assert headers[b"x-request-id"] == [b"edge-1"]
        assert headers[b"x-content-type-options"] == [b"nosniff"]
        assert headers[b"cache-control"] == [b"no-store"]
        assert headers[b"server"] == [b"petrecords"]

    async def test_a_crash_after_the_answer_started_is_left_to_the_server(self) -> None:
        """Headers are on the wire by then; the HTTP server can only cut the connection."""
        with pytest.raises(RuntimeError, match="after the answer started"):
            await _run(_crashes_midway)
