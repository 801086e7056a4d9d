"""End to end: the real `petrecords serve` and `petrecords token` commands, driven over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e import servers
from tests.e2e.servers import (
    CLEAN_EXIT_CODES,
    PETRECORDS,
    PORT_TAKEN,
    STARTUP_SECONDS,
    STOP_SECONDS,
    Server,
    free_port,
    running_server,
)
from tests.support import FIELDS, throwaway_postgres, token

pytestmark = pytest.mark.slow


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def _crud_round_trip(server: Server, access_token: str) -> None:
    headers = _bearer(access_token)
    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as http:
        created = http.post("/v1/pets", json={"name": "  Rex ", "petType": "dog"})
        assert created.status_code == 201, created.text
        record = created.json()
        assert set(record) == FIELDS
        assert (record["name"], record["petType"]) == ("Rex", "Dog")
        assert record["createdBy"] == record["modifiedBy"] == record["ownerId"] == "alice@example.com"
        assert record["createdAt"] == record["modifiedAt"]
        assert created.headers["Location"] == f"/v1/pets/{record['id']}"
        assert created.headers["ETag"]
        assert created.headers["X-Request-ID"]

        fetched = http.get(f"/v1/pets/{record['id']}")
        assert fetched.status_code == 200
        assert fetched.json() == record
        assert fetched.headers["ETag"] == created.headers["ETag"]
        assert fetched.headers["Cache-Control"] == "no-store"

        listed = http.get("/v1/pets")
        assert listed.status_code == 200
        page = listed.json()
        assert [item["id"] for item in page["items"]] == [record["id"]]
        assert (page["totalCount"], page["totalPages"], page["pageIndex"], page["pageSize"]) == (1, 1, 1, 100)

        deleted = http.delete(f"/v1/pets/{record['id']}")
        assert deleted.status_code == 200
        assert deleted.json() == record

        gone = http.get(f"/v1/pets/{record['id']}")
        assert gone.status_code == 404
        assert gone.json() == {"code": 995, "message": gone.json()["message"]}


@pytest.fixture(scope="module")
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data_dir = tmp_path_factory.mktemp("e2e") / "data"
    with running_server(data_dir, users=["alice@example.com", "admin@example.com --admin"]) as server:
        yield server


class TestServeSqlite:
    def test_secret_file_is_generated_owner_only(self, sqlite_server: Server) -> None:
        secret_file = sqlite_server.data_dir / "auth-secret"
        assert secret_file.is_file()
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600

    def test_token_issued_while_it_runs_is_accepted(self, sqlite_server: Server) -> None:
        _crud_round_trip(sqlite_server, sqlite_server.issue_token("Alice@Example.com", "--ttl", "120"))

    def test_tokens_issued_in_its_environment_are_accepted(self, sqlite_server: Server) -> None:
        admin = sqlite_server.tokens["admin@example.com --admin"]
        alice = sqlite_server.tokens["alice@example.com"]
        with httpx.Client(base_url=sqlite_server.url, timeout=10.0) as http:
            created = http.post("/v1/pets", json={"name": "Tom", "petType": "Cat"}, headers=_bearer(alice))
            assert created.status_code == 201
            pet_id = created.json()["id"]
            seen = http.get(f"/v1/pets/{pet_id}", headers=_bearer(admin))
            assert seen.status_code == 200
            assert http.delete(f"/v1/pets/{pet_id}", headers=_bearer(admin)).status_code == 200

    def test_token_for_another_secret_is_401(self, sqlite_server: Server) -> None:
        foreign = token("alice@example.com", secret="some-other-deployments-secret-0123456789abcdef")
        response = httpx.get(f"{sqlite_server.url}/v1/pets", headers=_bearer(foreign), timeout=10.0)
        assert response.status_code == 401
        assert response.json()["code"] == 997
        assert set(response.json()) <= {"code", "message"}
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.headers["X-Request-ID"]

    def test_no_token_is_401(self, sqlite_server: Server) -> None:
        response = httpx.get(f"{sqlite_server.url}/v1/pets", timeout=10.0)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"

    def test_readyz_and_request_ids(self, sqlite_server: Server) -> None:
        ready = httpx.get(f"{sqlite_server.url}/readyz", timeout=10.0)
        assert ready.status_code == 200
        assert ready.headers["X-Request-ID"]
        assert ready.headers["X-Content-Type-Options"] == "nosniff"
        echoed = httpx.get(f"{sqlite_server.url}/healthz", headers={"X-Request-ID": "e2e-check-42"}, timeout=10.0)
        assert echoed.headers["X-Request-ID"] == "e2e-check-42"
        replaced = httpx.get(f"{sqlite_server.url}/healthz", headers={"X-Request-ID": "x" * 129}, timeout=10.0)
        assert replaced.headers["X-Request-ID"]
        assert replaced.headers["X-Request-ID"] != "x" * 129
        assert "e2e-check-42" in sqlite_server.output()

    def test_unknown_path_is_a_service_error(self, sqlite_server: Server) -> None:
        response = httpx.get(f"{sqlite_server.url}/nowhere", timeout=10.0)
        assert response.status_code == 404
        assert response.json() == {"code": 995, "message": response.json()["message"]}


def test_two_workers_serve_and_share_metrics(tmp_path: Path) -> None:
    with running_server(tmp_path / "data", workers=2, users=["alice@example.com"]) as server:
        headers = _bearer(server.tokens["alice@example.com"])
        created = 6
        with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as http:
            for number in range(created):
                response = http.post("/v1/pets", json={"name": f"Pet {number}", "petType": "Fish"})
                assert response.status_code == 201, response.text
            assert http.get("/v1/pets").json()["totalCount"] == created
            assert http.get("/readyz").status_code == 200
            metrics = http.get("/metrics")
        assert metrics.status_code == 200
        assert metrics.headers["Content-Type"].startswith("text/plain")
        text = metrics.text
        assert "petrecords_http_request_duration_seconds_bucket" in text
        assert "petrecords_db_pool_connections" in text
        # Whichever worker answers reports the requests of both.
        post_lines = [
            line
            for line in text.splitlines()
            if line.startswith("petrecords_http_requests_total{")
            and 'method="POST"' in line
            and 'route="/v1/pets"' in line
            and 'status="201"' in line
        ]
        assert post_lines, text
        assert sum(float(line.rsplit(" ", 1)[1]) for line in post_lines) == created

        code = server.stop()
        assert code is not None, f"still running {STOP_SECONDS} s after SIGTERM:\n{server.output()}"
        assert code in CLEAN_EXIT_CODES, f"exit code {code}:\n{server.output()}"


def test_serves_postgresql(tmp_path: Path) -> None:
    with (
        throwaway_postgres() as database_url,
        running_server(tmp_path / "data", database_url=database_url, users=["alice@example.com"]) as server,
    ):
        assert httpx.get(f"{server.url}/readyz", timeout=10.0).status_code == 200
        _crud_round_trip(server, server.tokens["alice@example.com"])
        assert stat.S_IMODE((server.data_dir / "auth-secret").stat().st_mode) == 0o600
        code = server.stop()
        assert code is not None, f"still running {STOP_SECONDS} s after SIGTERM:\n{server.output()}"
        assert code in CLEAN_EXIT_CODES, f"exit code {code}:\n{server.output()}"


def test_it_says_it_listens_and_is_ready_only_once_every_worker_accepts(tmp_path: Path) -> None:
    """Granian said "Listening at" before it started a single worker, which takes seconds: /readyz, and the line,
    wait for the last worker."""
    port, log = free_port(), tmp_path / "server.log"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PETRECORDS_DATA_DIR"] = str(tmp_path / "data")
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(PETRECORDS), "serve", "--port", str(port), "--workers", "2"],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = ("Started worker-1", "Started worker-2")
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
            except httpx.TransportError:
                ready = False
            if ready:
                break
            time.sleep(0.02)
        said = log.read_text()  # after the first 200: every worker had started by then
        assert all(line in said for line in started), said
        process.send_signal(signal.SIGTERM)
        assert process.wait(STOP_SECONDS) in CLEAN_EXIT_CODES
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    messages = [json.loads(line)["message"] for line in log.read_text().splitlines()]
    listening = [number for number, message in enumerate(messages) if message.startswith("Listening at")]
    assert [messages[number] for number in listening] == [f"Listening at: http://127.0.0.1:{port}"]
    assert listening[0] > max(messages.index(line) for line in started)


def test_a_server_whose_free_port_was_taken_meanwhile_is_started_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a parallel run another test may listen on a port between the moment it is found free and the moment a
    server of these tests listens there: the server says so and exits, and the tests' helper starts it again on
    another port instead of failing."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        ports = iter([taken_port])
        monkeypatch.setattr(servers, "free_port", lambda: next(ports, None) or free_port())
        with running_server(tmp_path / "data") as server:
            assert httpx.get(f"{server.url}/healthz", timeout=5).status_code == 200
            assert not server.url.endswith(f":{taken_port}")
        first_log = (tmp_path / "data-server.log").read_text()
        assert PORT_TAKEN in first_log, first_log
