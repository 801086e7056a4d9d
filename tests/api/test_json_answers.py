"""Every JSON answer ends with a newline, so that curl's output does not run into the next prompt or the next
answer: the direct routes', the framework's, the operational endpoints', the change feed's and every error body,
whichever layer answers it. An idempotent replay stays byte for byte the first answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from tests.conftest import test_settings as settings_of
from tests.support import auth, pet_body, wipe

Client = AsyncTestClient[Any]


@pytest.fixture(scope="module")
async def framework_client(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """The module's app that sends every request through the framework's routes (no direct routes)."""
    settings = settings_of(database_url, tmp_path_factory.mktemp("data"), direct_routes=False)
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture(params=["direct", "framework"])
async def either(
    request: pytest.FixtureRequest, database_url: str, module_client: Client, framework_client: Client
) -> Client:
    """The module's app with its direct routes, then the one without, on an emptied database."""
    await wipe(database_url)
    return module_client if request.param == "direct" else framework_client


def assert_json_line(response: Any) -> None:
    """One JSON document and a newline, the newline counted in Content-Length."""
    assert response.headers["content-type"].startswith("application/json")
    assert response.content.endswith(b"}\n"), response.content
    assert not response.content.endswith(b"\n\n")
    assert int(response.headers["content-length"]) == len(response.content)
    response.json()


class TestRecords:
    async def test_a_create_a_get_a_list_and_a_replace(self, either: Client) -> None:
        created = await either.post("/v1/pets", json=pet_body(), headers=auth())
        location = created.headers["location"]
        found = await either.get(location, headers=auth())
        listed = await either.get("/v1/pets", headers=auth())
        replaced = await either.put(
            location, json=pet_body("Max"), headers={**auth(), "If-Match": found.headers["etag"]}
        )

        for response in (created, found, listed, replaced):
            assert response.status_code in (200, 201), response.text
            assert_json_line(response)

    async def test_head_says_the_length_of_the_get_with_its_newline(self, either: Client) -> None:
        created = await either.post("/v1/pets", json=pet_body(), headers=auth())

        head = await either.head(created.headers["location"], headers=auth())

        assert head.content == b""
        assert int(head.headers["content-length"]) == len(created.content)

    async def test_not_modified_has_no_body_at_all(self, either: Client) -> None:
        created = await either.post("/v1/pets", json=pet_body(), headers=auth())

        unchanged = await either.get(
            created.headers["location"], headers={**auth(), "If-None-Match": created.headers["etag"]}
        )

        assert unchanged.status_code == 304
        assert unchanged.content == b""

    async def test_an_idempotent_replay_is_the_first_answer_byte_for_byte(self, either: Client) -> None:
        headers = {**auth(), "Idempotency-Key": "newline-1"}
        first = await either.post("/v1/pets", json=pet_body(), headers=headers)
        again = await either.post("/v1/pets", json=pet_body(), headers=headers)

        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
        assert_json_line(again)


class TestErrors:
    @pytest.mark.parametrize(
        ("method", "path", "headers", "status"),
        [
            ("GET", "/v1/pets", {}, 401),
            ("GET", "/v1/pets/not-an-id", auth(), 404),
            ("GET", "/v1/nothing", auth(), 404),
            ("PATCH", "/v1/pets", auth(), 405),
            ("POST", "/v1/pets", {**auth(), "Content-Type": "text/plain"}, 415),
        ],
        ids=["401", "404 of an id", "404 of a path", "405", "415"],
    )
    async def test_each_error_body(
        self, either: Client, method: str, path: str, headers: dict[str, str], status: int
    ) -> None:
        response = await either.request(method, path, headers=headers, content=b"{}" if method != "GET" else None)

        assert response.status_code == status, response.text
        assert_json_line(response)

    async def test_a_validation_failure(self, either: Client) -> None:
        response = await either.post("/v1/pets", json={"name": ""}, headers=auth())

        assert response.status_code == 400
        assert_json_line(response)

    async def test_a_path_the_edge_refuses(self, either: Client) -> None:
        response = await either.get("//v1/pets", headers=auth())

        assert response.status_code == 404
        assert_json_line(response)


class TestOtherEndpoints:
    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
    async def test_operational(self, either: Client, path: str) -> None:
        response = await either.get(path)

        assert response.status_code == 200
        assert_json_line(response)

    async def test_the_change_feed_and_a_stream_ticket(self, either: Client) -> None:
        await either.post("/v1/pets", json=pet_body(), headers=auth())

        feed = await either.get("/v1/changes", headers=auth())
        ticket = await either.post("/v1/changes/tickets", headers=auth())

        assert feed.status_code == 200
        assert_json_line(feed)
        assert ticket.status_code == 201
        assert_json_line(ticket)

    async def test_a_database_that_does_not_answer(self, tmp_path: Path) -> None:
        missing = tmp_path / "nowhere" / "pets.sqlite3"
        settings = settings_of(f"sqlite:///{missing}", tmp_path)
        async with AsyncTestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
            response = await client.get("/readyz")

        assert response.status_code == 503
        assert_json_line(response)
