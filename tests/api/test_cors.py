"""Browser pages of other origins (contract v3 section 7): with PETRECORDS_CORS_ORIGINS set, a preflight from an
allowed origin is answered before the token check and allows exactly the contract's request headers, and every
answer to such an origin lets its code read ETag, Location, X-Request-ID, Retry-After and Idempotent-Replayed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import assert_error, auth, create

Client = AsyncTestClient[Any]
ORIGIN = "https://app.example"
OTHER = "https://evil.example"
ALLOWED_HEADERS = {
    "authorization",
    "content-type",
    "if-match",
    "if-none-match",
    "idempotency-key",
    "last-event-id",
    "x-request-id",
}
EXPOSED = {"etag", "location", "x-request-id", "retry-after", "idempotent-replayed"}


def _listed(value: str) -> set[str]:
    return {item.strip().lower() for item in value.split(",") if item.strip()}


@pytest.fixture
async def page_client(
    make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
) -> AsyncIterator[Client]:
    async with make_client(make_settings(cors_origins=(ORIGIN, "http://127.0.0.1:5173"))) as started:
        yield started


def _preflight(method: str, *requested: str, origin: str = ORIGIN) -> dict[str, str]:
    headers = {"Origin": origin, "Access-Control-Request-Method": method}
    if requested:
        headers["Access-Control-Request-Headers"] = ", ".join(requested)
    return headers


class TestPreflight:
    async def test_is_answered_before_the_token_check(self, page_client: Client) -> None:
        response = await page_client.options(
            "/v1/pets", headers=_preflight("POST", "authorization", "content-type", "idempotency-key")
        )

        assert response.status_code == 204, response.text
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert _listed(response.headers["access-control-allow-methods"]) == {"get", "head", "options", "post"}
        assert _listed(response.headers["access-control-allow-headers"]) == ALLOWED_HEADERS
        assert int(response.headers["access-control-max-age"]) > 0
        assert "origin" in _listed(response.headers["vary"])

    async def test_allows_a_records_methods(self, page_client: Client) -> None:
        created = await create(page_client)

        response = await page_client.options(created.headers["location"], headers=_preflight("PATCH", "if-match"))

        assert response.status_code == 204
        assert _listed(response.headers["access-control-allow-methods"]) == {
            "delete",
            "get",
            "head",
            "options",
            "patch",
            "put",
        }

    async def test_another_header_is_not_allowed_and_never_everything(self, page_client: Client) -> None:
        response = await page_client.options("/v1/pets", headers=_preflight("GET", "x-custom", "authorization"))

        assert response.status_code == 204
        allowed = _listed(response.headers["access-control-allow-headers"])
        assert allowed == ALLOWED_HEADERS
        assert "x-custom" not in allowed
        assert "*" not in allowed

    async def test_another_origin_gets_no_cors_answer(self, page_client: Client) -> None:
        response = await page_client.options("/v1/pets", headers=_preflight("GET", origin=OTHER))

        assert_error(response, 401, 997)
        assert not [name for name in response.headers if name.startswith("access-control-")]

    async def test_a_path_the_service_does_not_have_is_404(self, page_client: Client) -> None:
        response = await page_client.options("/v1/nothing", headers=_preflight("GET"))

        assert_error(response, 404, 995)


class TestAnswers:
    async def test_a_create_lets_the_page_read_its_headers(self, page_client: Client) -> None:
        response = await page_client.post(
            "/v1/pets",
            json={"name": "Rex", "petType": "Dog"},
            headers={**auth(), "Origin": ORIGIN, "Idempotency-Key": "k-1"},
        )

        assert response.status_code == 201
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert _listed(response.headers["access-control-expose-headers"]) == EXPOSED

    @pytest.mark.parametrize("path", ["/v1/pets/not-an-id", "/openapi.json"])
    async def test_failures_and_open_paths_too(self, page_client: Client, path: str) -> None:
        response = await page_client.get(path, headers={**auth(), "Origin": ORIGIN})

        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert _listed(response.headers["access-control-expose-headers"]) == EXPOSED

    async def test_an_unauthenticated_answer_too(self, page_client: Client) -> None:
        response = await page_client.get("/v1/pets", headers={"Origin": ORIGIN})

        assert_error(response, 401, 997)
        assert response.headers["access-control-allow-origin"] == ORIGIN

    async def test_another_origin_gets_none(self, page_client: Client) -> None:
        response = await page_client.get("/v1/pets", headers={**auth(), "Origin": OTHER})

        assert response.status_code == 200
        assert not [name for name in response.headers if name.startswith("access-control-")]
        assert "origin" in _listed(response.headers["vary"])

    async def test_none_at_all_without_configured_origins(self, client: Client) -> None:
        answer = await client.get("/v1/pets", headers={**auth(), "Origin": ORIGIN})
        preflight = await client.options("/v1/pets", headers=_preflight("GET"))

        assert not [name for name in answer.headers if name.startswith("access-control-")]
        assert not [name for name in preflight.headers if name.startswith("access-control-")]
        assert_error(preflight, 401, 997)
