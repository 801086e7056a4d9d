"""POST /v1/pets with an Idempotency-Key (contract section 3, "Concurrency and retries")."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import Settings
from tests.support import ADMIN, ALICE, BOB, auth, overlapping_client, pet_body, run_sql

Client = AsyncTestClient[Any]
KEY = "order-7f3a-0001"


def _keyed(key: str | bytes = KEY, user: str = ALICE) -> dict[str, Any]:
    return {**auth(user), "Idempotency-Key": key}


async def _count_all(client: Client) -> int:
    listed = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
    count: int = listed.json()["totalCount"]
    return count


class TestReplay:
    async def test_same_key_and_body_replays_the_original_response(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert first.status_code == 201
        assert "idempotent-replayed" not in first.headers
        assert second.status_code == 201
        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content
        assert second.headers["location"] == first.headers["location"]
        assert second.headers["etag"] == first.headers["etag"]
        assert await _count_all(client) == 1

    async def test_equal_json_with_other_key_order_and_spacing_replays(self, client: Client) -> None:
        first = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=_keyed())

        second = await client.post(
            "/v1/pets",
            content=b'{\n  "petType" :   "Dog",\t"name":"Rex"  }\n',
            headers={**_keyed(), "Content-Type": "application/json"},
        )

        assert second.status_code == 201
        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content
        assert await _count_all(client) == 1

    async def test_equal_json_with_escaped_characters_replays(self, client: Client) -> None:
        first = await client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=_keyed())

        second = await client.post(
            "/v1/pets",
            content=b'{"name": "\\u0052ex", "petType": "D\\u006fg"}',
            headers={**_keyed(), "Content-Type": "application/json; charset=utf-8"},
        )

        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content

    async def test_replay_after_the_record_was_deleted_creates_nothing(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed())
        await client.delete(first.headers["location"], headers=auth())

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert second.status_code == 201
        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content
        assert await _count_all(client) == 0

    async def test_replay_after_the_record_changed_returns_the_original_body(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed())
        await client.put(first.headers["location"], json=pet_body("Max"), headers=auth())

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert second.status_code == 201
        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content
        assert await _count_all(client) == 1

    async def test_different_keys_create_different_records(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed("key-one"))

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed("key-two"))

        assert second.status_code == 201
        assert "idempotent-replayed" not in second.headers
        assert second.json()["id"] != first.json()["id"]
        assert await _count_all(client) == 2

    async def test_without_a_key_every_post_creates(self, client: Client) -> None:
        await client.post("/v1/pets", json=pet_body(), headers=auth())
        second = await client.post("/v1/pets", json=pet_body(), headers=auth())

        assert "idempotent-replayed" not in second.headers
        assert await _count_all(client) == 2


class TestKeyReuse:
    @pytest.mark.parametrize(
        "other_body",
        [
            pet_body("Max"),
            pet_body(pet_type="Cat"),
            pet_body(ownerId=ALICE),
            pet_body(" Rex"),
            pet_body(pet_type="dog"),
        ],
    )
    async def test_same_key_with_a_different_body_is_422(self, client: Client, other_body: dict[str, Any]) -> None:
        await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        response = await client.post("/v1/pets", json=other_body, headers=_keyed())

        assert response.status_code == 422
        assert response.json() == {"code": 990, "message": response.json()["message"]}
        assert "idempotent-replayed" not in response.headers
        assert await _count_all(client) == 1

    async def test_the_key_is_scoped_to_the_caller(self, client: Client) -> None:
        alices = await client.post("/v1/pets", json=pet_body(), headers=_keyed(user=ALICE))

        bobs = await client.post("/v1/pets", json=pet_body(), headers=_keyed(user=BOB))

        assert bobs.status_code == 201
        assert "idempotent-replayed" not in bobs.headers
        assert bobs.json()["id"] != alices.json()["id"]
        assert bobs.json()["ownerId"] == BOB
        assert await _count_all(client) == 2

    async def test_another_caller_with_a_different_body_is_not_422(self, client: Client) -> None:
        await client.post("/v1/pets", json=pet_body(), headers=_keyed(user=ALICE))

        bobs = await client.post("/v1/pets", json=pet_body("Max", "Cat"), headers=_keyed(user=BOB))

        assert bobs.status_code == 201
        assert bobs.json()["name"] == "Max"

    async def test_the_key_is_scoped_to_the_case_folded_caller(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed(user="Alice@Example.com"))

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed(user=ALICE))

        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content


class TestFailedRequestsDoNotConsumeTheKey:
    @pytest.mark.parametrize(
        "bad_body",
        [
            pet_body(""),
            pet_body(pet_type="Dragon"),
            pet_body(weight="12 kg"),
            pet_body(ownerId=BOB),  # 403: Alice is not an admin
        ],
    )
    async def test_retry_after_a_failure_creates(self, client: Client, bad_body: dict[str, Any]) -> None:
        failed = await client.post("/v1/pets", json=bad_body, headers=_keyed())

        retried = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert failed.status_code in {400, 403}
        assert retried.status_code == 201
        assert "idempotent-replayed" not in retried.headers
        assert await _count_all(client) == 1

    async def test_retry_after_malformed_json_creates(self, client: Client) -> None:
        failed = await client.post(
            "/v1/pets", content=b'{"name": "Rex",', headers={**_keyed(), "Content-Type": "application/json"}
        )

        retried = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert failed.status_code == 400
        assert retried.status_code == 201
        assert "idempotent-replayed" not in retried.headers

    async def test_retry_after_wrong_media_type_creates(self, client: Client) -> None:
        failed = await client.post(
            "/v1/pets", content=json.dumps(pet_body()).encode(), headers={**_keyed(), "Content-Type": "text/plain"}
        )

        retried = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert failed.status_code == 415
        assert retried.status_code == 201
        assert "idempotent-replayed" not in retried.headers

    async def test_the_same_failure_repeated_is_not_replayed(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(""), headers=_keyed())

        second = await client.post("/v1/pets", json=pet_body(""), headers=_keyed())

        assert first.status_code == second.status_code == 400
        assert "idempotent-replayed" not in second.headers

    async def test_the_success_after_a_failure_is_then_replayed(self, client: Client) -> None:
        await client.post("/v1/pets", json=pet_body(""), headers=_keyed())
        created = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        replayed = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert replayed.headers["idempotent-replayed"] == "true"
        assert replayed.content == created.content
        assert await _count_all(client) == 1


class TestKeyFormat:
    @pytest.mark.parametrize(
        "key",
        [
            pytest.param(b"", id="empty"),
            pytest.param(b"k" * 256, id="256-chars"),
            pytest.param("ключ".encode(), id="non-ascii"),
            pytest.param("caf\u00e9".encode("latin-1"), id="latin-1"),
            pytest.param(b"key\x01", id="control-char"),
            pytest.param(b"key\x7f", id="del"),
            pytest.param(b"tab\there", id="tab"),
        ],
    )
    async def test_invalid_key_is_400(self, client: Client, key: bytes) -> None:
        response = await client.post("/v1/pets", json=pet_body(), headers=_keyed(key))

        assert response.status_code == 400
        body = response.json()
        assert body["code"] == 994
        assert set(body) <= {"code", "message", "errors"}
        assert "Idempotency-Key" in body["message"]
        assert await _count_all(client) == 0

    @pytest.mark.parametrize(
        "key",
        [
            pytest.param("k", id="one-char"),
            pytest.param("k" * 255, id="255-chars"),
            pytest.param("".join(chr(c) for c in range(0x21, 0x7F)), id="every-printable"),
            pytest.param("a key with spaces", id="inner-spaces"),
        ],
    )
    async def test_valid_key_is_accepted_and_replayed(self, client: Client, key: str) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed(key))

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed(key))

        assert first.status_code == 201
        assert second.headers["idempotent-replayed"] == "true"
        assert second.content == first.content

    async def test_invalid_key_is_400_before_403(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=_keyed(b""))

        assert response.status_code == 400
        assert response.json()["code"] == 994

    async def test_keys_differing_only_in_case_are_different(self, client: Client) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed("Key-A"))

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed("key-a"))

        assert second.status_code == 201
        assert "idempotent-replayed" not in second.headers
        assert second.json()["id"] != first.json()["id"]


class TestConcurrentDuplicates:
    async def test_concurrent_duplicates_create_one_record(self, client: Client, settings: Settings) -> None:
        async with overlapping_client(create_app(settings)) as concurrent:
            responses = await asyncio.gather(
                *(concurrent.post("/v1/pets", json=pet_body(), headers=_keyed("concurrent")) for _ in range(10))
            )

        statuses = [response.status_code for response in responses]
        assert set(statuses) <= {201, 409}, statuses
        originals = [r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers]
        assert len(originals) == 1
        for response in responses:
            if response.status_code == 201:
                assert response.content == originals[0].content
            else:
                assert response.json() == {"code": 991, "message": response.json()["message"]}
        assert await _count_all(client) == 1

    async def test_after_concurrent_duplicates_a_retry_replays(self, client: Client, settings: Settings) -> None:
        async with overlapping_client(create_app(settings)) as concurrent:
            responses = await asyncio.gather(
                *(concurrent.post("/v1/pets", json=pet_body(), headers=_keyed("concurrent")) for _ in range(10))
            )
        original = next(r for r in responses if r.status_code == 201 and "idempotent-replayed" not in r.headers)

        retried = await client.post("/v1/pets", json=pet_body(), headers=_keyed("concurrent"))

        assert retried.status_code == 201
        assert retried.headers["idempotent-replayed"] == "true"
        assert retried.content == original.content


class TestExpiredKeys:
    async def test_expired_key_creates_a_new_record(self, client: Client, database_url: str) -> None:
        first = await client.post("/v1/pets", json=pet_body(), headers=_keyed())
        await run_sql(database_url, "UPDATE idempotency_keys SET expires_at = 1")

        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert second.status_code == 201
        assert "idempotent-replayed" not in second.headers
        assert second.json()["id"] != first.json()["id"]
        assert await _count_all(client) == 2

    async def test_expired_key_may_be_used_with_another_body(self, client: Client, database_url: str) -> None:
        await client.post("/v1/pets", json=pet_body(), headers=_keyed())
        await run_sql(database_url, "UPDATE idempotency_keys SET expires_at = 1")

        second = await client.post("/v1/pets", json=pet_body("Max", "Cat"), headers=_keyed())

        assert second.status_code == 201
        assert second.json()["name"] == "Max"

    async def test_a_reused_expired_key_then_replays_the_new_record(self, client: Client, database_url: str) -> None:
        await client.post("/v1/pets", json=pet_body(), headers=_keyed())
        await run_sql(database_url, "UPDATE idempotency_keys SET expires_at = 1")
        second = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        third = await client.post("/v1/pets", json=pet_body(), headers=_keyed())

        assert third.headers["idempotent-replayed"] == "true"
        assert third.content == second.content
        assert await _count_all(client) == 2
