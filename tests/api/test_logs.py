"""Logs (sections 1 and 8): one JSON access line per request, with its request id, caller, route, status and
latency; database outages as one line with their cause; and never a bearer token, the signing secret, a
token's signature or a database password, whatever the request, its token or the failure."""

from __future__ import annotations

import base64
import json
import logging
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.logs import JsonFormatter
from tests.api.test_ops import _closed_port
from tests.support import ADMIN, ALICE, SECRET, auth, pet_body, run_sql, token

MakeClient = Callable[[Settings], AsyncTestClient[Any]]

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _from_the_test_client(record: logging.LogRecord) -> bool:
    return record.name == "httpx" and "http://testserver.local/" in record.getMessage()


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The records of the service (every logger of the process but the test's own HTTP client), as the
    service writes them: one JSON document per line, exceptions included."""
    formatter = JsonFormatter()
    return [formatter.format(record) for record in caplog.records if not _from_the_test_client(record)]


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in _lines(caplog)]
    return [line for line in lines if line["logger"] == "petrecords.access"]


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


class TestAccessLog:
    async def test_one_json_line_per_request_with_its_figures(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], logged: pytest.LogCaptureFixture
    ) -> None:
        async with make_client(make_settings(access_log=True)) as client:
            response = await client.get("/v1/pets", headers={**auth(), "X-Request-ID": "trace-123"})

        [line] = _access_lines(logged)
        assert line["request_id"] == response.headers["x-request-id"] == "trace-123"
        assert line["caller"] == ALICE
        assert (line["method"], line["route"], line["path"], line["status"]) == ("GET", "/v1/pets", "/v1/pets", 200)
        assert isinstance(line["duration_ms"], float | int)
        assert line["duration_ms"] >= 0
        assert line["level"] == "info"
        assert _TIME.fullmatch(line["time"])

    async def test_generated_request_id_is_the_one_answered(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], logged: pytest.LogCaptureFixture
    ) -> None:
        async with make_client(make_settings(access_log=True)) as client:
            response = await client.get("/healthz", headers={"X-Request-ID": "not sane: spaces"})

        [line] = _access_lines(logged)
        assert line["request_id"] == response.headers["x-request-id"] != "not sane: spaces"
        assert line["caller"] is None

    async def test_route_is_the_template_and_the_caller_who_failed_is_unknown(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], logged: pytest.LogCaptureFixture
    ) -> None:
        pet_id = str(uuid.uuid4())
        async with make_client(make_settings(access_log=True)) as client:
            await client.get(f"/v1/pets/{pet_id}", headers=auth())
            await client.get(f"/v1/pets/{pet_id}")

        found, unauthenticated = _access_lines(logged)
        assert found["status"] == 404
        assert found["caller"] == ALICE
        assert found["path"] == f"/v1/pets/{pet_id}"
        assert pet_id not in found["route"]
        assert found["route"].startswith("/v1/pets/")
        assert (unauthenticated["status"], unauthenticated["caller"]) == (401, None)

    async def test_access_log_can_be_turned_off(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], logged: pytest.LogCaptureFixture
    ) -> None:
        async with make_client(make_settings(access_log=False)) as client:
            await client.get("/v1/pets", headers=auth())

        assert _access_lines(logged) == []

    async def test_outage_is_one_line_with_its_cause_and_no_traceback(
        self,
        make_client: MakeClient,
        make_settings: Callable[..., Settings],
        database_url: str,
        tmp_path: Path,
        logged: pytest.LogCaptureFixture,
    ) -> None:
        if database_url.startswith("sqlite"):
            unreachable = make_settings(database_url=f"sqlite:///{tmp_path}", access_log=True)
        else:
            unreachable = make_settings(
                database_url=f"postgresql://postgres@127.0.0.1:{_closed_port()}/petrecords", access_log=True
            )
        async with make_client(unreachable) as client:
            response = await client.get("/v1/pets", headers={**auth(), "X-Request-ID": "outage-1"})

        assert response.status_code == 503
        lines = [json.loads(line) for line in _lines(logged)]
        [warning] = [line for line in lines if line["logger"] == "petrecords.errors"]
        assert warning["level"] == "warning"
        assert (warning["request_id"], warning["cause"]) == ("outage-1", "connection")
        assert warning["detail"]
        assert "exception" not in warning
        [access] = [line for line in lines if line["logger"] == "petrecords.access"]
        assert (access["status"], access["database_unavailable"]) == (503, "connection")


def _unsigned(user: str) -> str:
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part({'sub': user, 'exp': 9999999999})}."


def _fragments(value: str, size: int = 16) -> set[str]:
    return {value[start : start + size] for start in range(max(len(value) - size + 1, 1))}


def assert_never_logged(text: str, *, tokens: list[str], secrets: list[str]) -> None:
    """Neither a token, nor any 16 characters of a token's signature or of a secret."""
    signatures = [signature for value in tokens if (signature := value.rsplit(".", 1)[1])]
    for value in tokens:
        assert value not in text
    for value in [*signatures, *secrets]:
        leaked = [fragment for fragment in _fragments(value) if fragment in text]
        assert not leaked, leaked


class TestNothingSecretIsLogged:
    async def test_no_token_or_secret_in_any_log_line(
        self,
        make_client: MakeClient,
        make_settings: Callable[..., Settings],
        logged: pytest.LogCaptureFixture,
    ) -> None:
        valid, admin = token(ALICE), token(ADMIN, admin=True)
        wrong_secret = token(ALICE, secret="another-secret-that-is-long-enough-0123456789")
        expired = token(ALICE, ttl=-3600)
        bad_claim = token("not-an-email")
        tokens = [valid, admin, wrong_secret, expired, bad_claim, _unsigned(ALICE)]
        authorizations = [
            *(f"Bearer {value}" for value in tokens),
            f"bearer   {valid}  ",
            f"Basic {valid}",
            f"Bearer {valid} {admin}",
            valid,
            f"Bearer {valid[:-5]}",
            f"Bearer {valid}garbage",
        ]
        async with make_client(make_settings(access_log=True)) as client:
            created = await client.post("/v1/pets", json=pet_body(), headers={"Authorization": f"Bearer {valid}"})
            pet_id = created.json()["id"]
            for authorization in authorizations:
                headers = {"Authorization": authorization}
                await client.get("/v1/pets", headers=headers)
                await client.post("/v1/pets", json=pet_body(), headers=headers)
                await client.put(f"/v1/pets/{pet_id}", json=pet_body("Max"), headers=headers)
                await client.get("/readyz", headers=headers)
                await client.get("/nowhere", headers=headers)
            await client.get("/v1/pets", params={"access_token": valid}, headers=auth())
            await client.get(f"/v1/pets?token={valid}")

        assert len(_access_lines(logged)) >= len(authorizations) * 5
        assert_never_logged("\n".join(_lines(logged)), tokens=tokens, secrets=[SECRET])

    async def test_no_token_in_the_log_of_a_crash(self, tmp_path: Path, logged: pytest.LogCaptureFixture) -> None:
        """A 500 logs its traceback; no token reaches it."""
        url = f"sqlite:///{tmp_path / 'crash.sqlite3'}"
        settings = Settings(database_url=url, data_dir=tmp_path, auth_secret=SECRET, rate_limit=0)
        migrate(settings)
        await run_sql(url, "CREATE TRIGGER crash BEFORE INSERT ON pets BEGIN SELECT RAISE(ABORT, 'boom'); END")
        valid = token(ALICE)
        async with AsyncTestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
            response = await client.post("/v1/pets", json=pet_body(), headers={"Authorization": f"Bearer {valid}"})

        assert response.status_code == 500
        text = "\n".join(_lines(logged))
        assert "Traceback" in text
        assert_never_logged(text, tokens=[valid], secrets=[SECRET])

    @pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
    async def test_no_database_password_in_logs_when_it_works_or_fails(
        self,
        make_client: MakeClient,
        make_settings: Callable[..., Settings],
        database_url: str,
        logged: pytest.LogCaptureFixture,
    ) -> None:
        password = f"pw-{uuid.uuid4().hex}"  # the test server trusts local clients: any password works
        working = sa.make_url(database_url).set(password=password).render_as_string(hide_password=False)
        failing = sa.make_url(working).set(port=_closed_port()).render_as_string(hide_password=False)
        async with make_client(make_settings(database_url=working, access_log=True)) as client:
            assert (await client.post("/v1/pets", json=pet_body(), headers=auth())).status_code == 201
        async with make_client(make_settings(database_url=failing, access_log=True)) as client:
            assert (await client.get("/v1/pets", headers=auth())).status_code == 503
            assert (await client.get("/readyz")).status_code == 503

        text = "\n".join(_lines(logged))
        assert "database unavailable" in text
        assert_never_logged(text, tokens=[], secrets=[password])
