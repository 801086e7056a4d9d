"""Live streams from real `petrecords serve` processes (two workers each), bounded as contract v3 section 11 says:
a page opens one with a single-use ticket instead of a token, a caller holds at most
PETRECORDS_EVENTS_MAX_STREAMS_PER_CALLER of them in an instance (and someone else is still answered), and a
stream ends once the token that opened it has expired."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.e2e.servers import Server, running_server
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

ALICE, BOB = "alice@example.com", "bob@example.com"
MAX_STREAMS = 3
SETTINGS = {
    "PETRECORDS_EVENTS_KEEP_ALIVE_SECONDS": "0.5",
    "PETRECORDS_RATE_LIMIT": "0",
    "PETRECORDS_EVENTS_MAX_STREAMS_PER_CALLER": str(MAX_STREAMS),
    "PETRECORDS_AUTH_LEEWAY_SECONDS": "0",
}
EVENT_STREAM = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the module: each test closes the streams it opens, and uses tickets of its own."""
    data = tmp_path_factory.mktemp("streams") / "data"
    if request.param == "sqlite":
        with running_server(data, workers=2, users=[ALICE, BOB], settings=SETTINGS) as started:
            yield started
        return
    with (
        throwaway_postgres(migrated=True) as url,
        running_server(data, database_url=url, workers=2, users=[ALICE, BOB], settings=SETTINGS) as started,
    ):
        yield started


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _ticket(client: httpx.AsyncClient, server: Server, user: str = ALICE) -> str:
    response = await client.post(f"{server.url}/v1/changes/tickets", headers=_bearer(server.tokens[user]))
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"ticket", "expiresAt"}
    ticket: str = body["ticket"]
    return ticket


@contextlib.asynccontextmanager
async def _open(
    client: httpx.AsyncClient, url: str, headers: dict[str, str]
) -> AsyncIterator[tuple[httpx.Response, asyncio.Queue[str]]]:
    """A stream's answer, and its lines as they arrive (until it ends: then None)."""
    lines: asyncio.Queue[str] = asyncio.Queue()
    async with client.stream("GET", url, headers={**EVENT_STREAM, **headers}) as response:
        if response.status_code != 200:
            await response.aread()
            yield response, lines
            return

        async def read() -> None:
            async for line in response.aiter_lines():
                await lines.put(line)
            await lines.put("<end>")

        reader = asyncio.create_task(read())
        try:
            yield response, lines
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await reader


async def _until(lines: asyncio.Queue[str], wanted: str, *, seconds: float = 10) -> list[str]:
    seen: list[str] = []
    async with asyncio.timeout(seconds):
        while True:
            line = await lines.get()
            seen.append(line)
            if wanted in line:
                return seen


async def test_a_ticket_opens_one_stream_once(server: Server) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        ticket = await _ticket(client, server)
        async with _open(client, f"{server.url}/v1/changes?ticket={ticket}", {}) as (response, lines):
            assert response.status_code == 200
            assert "text/event-stream" in response.headers["content-type"]
            created = await client.post(
                f"{server.url}/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=_bearer(server.tokens[ALICE])
            )
            assert created.status_code == 201
            seen = await _until(lines, created.json()["id"])
            assert any(line == "event: created" for line in seen)

            again = await client.get(f"{server.url}/v1/changes?ticket={ticket}", headers=EVENT_STREAM)

        assert again.status_code == 401
        assert again.json()["code"] == 997
        assert ticket not in server.output(full=True)


@pytest.mark.parametrize("how", ["altered", "on the JSON page", "with a token too", "on another path"])
async def test_a_ticket_sent_anywhere_else_is_401_and_spent(server: Server, how: str) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        ticket = await _ticket(client, server)
        url, headers = f"{server.url}/v1/changes?ticket={ticket}", dict(EVENT_STREAM)
        if how == "altered":
            url = f"{server.url}/v1/changes?ticket={ticket[:-2]}xy"
        elif how == "on the JSON page":
            headers = {}
        elif how == "with a token too":
            headers = {**headers, **_bearer(server.tokens[ALICE])}
        else:
            url = f"{server.url}/v1/pets?ticket={ticket}"

        refused = await client.get(url, headers=headers)
        async with _open(client, f"{server.url}/v1/changes?ticket={ticket}", {}) as (afterwards, _lines):
            pass

    assert (refused.status_code, refused.json()["code"]) == (401, 997)
    # Any use consumed it; an altered one was no use of it.
    assert afterwards.status_code == (200 if how == "altered" else 401)


async def test_a_caller_holds_at_most_the_limit_and_others_are_still_answered(server: Server) -> None:
    url = f"{server.url}/v1/changes"
    async with contextlib.AsyncExitStack() as held, httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        for _ in range(MAX_STREAMS):
            response, _lines = await held.enter_async_context(_open(client, url, _bearer(server.tokens[ALICE])))
            assert response.status_code == 200

        one_more = await client.get(url, headers={**EVENT_STREAM, **_bearer(server.tokens[ALICE])})
        by_ticket = await client.get(f"{url}?ticket={await _ticket(client, server)}", headers=EVENT_STREAM)
        others = await client.get(f"{server.url}/v1/pets", headers=_bearer(server.tokens[BOB]))
        async with _open(client, url, _bearer(server.tokens[BOB])) as (bobs, _lines):
            bob_streams = bobs.status_code
        own_page = await client.get(url, headers=_bearer(server.tokens[ALICE]))

    assert (one_more.status_code, one_more.json()["code"]) == (429, 987)
    assert int(one_more.headers["retry-after"]) >= 1
    assert by_ticket.status_code == 429
    assert others.status_code == 200
    assert bob_streams == 200
    assert own_page.status_code == 200  # the JSON page is no stream


async def test_a_closed_stream_stops_counting(server: Server) -> None:
    url = f"{server.url}/v1/changes"
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        async with contextlib.AsyncExitStack() as held:
            for _ in range(MAX_STREAMS):
                await held.enter_async_context(_open(client, url, _bearer(server.tokens[ALICE])))
        deadline = time.monotonic() + 30
        while True:
            async with _open(client, url, _bearer(server.tokens[ALICE])) as (response, _lines):
                if response.status_code == 200:
                    break
            assert time.monotonic() < deadline, "closed streams were still counted after 30 s"
            await asyncio.sleep(0.5)


async def test_a_stream_ends_once_its_token_has_expired(server: Server) -> None:
    short = server.issue_token(ALICE, "--ttl", "3")
    async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client:
        ticket_response = await client.post(f"{server.url}/v1/changes/tickets", headers=_bearer(short))
        ticket = ticket_response.json()["ticket"]
        opened = time.monotonic()
        async with (
            _open(client, f"{server.url}/v1/changes", _bearer(short)) as (by_token, token_lines),
            _open(client, f"{server.url}/v1/changes?ticket={ticket}", {}) as (by_ticket, ticket_lines),
        ):
            assert (by_token.status_code, by_ticket.status_code) == (200, 200)
            token_seen = await _until(token_lines, "<end>", seconds=20)
            ticket_seen = await _until(ticket_lines, "<end>", seconds=20)
        ended = time.monotonic() - opened

    assert ended < 3 + 15
    assert any("expired" in line for line in token_seen)
    assert any("expired" in line for line in ticket_seen)
