"""Error bodies, response headers and limits (contract sections 6 and 7)."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import ALICE, BOB, auth, pet_body, run_sql, token

Client = AsyncTestClient[Any]
MakeClient = Callable[[Settings], AsyncTestClient[Any]]
Scenario = Callable[[Client], Awaitable[httpx.Response]]

# The contract's table of section 6: HTTP status -> ServiceError code.
CODES = {
    400: 994,
    401: 997,
    403: 997,
    404: 995,
    405: 993,
    408: 984,
    409: 991,
    412: 992,
    413: 989,
    415: 988,
    422: 990,
    429: 987,
    500: 500,
    503: 986,
}
INTERNALS = re.compile(
    r"traceback|File \"|\.py\b|sqlalchemy|sqlite|asyncpg|psycopg|postgres|\bselect\b|\binsert\b|\bfrom pets\b"
    r"|litestar|msgspec|pydantic|exception|/work/|/usr/|site-packages",
    re.IGNORECASE,
)
UNKNOWN_PATHS = [
    "/nope",
    "/v1/petsX",
    "/v2/pets",
    "/v1",
    "/v1/pets/018f2a4e-1b2c-7d3e-8f40-5a6b7c8d9e0f/owner",
    "/v1/pets/a/b/c",
]
ORIGIN = "https://app.example"


def assert_service_error(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is a ServiceError body with the contract's code for the status, and nothing else."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert body["code"] == CODES[status]
    assert isinstance(body["message"], str)
    assert body["message"]
    allowed = {"code", "message", "errors"} if body["code"] == 994 else {"code", "message"}
    assert set(body) <= allowed
    if "errors" in body:
        assert isinstance(body["errors"], dict)
        assert all(isinstance(messages, list) for messages in body["errors"].values())
    assert not INTERNALS.search(response.text), response.text
    return body


async def _create(client: Client, user: str = ALICE) -> httpx.Response:
    response = await client.post("/v1/pets", json=pet_body(), headers=auth(user))
    assert response.status_code == 201
    return response


async def _malformed_json(client: Client) -> httpx.Response:
    return await client.post(
        "/v1/pets", content=b'{"name": "Rex", "petType": ', headers={**auth(), "Content-Type": "application/json"}
    )


async def _invalid_field(client: Client) -> httpx.Response:
    return await client.post("/v1/pets", json=pet_body("", "Dragon", weight="12 kg"), headers=auth())


async def _unknown_parameter(client: Client) -> httpx.Response:
    return await client.get("/v1/pets?limit=5", headers=auth())


async def _no_token(client: Client) -> httpx.Response:
    return await client.get("/v1/pets")


async def _bad_token(client: Client) -> httpx.Response:
    return await client.get("/v1/pets", headers={"Authorization": "Bearer not.a.token"})


async def _forbidden(client: Client) -> httpx.Response:
    return await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth())


async def _missing_record(client: Client) -> httpx.Response:
    return await client.get(f"/v1/pets/{uuid.uuid4()}", headers=auth())


async def _malformed_id(client: Client) -> httpx.Response:
    return await client.get("/v1/pets/not-a-uuid", headers=auth())


async def _unknown_path(client: Client) -> httpx.Response:
    return await client.get("/v2/pets", headers=auth())


async def _wrong_method(client: Client) -> httpx.Response:
    return await client.post(f"/v1/pets/{uuid.uuid4()}", json=pet_body(), headers=auth())


async def _stale_etag(client: Client) -> httpx.Response:
    created = await _create(client)
    return await client.put(
        created.headers["location"], json=pet_body("Max"), headers={**auth(), "If-Match": '"stale"'}
    )


async def _too_large(client: Client) -> httpx.Response:
    return await client.post("/v1/pets", json=pet_body("x" * 20_000), headers=auth())


async def _not_json(client: Client) -> httpx.Response:
    return await client.post("/v1/pets", content=b"name=Rex", headers={**auth(), "Content-Type": "text/plain"})


async def _key_reused(client: Client) -> httpx.Response:
    headers = {**auth(), "Idempotency-Key": "reused"}
    await client.post("/v1/pets", json=pet_body(), headers=headers)
    return await client.post("/v1/pets", json=pet_body("Max"), headers=headers)


ERROR_SCENARIOS: list[tuple[Scenario, int]] = [
    (_malformed_json, 400),
    (_invalid_field, 400),
    (_unknown_parameter, 400),
    (_no_token, 401),
    (_bad_token, 401),
    (_forbidden, 403),
    (_missing_record, 404),
    (_malformed_id, 404),
    (_unknown_path, 404),
    (_wrong_method, 405),
    (_stale_etag, 412),
    (_too_large, 413),
    (_not_json, 415),
    (_key_reused, 422),
]


async def _healthz(client: Client) -> httpx.Response:
    return await client.get("/healthz")


async def _metrics(client: Client) -> httpx.Response:
    return await client.get("/metrics")


async def _list(client: Client) -> httpx.Response:
    return await client.get("/v1/pets", headers=auth())


async def _get(client: Client) -> httpx.Response:
    created = await _create(client)
    return await client.get(created.headers["location"], headers=auth())


async def _not_modified(client: Client) -> httpx.Response:
    created = await _create(client)
    return await client.get(created.headers["location"], headers={**auth(), "If-None-Match": created.headers["etag"]})


async def _unknown_path_without_token(client: Client) -> httpx.Response:
    return await client.get("/nope")


EVERY_KIND_OF_RESPONSE: list[Scenario] = [
    _healthz,
    _metrics,
    _list,
    _create,
    _get,
    _not_modified,
    _unknown_path_without_token,
    *(scenario for scenario, _ in ERROR_SCENARIOS),
]
AUTHENTICATED_RESPONSES: list[Scenario] = [
    _list,
    _wrong_method,
    _create,
    _get,
    _not_modified,
    _malformed_json,
    _forbidden,
    _missing_record,
    _unknown_path,
    _stale_etag,
    _too_large,
    _not_json,
    _key_reused,
]


def _name(scenario: Scenario) -> str:
    return scenario.__name__.lstrip("_")


class TestErrorBodies:
    @pytest.mark.parametrize(("scenario", "status"), ERROR_SCENARIOS, ids=[_name(s) for s, _ in ERROR_SCENARIOS])
    async def test_every_error_is_a_bare_service_error(self, client: Client, scenario: Scenario, status: int) -> None:
        response = await scenario(client)

        assert_service_error(response, status)

    async def test_only_validation_failures_name_fields_in_errors(self, client: Client) -> None:
        body = assert_service_error(await _invalid_field(client), 400)

        assert set(body["errors"]) == {"name", "petType", "weight"}


class TestUnknownPaths:
    @pytest.mark.parametrize("path", UNKNOWN_PATHS)
    async def test_unknown_path_without_token_is_404(self, client: Client, path: str) -> None:
        response = await client.get(path)

        assert_service_error(response, 404)

    @pytest.mark.parametrize("path", UNKNOWN_PATHS)
    async def test_unknown_path_with_token_is_404(self, client: Client, path: str) -> None:
        response = await client.get(path, headers=auth())

        assert_service_error(response, 404)

    @pytest.mark.parametrize("path", UNKNOWN_PATHS)
    async def test_unknown_path_with_an_invalid_token_is_404(self, client: Client, path: str) -> None:
        response = await client.get(path, headers={"Authorization": "Bearer garbage"})

        assert_service_error(response, 404)

    @pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
    async def test_unknown_path_with_other_methods_is_404(self, client: Client, method: str) -> None:
        response = await client.request(method, "/v2/pets", headers=auth())

        assert_service_error(response, 404)


class TestWrongMethod:
    @pytest.mark.parametrize("method", ["TRACE", "POST"])
    async def test_wrong_method_on_a_record_is_405_with_allow(self, client: Client, method: str) -> None:
        created = await _create(client)

        response = await client.request(method, created.headers["location"], json=pet_body(), headers=auth())

        assert_service_error(response, 405)
        allowed = {item.strip().upper() for item in response.headers["allow"].split(",")}
        assert {"GET", "PUT", "PATCH", "DELETE"} <= allowed
        assert method not in allowed

    @pytest.mark.parametrize("method", ["DELETE", "PUT", "PATCH"])
    async def test_wrong_method_on_the_collection_is_405_with_allow(self, client: Client, method: str) -> None:
        response = await client.request(method, "/v1/pets", headers=auth())

        assert_service_error(response, 405)
        allowed = {item.strip().upper() for item in response.headers["allow"].split(",")}
        assert {"GET", "POST"} <= allowed
        assert method not in allowed

    async def test_wrong_method_changes_nothing(self, client: Client) -> None:
        created = await _create(client)

        await client.post(created.headers["location"], json=pet_body("Max"), headers=auth())
        fetched = await client.get(created.headers["location"], headers=auth())

        assert fetched.json() == created.json()


class TestOptions:
    """OPTIONS answers which methods a path has (found by schemathesis: Litestar's own answer listed one)."""

    async def test_collection_lists_all_its_methods(self, client: Client) -> None:
        response = await client.options("/v1/pets", headers=auth())

        assert response.status_code == 204
        assert {item.strip() for item in response.headers["allow"].split(",")} == {"GET", "HEAD", "POST", "OPTIONS"}
        assert response.content == b""

    async def test_record_lists_all_its_methods(self, client: Client) -> None:
        created = await _create(client)

        response = await client.options(created.headers["location"], headers=auth())

        assert response.status_code == 204
        allowed = {item.strip() for item in response.headers["allow"].split(",")}
        assert allowed == {"GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"}

    async def test_needs_a_token_like_every_other_method(self, client: Client) -> None:
        response = await client.options("/v1/pets")

        assert_service_error(response, 401)


def _insert_pet(pet_id: str, *, revision: str) -> str:
    """An INSERT of one of Alice's records; the arguments are SQL literals made by the tests."""
    columns = "id, created_at, created_by, modified_at, modified_by, owner_id, name, name_key, pet_type, revision"
    values = f"{pet_id}, 1763740000000, '{ALICE}', 1763740000000, '{ALICE}', '{ALICE}', 'Rex', 'rex', 'Dog', {revision}"
    return f"INSERT INTO pets ({columns}) VALUES ({values})"  # noqa: S608 - literals of the tests, no input


@contextlib.asynccontextmanager
async def _broken_record(database_url: str) -> AsyncIterator[str]:
    """A path whose handling crashes inside the service, because the database holds what it never writes.

    SQLite is loosely typed, so a row can carry a text revision; on PostgreSQL a column the listing
    reads is renamed (and renamed back afterwards: the database is shared by the session).
    """
    if database_url.startswith("sqlite"):
        pet_id = uuid.uuid4()
        # The UUID column holds 32 hex digits on SQLite.
        await run_sql(database_url, _insert_pet(f"'{pet_id.hex}'", revision="'abc'"))
        yield f"/v1/pets/{pet_id}"
        return
    await run_sql(database_url, _insert_pet(f"'{uuid.uuid4()}'", revision="1"))
    await run_sql(database_url, "ALTER TABLE pets RENAME COLUMN name_key TO name_key_old")
    try:
        # The date filter makes the total a row count, which sees the row the service did not count.
        yield "/v1/pets?sort=name&createdFrom=1970-01-01T00:00:00Z"
    finally:
        await run_sql(database_url, "ALTER TABLE pets RENAME COLUMN name_key_old TO name_key")


class TestCrash:
    async def test_crash_is_a_bare_500(self, client: Client, database_url: str) -> None:
        async with _broken_record(database_url) as path:
            response = await client.get(path, headers=auth())

        assert response.status_code == 500
        assert response.json() == {"code": 500, "message": "Internal server error."}
        assert response.headers["content-type"].startswith("application/json")
        assert not INTERNALS.search(response.text)
        assert response.headers["x-request-id"]
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["cache-control"] == "no-store"

    async def test_service_answers_normally_after_a_crash(self, client: Client, database_url: str) -> None:
        async with _broken_record(database_url) as path:
            await client.get(path, headers=auth())

        created = await client.post("/v1/pets", json=pet_body(), headers=auth(BOB))
        listed = await client.get("/v1/pets", headers=auth(BOB))

        assert created.status_code == 201
        assert listed.json()["totalCount"] == 1


class TestRequestId:
    @pytest.mark.parametrize(
        "sent", ["abc-123", "a" * 128, str(uuid.uuid4()), "trace.1:span/2+x=y_z"], ids=["short", "128", "uuid", "punct"]
    )
    async def test_sane_request_id_is_echoed(self, client: Client, sent: str) -> None:
        response = await client.get("/v1/pets", headers={**auth(), "X-Request-ID": sent})

        assert response.headers["x-request-id"] == sent

    @pytest.mark.parametrize(
        "sent",
        ["a" * 129, "has space", 'quo"te', "semi;colon", "<script>", "a,b"],
        ids=["129", "space", "quote", "semicolon", "angle", "comma"],
    )
    async def test_insane_request_id_is_replaced(self, client: Client, sent: str) -> None:
        response = await client.get("/v1/pets", headers={**auth(), "X-Request-ID": sent})

        generated = response.headers["x-request-id"]
        assert generated
        assert generated != sent
        assert len(generated) <= 128
        assert re.fullmatch(r"[A-Za-z0-9._:+/=-]+", generated)

    async def test_empty_request_id_is_replaced(self, client: Client) -> None:
        response = await client.get("/v1/pets", headers={**auth(), "X-Request-ID": ""})

        assert response.headers["x-request-id"]

    async def test_generated_ids_differ(self, client: Client) -> None:
        first = await client.get("/v1/pets", headers=auth())
        second = await client.get("/v1/pets", headers=auth())

        assert first.headers["x-request-id"]
        assert first.headers["x-request-id"] != second.headers["x-request-id"]

    @pytest.mark.parametrize("scenario", EVERY_KIND_OF_RESPONSE, ids=_name)
    async def test_every_response_has_a_request_id(self, client: Client, scenario: Scenario) -> None:
        response = await scenario(client)

        assert response.headers["x-request-id"]

    @pytest.mark.parametrize("scenario", [_no_token, _unknown_path, _too_large, _wrong_method], ids=_name)
    async def test_sent_id_is_echoed_on_errors(self, client: Client, scenario: Scenario) -> None:
        client.headers["X-Request-ID"] = "req-0042"

        response = await scenario(client)

        assert response.headers["x-request-id"] == "req-0042"
        assert response.headers.get_list("x-request-id") == ["req-0042"]


class TestSecurityHeaders:
    @pytest.mark.parametrize("scenario", EVERY_KIND_OF_RESPONSE, ids=_name)
    async def test_every_response_has_nosniff(self, client: Client, scenario: Scenario) -> None:
        response = await scenario(client)

        assert response.headers["x-content-type-options"] == "nosniff"

    @pytest.mark.parametrize("scenario", AUTHENTICATED_RESPONSES, ids=_name)
    async def test_authenticated_responses_are_not_stored(self, client: Client, scenario: Scenario) -> None:
        response = await scenario(client)

        assert response.headers.get_list("cache-control") == ["no-store"]

    @pytest.mark.parametrize("scenario", [_no_token, _bad_token], ids=_name)
    async def test_api_errors_without_a_valid_token_are_not_stored(self, client: Client, scenario: Scenario) -> None:
        response = await scenario(client)

        assert response.headers["cache-control"] == "no-store"


class TestCors:
    @pytest.mark.parametrize("scenario", [_list, _healthz, _no_token, _unknown_path_without_token], ids=_name)
    async def test_no_cors_headers_by_default(self, client: Client, scenario: Scenario) -> None:
        client.headers["Origin"] = ORIGIN

        response = await scenario(client)

        assert not [name for name in response.headers if name.lower().startswith("access-control-")]

    async def test_no_preflight_answer_by_default(self, client: Client) -> None:
        response = await client.options("/v1/pets", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})

        assert not [name for name in response.headers if name.lower().startswith("access-control-")]

    async def test_configured_origin_is_allowed(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(cors_origins=(ORIGIN,))) as client:
            response = await client.get("/v1/pets", headers={**auth(), "Origin": ORIGIN})

        assert response.status_code == 200
        assert response.headers["access-control-allow-origin"] == ORIGIN

    async def test_other_origin_is_not_allowed(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(cors_origins=(ORIGIN,))) as client:
            response = await client.get("/v1/pets", headers={**auth(), "Origin": "https://evil.example"})

        assert response.headers.get("access-control-allow-origin") in {None, ORIGIN}

    async def test_configured_origin_gets_a_preflight_answer(
        self, make_client: MakeClient, make_settings: Callable[..., Settings]
    ) -> None:
        preflight = {
            "Origin": ORIGIN,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
        }
        async with make_client(make_settings(cors_origins=(ORIGIN,))) as client:
            response = await client.options("/v1/pets", headers=preflight)

        assert 200 <= response.status_code < 300
        assert response.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in response.headers["access-control-allow-methods"].upper()


class TestRateLimit:
    @pytest.fixture
    async def limited(self, make_client: MakeClient, make_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
        async with make_client(make_settings(rate_limit=3)) as client:
            yield client

    async def test_fourth_request_in_a_minute_is_429(self, limited: Client) -> None:
        allowed = [(await limited.get("/v1/pets", headers=auth())).status_code for _ in range(3)]

        response = await limited.get("/v1/pets", headers=auth())

        assert allowed == [200, 200, 200]
        assert_service_error(response, 429)
        assert re.fullmatch(r"\d+", response.headers["retry-after"])
        assert 1 <= int(response.headers["retry-after"]) <= 60
        assert response.headers["cache-control"] == "no-store"

    async def test_every_kind_of_request_counts(self, limited: Client) -> None:
        created = await limited.post("/v1/pets", json=pet_body(), headers=auth())
        await limited.get(created.headers["location"], headers=auth())
        await limited.delete(created.headers["location"], headers=auth())

        response = await limited.get("/v1/pets", headers=auth())

        assert_service_error(response, 429)

    async def test_another_caller_is_unaffected(self, limited: Client) -> None:
        for _ in range(4):
            await limited.get("/v1/pets", headers=auth(ALICE))

        response = await limited.get("/v1/pets", headers=auth(BOB))

        assert response.status_code == 200

    async def test_the_budget_belongs_to_the_case_folded_caller(self, limited: Client) -> None:
        for user in ("alice@example.com", "Alice@Example.com", "ALICE@EXAMPLE.COM"):
            await limited.get("/v1/pets", headers=auth(user))

        response = await limited.get("/v1/pets", headers=auth("aLiCe@example.com"))

        assert_service_error(response, 429)

    async def test_missing_token_is_401_even_when_limited(self, limited: Client) -> None:
        for _ in range(4):
            await limited.get("/v1/pets", headers=auth())

        without_token = await limited.get("/v1/pets")
        bad_token = await limited.get("/v1/pets", headers={"Authorization": f"Bearer {token(secret='x' * 40)}"})

        assert_service_error(without_token, 401)
        assert_service_error(bad_token, 401)

    async def test_429_comes_before_body_checks(self, limited: Client) -> None:
        for _ in range(3):
            await limited.get("/v1/pets", headers=auth())

        oversized = await limited.post("/v1/pets", json=pet_body("x" * 20_000), headers=auth())
        not_json = await limited.post("/v1/pets", content=b"x", headers={**auth(), "Content-Type": "text/plain"})
        invalid = await limited.post("/v1/pets", json=pet_body(""), headers=auth())
        missing = await limited.get(f"/v1/pets/{uuid.uuid4()}", headers=auth())

        for response in (oversized, not_json, invalid, missing):
            assert_service_error(response, 429)

    async def test_rejected_requests_create_nothing(self, limited: Client) -> None:
        for _ in range(3):
            await limited.get("/v1/pets", headers=auth())

        await limited.post("/v1/pets", json=pet_body(), headers=auth())
        listed = await limited.get("/v1/pets", headers=auth(BOB, admin=True))

        assert listed.json()["totalCount"] == 0
