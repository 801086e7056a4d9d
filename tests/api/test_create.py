"""POST of a record (contract sections 1, 2, 3 and 6): what every resource answers alike (a body that is no
object, malformed or not UTF-8, unknown members, the media type), on each registered resource; a pet's fields,
owner and body size."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient, TestClient

from petrecords.config import DEFAULT_PET_TYPES, Settings
from petrecords.resources.declaration import Resource
from tests.support import ADMIN, ALICE, BOB, FIELDS, Examples, admin, as_read, assert_error, auth, pet_body

Client = AsyncTestClient[Any]
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
UUID_V7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
JSON = {"Content-Type": "application/json"}
OTHER_ID = "01890a5d-ac96-774b-bcce-b302099a8057"
DEFAULT_LIMIT = 16 * 1024
VALID_BODY = b'{"name": "Rex", "petType": "Dog"}'


def assert_invalid_fields(response: httpx.Response, *fields: str) -> dict[str, Any]:
    """400/994 naming exactly these fields in `errors` and each of them in the message."""
    body = assert_error(response, 400, 994)
    assert set(body.get("errors", {})) == set(fields), body
    for field in fields:
        assert field in body["message"], body
    return body


def padded_json(size: int) -> bytes:
    """A valid create body of exactly `size` bytes (JSON white space as padding)."""
    assert size >= len(VALID_BODY)
    return VALID_BODY[:-1] + b" " * (size - len(VALID_BODY)) + b"}"


async def count_all(client: Client) -> int:
    response = await client.get("/v1/pets", headers=auth(ADMIN, admin=True))
    assert response.status_code == 200
    total: int = response.json()["totalCount"]
    return total


class TestCreate:
    """The same for every resource: a record made from its example by an administrator, and bodies no resource
    takes."""

    async def test_created_record_reads_back_identically(self, resource: Resource, examples: Examples) -> None:
        created = await examples.create(resource)

        fetched = await examples.client.get(created.headers["location"], headers=admin())

        assert created.headers["location"] == f"{resource.path}/{created.json()['id']}"
        assert fetched.json() == as_read(resource, created.json())
        assert fetched.headers["etag"] == created.headers["etag"]

    async def test_each_create_issues_a_new_id_and_etag(self, resource: Resource, examples: Examples) -> None:
        first = await examples.create(resource)
        second = await examples.create(resource, another=True)

        assert UUID_V7.match(first.json()["id"])
        assert first.json()["id"] != second.json()["id"]
        assert first.headers["etag"] != second.headers["etag"]

    async def test_unknown_fields_are_400_naming_each(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        body = examples.body(resource) | {"weight": "12 kg", "colourOfTheSky": 3}

        response = await examples.client.post(resource.path, json=body, headers=admin())

        assert_invalid_fields(response, "weight", "colourOfTheSky")
        assert await examples.count(resource) == 0

    async def test_body_that_is_not_an_object_is_400(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        listed = httpx.Request("POST", "/", json=[examples.body(resource)]).content
        for document in [b"[]", listed, b'"Rex"', b"5", b"1.5", b"null", b"true"]:
            response = await examples.client.post(resource.path, content=document, headers={**admin(), **JSON})

            assert_error(response, 400, 994)
        assert await examples.count(resource) == 0

    async def test_malformed_json_is_400(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        valid = httpx.Request("POST", "/", json=examples.body(resource)).content
        malformed = [
            b"",
            b"   ",
            valid[:-1] + b",",
            b"{name: 'Rex', petType: 'Dog'}",
            valid + b" trailing",
            valid[:-1] + b",}",
            b"\x00\x00",
            b"NaN",
        ]
        for raw in malformed:
            response = await examples.client.post(resource.path, content=raw, headers={**admin(), **JSON})

            assert response.status_code == 400, (raw, response.text)
            assert_error(response, 400, 994)
        assert await examples.count(resource) == 0

    async def test_body_that_is_not_utf8_is_400(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        valid = httpx.Request("POST", "/", json=examples.body(resource)).content

        response = await examples.client.post(
            resource.path, content=b'{"x": "R\xffx", ' + valid[1:], headers={**admin(), **JSON}
        )

        assert_error(response, 400, 994)
        assert await examples.count(resource) == 0


class TestCreateMediaType:
    """The same for every resource."""

    async def test_missing_content_type_is_415(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        valid = httpx.Request("POST", "/", json=examples.body(resource)).content

        response = await examples.client.post(resource.path, content=valid, headers=admin())

        assert_error(response, 415, 988)
        assert await examples.count(resource) == 0

    async def test_other_media_type_is_415(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        valid = httpx.Request("POST", "/", json=examples.body(resource)).content
        others = [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/xml",
            "application/jsonx",
            "text/json",
            "",
        ]
        for content_type in others:
            response = await examples.client.post(
                resource.path, content=valid, headers={**admin(), "Content-Type": content_type}
            )

            assert response.status_code == 415, (content_type, response.text)
            assert_error(response, 415, 988)
        assert await examples.count(resource) == 0

    async def test_json_with_or_without_charset_is_accepted(self, resource: Resource, examples: Examples) -> None:
        await examples.prepare(resource)
        accepted = [
            "application/json",
            "application/json; charset=utf-8",
            "application/json;charset=UTF-8",
            "Application/JSON",
        ]
        for number, content_type in enumerate(accepted):
            body = httpx.Request("POST", "/", json=examples.body(resource, another=number % 2 == 1)).content
            response = await examples.client.post(
                resource.path, content=body, headers={**admin(), "Content-Type": content_type}
            )

            assert response.status_code == 201, (content_type, response.text)
            await examples.client.delete(response.headers["location"], headers=admin())


class TestCreatePet:
    async def test_created_record_has_all_eight_fields(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(" Rex  ", "dOG"), headers=auth("Alice@Example.COM"))

        assert response.status_code == 201
        pet = response.json()
        assert set(pet) == FIELDS
        assert UUID_V7.match(pet["id"])
        assert TIMESTAMP.match(pet["createdAt"])
        assert pet["modifiedAt"] == pet["createdAt"]
        assert pet["createdBy"] == pet["modifiedBy"] == pet["ownerId"] == ALICE
        assert pet["name"] == "Rex"
        assert pet["petType"] == "Dog"
        assert response.headers["location"] == f"/v1/pets/{pet['id']}"
        assert response.headers["etag"].startswith('"')

    async def test_admin_may_name_another_owner(self, client: Client) -> None:
        response = await client.post(
            "/v1/pets", json=pet_body(ownerId="Bob@Example.com"), headers=auth(ADMIN, admin=True)
        )

        assert response.status_code == 201
        assert response.json()["ownerId"] == BOB
        assert response.json()["createdBy"] == ADMIN
        assert response.json()["modifiedBy"] == ADMIN
        fetched = await client.get(response.headers["location"], headers=auth(BOB))
        assert fetched.status_code == 200

    async def test_non_admin_naming_another_owner_is_403(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId=BOB), headers=auth())

        assert_error(response, 403, 997)
        assert await count_all(client) == 0

    async def test_owner_defaults_to_the_caller(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(), headers=auth(BOB))

        assert response.status_code == 201
        assert response.json()["ownerId"] == BOB

    async def test_owner_naming_the_caller_in_other_letter_case_is_the_caller(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId="ALICE@example.COM"), headers=auth())

        assert response.status_code == 201, response.text
        assert response.json()["ownerId"] == ALICE

    async def test_admin_naming_itself_as_owner_is_allowed(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(ownerId=ADMIN), headers=auth(ADMIN, admin=True))

        assert response.status_code == 201
        assert response.json()["ownerId"] == ADMIN

    async def test_owner_that_is_not_an_email_is_400(self, client: Client) -> None:
        for owner in ["bob", "", "bob@", "@example.com", "bob example.com", "bob@example", "a@@b.com", 5, True, ["x"]]:
            response = await client.post("/v1/pets", json=pet_body(ownerId=owner), headers=auth(ADMIN, admin=True))

            assert_invalid_fields(response, "ownerId")
        assert await count_all(client) == 0

    async def test_read_only_fields_with_garbage_values_are_ignored(self, client: Client) -> None:
        body = pet_body(
            id=OTHER_ID,
            createdAt="yesterday",
            createdBy="mallory@evil.example",
            modifiedAt="1970-01-01T00:00:00.000Z",
            modifiedBy="not an e-mail",
        )

        response = await client.post("/v1/pets", json=body, headers=auth())

        assert response.status_code == 201, response.text
        pet = response.json()
        assert pet["id"] != OTHER_ID
        assert UUID_V7.match(pet["id"])
        assert pet["createdBy"] == pet["modifiedBy"] == ALICE
        assert TIMESTAMP.match(pet["createdAt"])
        assert pet["createdAt"] == pet["modifiedAt"]
        assert pet["createdAt"] != "1970-01-01T00:00:00.000Z"

    async def test_read_only_fields_of_any_json_type_are_ignored(self, client: Client) -> None:
        for value in [None, 12345, True, ["x"], {"a": 1}]:
            body = pet_body(id=value, createdAt=value, createdBy=value, modifiedAt=value, modifiedBy=value)

            response = await client.post("/v1/pets", json=body, headers=auth())

            assert response.status_code == 201, (value, response.text)
            assert response.json()["createdBy"] == ALICE

    async def test_sending_back_a_read_record_creates_a_copy(self, client: Client) -> None:
        original = (await client.post("/v1/pets", json=pet_body(), headers=auth())).json()

        response = await client.post("/v1/pets", json=original, headers=auth(BOB, admin=True))

        assert response.status_code == 201, response.text
        copy = response.json()
        assert copy["id"] != original["id"]
        assert copy["ownerId"] == ALICE
        assert copy["createdBy"] == BOB


class TestCreatePetName:
    async def test_white_space_is_trimmed_at_both_ends(self, client: Client) -> None:
        for raw in ["  Rex  ", "\tRex\n", "\r\nRex\r\n", "\u00a0Rex\u3000", "\u2003Rex\u2029", "\u0085Rex\u000b"]:
            response = await client.post("/v1/pets", json=pet_body(raw), headers=auth())

            assert response.status_code == 201, (raw, response.text)
            assert response.json()["name"] == "Rex"

    async def test_inner_white_space_is_kept(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body("  Rex  the\u00a0Dog "), headers=auth())

        assert response.status_code == 201
        assert response.json()["name"] == "Rex  the\u00a0Dog"

    async def test_name_of_100_code_points_is_accepted(self, client: Client) -> None:
        names = [
            "a" * 100,
            "é" * 100,
            "🐕" * 100,  # 400 bytes in UTF-8, 100 code points
            "日本" * 50,
            "e\u0301" * 50,  # 50 visible characters, 100 code points
            "  " + "a" * 100 + "  ",  # the length counts after trimming
        ]
        for name in names:
            response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

            assert response.status_code == 201, (name, response.text)
            assert response.json()["name"] == name.strip()
            fetched = await client.get(response.headers["location"], headers=auth())
            assert fetched.json()["name"] == name.strip()

    async def test_name_of_101_code_points_is_400(self, client: Client) -> None:
        for name in ["a" * 101, "🐕" * 101, "e\u0301" * 50 + "e", " " + "a" * 101 + " ", "a" * 1000]:
            response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

            assert_invalid_fields(response, "name")
        assert await count_all(client) == 0

    async def test_single_character_name_is_accepted(self, client: Client) -> None:
        response = await client.post("/v1/pets", json=pet_body(" X "), headers=auth())

        assert response.status_code == 201
        assert response.json()["name"] == "X"

    async def test_empty_name_after_trimming_is_400(self, client: Client) -> None:
        for name in ["", " ", "   \t\n  ", "\u3000\u00a0"]:
            response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

            assert_invalid_fields(response, "name")

    async def test_control_character_inside_the_name_is_400(self, client: Client) -> None:
        # C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F)
        for code in [0x00, 0x01, 0x07, 0x09, 0x0A, 0x0D, 0x1B, 0x1F, 0x7F, 0x80, 0x85, 0x9B, 0x9F]:
            response = await client.post("/v1/pets", json=pet_body(f"Re{chr(code)}x"), headers=auth())

            assert response.status_code == 400, f"U+{code:04X}"
            assert_invalid_fields(response, "name")
        assert await count_all(client) == 0

    async def test_unicode_letters_symbols_and_emoji_round_trip(self, client: Client) -> None:
        name = "Fluffy 🐈‍⬛ Ünïcødé 日本 ‏שלום‎ Ž"

        response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

        assert response.status_code == 201, response.text
        fetched = await client.get(response.headers["location"], headers=auth())
        assert fetched.json()["name"] == name

    async def test_name_that_is_not_a_string_is_400(self, client: Client) -> None:
        for name in [5, 1.5, None, True, ["Rex"], {"first": "Rex"}]:
            response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

            assert_invalid_fields(response, "name")


class TestCreatePetType:
    async def test_every_default_type_is_accepted(self, client: Client) -> None:
        for pet_type in DEFAULT_PET_TYPES:
            response = await client.post("/v1/pets", json=pet_body(pet_type=pet_type), headers=auth())

            assert response.status_code == 201, (pet_type, response.text)
            assert response.json()["petType"] == pet_type

    async def test_type_matches_case_insensitively_and_returns_configured_spelling(self, client: Client) -> None:
        cases = [("dog", "Dog"), ("DOG", "Dog"), ("cAt", "Cat"), ("guineapig", "GuineaPig"), ("GUINEAPIG", "GuineaPig")]
        for sent, stored in cases:
            response = await client.post("/v1/pets", json=pet_body(pet_type=sent), headers=auth())

            assert response.status_code == 201, (sent, response.text)
            assert response.json()["petType"] == stored
            fetched = await client.get(response.headers["location"], headers=auth())
            assert fetched.json()["petType"] == stored

    async def test_unknown_type_is_400_listing_the_allowed_values(self, client: Client) -> None:
        for pet_type in ["Dragon", "", "Dogs", "Guinea Pig", "D0g"]:
            response = await client.post("/v1/pets", json=pet_body(pet_type=pet_type), headers=auth())

            body = assert_invalid_fields(response, "petType")
            for allowed in DEFAULT_PET_TYPES:
                assert allowed in body["message"]
                assert any(allowed in message for message in body["errors"]["petType"])
        assert await count_all(client) == 0

    async def test_type_that_is_not_a_string_is_400(self, client: Client) -> None:
        for pet_type in [None, 5, True, ["Dog"], {"type": "Dog"}]:
            response = await client.post("/v1/pets", json=pet_body(pet_type=pet_type), headers=auth())

            assert_invalid_fields(response, "petType")

    async def test_configured_types_replace_the_defaults(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(pet_types=("Axolotl", "Dragon"))) as custom:
            accepted = await custom.post("/v1/pets", json=pet_body(pet_type="AXOLOTL"), headers=auth())
            rejected = await custom.post("/v1/pets", json=pet_body(pet_type="Dog"), headers=auth())

        assert accepted.status_code == 201
        assert accepted.json()["petType"] == "Axolotl"
        body = assert_invalid_fields(rejected, "petType")
        assert "Axolotl" in body["message"]
        assert "Dragon" in body["message"]

    @given(
        candidate=st.one_of(
            st.text(max_size=12),
            st.sampled_from(DEFAULT_PET_TYPES).flatmap(
                lambda name: st.lists(st.booleans(), min_size=len(name), max_size=len(name)).map(
                    lambda flips: "".join(c.upper() if up else c.lower() for c, up in zip(name, flips, strict=True))
                )
            ),
            st.builds(
                lambda name, extra, front: extra + name if front else name + extra,
                st.sampled_from(DEFAULT_PET_TYPES),
                st.text(min_size=1, max_size=2),
                st.booleans(),
            ),
        )
    )
    def test_any_text_resolves_to_a_configured_type_or_is_400(
        self, sync_client: TestClient[Any], candidate: str
    ) -> None:
        by_lower = {pet_type.lower(): pet_type for pet_type in DEFAULT_PET_TYPES}
        by_folded = {pet_type.casefold(): pet_type for pet_type in DEFAULT_PET_TYPES}

        response = sync_client.post("/v1/pets", json=pet_body(pet_type=candidate), headers=auth())

        if candidate.lower() in by_lower:
            assert response.status_code == 201, response.text
            assert response.json()["petType"] == by_lower[candidate.lower()]
        elif candidate.casefold() in by_folded and response.status_code == 201:
            # Unicode caseless matching (e.g. a ligature) may also resolve; it must resolve to that type.
            assert response.json()["petType"] == by_folded[candidate.casefold()]
        else:
            assert_invalid_fields(response, "petType")


class TestCreatePetBody:
    async def test_empty_object_is_400_naming_both_required_fields(self, client: Client) -> None:
        response = await client.post("/v1/pets", json={}, headers=auth())

        assert_invalid_fields(response, "name", "petType")

    async def test_missing_name_is_400(self, client: Client) -> None:
        response = await client.post("/v1/pets", json={"petType": "Dog"}, headers=auth())

        assert_invalid_fields(response, "name")

    async def test_missing_pet_type_is_400(self, client: Client) -> None:
        response = await client.post("/v1/pets", json={"name": "Rex"}, headers=auth())

        assert_invalid_fields(response, "petType")

    async def test_every_offending_field_is_reported_at_once(self, client: Client) -> None:
        body = {"name": 5, "petType": None, "ownerId": "nobody", "weight": "12 kg"}

        response = await client.post("/v1/pets", json=body, headers=auth())

        assert_invalid_fields(response, "name", "petType", "ownerId", "weight")


class TestCreatePetBodySize:
    async def test_body_of_exactly_the_default_limit_is_accepted(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=padded_json(DEFAULT_LIMIT), headers={**auth(), **JSON})

        assert response.status_code == 201, response.text

    async def test_body_one_byte_over_the_default_limit_is_413(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=padded_json(DEFAULT_LIMIT + 1), headers={**auth(), **JSON})

        assert_error(response, 413, 989)
        assert await count_all(client) == 0

    async def test_much_larger_body_is_413(self, client: Client) -> None:
        response = await client.post("/v1/pets", content=padded_json(1024 * 1024), headers={**auth(), **JSON})

        assert_error(response, 413, 989)

    def test_body_over_the_limit_without_content_length_is_413(self, sync_client: TestClient[Any]) -> None:
        body = padded_json(DEFAULT_LIMIT + 1024)

        def chunks() -> Iterator[bytes]:  # a streamed body: sent without Content-Length
            for start in range(0, len(body), 1000):
                yield body[start : start + 1000]

        response = sync_client.post("/v1/pets", content=chunks(), headers={**auth(), **JSON})

        assert_error(response, 413, 989)
        listed = sync_client.get("/v1/pets", headers=auth(ADMIN, admin=True))
        assert listed.json()["totalCount"] == 0

    async def test_configured_limit_applies(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(max_body_bytes=1024)) as small:
            at_limit = await small.post("/v1/pets", content=padded_json(1024), headers={**auth(), **JSON})
            over_limit = await small.post("/v1/pets", content=padded_json(1025), headers={**auth(), **JSON})
            default_over = await small.post(
                "/v1/pets", content=padded_json(DEFAULT_LIMIT + 1), headers={**auth(), **JSON}
            )

        assert at_limit.status_code == 201, at_limit.text
        assert_error(over_limit, 413, 989)
        assert_error(default_over, 413, 989)

    async def test_raised_limit_accepts_bodies_over_the_default(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        async with make_client(make_settings(max_body_bytes=64 * 1024)) as large:
            response = await large.post("/v1/pets", content=padded_json(DEFAULT_LIMIT * 2), headers={**auth(), **JSON})

        assert response.status_code == 201, response.text
