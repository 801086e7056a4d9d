"""Three `petrecords serve` instances behind Debian's HAProxy, run with deploy/haproxy.cfg as it is.

Clients keep creating and reading records through HAProxy while one instance is told to stop (SIGTERM): it
answers 503 on /readyz for PETRECORDS_SHUTDOWN_DRAIN_SECONDS while still serving, HAProxy's health checks take
it out, and only then does it refuse connections and exit. No client may get anything but the answer it
asked for or a retryable 503/986, and every acknowledged create must be in the database. With `-s` it prints
what it measured: requests answered per second, how many were 503, PostgreSQL connections in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.e2e.debian import background, program, wait_for_port
from tests.e2e.servers import Server, free_port, running_servers
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
USER = "alice@example.com"
INSTANCES = 3
DRAIN_SECONDS = 3
CLIENTS = 8
POOL_SIZE = 4
BEFORE, AFTER = 150, 150
"""Creates acknowledged before the stop, and after the stopped instance has exited."""
DEADLINE_SECONDS = 60.0


@contextlib.contextmanager
def haproxy(directory: Path, servers: list[Server]) -> Iterator[tuple[str, Path]]:
    """HAProxy with deploy/haproxy.cfg in front of `servers`: its URL and its stats socket."""
    binary = program("haproxy", package="haproxy")
    directory.mkdir(parents=True)
    port = free_port()
    stats = directory / "haproxy.sock"
    env = {
        **os.environ,
        "PETRECORDS_LB_BIND": f"127.0.0.1:{port}",
        "PETRECORDS_LB_STATS_SOCKET": str(stats),
        **{f"PETRECORDS_APP{number}": server.url.removeprefix("http://") for number, server in enumerate(servers, 1)},
    }
    log = directory / "haproxy.log"
    with background([binary, "-db", "-f", str(DEPLOY / "haproxy.cfg")], log=log, env=env) as process:
        wait_for_port(port, process, what="HAProxy", log=log)
        # HAProxy binds the stats socket under a temporary name and renames it, after its port may already listen.
        _until(stats.exists, what="HAProxy's stats socket")
        yield f"http://127.0.0.1:{port}", stats


def server_states(stats: Path) -> dict[str, str]:
    """Each instance's state as HAProxy sees it (UP, DOWN, …)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(5)
        connection.connect(str(stats))
        connection.sendall(b"show stat\n")
        chunks = []
        while chunk := connection.recv(65536):
            chunks.append(chunk)
    lines = b"".join(chunks).decode().lstrip("# ").splitlines()
    rows = csv.DictReader(line for line in lines if line)
    ours = (row for row in rows if row["pxname"] == "petrecords" and row["svname"] not in ("FRONTEND", "BACKEND"))
    return {row["svname"]: row["status"] for row in ours}


def _until(condition: Any, *, what: str, seconds: float = DEADLINE_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:g} s in vain for {what}")
        time.sleep(0.05)


async def _count(database_url: str, statement: str) -> int:
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        return int(await connection.fetchval(statement))
    finally:
        await connection.close()


async def _ids(database_url: str) -> set[str]:
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        return {str(row["id"]) for row in await connection.fetch("SELECT id FROM pets")}
    finally:
        await connection.close()


class Load:
    """Clients that create a record and read it back, over and over, through the load balancer."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.acknowledged: list[str] = []
        self.statuses: Counter[int] = Counter()
        self.unexpected: list[str] = []
        self.stop = threading.Event()
        self._threads = [threading.Thread(target=self._client) for _ in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(timeout=60)

    def _client(self) -> None:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=30) as http:
            while not self.stop.is_set():
                try:
                    created = http.post("/v1/pets", json={"name": "Balanced", "petType": "Dog"})
                    self._note("create", created, 201)
                    if created.status_code == 201:
                        self.acknowledged.append(created.json()["id"])
                        got = http.get(f"/v1/pets/{created.json()['id']}")
                        self._note("get", got, 200)
                except httpx.TransportError as exc:
                    self.unexpected.append(f"{type(exc).__name__}: {exc}")

    def _note(self, what: str, response: httpx.Response, expected: int) -> None:
        self.statuses[response.status_code] += 1
        if response.status_code == expected:
            return
        retryable = (
            response.status_code == 503
            and response.headers.get("Retry-After") is not None
            and response.json().get("code") == 986
        )
        if not retryable:
            self.unexpected.append(f"{what}: {response.status_code} {response.text}")


def test_stopping_an_instance_under_load_loses_nothing(tmp_path: Path) -> None:
    with (
        throwaway_postgres() as database_url,
        running_servers(
            INSTANCES,
            tmp_path / "data",
            database_url=database_url,
            users=[USER],
            settings={
                "PETRECORDS_SHUTDOWN_DRAIN_SECONDS": str(DRAIN_SECONDS),
                "PETRECORDS_DB_POOL_SIZE": str(POOL_SIZE),
                "PETRECORDS_ACCESS_LOG": "false",
            },
        ) as servers,
        haproxy(tmp_path / "haproxy", servers) as (url, stats),
    ):
        _until(lambda: set(server_states(stats).values()) == {"UP"}, what="HAProxy to find every instance up")
        stopped = servers[1]
        connections = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'petrecords'"
        )
        peak_connections = 0
        with Load(url, servers[0].tokens[USER]) as load:
            _until(lambda: len(load.acknowledged) >= BEFORE or bool(load.unexpected), what="the load to start")
            started, acknowledged_before = time.monotonic(), len(load.acknowledged)
            stopped.terminate()
            _until(lambda: server_states(stats)["app2"].startswith("DOWN"), what="HAProxy to take app2 out")
            taken_out = time.monotonic() - started
            _until(lambda: stopped.process.poll() is not None, what="the stopped instance to exit")
            exited = time.monotonic() - started
            after = len(load.acknowledged)
            _until(lambda: len(load.acknowledged) >= after + AFTER or bool(load.unexpected), what="more load")
            peak_connections = asyncio.run(_count(database_url, connections))
            seconds = time.monotonic() - started
            answered = len(load.acknowledged) - acknowledged_before

        assert not load.unexpected, load.unexpected[:10]
        assert stopped.process.returncode == 0, stopped.output()
        assert f"shutting down in {DRAIN_SECONDS:g} s" in stopped.output(full=True)
        assert "Traceback" not in "\n".join(server.output(full=True) for server in servers)
        assert set(load.acknowledged) <= asyncio.run(_ids(database_url))
        assert taken_out < exited  # out of the rotation before it refused anything
        print(
            f"\n{INSTANCES} instances × 1 worker × pool {POOL_SIZE}, {CLIENTS} clients through HAProxy: "
            f"{answered / seconds:.0f} creates/s (each followed by a get) while one stopped; app2 out after "
            f"{taken_out:.1f} s, exited after {exited:.1f} s; answers {dict(load.statuses)}; "
            f"{peak_connections} PostgreSQL connections of the service's, for the two left"
        )
    assert uuid.UUID(load.acknowledged[0]).version == 7
