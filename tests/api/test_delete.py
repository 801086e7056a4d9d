"""DELETE of one record (contract sections 3 and 5): what every resource answers alike (the record as it was,
then gone; missing and malformed ids; If-Match), on each registered resource; who may delete a pet."""

from __future__ import annotations

from typing import Any

import httpx
from litestar.testing import AsyncTestClient

from petrecords.resources.declaration import Resource
from tests.support import (
    ADMIN,
    ALICE,
    BOB,
    FIELDS,
    MISSING_ID,
    Examples,
    admin,
    as_read,
    assert_error,
    auth,
    create,
    pet_body,
)

Client = AsyncTestClient[Any]


async def listed_ids(examples: Examples, resource: Resource) -> set[str]:
    response = await examples.client.get(resource.path, headers=admin())
    assert response.status_code == 200
    return {record["id"] for record in response.json()["items"]}


async def replaced(examples: Examples, resource: Resource, created: httpx.Response, **headers: str) -> httpx.Response:
    """The record replaced by its example again: a new revision, and so a new ETag."""
    response = await examples.client.put(
        created.headers["location"], json=examples.body(resource), headers={**admin(), **headers}
    )
    assert response.status_code == 200, response.text
    return response


class TestDelete:
    """The same for every resource: a record made from its example, deleted by an administrator."""

    async def test_returns_the_record_as_it_was(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        latest = await replaced(examples, resource, created)

        response = await examples.client.delete(created.headers["location"], headers=admin())

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert response.json() == as_read(resource, latest.json())

    async def test_deleted_record_is_gone(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        kept = await examples.create(resource, another=True)

        await examples.client.delete(created.headers["location"], headers=admin())

        assert_error(await examples.client.get(created.headers["location"], headers=admin()), 404, 995)
        assert await listed_ids(examples, resource) == {kept.json()["id"]}
        await examples.assert_unchanged(resource, kept)

    async def test_second_delete_is_404(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        first = await examples.client.delete(created.headers["location"], headers=admin())
        second = await examples.client.delete(created.headers["location"], headers=admin())

        assert first.status_code == 200
        assert_error(second, 404, 995)

    async def test_nonexistent_id_is_404(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.delete(f"{resource.path}/{MISSING_ID}", headers=admin())

        assert_error(response, 404, 995)

    async def test_malformed_id_is_404(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        record_id = created.json()["id"]

        for bad in ["abc", "123", record_id.replace("-", ""), record_id + "0", record_id[:-1] + "g", "%20" + record_id]:
            response = await examples.client.delete(f"{resource.path}/{bad}", headers=admin())

            assert response.status_code == 404, (bad, response.text)
            assert_error(response, 404, 995)
        await examples.assert_unchanged(resource, created)

    async def test_body_and_content_type_are_not_required(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.request("DELETE", created.headers["location"], headers=admin())

        assert response.status_code == 200


class TestDeleteIfMatch:
    """The same for every resource: a record made from its example, deleted by an administrator."""

    async def test_current_etag_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.delete(
            created.headers["location"], headers={**admin(), "If-Match": created.headers["etag"]}
        )

        assert response.status_code == 200
        assert_error(await examples.client.get(created.headers["location"], headers=admin()), 404, 995)

    async def test_star_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.delete(created.headers["location"], headers={**admin(), "If-Match": "*"})

        assert response.status_code == 200

    async def test_list_containing_the_current_etag_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.delete(
            created.headers["location"], headers={**admin(), "If-Match": f'"stale",{created.headers["etag"]}'}
        )

        assert response.status_code == 200

    async def test_stale_etag_is_412_and_the_record_still_exists(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        latest = await replaced(examples, resource, created)

        response = await examples.client.delete(
            created.headers["location"], headers={**admin(), "If-Match": created.headers["etag"]}
        )

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, latest)

    async def test_weak_etag_never_matches(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.delete(
            created.headers["location"], headers={**admin(), "If-Match": "W/" + created.headers["etag"]}
        )

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, created)

    async def test_malformed_if_match_is_400(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        for header in ["abc", '"unterminated', "W/abc"]:
            response = await examples.client.delete(
                created.headers["location"], headers={**admin(), "If-Match": header}
            )

            assert response.status_code == 400, (header, response.text)
            assert_error(response, 400, 994)
        await examples.assert_unchanged(resource, created)

    async def test_star_on_a_nonexistent_record_is_404(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.delete(f"{resource.path}/{MISSING_ID}", headers={**admin(), "If-Match": "*"})

        assert_error(response, 404, 995)

    async def test_replace_and_delete_with_the_same_etag_cannot_both_succeed(
        self, resource: Resource, examples: Examples
    ) -> None:
        created = await examples.create(resource)
        etag = created.headers["etag"]

        latest = await replaced(examples, resource, created, **{"If-Match": etag})
        deleted = await examples.client.delete(created.headers["location"], headers={**admin(), "If-Match": etag})

        assert_error(deleted, 412, 992)
        await examples.assert_unchanged(resource, latest)


async def assert_pet_unchanged(client: Client, written: httpx.Response) -> None:
    """The pet still exists exactly as that create or replace response showed it."""
    current = await client.get(f"/v1/pets/{written.json()['id']}", headers=auth(ADMIN, admin=True))
    assert current.status_code == 200
    assert current.json() == written.json()
    assert current.headers["etag"] == written.headers["etag"]


class TestDeletePet:
    async def test_returns_the_pet_with_the_contracts_members(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="cat")
        replaced = await client.put(created.headers["location"], json=pet_body("Max", "Dog"), headers=auth())

        response = await client.delete(created.headers["location"], headers=auth())

        assert response.status_code == 200
        assert set(response.json()) == FIELDS
        assert response.json() == replaced.json()

    async def test_someone_elses_record_is_404_identical_to_a_nonexistent_one(self, client: Client) -> None:
        created = await create(client, BOB)

        hidden = await client.delete(created.headers["location"], headers=auth(ALICE))
        missing = await client.delete(f"/v1/pets/{MISSING_ID}", headers=auth(ALICE))

        assert_error(hidden, 404, 995)
        assert hidden.content == missing.content
        await assert_pet_unchanged(client, created)

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
