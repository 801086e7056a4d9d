"""GET /v1/pets/{id}: visibility, malformed ids and If-None-Match (contract sections 3 and 5)."""

from __future__ import annotations

from typing import Any

from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, FIELDS, MISSING_ID, assert_error, auth, create, pet_body

Client = AsyncTestClient[Any]


class TestGetPet:
    async def test_returns_the_record_and_its_etag(self, client: Client) -> None:
        created = await create(client, name="Rex", pet_type="cat")

        response = await client.get(f"/v1/pets/{created.json()['id']}", headers=auth())

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == FIELDS
        assert response.json() == created.json()
        etag = response.headers["etag"]
        assert etag == created.headers["etag"]
        assert etag.startswith('"')
        assert etag.endswith('"')
        assert len(etag) > 2

    async def test_repeated_reads_give_the_same_etag(self, client: Client) -> None:
        pet_id = (await create(client)).json()["id"]

        first = await client.get(f"/v1/pets/{pet_id}", headers=auth())
        second = await client.get(f"/v1/pets/{pet_id}", headers=auth())

        assert first.headers["etag"] == second.headers["etag"]
        assert first.content == second.content

    async def test_records_have_different_etags(self, client: Client) -> None:
        first = await create(client, name="Same")
        second = await create(client, name="Same")

        assert first.headers["etag"] != second.headers["etag"]

    async def test_nonexistent_id_is_404(self, client: Client) -> None:
        response = await client.get(f"/v1/pets/{MISSING_ID}", headers=auth())

        assert_error(response, 404, 995)

    async def test_malformed_ids_are_404(self, client: Client) -> None:
        pet_id = (await create(client)).json()["id"]
        malformed = [
            "abc",
            "123",
            "null",
            pet_id.replace("-", ""),  # 32 hex digits without hyphens
            pet_id + "0",
            pet_id[:-1],
            "{" + pet_id + "}",
            "urn:uuid:" + pet_id,
            "%20" + pet_id,
            pet_id[:-1] + "g",
            "00000000-0000-0000-0000-00000000000",
        ]
        for bad in malformed:
            response = await client.get(f"/v1/pets/{bad}", headers=auth())

            assert response.status_code == 404, (bad, response.text)
            assert_error(response, 404, 995)

    async def test_upper_case_id_reads_the_same_record(self, client: Client) -> None:
        """RFC 9562 UUIDs are case-insensitive on input: the service resolves an upper-case id (observed
        behaviour; the contract only requires that issued ids are lower-case), and answers in canonical form."""
        created = await create(client)
        pet_id = created.json()["id"]

        response = await client.get(f"/v1/pets/{pet_id.upper()}", headers=auth())

        assert response.status_code == 200
        assert response.json()["id"] == pet_id
        assert response.headers["etag"] == created.headers["etag"]

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


class TestGetPetIfNoneMatch:
    async def test_matching_etag_is_304_without_a_body(self, client: Client) -> None:
        created = await create(client)
        etag = created.headers["etag"]

        response = await client.get(created.headers["location"], headers={**auth(), "If-None-Match": etag})

        assert response.status_code == 304
        assert response.content == b""
        assert response.headers["etag"] == etag

    async def test_non_matching_etag_is_200(self, client: Client) -> None:
        created = await create(client)

        response = await client.get(
            created.headers["location"], headers={**auth(), "If-None-Match": '"not-the-current-etag"'}
        )

        assert response.status_code == 200
        assert response.json() == created.json()
        assert response.headers["etag"] == created.headers["etag"]

    async def test_star_is_304(self, client: Client) -> None:
        created = await create(client)

        response = await client.get(created.headers["location"], headers={**auth(), "If-None-Match": "*"})

        assert response.status_code == 304
        assert response.content == b""

    async def test_list_containing_the_etag_is_304(self, client: Client) -> None:
        created = await create(client)
        header = f'"other", {created.headers["etag"]}, "another"'

        response = await client.get(created.headers["location"], headers={**auth(), "If-None-Match": header})

        assert response.status_code == 304

    async def test_weak_form_of_the_etag_is_304(self, client: Client) -> None:
        """If-None-Match uses the weak comparison (RFC 9110 13.1.2)."""
        created = await create(client)

        response = await client.get(
            created.headers["location"], headers={**auth(), "If-None-Match": "W/" + created.headers["etag"]}
        )

        assert response.status_code == 304

    async def test_etag_of_another_record_is_200(self, client: Client) -> None:
        first = await create(client)
        second = await create(client)

        response = await client.get(
            first.headers["location"], headers={**auth(), "If-None-Match": second.headers["etag"]}
        )

        assert response.status_code == 200

    async def test_etag_before_a_replace_is_200_with_the_new_etag(self, client: Client) -> None:
        created = await create(client)
        replaced = await client.put(created.headers["location"], json=pet_body("Max"), headers=auth())

        response = await client.get(
            created.headers["location"], headers={**auth(), "If-None-Match": created.headers["etag"]}
        )

        assert response.status_code == 200
        assert response.json()["name"] == "Max"
        assert response.headers["etag"] == replaced.headers["etag"]
        assert response.headers["etag"] != created.headers["etag"]

    async def test_star_on_someone_elses_record_is_404(self, client: Client) -> None:
        created = await create(client, BOB)

        response = await client.get(created.headers["location"], headers={**auth(ALICE), "If-None-Match": "*"})

        assert_error(response, 404, 995)

    async def test_star_on_a_nonexistent_record_is_404(self, client: Client) -> None:
        response = await client.get(f"/v1/pets/{MISSING_ID}", headers={**auth(), "If-None-Match": "*"})

        assert_error(response, 404, 995)
