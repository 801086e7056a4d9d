"""Browser pages of other origins (contract v3 section 7): with PETRECORDS_CORS_ORIGINS set, a preflight from an
allowed origin is answered before the token check and allows exactly the contract's request headers, and every
answer to such an origin lets its code read ETag, Location, X-Request-ID, Retry-After and Idempotent-Replayed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient
from pydantic import ValidationError

from petrecords.app import create_app
from petrecords.cli import _describe
from petrecords.config import Settings
from tests.conftest import test_settings as settings_of
from tests.support import assert_error, auth, create, wipe

# The headers of other origins' pages, answered alike whatever database the records come from.
pytestmark = pytest.mark.only_on("sqlite")

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


@pytest.fixture(scope="module")
async def page_app(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """The module's app that lets pages of ORIGIN (and a developer's) call it: built once, as an app costs more than
    these tests do."""
    settings = settings_of(
        database_url, tmp_path_factory.mktemp("data"), cors_origins=(ORIGIN, "http://127.0.0.1:5173")
    )
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
async def page_client(database_url: str, page_app: Client) -> Client:
    """The module's app for pages, on an emptied database."""
    await wipe(database_url)
    return page_app


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


class TestOrigins:
    """Origins are checked when the service starts: one that a browser never sends (a trailing slash, a path) would
    match nothing, without a word."""

    @pytest.mark.parametrize(
        ("written", "meant"),
        [
            ("https://app.example/", "did you mean https://app.example?"),
            ("https://app.example/app/", "did you mean https://app.example?"),
            ("https://app.example:8443/#top", "did you mean https://app.example:8443?"),
            ("app.example", "did you mean https://app.example?"),
            (
                "https://user:secret@app.example",
                "an origin names no user or password; did you mean https://app.example?",
            ),
            ("*", "list each origin whose pages may call the API"),
            ("https://app.example:99999", "is not an origin (scheme://host[:port])"),
        ],
    )
    def test_what_is_no_origin_is_refused_in_one_line(self, written: str, meant: str) -> None:
        with pytest.raises(ValidationError) as caught:
            Settings(cors_origins=f"{ORIGIN},{written}")

        described = _describe(caught.value)
        assert described.startswith("PETRECORDS_CORS_ORIGINS: ")
        assert described.endswith(meant)
        assert "\n" not in described
        assert "secret" not in described

    @pytest.mark.parametrize(
        ("written", "origin"),
        [
            ("HTTPS://App.Example", "https://app.example"),
            ("https://app.example:443", "https://app.example"),
            ("http://127.0.0.1:5173", "http://127.0.0.1:5173"),
            ("http://[::1]:8080", "http://[::1]:8080"),
            ("https://bücher.example", "https://xn--bcher-kva.example"),
            ("capacitor://localhost", "capacitor://localhost"),
        ],
    )
    def test_an_origin_is_kept_as_a_browser_sends_it(self, written: str, origin: str) -> None:
        assert Settings(cors_origins=f" {written} , {origin}").cors_origins == (origin,)

    async def test_a_page_of_an_origin_written_otherwise_is_answered(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(cors_origins=("HTTPS://APP.example:443",))) as client:
            response = await client.options("/v1/pets", headers=_preflight("GET"))

        assert response.status_code == 204
        assert response.headers["access-control-allow-origin"] == ORIGIN


@pytest.fixture
def access_log(caplog: pytest.LogCaptureFixture) -> Callable[[], list[dict[str, Any]]]:
    """The access lines written so far: each one's message and fields."""
    caplog.set_level(logging.INFO, logger="petrecords.access")

    def lines() -> list[dict[str, Any]]:
        return [
            {"message": line.getMessage(), **getattr(line, "fields", {})}
            for line in caplog.records
            if line.name == "petrecords.access"
        ]

    return lines


@pytest.fixture(scope="module")
async def logged_app(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Client]:
    """The module's app for ORIGIN's pages that writes an access line of each request."""
    settings = settings_of(database_url, tmp_path_factory.mktemp("data"), cors_origins=(ORIGIN,), access_log=True)
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
async def logged_client(database_url: str, logged_app: Client) -> Client:
    await wipe(database_url)
    return logged_app


class TestRefusedPreflights:
    """A refused preflight is logged as one: its access line says so and why, where it read as `OPTIONS … 401`, a
    token's fault, though no browser sends a token with a preflight."""

    async def test_from_another_origin(self, logged_client: Client, access_log: Any) -> None:
        response = await logged_client.options("/v1/pets", headers=_preflight("GET", origin=OTHER))

        assert_error(response, 401, 997)
        (line,) = access_log()
        reason = f"the origin {OTHER} is not one of PETRECORDS_CORS_ORIGINS"
        assert line["preflight_refused"] == reason
        assert line["message"] == f"preflight of /v1/pets refused (answered 401): {reason}"
        assert (line["method"], line["status"]) == ("OPTIONS", 401)

    async def test_when_no_origin_is_configured(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings], access_log: Any
    ) -> None:
        async with make_client(make_settings(access_log=True)) as client:
            response = await client.options("/v1/pets", headers=_preflight("GET"))

        assert_error(response, 401, 997)
        (line,) = access_log()
        assert line["preflight_refused"] == (
            "no page of another origin may call the API: PETRECORDS_CORS_ORIGINS is unset"
        )

    @pytest.mark.parametrize(
        ("asked", "reason"),
        [
            (_preflight("GET", "x-custom", "authorization"), "it asks to send x-custom, which no page may send"),
            (
                _preflight("PATCH"),
                "it asks for the method PATCH, which the path does not allow (GET, HEAD, OPTIONS, POST)",
            ),
        ],
        ids=["a header", "a method"],
    )
    async def test_what_the_browser_will_refuse(
        self, logged_client: Client, access_log: Any, asked: dict[str, str], reason: str
    ) -> None:
        response = await logged_client.options("/v1/pets", headers=asked)

        assert response.status_code == 204
        (line,) = access_log()
        assert line["preflight_refused"] == reason

    async def test_a_preflight_let_through_and_a_plain_options_say_nothing_of_it(
        self, logged_client: Client, access_log: Any
    ) -> None:
        await logged_client.options("/v1/pets", headers=_preflight("POST", "Content-Type", "Authorization", "Accept"))
        await logged_client.options("/v1/pets", headers={"Origin": OTHER, **auth()})

        assert [line["message"] for line in access_log()] == ["OPTIONS /v1/pets 204", "OPTIONS /v1/pets 204"]
        assert not [line for line in access_log() if "preflight_refused" in line]
