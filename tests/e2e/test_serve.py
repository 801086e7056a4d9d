"""End to end: the real `petrecords serve` and `petrecords token` commands, driven over HTTP."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import throwaway_postgres, token

pytestmark = pytest.mark.slow

PETRECORDS = Path(sys.executable).parent / "petrecords"
STARTUP_SECONDS = 20.0
STOP_SECONDS = 10.0
# What a server stopped by SIGTERM exits with: a clean, graceful shutdown.
CLEAN_EXIT_CODES = (0,)


@dataclass
class Server:
    url: str
    env: dict[str, str]
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path
    tokens: dict[str, str]

    def output(self, *, full: bool = False) -> str:
        text = self.log.read_text(errors="replace")
        return text if full else text[-4000:]

    def issue_token(self, user: str = "alice@example.com", *extra: str) -> str:
        return _finish_token(_start_token(self.env, user, *extra))

    def stop(self) -> int | None:
        """SIGTERM, then the exit code, or None when it did not exit within STOP_SECONDS."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start_token(env: dict[str, str], user: str, *extra: str) -> subprocess.Popen[str]:
    """`petrecords token` in the server's environment (it takes a while to start: run it beside other work)."""
    return subprocess.Popen(
        [str(PETRECORDS), "token", "--user", user, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish_token(process: subprocess.Popen[str]) -> str:
    try:
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    return stdout.strip()


def _environment(data_dir: Path, database_url: str | None) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PETRECORDS_DATA_DIR"] = str(data_dir)
    if database_url is not None:
        env["PETRECORDS_DATABASE_URL"] = database_url
    return env


@contextlib.contextmanager
def running_server(
    data_dir: Path, *, database_url: str | None = None, workers: int = 1, users: Sequence[str] = ()
) -> Iterator[Server]:
    """A `petrecords serve` process, up and answering /healthz; always killed on the way out.

    Tokens for `users` (an e-mail, optionally followed by " --admin") are issued by `petrecords token`
    started at the same moment as the server, both finding no secret yet: they must agree on one.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = _environment(data_dir, database_url)
    log = data_dir.parent / f"{data_dir.name}-server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(PETRECORDS), "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    issuing = {user: _start_token(env, *user.split()) for user in users}
    server = Server(url=f"http://127.0.0.1:{port}", env=env, data_dir=data_dir, process=process, log=log, tokens={})
    try:
        for user, issuer in issuing.items():
            server.tokens[user] = _finish_token(issuer)
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode} before serving:\n{server.output()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{server.url}/healthz", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /healthz within {STARTUP_SECONDS} s:\n{server.output()}")
            time.sleep(0.05)
        # /healthz answers as soon as one worker runs. Granian ignores a SIGTERM that reaches a worker still
        # starting (it is killed after --graceful-timeout), so wait until every worker says it started.
        while not all(f"Started worker-{number}" in server.output(full=True) for number in range(1, workers + 1)):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"not every worker started within {STARTUP_SECONDS} s:\n{server.output()}")
            time.sleep(0.05)
        yield server
    finally:
        for issuer in issuing.values():
            if issuer.poll() is None:
                issuer.kill()
                issuer.wait()
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        else:
            # Workers of a stopped server must not outlive it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def _crud_round_trip(server: Server, access_token: str) -> None:
    headers = _bearer(access_token)
    with httpx.Client(base_url=server.url, headers=headers, timeout=10.0) as http:
        created = http.post("/v1/pets", json={"name": "  Rex ", "petType": "dog"})
        assert created.status_code == 201, created.text
        record = created.json()
        assert set(record) == {"id", "createdAt", "createdBy", "modifiedAt", "modifiedBy", "ownerId", "name", "petType"}
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
        assert (page["totalCount"], page["totalPages"], page["pageIndex"], page["pageSize"]) == (1, 1, 1, 20)

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

    def test_tokens_issued_as_it_started_are_accepted(self, sqlite_server: Server) -> None:
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
