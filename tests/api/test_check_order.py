"""The order of checks (contract section 6): 401, 429, 413, 415, 400, 404, 403, 412.

Each request fails two or more checks at once; the earliest in that order must answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.config import Settings
from tests.support import ADMIN, ALICE, BOB, MISSING_ID, assert_error, auth, create, pet_body, token

Client = AsyncTestClient[Any]
JSON = {"Content-Type": "application/json"}
TEXT = {"Content-Type": "text/plain"}
OVERSIZED = b'{"name": "Rex", "petType": "Dog"' + b" " * (16 * 1024) + b"}"
MALFORMED = b'{"name": "Rex",'
INVALID = b'{"name": "", "petType": "Dragon", "color": 1}'


def assert_unauthenticated(response: httpx.Response, *, token_sent: bool) -> None:
    assert_error(response, 401, 997)
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith("Bearer")
    if token_sent:
        assert 'error="invalid_token"' in challenge
    else:
        assert "error=" not in challenge


async def assert_unchanged(client: Client, written: httpx.Response) -> None:
    current = await client.get(f"/v1/pets/{written.json()['id']}", headers=auth(ADMIN, admin=True))
    assert current.status_code == 200
    assert current.json() == written.json()
    assert current.headers["etag"] == written.headers["etag"]


async def count_all(client: Client) -> int:
    response = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
    assert response.status_code == 200
    total: int = response.json()["totalCount"]
    return total


BAD_TOKENS = {
    "garbage": {"Authorization": "Bearer not-a-jwt"},
    "expired": {"Authorization": f"Bearer {token(ALICE, ttl=-3600)}"},
    "wrong secret": {"Authorization": f"Bearer {token(ALICE, secret='another-secret-that-is-long-enough-0123')}"},
    "subject not an e-mail": {"Authorization": f"Bearer {token('alice')}"},
    "other scheme": {"Authorization": f"Basic {token(ALICE)}"},
}


class TestUnauthenticatedComesFirst:
    async def test_no_token_and_invalid_body_is_401(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=INVALID, headers=JSON)

        assert_unauthenticated(response, token_sent=False)
        assert await count_all(client) == 0

    async def test_no_token_oversized_body_of_wrong_media_type_is_401(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=OVERSIZED, headers=TEXT)

        assert_unauthenticated(response, token_sent=False)

    async def test_no_token_on_each_pet_endpoint_is_401(self, client: Client) -> None:
        created = await create(client)
        location = created.headers["location"]
        requests = [
            client.get("/v1/pets"),
            client.get(location),
            client.get(f"/v1/pets/{MISSING_ID}"),
            client.get("/v1/pets/abc"),
            client.put(location, content=MALFORMED, headers=TEXT),
            client.put("/v1/pets/abc", content=INVALID, headers=JSON),
            client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(ownerId=BOB), headers={"If-Match": '"stale"'}),
            client.delete(location, headers={"If-Match": "abc"}),
            client.delete(f"/v1/pets/{MISSING_ID}"),
        ]
        for request in requests:
            assert_unauthenticated(await request, token_sent=False)
        await assert_unchanged(client, created)

    @pytest.mark.parametrize("headers", BAD_TOKENS.values(), ids=BAD_TOKENS.keys())
    async def test_invalid_token_and_invalid_request_is_401_invalid_token(
        self, client: Client, headers: dict[str, str]
    ) -> None:
        created = await create(client)

        responses = [
            await client.post("/v1/pets", content=OVERSIZED, headers={**headers, **TEXT}),
            await client.put(created.headers["location"], content=MALFORMED, headers={**headers, **JSON}),
            await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(), headers=headers),
            await client.delete(created.headers["location"], headers={**headers, "If-Match": '"stale"'}),
            await client.get(created.headers["location"], headers=headers),
        ]

        for response in responses:
            assert_unauthenticated(response, token_sent=True)
        await assert_unchanged(client, created)


class TestRateLimitComesBeforeTheBody:
    async def test_rate_limited_caller_with_an_oversized_body_of_wrong_type_is_429(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(rate_limit=1)) as limited:
            first = await limited.post("/v1/pets", json=pet_body(), headers=auth())
            second = await limited.post("/v1/pets", content=OVERSIZED, headers={**auth(), **TEXT})
            third = await limited.put(f"/v1/pets/{MISSING_ID}", content=MALFORMED, headers={**auth(), **JSON})

        assert first.status_code == 201
        for response in (second, third):
            assert_error(response, 429, 987)
            assert int(response.headers["retry-after"]) >= 1

    async def test_invalid_token_of_a_rate_limited_caller_is_401(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(rate_limit=1)) as limited:
            await limited.post("/v1/pets", json=pet_body(), headers=auth())
            expired = await limited.post(
                "/v1/pets", json=pet_body(), headers={"Authorization": f"Bearer {token(ALICE, ttl=-3600)}"}
            )
            missing = await limited.post("/v1/pets", json=pet_body())

        assert_unauthenticated(expired, token_sent=True)
        assert_unauthenticated(missing, token_sent=False)


class TestBodySizeComesBeforeMediaTypeAndValidation:
    async def test_oversized_body_of_wrong_media_type_is_413(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=OVERSIZED, headers={**auth(), **TEXT})

        assert_error(response, 413, 989)

    async def test_oversized_body_without_content_type_is_413(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=OVERSIZED, headers=auth())

        assert_error(response, 413, 989)

    async def test_oversized_malformed_json_is_413(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=b"{" + b"x" * (20 * 1024), headers={**auth(), **JSON})

        assert_error(response, 413, 989)

    async def test_oversized_put_to_a_malformed_id_is_413(self, client: Client) -> None:
        response = await client.put("/v1/pets/abc", content=OVERSIZED, headers={**auth(), **TEXT})

        assert_error(response, 413, 989)

    async def test_oversized_put_to_someone_elses_record_with_stale_etag_is_413(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(
            created.headers["location"], content=OVERSIZED, headers={**auth(ALICE), **JSON, "If-Match": '"stale"'}
        )

        assert_error(response, 413, 989)
        await assert_unchanged(client, created)


class TestMediaTypeComesBeforeValidation:
    async def test_wrong_media_type_with_malformed_json_is_415(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=MALFORMED, headers={**auth(), **TEXT})

        assert_error(response, 415, 988)

    async def test_missing_content_type_with_invalid_body_is_415(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=INVALID, headers=auth())

        assert_error(response, 415, 988)

    async def test_wrong_media_type_with_invalid_idempotency_key_is_415(self, client: Client) -> None:
        response = await client.post(
            "/v1/pets", content=b'{"name": "Rex", "petType": "Dog"}', headers={**auth(), **TEXT, "Idempotency-Key": ""}
        )

        assert_error(response, 415, 988)

    async def test_wrong_media_type_on_a_malformed_id_is_415(self, client: Client) -> None:
        response = await client.put("/v1/pets/abc", content=MALFORMED, headers={**auth(), **TEXT})

        assert_error(response, 415, 988)

    async def test_wrong_media_type_on_a_missing_record_is_415(self, client: Client) -> None:
        response = await client.put(
            f"/v1/pets/{MISSING_ID}", content=b'{"name": "Rex", "petType": "Dog"}', headers={**auth(), **TEXT}
        )

        assert_error(response, 415, 988)

    async def test_wrong_media_type_with_stale_etag_is_415(self, client: Client) -> None:
        created = await create(client)

        response = await client.put(
            created.headers["location"],
            content=b'{"name": "Max", "petType": "Dog"}',
            headers={**auth(), **TEXT, "If-Match": '"stale"'},
        )

        assert_error(response, 415, 988)
        await assert_unchanged(client, created)


class TestValidationComesBeforeNotFound:
    async def test_put_to_a_malformed_id_with_an_invalid_body_is_400(self, client: Client) -> None:
        response = await client.put("/v1/pets/abc", content=INVALID, headers={**auth(), **JSON})

        body = assert_error(response, 400, 994)
        assert set(body["errors"]) == {"name", "petType", "color"}

    async def test_put_to_a_malformed_id_with_malformed_json_is_400(self, client: Client) -> None:
        response = await client.put("/v1/pets/abc", content=MALFORMED, headers={**auth(), **JSON})

        assert_error(response, 400, 994)

    async def test_put_to_a_missing_record_with_an_invalid_body_is_400(self, client: Client) -> None:
        response = await client.put(f"/v1/pets/{MISSING_ID}", content=INVALID, headers={**auth(), **JSON})

        assert_error(response, 400, 994)

    async def test_put_to_someone_elses_record_with_an_invalid_body_is_400(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(created.headers["location"], content=INVALID, headers={**auth(ALICE), **JSON})

        assert_error(response, 400, 994)
        await assert_unchanged(client, created)

    async def test_put_to_a_missing_record_with_a_different_body_id_is_400(self, client: Client) -> None:
        other = await create(client)

        response = await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(id=other.json()["id"]), headers=auth())

        body = assert_error(response, 400, 994)
        assert "id" in body["errors"]
        await assert_unchanged(client, other)

    async def test_put_to_a_missing_record_with_malformed_if_match_is_400(self, client: Client) -> None:
        response = await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(), headers={**auth(), "If-Match": "abc"})

        assert_error(response, 400, 994)

    async def test_delete_of_a_missing_record_with_malformed_if_match_is_400(self, client: Client) -> None:
        response = await client.delete(f"/v1/pets/{MISSING_ID}", headers={**auth(), "If-Match": "abc"})

        assert_error(response, 400, 994)

    async def test_delete_of_a_malformed_id_with_malformed_if_match_is_400(self, client: Client) -> None:
        response = await client.delete("/v1/pets/abc", headers={**auth(), "If-Match": "abc"})

        assert_error(response, 400, 994)


class TestValidationComesBeforeForbidden:
    async def test_create_for_another_owner_with_an_invalid_name_is_400(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body("", ownerId=BOB), headers=auth(ALICE))

        body = assert_error(response, 400, 994)
        assert "name" in body["errors"]
        assert "ownerId" not in body["errors"]

    async def test_create_for_another_owner_with_an_invalid_idempotency_key_is_400(self, client: Client) -> None:
        response = await client.post(
            "/v1/pets", json=pet_body(ownerId=BOB), headers={**auth(ALICE), "Idempotency-Key": "k" * 256}
        )

        assert_error(response, 400, 994)
        assert await count_all(client) == 0

    async def test_replace_giving_away_with_an_invalid_type_is_400(self, client: Client) -> None:
        created = await create(client)

        response = await client.put(
            created.headers["location"], json=pet_body(pet_type="Dragon", ownerId=BOB), headers=auth(ALICE)
        )

        assert_error(response, 400, 994)
        await assert_unchanged(client, created)


class TestNotFoundComesBeforeForbiddenAndPrecondition:
    async def test_put_to_a_missing_record_giving_it_away_is_404(self, client: Client) -> None:
        response = await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(ownerId=BOB), headers=auth(ALICE))

        assert_error(response, 404, 995)
        assert await count_all(client) == 0

    async def test_put_to_a_malformed_id_giving_it_away_is_404(self, client: Client) -> None:
        response = await client.put("/v1/pets/abc", json=pet_body(ownerId=BOB), headers=auth(ALICE))

        assert_error(response, 404, 995)

    async def test_put_to_someone_elses_record_giving_it_away_is_404(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(created.headers["location"], json=pet_body(ownerId=ADMIN), headers=auth(ALICE))

        assert_error(response, 404, 995)
        await assert_unchanged(client, created)

    async def test_put_to_a_missing_record_with_stale_etag_is_404(self, client: Client) -> None:
        response = await client.put(
            f"/v1/pets/{MISSING_ID}", json=pet_body(), headers={**auth(), "If-Match": '"stale"'}
        )

        assert_error(response, 404, 995)

    async def test_put_to_someone_elses_record_with_its_current_etag_is_404(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(
            created.headers["location"],
            json=pet_body("Stolen"),
            headers={**auth(ALICE), "If-Match": created.headers["etag"]},
        )

        assert_error(response, 404, 995)
        await assert_unchanged(client, created)

    async def test_delete_of_someone_elses_record_with_stale_etag_is_404(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.delete(created.headers["location"], headers={**auth(ALICE), "If-Match": '"stale"'})

        assert_error(response, 404, 995)
        await assert_unchanged(client, created)

    async def test_delete_of_a_malformed_id_with_stale_etag_is_404(self, client: Client) -> None:
        response = await client.delete("/v1/pets/abc", headers={**auth(), "If-Match": '"stale"'})

        assert_error(response, 404, 995)


class TestForbiddenComesBeforePrecondition:
    async def test_giving_away_own_record_with_stale_etag_is_403(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(
            created.headers["location"],
            json=pet_body("Max", ownerId=BOB),
            headers={**auth(ALICE), "If-Match": '"stale"'},
        )

        assert_error(response, 403, 997)
        await assert_unchanged(client, created)

    async def test_giving_away_own_record_with_weak_etag_is_403(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(
            created.headers["location"],
            json=pet_body("Max", ownerId=BOB),
            headers={**auth(ALICE), "If-Match": "W/" + created.headers["etag"]},
        )

        assert_error(response, 403, 997)
        await assert_unchanged(client, created)


class TestPreconditionComesLast:
    async def test_valid_write_with_stale_etag_is_412(self, client: Client) -> None:
        created = await create(client, ALICE)
        replaced = await client.put(created.headers["location"], json=pet_body("Max"), headers=auth())

        response = await client.put(
            created.headers["location"],
            json=pet_body("Tom", ownerId=ALICE),
            headers={**auth(ALICE), "If-Match": created.headers["etag"]},
        )

        assert_error(response, 412, 992)
        await assert_unchanged(client, replaced)

    async def test_admin_giving_away_with_stale_etag_is_412(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(
            created.headers["location"],
            json=pet_body("Max", ownerId=BOB),
            headers={**auth(ADMIN, admin=True), "If-Match": '"stale"'},
        )

        assert_error(response, 412, 992)
        await assert_unchanged(client, created)
