"""End to end: what the real `petrecords serve` and `petrecords token` write. JSON access lines on standard
output, and never a bearer token, a token's signature, the signing secret or the database password: not
at startup, not for valid, invalid or malformed tokens, not when the database fails."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import sqlalchemy as sa

from tests.api.test_logs import assert_never_logged
from tests.e2e.servers import PETRECORDS, running_server
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow


def _access_lines(output: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "petrecords.access"]


def test_server_logs_every_request_and_no_secret(tmp_path: Path) -> None:
    password = f"pw-{uuid.uuid4().hex}"  # the test server trusts local clients: any password works
    with throwaway_postgres() as plain_url:
        database_url = sa.make_url(plain_url).set(password=password).render_as_string(hide_password=False)
        data_dir = tmp_path / "data"
        with running_server(data_dir, database_url=database_url, users=["alice@example.com"]) as server:
            secret = (data_dir / "auth-secret").read_text().strip()  # generated at the first start
            valid = server.tokens["alice@example.com"]
            issued = server.issue_token("admin@example.com", "--admin")
            forged = jwt.encode({"sub": "alice@example.com", "exp": int(time.time()) + 600}, "x" * 32)
            expired = jwt.encode({"sub": "alice@example.com", "exp": 1}, secret)
            tokens = [valid, issued, forged, expired]
            authorizations = [
                *(f"Bearer {value}" for value in tokens),
                f"Basic {valid}",
                valid,
                f"Bearer {valid[:-3]}",
                "Bearer not-a-jwt",
            ]
            with httpx.Client(base_url=server.url, timeout=10.0) as http:
                created = http.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=_bearer(valid))
                assert created.status_code == 201, created.text
                for authorization in authorizations:
                    headers = {"Authorization": authorization, "X-Request-ID": f"r-{uuid.uuid4().hex}"}
                    http.get("/v1/pets", headers=headers)
                    http.get(f"/v1/pets/{created.json()['id']}", headers=headers)
                http.get("/v1/pets", params={"access_token": valid})
                http.get("/v1/pets", params={"access_token": valid}, headers=_bearer(valid))
                http.get("/readyz", headers=_bearer(valid))
            assert server.stop() == 0
            output = server.output(full=True)

    # Every line is JSON in one format, the HTTP server's own lines too.
    lines = [json.loads(line) for line in output.splitlines()]
    assert all(list(line)[:4] == ["time", "level", "logger", "message"] for line in lines), output
    granian = [line["message"] for line in lines if line["logger"].startswith("_granian")]
    assert {"Started worker-1", "Shutting down granian"} <= set(granian), output
    access = _access_lines(output)
    assert len(access) >= 2 * len(authorizations) + 4
    for line in access:
        assert {"time", "level", "request_id", "method", "route", "path", "status", "duration_ms", "caller"} <= set(
            line
        )
    by_status = {line["status"] for line in access}
    assert {200, 201, 400, 401} <= by_status
    assert any(line["caller"] == "alice@example.com" for line in access)
    assert_never_logged(output, tokens=tokens, secrets=[secret, password])


def _bearer(value: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {value}"}


def test_token_command_prints_only_the_token_and_where_its_secret_is(tmp_path: Path) -> None:
    secret = f"configured-secret-{uuid.uuid4().hex}"
    env = {"PATH": "/usr/bin:/bin", "PETRECORDS_DATA_DIR": str(tmp_path), "PETRECORDS_AUTH_SECRET": secret}
    result = subprocess.run(
        [str(PETRECORDS), "token", "--user", "Alice@Example.com", "--admin"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stderr == "petrecords token: signed with the secret in PETRECORDS_AUTH_SECRET\n"
    issued = result.stdout.strip()
    assert result.stdout == issued + "\n"
    claims = jwt.decode(issued, secret, algorithms=["HS256"])
    assert claims["sub"] == "alice@example.com"
    assert_never_logged(result.stdout + result.stderr, tokens=[], secrets=[secret])
