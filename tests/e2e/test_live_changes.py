"""The live change feed (Server-Sent Events) from real `petrecords serve` processes: changes arrive within a
second of their commit, on every instance; a stream resumes after Last-Event-ID, sends keep-alive comments,
shows a caller only what they may see, and does not hold up a shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.servers import Server, running_server, running_servers
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

VET = "vet@clinic.example --group clinic-42"
NURSE = "nurse@clinic.example --group clinic-42"
USERS = ["alice@example.com", "bob@example.com", "admin@example.com --admin", VET, NURSE]
ADMIN = "admin@example.com --admin"
SETTINGS = {
    "PETRECORDS_EVENTS_KEEP_ALIVE_SECONDS": "0.5",
    "PETRECORDS_RATE_LIMIT": "0",
    "PETRECORDS_REMINDERS_INTERVAL_SECONDS": "0.2",
}
DELIVERY_SECONDS = 1.0


@contextlib.contextmanager
def _started(database: str, data_dir: Path) -> Iterator[Server]:
    """A server of two workers on a new database of the kind named."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(throwaway_postgres(migrated=True)) if database == "postgresql" else None
        yield stack.enter_context(running_server(data_dir, database_url=url, workers=2, users=USERS, settings=SETTINGS))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server a database for the module's tests that leave it running: each opens its streams before the
    writes it waits for (a stream opened without Last-Event-ID starts at its opening) and resumes only after an
    event of its own, so what earlier tests wrote reaches none of them."""
    with _started(request.param, tmp_path_factory.mktemp("live") / "data") as started:
        yield started


@pytest.fixture(params=["sqlite", "postgresql"])
def server_to_stop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """A server of its own, for a test that stops it."""
    with _started(request.param, tmp_path / "data") as started:
        yield started


def _headers(server: Server, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.tokens[user]}"}


async def _create_pet(server: Server, user: str, name: str) -> tuple[dict[str, Any], float]:
    """The created pet, and when its 201 arrived (the write had committed by then)."""
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(
            f"{server.url}/v1/pets", json={"name": name, "petType": "Dog"}, headers=_headers(server, user)
        )
    assert response.status_code == 201, response.text
    return response.json(), time.monotonic()


@contextlib.asynccontextmanager
async def stream(server: Server, user: str, **headers: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
    """The events of a live stream as they arrive, each with the moment it arrived: {"id", "event", "data",
    "arrived"}, or {"comment", "arrived"} for a comment."""
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    opened = asyncio.Event()

    async def listen() -> None:
        request_headers = {**_headers(server, user), "Accept": "text/event-stream", **headers}
        async with (
            httpx.AsyncClient(timeout=httpx.Timeout(10, read=None)) as client,
            client.stream("GET", f"{server.url}/v1/changes", headers=request_headers) as response,
        ):
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            assert response.headers["cache-control"] == "no-store"
            opened.set()
            event: dict[str, Any] = {}
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    await events.put({"comment": line[1:].strip(), "arrived": time.monotonic()})
                elif line == "":
                    if "data" in event:  # not the stream's opening `retry:` advice
                        await events.put({**event, "arrived": time.monotonic()})
                    event = {}
                elif ":" in line:
                    name, _, value = line.partition(":")
                    event[name] = json.loads(value) if name == "data" else value.strip()

    task = asyncio.create_task(listen())
    try:
        await asyncio.wait_for(opened.wait(), 10)
        yield events
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


async def next_change(events: asyncio.Queue[dict[str, Any]]) -> dict[str, Any]:
    while True:
        event = await asyncio.wait_for(events.get(), 10)
        if "data" in event:
            return event


async def test_changes_arrive_within_a_second_of_their_commit(server: Server) -> None:
    await _create_pet(server, "alice@example.com", "before the stream opened")
    async with stream(server, ADMIN) as events:
        latencies = []
        for number in range(5):
            pet, committed = await _create_pet(server, "alice@example.com", f"pet {number}")
            event = await next_change(events)
            assert (event["event"], event["data"]["record"]) == ("created", pet)
            assert event["id"] == event["data"]["cursor"]
            latencies.append(event["arrived"] - committed)

    assert max(latencies) < DELIVERY_SECONDS, latencies


async def test_a_stream_resumes_after_last_event_id(server: Server) -> None:
    async with stream(server, ADMIN) as events:
        await _create_pet(server, "alice@example.com", "one")
        first = await next_change(events)
    await _create_pet(server, "alice@example.com", "two")
    await _create_pet(server, "alice@example.com", "three")

    async with stream(server, ADMIN, **{"Last-Event-ID": first["id"]}) as events:
        resumed = [await next_change(events), await next_change(events)]

    assert [event["data"]["record"]["name"] for event in resumed] == ["two", "three"]


async def test_a_caller_receives_only_what_they_may_see(server: Server) -> None:
    async with stream(server, "bob@example.com") as events:
        await _create_pet(server, "alice@example.com", "Alice's")
        await _create_pet(server, "bob@example.com", "Bob's")
        received = await next_change(events)

    assert received["data"]["record"]["name"] == "Bob's"


async def test_a_member_receives_the_changes_of_the_groups_records(server: Server) -> None:
    """A pet the clinic owns, registered by one of its vets, reaches the stream of another member."""
    async with stream(server, NURSE) as events:
        await _create_pet(server, "alice@example.com", "Alice's")
        async with httpx.AsyncClient(timeout=10) as client:
            body = {"name": "The clinic's", "petType": "Cat", "ownerId": "group:clinic-42"}
            response = await client.post(f"{server.url}/v1/pets", json=body, headers=_headers(server, VET))
            assert response.status_code == 201, response.text
        received = await next_change(events)

    assert received["data"]["record"] == response.json()


async def test_a_reminder_reaches_the_owners_stream(server: Server) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        vaccine = await client.post(
            "/v1/vaccines", json={"name": "Rabies", "petType": "Dog", "duration": 365}, headers=_headers(server, ADMIN)
        )
        assert vaccine.status_code == 201, vaccine.text
        pet, _ = await _create_pet(server, "alice@example.com", "due soon")
        async with stream(server, "alice@example.com") as events:
            due_at = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(time.time() + 10 * 86_400))
            body = {"petId": pet["id"], "vaccineId": vaccine.json()["id"], "appliedAt": "2026-01-02T00:00:00.000Z"}
            given = await client.post(
                "/v1/pet-vaccination", json={**body, "dueAt": due_at}, headers=_headers(server, "alice@example.com")
            )
            assert given.status_code == 201, given.text
            created = await next_change(events)
            reminded = await next_change(events)

    assert (created["event"], created["data"]["id"]) == ("created", given.json()["id"])
    assert (reminded["event"], reminded["data"]["id"]) == ("due-soon", given.json()["id"])
    assert reminded["data"]["record"] == given.json()


async def test_a_quiet_stream_sends_comments(server: Server) -> None:
    async with stream(server, "alice@example.com") as events:
        first = await asyncio.wait_for(events.get(), 10)
        second = await asyncio.wait_for(events.get(), 10)

    assert "comment" in first
    assert "comment" in second
    assert second["arrived"] - first["arrived"] < 2.0


@pytest.fixture
def two_instances(tmp_path: Path) -> Iterator[list[Server]]:
    with (
        throwaway_postgres(migrated=True) as url,
        running_servers(2, tmp_path / "data", database_url=url, users=USERS, settings=SETTINGS) as servers,
    ):
        yield servers


async def test_a_change_on_one_instance_reaches_a_stream_of_another(two_instances: list[Server]) -> None:
    writer, reader = two_instances
    async with stream(reader, ADMIN) as events:
        pet, committed = await _create_pet(writer, "alice@example.com", "Rex")
        event = await next_change(events)

    assert event["data"]["record"] == pet
    assert event["arrived"] - committed < DELIVERY_SECONDS


async def test_open_streams_do_not_hold_up_a_shutdown(server_to_stop: Server) -> None:
    server = server_to_stop
    async with stream(server, ADMIN) as events, stream(server, "alice@example.com"):
        await _create_pet(server, "alice@example.com", "Rex")
        await next_change(events)
        started = time.monotonic()
        server.terminate()
        code = await asyncio.get_running_loop().run_in_executor(None, server.wait, 20.0)

    assert code == 0, server.output()
    assert time.monotonic() - started < 10
