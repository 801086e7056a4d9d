"""PUT of one record (contract sections 3 and 5): If-Match, the same for every resource, on each registered
resource; a pet's replacement, ownership and `id` member."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from litestar.testing import AsyncTestClient

from petrecords.resources.declaration import Resource
from tests.support import ADMIN, ALICE, BOB, FIELDS, MISSING_ID, Examples, admin, assert_error, auth, create, pet_body

Client = AsyncTestClient[Any]
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
JSON = {"Content-Type": "application/json"}


async def read_as_admin(client: Client, location: str) -> httpx.Response:
    return await client.get(location, headers=auth(ADMIN, admin=True))


async def assert_unchanged(client: Client, written: httpx.Response) -> None:
    """The record is still exactly as that create or replace response showed it."""
    current = await read_as_admin(client, f"/v1/pets/{written.json()['id']}")
    assert current.status_code == 200
    assert current.json() == written.json()
    assert current.headers["etag"] == written.headers["etag"]


async def count_all(client: Client) -> int:
    response = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
    assert response.status_code == 200
    total: int = response.json()["totalCount"]
    return total


class TestReplacePet:
    async def test_replaces_name_and_type(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="Dog")

        response = await client.put(created.headers["location"], json=pet_body("  Tom ", "cAT"), headers=auth())

        assert response.status_code == 200, response.text
        pet = response.json()
        assert set(pet) == FIELDS
        assert pet["id"] == created.json()["id"]
        assert pet["name"] == "Tom"
        assert pet["petType"] == "Cat"
        fetched = await client.get(created.headers["location"], headers=auth())
        assert fetched.json() == pet
        assert fetched.headers["etag"] == response.headers["etag"]

    async def test_write_stamps_modified_and_keeps_created(self, client: Client) -> None:
        created = (await create(client, ALICE)).json()

        response = await client.put(
            f"/v1/pets/{created['id']}", json=pet_body("Max"), headers=auth("Alice@Example.com")
        )

        pet = response.json()
        assert pet["createdAt"] == created["createdAt"]
        assert pet["createdBy"] == created["createdBy"] == ALICE
        assert pet["modifiedBy"] == ALICE
        assert TIMESTAMP.match(pet["modifiedAt"])
        assert pet["modifiedAt"] >= pet["createdAt"]

    async def test_admin_write_is_stamped_with_the_admin_and_keeps_the_owner(self, client: Client) -> None:
        created = (await create(client, ALICE)).json()

        response = await client.put(f"/v1/pets/{created['id']}", json=pet_body("Max"), headers=auth(ADMIN, admin=True))

        assert response.status_code == 200
        pet = response.json()
        assert pet["ownerId"] == ALICE
        assert pet["createdBy"] == ALICE
        assert pet["modifiedBy"] == ADMIN
        assert pet["createdAt"] == created["createdAt"]
        as_owner = await client.get(f"/v1/pets/{created['id']}", headers=auth(ALICE))
        assert as_owner.json() == pet

    async def test_every_replace_is_a_write_even_with_identical_values(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="Dog")
        etags = [created.headers["etag"]]
        modified = [created.json()["modifiedAt"]]

        for _ in range(3):
            response = await client.put(created.headers["location"], json=pet_body("Rex", "Dog"), headers=auth())
            assert response.status_code == 200
            assert response.json()["name"] == "Rex"
            etags.append(response.headers["etag"])
            modified.append(response.json()["modifiedAt"])

        assert len(set(etags)) == len(etags)
        assert modified == sorted(modified)
        fetched = await client.get(created.headers["location"], headers=auth())
        assert fetched.headers["etag"] == etags[-1]

    async def test_modified_by_follows_the_last_writer(self, client: Client) -> None:
        created = await create(client, ALICE)

        await client.put(created.headers["location"], json=pet_body("Max"), headers=auth(ADMIN, admin=True))
        response = await client.put(created.headers["location"], json=pet_body("Rex"), headers=auth(ALICE))

        assert response.json()["modifiedBy"] == ALICE
        assert response.json()["createdBy"] == ALICE

    async def test_sending_back_the_read_record_is_accepted(self, client: Client) -> None:
        created = await create(client)
        document = {**created.json(), "name": "Max"}

        response = await client.put(created.headers["location"], json=document, headers=auth())

        assert response.status_code == 200, response.text
        assert response.json()["name"] == "Max"

    async def test_read_only_fields_with_other_values_are_ignored(self, client: Client) -> None:
        created = await create(client)
        body = pet_body(
            "Max",
            createdAt="1970-01-01T00:00:00.000Z",
            createdBy="mallory@evil.example",
            modifiedAt="garbage",
            modifiedBy=12345,
        )

        response = await client.put(created.headers["location"], json=body, headers=auth())

        assert response.status_code == 200, response.text
        pet = response.json()
        assert pet["createdAt"] == created.json()["createdAt"]
        assert pet["createdBy"] == ALICE
        assert pet["modifiedBy"] == ALICE
        assert TIMESTAMP.match(pet["modifiedAt"])

    async def test_nonexistent_id_is_404_and_creates_nothing(self, client: Client) -> None:
        response = await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body(), headers=auth())

        assert_error(response, 404, 995)
        fetched = await read_as_admin(client, f"/v1/pets/{MISSING_ID}")
        assert fetched.status_code == 404
        assert await count_all(client) == 0

    async def test_admin_cannot_create_with_put_either(self, client: Client) -> None:
        response = await client.put(
            f"/v1/pets/{MISSING_ID}", json=pet_body(id=MISSING_ID, ownerId=BOB), headers=auth(ADMIN, admin=True)
        )

        assert_error(response, 404, 995)
        assert await count_all(client) == 0

    async def test_deleted_record_is_not_recreated(self, client: Client) -> None:
        created = await create(client)
        await client.delete(created.headers["location"], headers=auth())

        response = await client.put(created.headers["location"], json=pet_body(), headers=auth())

        assert_error(response, 404, 995)
        assert await count_all(client) == 0

    async def test_malformed_id_is_404(self, client: Client) -> None:
        for bad in ["abc", "123", MISSING_ID.replace("-", ""), MISSING_ID + "0", MISSING_ID[:-1] + "g"]:
            response = await client.put(f"/v1/pets/{bad}", json=pet_body(), headers=auth())

            assert response.status_code == 404, (bad, response.text)
            assert_error(response, 404, 995)
        assert await count_all(client) == 0

    async def test_someone_elses_record_is_404_identical_to_a_nonexistent_one(self, client: Client) -> None:
        created = await create(client, BOB)

        hidden = await client.put(created.headers["location"], json=pet_body("Stolen"), headers=auth(ALICE))
        missing = await client.put(f"/v1/pets/{MISSING_ID}", json=pet_body("Stolen"), headers=auth(ALICE))

        assert_error(hidden, 404, 995)
        assert hidden.content == missing.content
        await assert_unchanged(client, created)

    async def test_admin_may_replace_anyones_record(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(
            created.headers["location"], json=pet_body("Max", "Bird"), headers=auth(ADMIN, admin=True)
        )

        assert response.status_code == 200
        assert response.json()["name"] == "Max"
        assert response.json()["petType"] == "Bird"
        assert response.json()["ownerId"] == BOB

    async def test_body_is_validated_like_create(self, client: Client) -> None:
        created = await create(client)
        invalid = [
            ({"petType": "Dog"}, {"name"}),
            ({"name": "Rex"}, {"petType"}),
            (pet_body("a" * 101), {"name"}),
            (pet_body("Re\x00x"), {"name"}),
            (pet_body(pet_type="Dragon"), {"petType"}),
            (pet_body(ownerId="not-an-email"), {"ownerId"}),
            (pet_body(weight="12 kg"), {"weight"}),
        ]
        for document, fields in invalid:
            response = await client.put(created.headers["location"], json=document, headers=auth())

            body = assert_error(response, 400, 994)
            assert set(body["errors"]) == fields, (document, body)
            for field in fields:
                assert field in body["message"]
        await assert_unchanged(client, created)

    async def test_rejected_type_lists_the_allowed_values(self, client: Client) -> None:
        created = await create(client)

        response = await client.put(created.headers["location"], json=pet_body(pet_type="Dragon"), headers=auth())

        body = assert_error(response, 400, 994)
        for allowed in ("Dog", "Cat", "Capybara", "Other"):
            assert allowed in body["message"]

    async def test_body_that_is_not_an_object_or_not_json_is_400(self, client: Client) -> None:
        created = await create(client)

        for raw in [b"[]", b'"Rex"', b"null", b"{", b""]:
            response = await client.put(created.headers["location"], content=raw, headers={**auth(), **JSON})

            assert response.status_code == 400, (raw, response.text)
            assert_error(response, 400, 994)
        await assert_unchanged(client, created)

    async def test_missing_content_type_is_415(self, client: Client) -> None:
        created = await create(client)

        response = await client.put(created.headers["location"], content=b'{"name":"Max","petType":"Dog"}')

        assert response.status_code in (401, 415)  # no token either: 401 wins (see test_check_order)
        response = await client.put(
            created.headers["location"], content=b'{"name":"Max","petType":"Dog"}', headers=auth()
        )
        assert_error(response, 415, 988)
        await assert_unchanged(client, created)

    async def test_oversized_body_is_413(self, client: Client) -> None:
        created = await create(client)
        body = b'{"name":"Max","petType":"Dog"' + b" " * (16 * 1024) + b"}"

        response = await client.put(created.headers["location"], content=body, headers={**auth(), **JSON})

        assert_error(response, 413, 989)
        await assert_unchanged(client, created)


class TestReplacePetOwner:
    async def test_omitted_owner_keeps_the_current_owner(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth(ADMIN, admin=True))

        response = await client.put(created.headers["location"], json=pet_body("Max"), headers=auth(BOB))

        assert response.status_code == 200
        assert response.json()["ownerId"] == BOB
        assert response.json()["createdBy"] == ADMIN
        assert response.json()["modifiedBy"] == BOB

    async def test_omitted_owner_keeps_the_owner_when_an_admin_replaces(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(created.headers["location"], json=pet_body("Max"), headers=auth(ADMIN, admin=True))

        assert response.json()["ownerId"] == BOB
        fetched = await client.get(created.headers["location"], headers=auth(BOB))
        assert fetched.status_code == 200

    async def test_null_owner_keeps_the_current_owner(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.put(
            created.headers["location"], json=pet_body("Max", ownerId=None), headers=auth(ADMIN, admin=True)
        )

        assert response.status_code == 200, response.text
        assert response.json()["ownerId"] == BOB

    async def test_owner_naming_the_caller_is_allowed(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(
            created.headers["location"], json=pet_body("Max", ownerId="ALICE@example.com"), headers=auth(ALICE)
        )

        assert response.status_code == 200, response.text
        assert response.json()["ownerId"] == ALICE

    async def test_non_admin_giving_the_record_away_is_403(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(created.headers["location"], json=pet_body("Max", ownerId=BOB), headers=auth(ALICE))

        assert_error(response, 403, 997)
        await assert_unchanged(client, created)

    async def test_admin_may_move_a_record_to_another_owner(self, client: Client) -> None:
        created = await create(client, ALICE)

        response = await client.put(
            created.headers["location"],
            json=pet_body("Max", ownerId="Bob@Example.com"),
            headers=auth(ADMIN, admin=True),
        )

        assert response.status_code == 200
        assert response.json()["ownerId"] == BOB
        assert (await client.get(created.headers["location"], headers=auth(BOB))).status_code == 200
        assert_error(await client.get(created.headers["location"], headers=auth(ALICE)), 404, 995)


class TestReplacePetId:
    async def test_id_equal_to_the_path_is_accepted(self, client: Client) -> None:
        created = await create(client)
        pet_id = created.json()["id"]

        response = await client.put(f"/v1/pets/{pet_id}", json=pet_body("Max", id=pet_id), headers=auth())

        assert response.status_code == 200, response.text
        assert response.json()["id"] == pet_id

    async def test_id_different_from_the_path_is_400(self, client: Client) -> None:
        created = await create(client)
        other = await create(client)

        for wrong in [other.json()["id"], MISSING_ID, "abc", ""]:
            response = await client.put(created.headers["location"], json=pet_body("Max", id=wrong), headers=auth())

            body = assert_error(response, 400, 994)
            assert "id" in body.get("errors", {}), (wrong, body)
            assert "id" in body["message"]
        await assert_unchanged(client, created)
        await assert_unchanged(client, other)

    async def test_id_that_is_not_a_string_is_400(self, client: Client) -> None:
        created = await create(client)

        response = await client.put(created.headers["location"], json=pet_body("Max", id=12345), headers=auth())

        assert_error(response, 400, 994)
        await assert_unchanged(client, created)


class TestReplaceIfMatch:
    """The same for every resource: a record made from its example, replaced by its example again by an
    administrator (every replace is a write: a new revision, a new ETag)."""

    async def put(self, examples: Examples, resource: Resource, location: str, if_match: str) -> httpx.Response:
        return await examples.client.put(
            location, json=examples.body(resource), headers={**admin(), "If-Match": if_match}
        )

    async def test_current_etag_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await self.put(examples, resource, created.headers["location"], created.headers["etag"])

        assert response.status_code == 200, response.text
        assert response.headers["etag"] != created.headers["etag"]
        await examples.assert_unchanged(resource, response)

    async def test_stale_etag_is_412_and_nothing_is_written(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        replaced = await self.put(examples, resource, created.headers["location"], "*")

        response = await self.put(examples, resource, created.headers["location"], created.headers["etag"])

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, replaced)

    async def test_etag_of_another_record_is_412(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        other = await examples.create(resource, another=True)

        response = await self.put(examples, resource, created.headers["location"], other.headers["etag"])

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, created)

    async def test_star_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await self.put(examples, resource, created.headers["location"], "*")

        assert response.status_code == 200, response.text
        assert response.headers["etag"] != created.headers["etag"]

    async def test_weak_etag_never_matches(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        response = await self.put(examples, resource, created.headers["location"], "W/" + created.headers["etag"])

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, created)

    async def test_list_containing_the_current_etag_is_200(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        header = f'"stale", {created.headers["etag"]} , W/"weak"'

        response = await self.put(examples, resource, created.headers["location"], header)

        assert response.status_code == 200, response.text

    async def test_list_without_the_current_etag_is_412(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)
        header = '"stale", "older", W/' + created.headers["etag"]

        response = await self.put(examples, resource, created.headers["location"], header)

        assert_error(response, 412, 992)
        await examples.assert_unchanged(resource, created)

    async def test_malformed_if_match_is_400(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        for header in ["abc", '"unterminated', "W/abc", '"a" "b"', '"a",,"b"', "**"]:
            response = await self.put(examples, resource, created.headers["location"], header)

            assert response.status_code == 400, (header, response.text)
            assert_error(response, 400, 994)
        await examples.assert_unchanged(resource, created)

    async def test_concurrent_writers_with_the_same_etag_cannot_both_succeed(
        self, resource: Resource, examples: Examples
    ) -> None:
        created = await examples.create(resource)
        etag = created.headers["etag"]

        for _ in range(5):
            responses = await asyncio.gather(
                *(self.put(examples, resource, created.headers["location"], etag) for _ in range(4))
            )

            statuses = sorted(response.status_code for response in responses)
            assert statuses == [200, 412, 412, 412], [response.text for response in responses]
            winner = next(response for response in responses if response.status_code == 200)
            await examples.assert_unchanged(resource, winner)
            etag = winner.headers["etag"]

    async def test_if_match_with_etag_from_a_replace_response_is_200(
        self, resource: Resource, examples: Examples
    ) -> None:
        created = await examples.create(resource)
        replaced = await self.put(examples, resource, created.headers["location"], "*")

        response = await self.put(examples, resource, created.headers["location"], replaced.headers["etag"])

        assert response.status_code == 200, response.text


class TestReplacePetIfMatch:
    async def test_the_first_of_two_writers_with_the_same_etag_wins(self, client: Client) -> None:
        """The owner's write and an administrator's, both from the owner's read."""
        created = await create(client)
        read = await client.get(created.headers["location"], headers=auth(ALICE))
        etag = read.headers["etag"]

        first = await client.put(
            created.headers["location"], json=pet_body("First"), headers={**auth(ALICE), "If-Match": etag}
        )
        second = await client.put(
            created.headers["location"],
            json=pet_body("Second"),
            headers={**auth(ADMIN, admin=True), "If-Match": etag},
        )

        assert first.status_code == 200
        assert_error(second, 412, 992)
        await assert_unchanged(client, first)
