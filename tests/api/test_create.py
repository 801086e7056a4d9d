"""POST /v1/pets (contract sections 2 and 3)."""

from __future__ import annotations

import re
from typing import Any

from litestar.testing import AsyncTestClient

from tests.support import ADMIN, ALICE, BOB, auth, pet_body

Client = AsyncTestClient[Any]
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
UUID_V7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


class TestCreatePet:
    async def test_created_record_has_all_eight_fields(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(" Rex  ", "dOG"), headers=auth("Alice@Example.COM"))

        assert response.status_code == 201
        pet = response.json()
        assert set(pet) == {"id", "createdAt", "createdBy", "modifiedAt", "modifiedBy", "ownerId", "name", "petType"}
        assert UUID_V7.match(pet["id"])
        assert TIMESTAMP.match(pet["createdAt"])
        assert pet["modifiedAt"] == pet["createdAt"]
        assert pet["createdBy"] == pet["modifiedBy"] == pet["ownerId"] == ALICE
        assert pet["name"] == "Rex"
        assert pet["petType"] == "Dog"
        assert response.headers["location"] == f"/v1/pets/{pet['id']}"
        assert response.headers["etag"].startswith('"')

    async def test_created_record_reads_back_identically(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth())

        fetched = await client.get(created.headers["location"], headers=auth())

        assert fetched.json() == created.json()
        assert fetched.headers["etag"] == created.headers["etag"]

    async def test_admin_may_name_another_owner(self, client: Client) -> None:
        response = await client.post(
            "/v1/pets", json=pet_body(ownerId="Bob@Example.com"), headers=auth(ADMIN, admin=True)
        )

        assert response.status_code == 201
        assert response.json()["ownerId"] == BOB
        assert response.json()["createdBy"] == ADMIN

    async def test_non_admin_naming_another_owner_is_403(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth())

        assert response.status_code == 403
        assert response.json() == {"code": 997, "message": response.json()["message"]}

    async def test_unknown_fields_are_400_naming_each(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(color="brown", age=3), headers=auth())

        assert response.status_code == 400
        body = response.json()
        assert body["code"] == 994
        assert set(body["errors"]) == {"color", "age"}
        assert "color" in body["message"]
        assert "age" in body["message"]
