"""DELETE /v1/pets/{id}: the answer, visibility and If-Match (contract sections 3 and 5)."""

from __future__ import annotations

from typing import Any

import httpx
from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, FIELDS, MISSING_ID, assert_error, auth, create, pet_body

Client = AsyncTestClient[Any]


async def assert_unchanged(client: Client, written: httpx.Response) -> None:
    """The record still exists exactly as that create or replace response showed it."""
    current = await client.get(f"/v1/pets/{written.json()['id']}", headers=auth(ADMIN, admin=True))
    assert current.status_code == 200
    assert current.json() == written.json()
    assert current.headers["etag"] == written.headers["etag"]


async def listed_ids(client: Client) -> set[str]:
    response = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
    assert response.status_code == 200
    return {pet["id"] for pet in response.json()["items"]}


class TestDeletePet:
    async def test_returns_the_record_as_it_was(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="cat")
        replaced = await client.put(created.headers["location"], json=pet_body("Max", "Dog"), headers=auth())

        response = await client.delete(created.headers["location"], headers=auth())

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == FIELDS
        assert response.json() == replaced.json()

    async def test_deleted_record_is_gone(self, client: Client) -> None:
        created = await create(client)
        kept = await create(client)

        await client.delete(created.headers["location"], headers=auth())

        assert_error(await client.get(created.headers["location"], headers=auth()), 404, 995)
        assert_error(await client.get(created.headers["location"], headers=auth(ADMIN, admin=True)), 404, 995)
        assert await listed_ids(client) == {kept.json()["id"]}
        await assert_unchanged(client, kept)

    async def test_second_delete_is_404(self, client: Client) -> None:
        created = await create(client)

        first = await client.delete(created.headers["location"], headers=auth())
        second = await client.delete(created.headers["location"], headers=auth())

        assert first.status_code == 200
        assert_error(second, 404, 995)

    async def test_nonexistent_id_is_404(self, client: Client) -> None:
        response = await client.delete(f"/v1/pets/{MISSING_ID}", headers=auth())

        assert_error(response, 404, 995)

    async def test_malformed_id_is_404(self, client: Client) -> None:
        created = await create(client)
        pet_id = created.json()["id"]

        for bad in ["abc", "123", pet_id.replace("-", ""), pet_id + "0", pet_id[:-1] + "g", "%20" + pet_id]:
            response = await client.delete(f"/v1/pets/{bad}", headers=auth())

            assert response.status_code == 404, (bad, response.text)
            assert_error(response, 404, 995)
        await assert_unchanged(client, created)

    async def test_someone_elses_record_is_404_identical_to_a_nonexistent_one(self, client: Client) -> None:
        created = await create(client, BOB)

        hidden = await client.delete(created.headers["location"], headers=auth(ALICE))
        missing = await client.delete(f"/v1/pets/{MISSING_ID}", headers=auth(ALICE))

        assert_error(hidden, 404, 995)
        assert hidden.content == missing.content
        await assert_unchanged(client, created)

    async def test_admin_may_delete_anyones_record(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.delete(created.headers["location"], headers=auth(ADMIN, admin=True))

        assert response.status_code == 200
        assert response.json() == created.json()
        assert_error(await client.get(created.headers["location"], headers=auth(BOB)), 404, 995)

    async def test_owner_may_delete_a_record_an_admin_created_for_them(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth(ADMIN, admin=True))

        response = await client.delete(created.headers["location"], headers=auth(BOB))

        assert response.status_code == 200
        assert response.json()["ownerId"] == BOB

    async def test_body_and_content_type_are_not_required(self, client: Client) -> None:
        created = await create(client)

        response = await client.request("DELETE", created.headers["location"], headers=auth())

        assert response.status_code == 200


class TestDeletePetIfMatch:
    async def test_current_etag_is_200(self, client: Client) -> None:
        created = await create(client)

        response = await client.delete(
            created.headers["location"], headers={**auth(), "If-Match": created.headers["etag"]}
        )

        assert response.status_code == 200
        assert_error(await client.get(created.headers["location"], headers=auth()), 404, 995)

    async def test_star_is_200(self, client: Client) -> None:
        created = await create(client)

        response = await client.delete(created.headers["location"], headers={**auth(), "If-Match": "*"})

        assert response.status_code == 200

    async def test_list_containing_the_current_etag_is_200(self, client: Client) -> None:
        created = await create(client)

        response = await client.delete(
            created.headers["location"], headers={**auth(), "If-Match": f'"stale",{created.headers["etag"]}'}
        )

        assert response.status_code == 200

    async def test_stale_etag_is_412_and_the_record_still_exists(self, client: Client) -> None:
        created = await create(client)
        replaced = await client.put(created.headers["location"], json=pet_body("Max"), headers=auth())

        response = await client.delete(
            created.headers["location"], headers={**auth(), "If-Match": created.headers["etag"]}
        )

        assert_error(response, 412, 992)
        await assert_unchanged(client, replaced)

    async def test_weak_etag_never_matches(self, client: Client) -> None:
        created = await create(client)

        response = await client.delete(
            created.headers["location"], headers={**auth(), "If-Match": "W/" + created.headers["etag"]}
        )

        assert_error(response, 412, 992)
        await assert_unchanged(client, created)

    async def test_malformed_if_match_is_400(self, client: Client) -> None:
        created = await create(client)

        for header in ["abc", '"unterminated', "W/abc"]:
            response = await client.delete(created.headers["location"], headers={**auth(), "If-Match": header})

            assert response.status_code == 400, (header, response.text)
            assert_error(response, 400, 994)
        await assert_unchanged(client, created)

    async def test_star_on_a_nonexistent_record_is_404(self, client: Client) -> None:
        response = await client.delete(f"/v1/pets/{MISSING_ID}", headers={**auth(), "If-Match": "*"})

        assert_error(response, 404, 995)

    async def test_replace_and_delete_with_the_same_etag_cannot_both_succeed(self, client: Client) -> None:
        created = await create(client)
        etag = created.headers["etag"]

        replaced = await client.put(
            created.headers["location"], json=pet_body("Max"), headers={**auth(), "If-Match": etag}
        )
        deleted = await client.delete(created.headers["location"], headers={**auth(), "If-Match": etag})

        assert replaced.status_code == 200
        assert_error(deleted, 412, 992)
        await assert_unchanged(client, replaced)
