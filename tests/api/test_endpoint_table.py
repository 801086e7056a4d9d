"""The table of endpoints is the one source of what the service answers: every route of it answers alike below
the framework and through it (for every resource), the operations the service answers are exactly the
document's, and each path allows exactly the methods its endpoints declare."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.testing import TestClient

from petrecords.app import create_app
from petrecords.certificates.links import PUBLIC_PREFIX
from petrecords.endpoints import EndpointTable
from petrecords.registry import RESOURCES
from petrecords.resources.declaration import OnDelete, Resource
from tests.conftest import test_settings as settings_of
from tests.support import ADMIN, ANOTHER, BOB, MISSING_ID, auth, wipe

ORIGIN = "https://app.example"
# What differs between two answers to the same request in two worlds of the same records: ids, times, cursors,
# tags and the request's own id.
PER_ANSWER = {"x-request-id", "date", "content-length"}
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")
_CURSOR = re.compile(r'"(?:cursor|nextCursor)":"[0-9a-f]+-[0-9a-f]+"')
_ETAG = re.compile(r'"[0-9a-f]{20}"')
_TICKET = re.compile(r'"ticket":"[A-Za-z0-9_-]+"')
_SECRET = re.compile(r'"secret":"whsec_[^"]*"')
_LINK = re.compile(r'"link":"/public/certificates/[A-Za-z0-9_-]+"')


@dataclass
class Both:
    """Two apps of the same settings on one database: one that answers the direct routes below the framework, one
    that sends every request through it (PETRECORDS_DIRECT_ROUTES=false)."""

    direct: TestClient[Any]
    framework: TestClient[Any]
    table: EndpointTable

    def client(self, *, framework: bool) -> TestClient[Any]:
        return self.framework if framework else self.direct


def _table_of(app: Any) -> EndpointTable:
    while not isinstance(app, Litestar):
        app = app.app
    table: EndpointTable = app.state.endpoints
    return table


@pytest.fixture(scope="module")
def both_apps(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Both]:
    """The two apps, built once for the module: two apps cost more than most of its tests."""
    data_dir = tmp_path_factory.mktemp("data")
    direct_app = create_app(settings_of(database_url, data_dir, cors_origins=(ORIGIN,)))
    framework_app = create_app(settings_of(database_url, data_dir, cors_origins=(ORIGIN,), direct_routes=False))
    with TestClient(app=direct_app) as direct, TestClient(app=framework_app) as framework:  # type: ignore[arg-type]
        yield Both(direct, framework, _table_of(direct_app))


@pytest.fixture
def both(database_url: str, both_apps: Both) -> Both:
    """The module's two apps, on an emptied database."""
    asyncio.run(wipe(database_url))
    return both_apps


@dataclass
class World:
    """One record of every resource (made in reference order), and what a request may name."""

    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)

    def body(self, resource: Resource, *, another: bool = False) -> dict[str, Any]:
        """A valid body: the resource's example, its references naming this world's records; `another` makes it
        a second record of the resource besides the world's."""
        body = dict(resource.examples) | (ANOTHER.get(resource.name, {}) if another else {})
        for reference in resource.references:
            body[reference.field] = self.records[reference.target.name]["id"]
        return body


def _make_world(client: TestClient[Any]) -> World:
    world = World()
    for resource in sorted(RESOURCES.resources, key=RESOURCES.rank):
        response = client.post(resource.path, json=world.body(resource), headers=auth(ADMIN, admin=True))
        assert response.status_code == 201, response.text
        world.records[resource.name] = response.json()
        world.etags[resource.name] = response.headers["etag"]
    return world


Request = tuple[str, str, dict[str, str], bytes | None]
"""method, path, headers, body."""


def _requests(table: EndpointTable, world: World) -> Iterator[tuple[str, Request]]:
    """Requests to every endpoint of the table, valid and not, named; those that delete come last."""
    admin = {**auth(ADMIN, admin=True), "Origin": ORIGIN}  # and so from a page of an allowed origin: CORS too
    json_body = {"Content-Type": "application/json"}
    deletes: list[tuple[str, Request]] = []
    for endpoint in table.endpoints:
        resource = next((one for one in RESOURCES.resources if endpoint.tag == one.name), None)
        record = world.records[resource.name] if resource is not None else None
        params = dict.fromkeys(endpoint.parameters, record["id"] if record is not None else "docs-init.js")
        path = endpoint.path.format(**params)
        if endpoint.path.startswith(PUBLIC_PREFIX):  # a public link's token: the one the world's create showed
            path = next(one["link"] for one in world.records.values() if "link" in one)
        label = f"{endpoint.method} {endpoint.path}"
        missing = endpoint.path.format(**dict.fromkeys(endpoint.parameters, MISSING_ID))
        if endpoint.method == "GET":
            yield f"{label} as admin", ("GET", path, admin, None)
            yield f"{label} as bob", ("GET", path, auth(BOB), None)
            yield f"{label} without a token", ("GET", path, {}, None)
            yield f"{label} with an unknown parameter", ("GET", f"{path}?colour=brown", admin, None)
            if endpoint.parameters:
                yield f"{label} of a missing record", ("GET", missing, admin, None)
            if resource is not None and endpoint.parameters and not endpoint.path.endswith("history"):
                tag = {"If-None-Match": world.etags[resource.name]}
                yield f"{label} not modified", ("GET", path, {**admin, **tag}, None)
        elif endpoint.method in ("POST", "PUT", "PATCH") and resource is not None:
            values = {} if endpoint.method == "PATCH" else world.body(resource, another=endpoint.method == "POST")
            body = httpx.Request("POST", "/", json=values).content
            yield f"{label} valid", (endpoint.method, path, {**admin, **json_body}, body)
            yield f"{label} invalid", (endpoint.method, path, {**admin, **json_body}, b'{"colour": 1}')
            yield f"{label} not JSON", (endpoint.method, path, {**admin, "Content-Type": "text/plain"}, body)
            yield f"{label} malformed JSON", (endpoint.method, path, {**admin, **json_body}, b'{"name": ')
            yield f"{label} without a token", (endpoint.method, path, json_body, body)
            if endpoint.parameters:
                stale = {"If-Match": '"00000000000000000000"'}
                yield f"{label} stale", (endpoint.method, path, {**admin, **json_body, **stale}, body)
                yield f"{label} of a missing record", (endpoint.method, missing, {**admin, **json_body}, body)
                yield f"{label} as bob", (endpoint.method, path, {**auth(BOB), **json_body}, body)
        elif endpoint.method == "POST":  # an endpoint of no resource, such as a stream's ticket: no body
            yield f"{label} valid", ("POST", path, admin, None)
            yield f"{label} without a token", ("POST", path, {}, None)
        elif endpoint.method == "DELETE":
            yield f"{label} of a missing record", ("DELETE", missing, admin, None)
            yield f"{label} as bob", ("DELETE", path, auth(BOB), None)
            assert resource is not None
            deletes.append((_deletion_order(resource), f"{label} valid", ("DELETE", path, admin, None)))
    for _, label, request in sorted(deletes, key=lambda deletion: deletion[0]):
        yield label, request


def _deletion_order(resource: Resource) -> tuple[bool, int]:
    """Referring records first, and last those that records may not go without (the vaccine, which the
    vaccinations made meanwhile still name until their pet's deletion takes them along)."""
    restricted = any(dependent.reference.on_delete is OnDelete.RESTRICT for dependent in RESOURCES.dependents(resource))
    return restricted, -RESOURCES.rank(resource)


def _send(both: Both, request: Request, *, framework: bool) -> httpx.Response:
    method, path, headers, body = request
    return both.client(framework=framework).request(method, path, headers=headers, content=body)


def _shape(response: httpx.Response, world: World) -> tuple[int, dict[str, str], str]:
    """An answer without what is its own world's: the status, the headers but CORS's and those that name this
    answer, and the body with this world's ids, times, cursors and tags replaced by what they stand for."""
    names = {record["id"]: f"<{name}>" for name, record in world.records.items()}
    # The metrics count the requests of the process so far: the same figures twice only by chance.
    text = "<figures>" if response.request.url.path == "/metrics" else response.text
    text = _UUID.sub(lambda match: names.get(match.group(0), "<id>"), text)
    text = _SECRET.sub('"secret":"<secret>"', _TICKET.sub('"ticket":"<ticket>"', text))
    text = _LINK.sub('"link":"<link>"', text)
    text = _CURSOR.sub('"cursor":"<cursor>"', _ETAG.sub('"<etag>"', _TIMESTAMP.sub("<time>", text)))
    headers = {
        name: _UUID.sub(lambda match: names.get(match.group(0), "<id>"), _ETAG.sub("<etag>", value))
        for name, value in response.headers.items()
        if name not in PER_ANSWER
    }
    return response.status_code, headers, text


def test_every_route_answers_alike_below_the_framework_and_through_it(both: Both, database_url: str) -> None:
    table = both.table
    answers: dict[bool, dict[str, tuple[int, dict[str, str], str]]] = {}
    for framework in (False, True):
        asyncio.run(wipe(database_url))
        world = _make_world(both.client(framework=framework))
        answers[framework] = {
            label: _shape(_send(both, request, framework=framework), world)
            for label, request in _requests(table, world)
        }

    assert answers[False].keys() == answers[True].keys()
    differ = {
        label: (answers[False][label], answers[True][label])
        for label in answers[False]
        if answers[False][label] != answers[True][label]
    }
    assert not differ, differ
    statuses = {label: shape[0] for label, shape in answers[False].items()}
    assert 500 not in statuses.values(), statuses
    # Each resource's every endpoint was asked, and did something: no route of the table is left out.
    for endpoint in table.endpoints:
        label = f"{endpoint.method} {endpoint.path}"
        assert any(name.startswith(label) and status < 300 for name, status in statuses.items()), label


def test_a_second_record_of_each_resource_differs_in_its_unique_values() -> None:
    for resource in RESOURCES.resources:
        for unique in resource.unique:
            assert set(unique.fields) & set(ANOTHER.get(resource.name, {})), (resource.name, unique.fields)


def test_the_operations_answered_are_the_documents(both: Both) -> None:
    table = both.table
    document = both.direct.get("/openapi.json").json()

    documented = {(path, method.upper()) for path, item in document["paths"].items() for method in item}
    answered = {(endpoint.path, endpoint.method) for endpoint in table.endpoints}

    assert answered == documented
    assert {operation["operationId"] for item in document["paths"].values() for operation in item.values()} == {
        endpoint.operation_id for endpoint in table.endpoints
    }


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "TRACE", "MADEUP"])
@pytest.mark.parametrize("framework", [False, True], ids=["direct", "framework"])
def test_a_path_allows_exactly_its_endpoints_methods(both: Both, method: str, framework: bool) -> None:
    table, client = both.table, both.client(framework=framework)
    document = client.get("/openapi.json").json()
    admin = auth(ADMIN, admin=True)
    for path, item in document["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", MISSING_ID if path.startswith("/v1/") else "docs-init.js", path)
        allowed = {name.upper() for name in item} | {"OPTIONS"} | ({"HEAD"} if "get" in item else set())
        options = client.options(concrete, headers=admin)
        assert options.status_code == 204, (path, options.text)
        assert set(options.headers["allow"].split(", ")) == allowed, path
        assert table.allow(path) == options.headers["allow"]
        if method.lower() in item:
            continue
        response = client.request(method, concrete, headers=admin)
        assert response.status_code == 405, (path, method, response.text)
        assert response.json()["code"] == 993
        assert set(response.headers["allow"].split(", ")) == allowed, path


@pytest.mark.parametrize("framework", [False, True], ids=["direct", "framework"])
def test_metrics_name_each_endpoint_by_its_template(both: Both, framework: bool) -> None:
    admin = auth(ADMIN, admin=True)
    client = both.client(framework=framework)
    world_pet = client.post("/v1/pets", json={"name": "Rex", "petType": "Dog"}, headers=admin).json()
    for path in (f"/v1/pets/{world_pet['id']}", f"/v1/pets/{world_pet['id']}/history", "/v1/pets/"):
        client.get(path, headers=admin)
        client.options(path, headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})

    text = client.get("/metrics").text

    routes = set(re.findall(r'petrecords_http_requests_total\{[^}]*route="([^"]+)"', text))
    assert {"/v1/pets", "/v1/pets/{petId}", "/v1/pets/{petId}/history"} <= routes
    assert not any(world_pet["id"] in route for route in routes)
