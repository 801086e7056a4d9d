"""Pet Records instances behind Debian's HAProxy, run with deploy/haproxy.cfg as it is and the instances' file that
deploy/haproxy-servers writes.

Three instances: clients keep creating and reading records through HAProxy's public side (TLS) while one instance
is told to stop (SIGTERM): it answers 503 on /readyz for PETRECORDS_SHUTDOWN_DRAIN_SECONDS while still serving,
HAProxy's health checks take it out, and only then does it refuse connections and exit. No client may get anything
but the answer it asked for or a retryable 503/986, and every acknowledged create must be in the database. With
`-s` it prints what it measured: requests answered per second, how many were 503, PostgreSQL connections in use.

One instance (a stand-in that echoes what it is sent): the public side serves the API alone, over TLS, with HSTS;
the operational endpoints, however written, answer 404 there and never reach the instance, and answer on the
operators' side; the instance is told the client's address and scheme, never what the client claimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import datetime
import http.server
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.e2e.debian import background, program, unavailable, wait_for_port
from tests.e2e.servers import free_port, running_servers
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


@dataclass
class Balancer:
    url: str
    """The public side: https://127.0.0.1:…"""
    internal_url: str
    stats: Path
    tls: ssl.SSLContext
    """What a client trusts the public side's certificate with."""


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost: HAProxy's PEM file (chain and key), and the
    certificate alone for clients to trust."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    issued = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    public = issued.public_bytes(serialization.Encoding.PEM)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pem, trusted = directory / "haproxy.pem", directory / "tls.crt"
    pem.write_bytes(public + private)
    pem.chmod(0o600)
    trusted.write_bytes(public)
    return pem, trusted


@contextlib.contextmanager
def haproxy(directory: Path, addresses: list[str]) -> Iterator[Balancer]:
    """HAProxy with deploy/haproxy.cfg in front of the instances at `addresses` (HOST:PORT)."""
    binary = program("haproxy", package="haproxy")
    if os.geteuid() != 0:
        unavailable("deploy/haproxy.cfg has HAProxy become the haproxy user, which only root may")
    directory.mkdir(parents=True)
    servers = directory / "petrecords-servers.cfg"
    servers.write_text(_servers_file(*addresses).stdout)
    pem, trusted = certificate(directory)
    port, internal_port = free_port(), free_port()
    stats = directory / "haproxy.sock"
    env = {
        **os.environ,
        "PETRECORDS_LB_BIND": f"127.0.0.1:{port}",
        "PETRECORDS_LB_CERT": str(pem),
        "PETRECORDS_LB_INTERNAL_BIND": f"127.0.0.1:{internal_port}",
        "PETRECORDS_LB_STATS_SOCKET": str(stats),
    }
    log = directory / "haproxy.log"
    with background(
        [binary, "-db", "-f", str(DEPLOY / "haproxy.cfg"), "-f", str(servers)], log=log, env=env
    ) as process:
        wait_for_port(port, process, what="HAProxy", log=log)
        wait_for_port(internal_port, process, what="HAProxy's internal side", log=log)
        # HAProxy binds the stats socket under a temporary name and renames it, after its port may already listen.
        _until(stats.exists, what="HAProxy's stats socket")
        yield Balancer(
            url=f"https://127.0.0.1:{port}",
            internal_url=f"http://127.0.0.1:{internal_port}",
            stats=stats,
            tls=ssl.create_default_context(cafile=str(trusted)),
        )


def _servers_file(*addresses: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DEPLOY / "haproxy-servers"), *addresses], capture_output=True, text=True, timeout=10, check=False
    )


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

    def __init__(self, balancer: Balancer, token: str) -> None:
        self.balancer = balancer
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
        with httpx.Client(
            base_url=self.balancer.url, headers=self.headers, timeout=30, verify=self.balancer.tls
        ) as http:
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
        throwaway_postgres(migrated=True) as database_url,
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
        haproxy(tmp_path / "haproxy", [server.url.removeprefix("http://") for server in servers]) as balancer,
    ):
        stats = balancer.stats
        _until(lambda: set(server_states(stats).values()) == {"UP"}, what="HAProxy to find every instance up")
        stopped = servers[1]
        connections = (
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = 'petrecords'"
        )
        peak_connections = 0
        with Load(balancer, servers[0].tokens[USER]) as load:
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
            f"\n{INSTANCES} instances × 1 worker × pool {POOL_SIZE}, {CLIENTS} clients through HAProxy (TLS): "
            f"{answered / seconds:.0f} creates/s (each followed by a get) while one stopped; app2 out after "
            f"{taken_out:.1f} s, exited after {exited:.1f} s; answers {dict(load.statuses)}; "
            f"{peak_connections} PostgreSQL connections of the service's, for the two left"
        )
    assert uuid.UUID(load.acknowledged[0]).version == 7


OPERATIONAL = ("/metrics", "/docs", "/docs/assets/swagger-ui.css", "/openapi.json", "/healthz", "/readyz", "/health")
WRITTEN_OTHERWISE = ("/metrics/", "/%6detrics", "/openapi.json/", "//metrics", "/v1/../metrics")
"""Paths that the service, or a proxy that normalises paths, could read as an operational endpoint."""


class _Echo(http.server.BaseHTTPRequestHandler):
    """An instance that answers every request 200 with what it was sent, and keeps the paths that came through
    HAProxy's frontends (with X-Forwarded-For: its own health checks have none)."""

    seen: list[str]

    def do_GET(self) -> None:
        if "X-Forwarded-For" in self.headers:
            self.seen.append(self.path)
        body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: the test reads what it was sent, not a log


@contextlib.contextmanager
def _echo() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Echo", (_Echo,), {"seen": seen})
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        thread.start()
        try:
            yield f"127.0.0.1:{server.server_address[1]}", seen
        finally:
            server.shutdown()
            thread.join(timeout=10)


def test_the_public_side_serves_the_api_alone_over_tls(tmp_path: Path) -> None:
    with _echo() as (address, seen), haproxy(tmp_path / "haproxy", [address]) as balancer:
        _until(lambda: server_states(balancer.stats) == {"app1": "UP"}, what="HAProxy to find the one instance up")
        with httpx.Client(base_url=balancer.url, verify=balancer.tls, timeout=10) as public:
            answer = public.get("/v1/pets?pageSize=1", headers={"X-Forwarded-For": "203.0.113.9"})
            assert answer.status_code == 200, answer.text
            assert answer.headers["Strict-Transport-Security"] == "max-age=63072000"
            received = {name.lower(): value for name, value in answer.json()["headers"].items()}
            assert received["x-forwarded-proto"] == "https"
            assert received["x-forwarded-for"] == "127.0.0.1"
            assert answer.json()["path"] == "/v1/pets?pageSize=1"

            checked = len(seen)
            for path in (*OPERATIONAL, *WRITTEN_OTHERWISE):
                refused = public.get(path)
                assert refused.status_code == 404, (path, refused.text)
                assert refused.json() == {"code": 995, "message": "The specified resource was not found."}
            assert seen[checked:] == []

        with httpx.Client(base_url=balancer.internal_url, timeout=10) as internal:
            for path in OPERATIONAL:
                reached = internal.get(path, headers={"X-Forwarded-Proto": "https"})
                assert reached.status_code == 200, (path, reached.text)
                assert reached.json()["path"] == path
                received = {name.lower(): value for name, value in reached.json()["headers"].items()}
                assert received["x-forwarded-proto"] == "http"
        with pytest.raises(httpx.TransportError):
            httpx.get(balancer.url.replace("https://", "http://") + "/v1/pets", timeout=5)


def test_the_servers_file_has_a_server_for_each_address() -> None:
    written = _servers_file("10.0.0.11:8000", "10.0.0.12:8000", "[2001:db8::5]:8000", "app.internal:8000")
    assert written.returncode == 0, written.stderr
    assert [line.split() for line in written.stdout.splitlines() if not line.startswith("#")] == [
        ["backend", "petrecords"],
        ["server", "app1", "10.0.0.11:8000"],
        ["server", "app2", "10.0.0.12:8000"],
        ["server", "app3", "[2001:db8::5]:8000"],
        ["server", "app4", "app.internal:8000"],
    ]
    refused = _servers_file()
    assert refused.returncode == 2
    assert refused.stderr.startswith("usage: ")
