"""GET of one record (contract sections 3 and 5): what every resource answers alike (the record and its ETag,
missing and malformed ids, If-None-Match), on each registered resource; a pet's visibility."""

from __future__ import annotations

from typing import Any

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


class TestGet:
    """The same for every resource: a record made from its example, read by an administrator."""

    async def test_returns_the_record_and_its_etag(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.get(created.headers["location"], headers=admin())

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert response.json() == as_read(resource, created.json())
        etag = response.headers["etag"]
        assert etag == created.headers["etag"]
        assert etag.startswith('"')
        assert etag.endswith('"')
        assert len(etag) > 2

    async def test_repeated_reads_give_the_same_etag(self, resource: Resource, examples: Examples) -> None:
        location = (await examples.create(resource)).headers["location"]

        first = await examples.client.get(location, headers=admin())
        second = await examples.client.get(location, headers=admin())

        assert first.headers["etag"] == second.headers["etag"]
        assert first.content == second.content

    async def test_records_have_different_etags(self, resource: Resource, examples: Examples) -> None:
        first = await examples.create(resource)
        second = await examples.create(resource, another=True)

        assert first.headers["etag"] != second.headers["etag"]

    async def test_nonexistent_id_is_404(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(f"{resource.path}/{MISSING_ID}", headers=admin())

        assert_error(response, 404, 995)

    async def test_malformed_ids_are_404(self, resource: Resource, examples: Examples) -> None:
        record_id = (await examples.create(resource)).json()["id"]
        malformed = [
            "abc",
            "123",
            "null",
            record_id.replace("-", ""),  # 32 hex digits without hyphens
            record_id + "0",
            record_id[:-1],
            "{" + record_id + "}",
            "urn:uuid:" + record_id,
            "%20" + record_id,
            record_id[:-1] + "g",
            "00000000-0000-0000-0000-00000000000",
        ]
        for bad in malformed:
            response = await examples.client.get(f"{resource.path}/{bad}", headers=admin())

            assert response.status_code == 404, (bad, response.text)
            assert_error(response, 404, 995)

        assert (await examples.client.get(f"{resource.path}/{record_id}", headers=admin())).status_code == 200

    async def test_upper_case_id_reads_the_same_record(self, resource: Resource, examples: Examples) -> None:
        """RFC 9562 UUIDs are case-insensitive on input: the service resolves an upper-case id (observed
        behaviour; the contract only requires that issued ids are lower-case), and answers in canonical form."""
        created = await examples.create(resource)

        response = await examples.client.get(f"{resource.path}/{created.json()['id'].upper()}", headers=admin())

        assert response.status_code == 200
        assert response.json() == as_read(resource, created.json())
        assert response.headers["etag"] == created.headers["etag"]


class TestGetPet:
    async def test_a_pet_has_the_contracts_members(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="cat")

        response = await client.get(f"/v1/pets/{created.json()['id']}", headers=auth())

        assert set(response.json()) == FIELDS
        assert response.json() == created.json()

    async def test_someone_elses_record_is_404_identical_to_a_nonexistent_one(self, client: Client) -> None:
        pet_id = (await create(client, BOB)).json()["id"]

        hidden = await client.get(f"/v1/pets/{pet_id}", headers=auth(ALICE))
        missing = await client.get(f"/v1/pets/{MISSING_ID}", headers=auth(ALICE))

        assert_error(hidden, 404, 995)
        assert hidden.content == missing.content
        assert "etag" not in hidden.headers

    async def test_owner_sees_a_record_an_admin_created_for_them(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth(ADMIN, admin=True))

        as_owner = await client.get(created.headers["location"], headers=auth(BOB))
        as_creator_without_admin = await client.get(created.headers["location"], headers=auth(ADMIN))

        assert as_owner.status_code == 200
        assert_error(as_creator_without_admin, 404, 995)

    async def test_admin_sees_everyones_records(self, client: Client) -> None:
        alices = await create(client, ALICE)
        bobs = await create(client, BOB)

        for created in (alices, bobs):
            response = await client.get(created.headers["location"], headers=auth(ADMIN, admin=True))

            assert response.status_code == 200
            assert response.json() == created.json()
            assert response.headers["etag"] == created.headers["etag"]

    async def test_caller_identity_is_compared_in_lower_case(self, client: Client) -> None:
        created = await create(client, "Alice@Example.com")

        response = await client.get(created.headers["location"], headers=auth("ALICE@EXAMPLE.COM"))

        assert response.status_code == 200


class TestGetIfNoneMatch:
    """The same for every resource: a record made from its example, read by an administrator."""

    async def test_matching_etag_is_304_without_a_body(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        etag = created.headers["etag"]

        response = await examples.client.get(created.headers["location"], headers={**admin(), "If-None-Match": etag})

        assert response.status_code == 304
        assert response.content == b""
        assert response.headers["etag"] == etag

    async def test_non_matching_etag_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.get(
            created.headers["location"], headers={**admin(), "If-None-Match": '"not-the-current-etag"'}
        )

        assert response.status_code == 200
        assert response.json() == as_read(resource, created.json())
        assert response.headers["etag"] == created.headers["etag"]

    async def test_star_is_304(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await examples.client.get(created.headers["location"], headers={**admin(), "If-None-Match": "*"})

        assert response.status_code == 304
        assert response.content == b""

    async def test_list_containing_the_etag_is_304(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        header = f'"other", {created.headers["etag"]}, "another"'

        response = await examples.client.get(created.headers["location"], headers={**admin(), "If-None-Match": header})

        assert response.status_code == 304

    async def test_weak_form_of_the_etag_is_304(self, resource: Resource, examples: Examples) -> None:
        """If-None-Match uses the weak comparison (RFC 9110 13.1.2)."""
        created = await examples.create(resource)

        response = await examples.client.get(
            created.headers["location"], headers={**admin(), "If-None-Match": "W/" + created.headers["etag"]}
        )

        assert response.status_code == 304

    async def test_etag_of_another_record_is_200(self, resource: Resource, examples: Examples) -> None:
        first = await examples.create(resource)
        second = await examples.create(resource, another=True)

        response = await examples.client.get(
            first.headers["location"], headers={**admin(), "If-None-Match": second.headers["etag"]}
        )

        assert response.status_code == 200

    async def test_etag_before_a_replace_is_200_with_the_new_etag(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        replaced = await examples.client.put(created.headers["location"], json=examples.body(resource), headers=admin())
        assert replaced.status_code == 200, replaced.text

        response = await examples.client.get(
            created.headers["location"], headers={**admin(), "If-None-Match": created.headers["etag"]}
        )

        assert response.status_code == 200
        assert response.json() == replaced.json()
        assert response.headers["etag"] == replaced.headers["etag"]
        assert response.headers["etag"] != created.headers["etag"]

    async def test_star_on_a_nonexistent_record_is_404(self, resource: Resource, examples: Examples) -> None:
        response = await examples.client.get(f"{resource.path}/{MISSING_ID}", headers={**admin(), "If-None-Match": "*"})

        assert_error(response, 404, 995)


class TestGetPetIfNoneMatch:
    async def test_star_on_someone_elses_record_is_404(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.get(created.headers["location"], headers={**auth(ALICE), "If-None-Match": "*"})

        assert_error(response, 404, 995)
