"""`GET /v1/{resource}/{id}` and `POST /v1/{resource}` are answered below the framework (DirectRoutes) unless
the request carries an `Origin` and CORS is configured: then the framework's routes answer, and add the CORS
headers. Both ways must give the same answer to the same request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import TestClient

from petrecords.app import create_app
from petrecords.config import Settings
from tests.support import ALICE, BOB, auth, wipe

ORIGIN = "https://app.example"
FRAMEWORK = {"Origin": ORIGIN}
# What differs between two answers to the same request, whichever way it went.
PER_ANSWER = {"etag", "location", "x-request-id", "date", "content-length"}


@pytest.fixture
def cors_client(database_url: str, make_settings: Callable[..., Settings]) -> Iterator[TestClient[Any]]:
    asyncio.run(wipe(database_url))
    with TestClient(app=create_app(make_settings(cors_origins=(ORIGIN,), max_body_bytes=256))) as started:  # type: ignore[arg-type]
        yield started


def _post(client: TestClient[Any], content: bytes, *, framework: bool, **headers: str) -> httpx.Response:
    return client.post(
        "/v1/pets",
        content=content,
        headers={**(FRAMEWORK if framework else {}), "Content-Type": "application/json", **auth(), **headers},
    )


def _shape(response: httpx.Response) -> tuple[int, dict[str, str], Any]:
    """An answer without what is its own: the status, the headers but CORS's and those that name this answer, and
    the body (a record's id and times left out)."""
    headers = {
        name: value
        for name, value in response.headers.items()
        if name not in PER_ANSWER and not name.startswith("access-control-") and name != "vary"
    }
    body = response.json() if response.content else None
    if isinstance(body, dict) and "id" in body:
        body = {name: value for name, value in body.items() if name not in {"id", "createdAt", "modifiedAt"}}
    return response.status_code, headers, body


def test_a_create_and_a_lookup_carry_the_cors_headers(cors_client: TestClient[Any]) -> None:
    created = _post(cors_client, b'{"name": "Rex", "petType": "Dog"}', framework=True)
    found = cors_client.get(created.headers["location"], headers={**FRAMEWORK, **auth()})

    assert created.status_code == 201, created.text
    assert found.status_code == 200, found.text
    assert created.headers["access-control-allow-origin"] == ORIGIN
    assert found.headers["access-control-allow-origin"] == ORIGIN
    assert found.json() == created.json()


def test_a_create_answers_alike_both_ways(cors_client: TestClient[Any]) -> None:
    body = b'{"name": "Rex", "petType": "dog"}'
    direct, framework = (_post(cors_client, body, framework=way) for way in (False, True))

    assert direct.status_code == 201, direct.text
    assert _shape(direct) == _shape(framework)
    assert direct.headers["location"] == f"/v1/pets/{direct.json()['id']}"
    assert cors_client.get(direct.headers["location"], headers=auth()).json() == direct.json()


@pytest.mark.parametrize("framework_first", [False, True], ids=["direct first", "framework first"])
def test_an_idempotency_key_is_one_whichever_way(cors_client: TestClient[Any], framework_first: bool) -> None:
    body = b'{"name": "Mia", "petType": "Cat"}'
    key = {"Idempotency-Key": "k1"}
    first = _post(cors_client, body, framework=framework_first, **key)
    again = _post(cors_client, body, framework=not framework_first, **key)
    other = _post(cors_client, b'{"name": "Max", "petType": "Cat"}', framework=not framework_first, **key)

    assert first.status_code == 201, first.text
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert (again.headers["location"], again.headers["etag"]) == (first.headers["location"], first.headers["etag"])
    assert other.status_code == 422


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Authorization": "Bearer nope"}, 401),
        ({"Content-Type": "text/plain"}, 415),
        ({"Idempotency-Key": ""}, 400),
        ({"Idempotency-Key": "x" * 1000}, 400),
    ],
    ids=["bad token", "media type", "empty key", "long key"],
)
def test_a_refused_create_answers_alike_both_ways(
    cors_client: TestClient[Any], headers: dict[str, str], status: int
) -> None:
    direct, framework = (
        _post(cors_client, b'{"name": "Rex", "petType": "Dog"}', framework=way, **headers) for way in (False, True)
    )

    assert direct.status_code == status, direct.text
    assert _shape(direct) == _shape(framework)


def test_someone_elses_record_is_missing_both_ways(cors_client: TestClient[Any]) -> None:
    created = _post(cors_client, b'{"name": "Rex", "petType": "Dog"}', framework=False)
    direct, framework = (
        cors_client.get(created.headers["location"], headers={**(FRAMEWORK if way else {}), **auth(BOB)})
        for way in (False, True)
    )

    assert direct.status_code == 404
    assert _shape(direct) == _shape(framework)
    assert created.json()["ownerId"] == ALICE


@given(
    content=st.one_of(
        st.binary(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
            max_leaves=6,
        ).map(lambda value: httpx.Request("POST", "/", json=value).content),
        st.fixed_dictionaries(
            {"name": st.text(max_size=12), "petType": st.sampled_from(["Dog", "cat", "Unicorn", ""])},
            optional={"ownerId": st.sampled_from([None, ALICE, BOB, "not an address"])},
        ).map(lambda value: httpx.Request("POST", "/", json=value).content),
    )
)
def test_any_body_answers_alike_both_ways(cors_client: TestClient[Any], content: bytes) -> None:
    direct, framework = (_post(cors_client, content, framework=way) for way in (False, True))

    assert direct.status_code != 500, direct.text
    assert _shape(direct) == _shape(framework)
