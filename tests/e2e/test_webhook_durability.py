"""Webhook delivery is as durable as a write (contract, section 17): real `petrecords serve` processes deliver to a
real receiver on 127.0.0.1 while a client writes; the delivering service is killed (`kill -9` of its whole process
group) mid-way and started again on the same data. Once delivery has caught up, every change the owner's feed holds
after the webhook's own reached the receiver at least once, and their first arrivals are in commit order: a change
may come twice only around the crash, never be missed, never overtake another.

SQLite: one server, killed and restarted. PostgreSQL: two servers on one database (one delivers, the lease says
which); the first is killed and the webhook is delivered by the other (within the lease's 20 s), then the first
comes back. `make test` runs short phases; `make test-long` longer ones."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.servers import Server, running_server, running_servers
from tests.support import throwaway_postgres
from tests.webhooks.receivers import Receiver

pytestmark = pytest.mark.slow

USER = "alice@example.com"
SETTINGS = {
    "PETRECORDS_WEBHOOKS_ALLOW_PRIVATE": "true",
    "PETRECORDS_WEBHOOKS_TIMEOUT_SECONDS": "2",
    "PETRECORDS_WEBHOOKS_RETRY_SECONDS": "0.5",
}
PHASE_SECONDS = [pytest.param(1.5, id="phases of 1.5 s"), pytest.param(8.0, id="phases of 8 s", marks=pytest.mark.long)]
CATCH_UP_SECONDS = 60.0


@contextlib.contextmanager
def _writing(servers: list[Server]) -> Iterator[list[str]]:
    """A client that creates and renames pets as fast as the servers answer, going to the next server when one is
    gone; what failed on its way (a refused connection while a server is down is expected) is ignored."""
    stop = threading.Event()
    problems: list[str] = []

    def write() -> None:
        serial = 0
        while not stop.is_set():
            for server in servers:
                if stop.is_set():
                    return
                serial += 1
                headers = {"Authorization": f"Bearer {server.tokens[USER]}"}
                try:
                    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as http:
                        created = http.post("/v1/pets", json={"name": f"pet {serial}", "petType": "Dog"})
                        if created.status_code == 201:
                            pet = created.json()["id"]
                            http.patch(f"/v1/pets/{pet}", json={"breed": "Beagle"})
                        elif created.status_code >= 500:
                            problems.append(created.text)
                except httpx.TransportError:
                    time.sleep(0.05)  # this server is down: the next one

    thread = threading.Thread(target=write, name="writer", daemon=True)
    thread.start()
    try:
        yield problems
    finally:
        stop.set()
        thread.join(30)


def _create_hook(server: Server, url: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {server.tokens[USER]}"}
    response = httpx.post(f"{server.url}/v1/webhooks", json={"url": url}, headers=headers, timeout=10.0)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _feed_after(server: Server, change_id: str) -> list[dict[str, Any]]:
    """The owner's feed after the webhook's created change: what must reach the receiver."""
    headers = {"Authorization": f"Bearer {server.tokens[USER]}"}
    items: list[dict[str, Any]] = []
    after: str | None = None
    with httpx.Client(base_url=server.url, headers=headers, timeout=30.0) as http:
        while True:
            page = http.get("/v1/changes", params={"limit": 1000, **({"after": after} if after else {})}).json()
            items.extend(page["items"])
            if not page["items"]:
                break
            after = page["nextCursor"]
    start = next(index for index, change in enumerate(items) if change["id"] == change_id)
    return items[start + 1 :]


def _check(receiver: Receiver, mark: str, expected: list[dict[str, Any]]) -> None:
    assert len(expected) >= 10, f"only {len(expected)} changes were written: nothing much was tested"
    received = [json.loads(request.body)["data"] for request in receiver.requests_marked(mark)]
    first_arrivals: dict[str, dict[str, Any]] = {}
    for change in received:
        first_arrivals.setdefault(change["cursor"], change)
    assert list(first_arrivals.values()) == expected, (
        f"{len(first_arrivals)} distinct changes received, {len(expected)} in the feed"
    )


def _caught_up(receiver: Receiver, mark: str, server: Server, hook_id: str) -> list[dict[str, Any]]:
    expected = _feed_after(server, hook_id)
    deadline = time.monotonic() + CATCH_UP_SECONDS
    while time.monotonic() < deadline:
        cursors = {json.loads(request.body)["data"]["cursor"] for request in receiver.requests_marked(mark)}
        if all(change["cursor"] in cursors for change in expected):
            return expected
        time.sleep(0.2)
    missing = [c["cursor"] for c in expected if c["cursor"] not in cursors][:5]
    pytest.fail(f"the receiver lacks {missing} after {CATCH_UP_SECONDS:g} s\n{server.output()}")


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with Receiver().running() as running:
        yield running


@pytest.mark.parametrize("phase_seconds", PHASE_SECONDS)
def test_sqlite_kill_and_restart_misses_nothing(receiver: Receiver, tmp_path: Path, phase_seconds: float) -> None:
    mark = f"sqlite-{phase_seconds}"
    url = f"http://127.0.0.1:{receiver.port}/ok?{mark}"
    data_dir = tmp_path / "data"
    with running_server(data_dir, users=[USER], settings=SETTINGS) as server:
        hook = _create_hook(server, url)
        with _writing([server]) as problems:
            time.sleep(phase_seconds)
            server.kill()
        assert not problems, problems[:3]
    with running_server(data_dir, users=[USER], settings=SETTINGS) as server:
        with _writing([server]) as problems:
            time.sleep(phase_seconds)
        assert not problems, problems[:3]
        _check(receiver, mark, _caught_up(receiver, mark, server, hook["id"]))


@pytest.mark.parametrize("phase_seconds", PHASE_SECONDS)
def test_postgresql_another_instance_takes_over(receiver: Receiver, tmp_path: Path, phase_seconds: float) -> None:
    mark = f"postgresql-{phase_seconds}"
    url = f"http://127.0.0.1:{receiver.port}/ok?{mark}"
    data_dir = tmp_path / "data"
    with contextlib.ExitStack() as stack:
        database_url = stack.enter_context(throwaway_postgres(migrated=True))
        first, second = stack.enter_context(
            running_servers(2, data_dir, database_url=database_url, users=[USER], settings=SETTINGS)
        )
        hook = _create_hook(first, url)
        with _writing([first, second]) as problems:
            time.sleep(phase_seconds)
            first.kill()
            time.sleep(phase_seconds)
        assert not problems, problems[:3]
        _check(receiver, mark, _caught_up(receiver, mark, second, hook["id"]))
        restarted = stack.enter_context(
            running_server(data_dir, database_url=database_url, users=[USER], settings=SETTINGS)
        )
        with _writing([restarted, second]) as problems:
            time.sleep(phase_seconds)
        assert not problems, problems[:3]
        _check(receiver, mark, _caught_up(receiver, mark, second, hook["id"]))
