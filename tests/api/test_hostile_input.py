"""Input that is hostile or surprising: deep and odd JSON, duplicate members, invisible and spoofing names,
ambiguous paths, made-up methods, HEAD, ambiguous credentials. Never a 500; always a ServiceError."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import AsyncTestClient, TestClient

from petrecords.config import Settings
from tests.support import ALICE, assert_error, auth, create, pet_body, token

Client = AsyncTestClient[Any]
SyncClient = TestClient[Any]
JSON_HEADERS = {"Content-Type": "application/json"}


def _post_raw(body: bytes | str, **headers: str) -> dict[str, Any]:
    return {"content": body, "headers": {**auth(), **JSON_HEADERS, **headers}}


class TestDeeplyNestedJson:
    @pytest.mark.parametrize("depth", [33, 200, 999, 1000, 2700])
    @pytest.mark.parametrize("opening", ["[", '{"a":'])
    async def test_a_deep_body_is_400(self, client: Client, depth: int, opening: str) -> None:
        closing = "]" if opening == "[" else "}"
        body = opening * depth + "1" + closing * depth

        response = await client.post("/v1/pets", **_post_raw(body))

        assert "nests" in assert_error(response, 400, 994)["message"]

    @pytest.mark.parametrize("field", ["name", "petType", "ownerId", "createdAt", "id"])
    async def test_a_deep_value_in_any_field_is_400_on_create_and_replace(self, client: Client, field: str) -> None:
        created = (await create(client)).json()
        document = pet_body(**{field: None})
        body = json.dumps(document).replace("null", "[" * 2000 + "]" * 2000)

        created_again = await client.post("/v1/pets", **_post_raw(body))
        replaced = await client.put(f"/v1/pets/{created['id']}", **_post_raw(body))

        assert_error(created_again, 400, 994)
        assert_error(replaced, 400, 994)

    async def test_nesting_within_the_limit_is_only_a_wrong_value(self, client: Client) -> None:
        body = json.dumps(pet_body(name=[[[["Rex"]]]]))  # type: ignore[arg-type]

        response = await client.post("/v1/pets", **_post_raw(body))

        assert assert_error(response, 400, 994)["errors"] == {"name": ["must be a string."]}


class TestDuplicateMembers:
    async def test_a_member_given_twice_is_400_naming_it(self, client: Client) -> None:
        body = '{"name": "Rex", "petType": "Dog", "name": "Max"}'

        response = await client.post("/v1/pets", **_post_raw(body))

        error = assert_error(response, 400, 994)
        assert list(error["errors"]) == ["name"]
        assert "more than once" in error["errors"]["name"][0]

    async def test_duplicates_in_a_nested_object_count_too(self, client: Client) -> None:
        created = (await create(client)).json()
        body = '{"name": "Rex", "petType": "Dog", "id": "ID", "createdBy": {"a": 1, "a": 2}}'.replace(
            "ID", created["id"]
        )

        response = await client.put(f"/v1/pets/{created['id']}", **_post_raw(body))

        assert list(assert_error(response, 400, 994)["errors"]) == ["a"]

    @pytest.mark.parametrize(
        "body",
        ['{"name": "\\ud800", "petType": "Dog"}', '{"name": NaN, "petType": "Dog"}', '{"name": 1e999}', "\ufeff{}"],
    )
    async def test_what_json_does_not_allow_is_400(self, client: Client, body: str) -> None:
        response = await client.post("/v1/pets", **_post_raw(body.encode("utf-8", "surrogatepass")))

        assert_error(response, 400, 994)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=40,
)
pet_like_documents = st.fixed_dictionaries(
    {},
    optional={
        "name": json_values | st.text(max_size=120),
        "petType": json_values | st.sampled_from(["Dog", "cat", "UNICORN"]),
        "ownerId": json_values | st.sampled_from([ALICE, "bob@example.com", "not an address"]),
        "id": json_values,
        "createdAt": json_values,
    },
).flatmap(
    lambda known: st.dictionaries(st.text(max_size=8), json_values, max_size=3).map(lambda extra: {**extra, **known})
)


class TestArbitraryBodies:
    """Every body within the size limit answers a ServiceError or succeeds; never a 500."""

    @given(document=json_values | pet_like_documents, method=st.sampled_from(["POST", "PUT"]))
    def test_never_a_server_error(self, sync_client: SyncClient, document: Any, method: str) -> None:
        path = "/v1/pets" if method == "POST" else f"/v1/pets/{uuid.UUID(int=7)}"

        response = sync_client.request(method, path, content=json.dumps(document), headers={**auth(), **JSON_HEADERS})

        assert response.status_code < 500, response.text
        if response.status_code >= 400:
            assert_error(response, response.status_code, response.json()["code"])


class TestNames:
    @pytest.mark.parametrize(
        "name",
        [
            "\u200b",
            "\ufeff",
            "\u180e",
            "\u200b\u200c\u200d\u2060",
            "\u3164",
            "\U000e0041\U000e0042",
            " \u200b ",
            "\u202eRex",
            "Rex\u202e",
            "R\u2066ex\u2069",
        ],
    )
    async def test_invisible_or_spoofing_names_are_400(self, client: Client, name: str) -> None:
        response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == ["name"]

    @pytest.mark.parametrize("name", ["Rex\u200d", "👨\u200d👩\u200d👧", "שלום\u200f", "e\u0301"])
    async def test_invisible_characters_beside_visible_ones_are_kept(self, client: Client, name: str) -> None:
        response = await client.post("/v1/pets", json=pet_body(name), headers=auth())

        assert response.status_code == 201, response.text
        assert response.json()["name"] == name

    @pytest.mark.parametrize(("stored", "query"), [("Caf\u00e9", "cafe\u0301"), ("Cafe\u0301", "CAF\u00c9")])
    async def test_names_match_in_either_unicode_form_and_come_back_as_sent(
        self, client: Client, stored: str, query: str
    ) -> None:
        await create(client, name=stored)

        for parameter in ("name", "search"):
            response = await client.get("/v1/pets", params={parameter: query}, headers=auth())
            assert [item["name"] for item in response.json()["items"]] == [stored], parameter


class TestAmbiguousPaths:
    @pytest.mark.parametrize(
        "path", ["//v1/pets", "/v1//pets", "/v1/pets//", "/v1%2Fpets", "/v1%2fpets", "/v1/pets%2F", "/v1%5Cpets"]
    )
    async def test_a_path_the_router_would_read_as_another_is_404(self, client: Client, path: str) -> None:
        response = await client.get(path, headers=auth())

        assert_error(response, 404, 995)
        assert response.headers["cache-control"] == "no-store"
        assert "x-request-id" in response.headers

    async def test_a_trailing_slash_on_the_collection_is_the_collection(self, client: Client) -> None:
        assert (await client.get("/v1/pets/", headers=auth())).status_code == 200


class TestHead:
    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/health", "/metrics", "/openapi.json", "/docs"])
    async def test_head_answers_as_get_without_the_body(self, client: Client, path: str) -> None:
        got = await client.get(path)
        head = await client.head(path)

        assert head.status_code == got.status_code == 200
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]

    async def test_head_of_a_record_and_the_list(self, client: Client) -> None:
        created = await create(client)

        record = await client.head(created.headers["location"], headers=auth())
        listing = await client.head("/v1/pets", headers=auth())

        assert (record.status_code, record.content, record.headers["etag"]) == (200, b"", created.headers["etag"])
        assert (listing.status_code, listing.content) == (200, b"")

    async def test_head_needs_a_token_like_get(self, client: Client) -> None:
        response = await client.head("/v1/pets")

        assert response.status_code == 401
        assert response.content == b""

    async def test_405_lists_head_where_get_is_allowed(self, client: Client) -> None:
        response = await client.request("PATCH", "/healthz")

        assert_error(response, 405, 993)
        assert response.headers["allow"] == "GET, HEAD, OPTIONS"


class TestContentTypes:
    @pytest.mark.parametrize(
        ("path", "media_type"), [("/metrics", "text/plain; version=0.0.4"), ("/docs", "text/html")]
    )
    async def test_one_charset(self, client: Client, path: str, media_type: str) -> None:
        response = await client.get(path)

        assert response.headers["content-type"] == f"{media_type}; charset=utf-8"


@pytest.mark.only_on("sqlite")  # the metrics' labels, made at the edge whatever database answers
class TestMetricLabels:
    async def test_made_up_methods_and_paths_add_no_series(self, client: Client) -> None:
        for warm_up in ("MADEUP", "GET"):
            await client.request(warm_up, "/no/such/path")
            await client.request(warm_up, "/healthz")
            await client.request(warm_up, "/v1/pets/0", headers=auth())
        await client.get("/metrics")
        before = _series((await client.get("/metrics")).text)

        for index in range(2000):
            await client.request(f"M{index:X}", "/healthz")
            await client.request("GET", f"/made-up/{index}")
            await client.request(f"X{index}", f"/v1/pets/{index}", headers=auth())
        after = _series((await client.get("/metrics")).text)

        assert after == before
        assert 'method="other"' in (await client.get("/metrics")).text


def _series(metrics: str) -> set[str]:
    """The names and label sets of every sample: what grows when a label takes a new value."""
    return {line.rsplit(" ", 1)[0] for line in metrics.splitlines() if line and not line.startswith("#")}


class TestCredentials:
    async def test_two_authorization_headers_are_401_even_when_both_are_valid(self, client: Client) -> None:
        headers = [("Authorization", f"Bearer {token()}"), ("Authorization", f"Bearer {token()}")]

        response = await client.get("/v1/pets", headers=headers)

        assert_error(response, 401, 997)
        assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'

    @pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
    async def test_a_time_claim_that_is_a_string_is_401(self, client: Client, claim: str) -> None:
        now = int(time.time())
        value = {"exp": now + 600, "iat": now, "nbf": now}[claim]

        response = await client.get("/v1/pets", headers={"Authorization": f"Bearer {token(**{claim: str(value)})}"})

        assert_error(response, 401, 997)

    async def test_a_token_living_longer_than_the_maximum_is_401(self, client: Client) -> None:
        too_long = token(ttl=86400 + 1)
        without_iat = token(ttl=86400 + 120, iat=None)
        longest = token(ttl=86400)

        assert_error(await client.get("/v1/pets", headers={"Authorization": f"Bearer {too_long}"}), 401, 997)
        assert_error(await client.get("/v1/pets", headers={"Authorization": f"Bearer {without_iat}"}), 401, 997)
        assert (await client.get("/v1/pets", headers={"Authorization": f"Bearer {longest}"})).status_code == 200

    async def test_the_maximum_is_a_setting(self, make_client: Any, make_settings: Any) -> None:
        settings_: Settings = make_settings(auth_max_token_lifetime_seconds=600)
        async with make_client(settings_) as client:
            response = await client.get("/v1/pets", headers={"Authorization": f"Bearer {token(ttl=601)}"})

        assert_error(response, 401, 997)


class TestLongFractions:
    async def test_a_date_time_with_many_fraction_digits_is_read(self, client: Client) -> None:
        created = (await create(client)).json()
        exact = created["createdAt"][:-1] + "0" * 30 + "Z"
        just_after = created["createdAt"][:-1] + "0" * 30 + "1Z"

        from_exact = await client.get("/v1/pets", params={"createdFrom": exact}, headers=auth())
        from_just_after = await client.get("/v1/pets", params={"createdFrom": just_after}, headers=auth())

        assert from_exact.json()["totalCount"] == 1
        assert from_just_after.json()["totalCount"] == 0
