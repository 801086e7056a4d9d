"""The direct routes (DirectRoutes) answer below the framework; with PETRECORDS_DIRECT_ROUTES=false the framework's
routes answer every request. Both ways must give the same answer to the same request, CORS headers included.
(tests/api/test_endpoint_table.py asks every route of the table; these look closer at a create and a lookup.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from litestar.testing import TestClient

from petrecords.app import create_app
from tests.conftest import test_settings as settings_of
from tests.support import ALICE, BOB, auth, wipe

ORIGIN = "https://app.example"
FROM_A_PAGE = {"Origin": ORIGIN}
# What differs between two answers to the same request, whichever way it went.
PER_ANSWER = {"etag", "location", "x-request-id", "date", "content-length"}


class TwoWays:
    """Two apps on one database, of the same settings but that one sends every request through the framework."""

    def __init__(self, direct: TestClient[Any], framework: TestClient[Any]) -> None:
        self.direct = direct
        self.framework = framework

    def client(self, *, framework: bool) -> TestClient[Any]:
        return self.framework if framework else self.direct


@pytest.fixture(scope="module")
def two_apps(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoWays]:
    """The two apps, built once for the module: two apps cost more than its tests do."""
    data_dir = tmp_path_factory.mktemp("data")
    settings = settings_of(database_url, data_dir, cors_origins=(ORIGIN,), max_body_bytes=256)
    framework_settings = settings_of(
        database_url, data_dir, cors_origins=(ORIGIN,), max_body_bytes=256, direct_routes=False
    )
    with (
        TestClient(app=create_app(settings)) as direct,  # type: ignore[arg-type]
        TestClient(app=create_app(framework_settings)) as framework,  # type: ignore[arg-type]
    ):
        yield TwoWays(direct, framework)


@pytest.fixture
def ways(database_url: str, two_apps: TwoWays) -> TwoWays:
    """The module's two apps, on an emptied database."""
    asyncio.run(wipe(database_url))
    return two_apps


def _post(ways: TwoWays, content: bytes, *, framework: bool, **headers: str) -> httpx.Response:
    return ways.client(framework=framework).post(
        "/v1/pets",
        content=content,
        headers={**FROM_A_PAGE, "Content-Type": "application/json", **auth(), **headers},
    )


def _shape(response: httpx.Response) -> tuple[int, dict[str, str], Any]:
    """An answer without what is its own: the status, the headers but those that name this answer, and the body
    (a record's id and times left out)."""
    headers = {name: value for name, value in response.headers.items() if name not in PER_ANSWER}
    body = response.json() if response.content else None
    if isinstance(body, dict) and "id" in body:
        body = {name: value for name, value in body.items() if name not in {"id", "createdAt", "modifiedAt"}}
    return response.status_code, headers, body


@pytest.mark.parametrize("framework", [False, True], ids=["direct", "framework"])
def test_a_create_and_a_lookup_carry_the_cors_headers(ways: TwoWays, framework: bool) -> None:
    created = _post(ways, b'{"name": "Rex", "petType": "Dog"}', framework=framework)
    found = ways.client(framework=framework).get(created.headers["location"], headers={**FROM_A_PAGE, **auth()})

    assert created.status_code == 201, created.text
    assert found.status_code == 200, found.text
    assert created.headers["access-control-allow-origin"] == ORIGIN
    assert found.headers["access-control-allow-origin"] == ORIGIN
    assert found.json() == created.json()


def test_a_create_answers_alike_both_ways(ways: TwoWays) -> None:
    body = b'{"name": "Rex", "petType": "dog"}'
    direct, framework = (_post(ways, body, framework=way) for way in (False, True))

    assert direct.status_code == 201, direct.text
    assert _shape(direct) == _shape(framework)
    assert direct.headers["location"] == f"/v1/pets/{direct.json()['id']}"
    assert ways.direct.get(direct.headers["location"], headers=auth()).json() == direct.json()


@pytest.mark.parametrize("framework_first", [False, True], ids=["direct first", "framework first"])
def test_an_idempotency_key_is_one_whichever_way(ways: TwoWays, framework_first: bool) -> None:
    body = b'{"name": "Mia", "petType": "Cat"}'
    key = {"Idempotency-Key": "k1"}
    first = _post(ways, body, framework=framework_first, **key)
    again = _post(ways, body, framework=not framework_first, **key)
    other = _post(ways, b'{"name": "Max", "petType": "Cat"}', framework=not framework_first, **key)

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
def test_a_refused_create_answers_alike_both_ways(ways: TwoWays, headers: dict[str, str], status: int) -> None:
    direct, framework = (
        _post(ways, b'{"name": "Rex", "petType": "Dog"}', framework=way, **headers) for way in (False, True)
    )

    assert direct.status_code == status, direct.text
    assert _shape(direct) == _shape(framework)


def test_someone_elses_record_is_missing_both_ways(ways: TwoWays) -> None:
    created = _post(ways, b'{"name": "Rex", "petType": "Dog"}', framework=False)
    direct, framework = (
        ways.client(framework=way).get(created.headers["location"], headers={**FROM_A_PAGE, **auth(BOB)})
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
def test_any_body_answers_alike_both_ways(ways: TwoWays, content: bytes) -> None:
    direct, framework = (_post(ways, content, framework=way) for way in (False, True))

    assert direct.status_code != 500, direct.text
    assert _shape(direct) == _shape(framework)
