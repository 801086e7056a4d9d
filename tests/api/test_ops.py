"""Operational endpoints: health, readiness, metrics, the OpenAPI document and its docs page (section 8)."""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import DEFAULT_PET_TYPES, Settings
from petrecords.registry import RESOURCES
from tests.support import FIELDS, auth, pet_body, run_sql

Client = AsyncTestClient[Any]
MakeClient = Callable[[Settings], AsyncTestClient[Any]]

RECORD_PATH = "/v1/pets/{petId}"
# Every status the contract names for each operation (sections 3, 5, 6, 7).
DOCUMENTED_STATUSES = {
    ("/v1/pets", "post"): {201, 400, 401, 403, 408, 409, 413, 415, 422, 429, 500, 503},
    ("/v1/pets", "get"): {200, 400, 401, 429, 500, 503},
    (RECORD_PATH, "get"): {200, 304, 401, 404, 429, 500, 503},
    (RECORD_PATH, "put"): {200, 400, 401, 403, 404, 408, 412, 413, 415, 429, 500, 503},
    (RECORD_PATH, "patch"): {200, 400, 401, 403, 404, 408, 412, 413, 415, 429, 500, 503},
    (RECORD_PATH, "delete"): {200, 401, 404, 412, 429, 500, 503},
}
LIST_PARAMETERS = {
    "pageIndex",
    "pageSize",
    "ids",
    "petType",
    "ownerId",
    "name",
    "search",
    "createdFrom",
    "createdTo",
    "modifiedFrom",
    "modifiedTo",
    "sort",
    "order",
    # The conventions of web data providers (contract v3 section 4), for the sort fields of a pet.
    "q",
    "id",
    "id_ne",
    "name_like",
    "petType_ne",
    "ownerId_ne",
    "createdAt_gte",
    "createdAt_lte",
    "createdBy_ne",
    "modifiedAt_gte",
    "modifiedAt_lte",
    "modifiedBy_ne",
    # The clinic's fields (contract v3 section 2) and whose records (section 12).
    "birthDateFrom",
    "birthDateTo",
    "birthDate_gte",
    "birthDate_lte",
    "breed",
    "breed_like",
    "microchip",
    "microchip_ne",
    "neutered",
    "neutered_ne",
    "sex",
    "sex_ne",
    # Contract v4 section 2: whether the pet died (deceasedAt, a date, takes the bounds).
    "deceased",
    "deceasedAt_gte",
    "deceasedAt_lte",
    "access",
}
PET_FIELDS = FIELDS
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\d+)?$")
_LABEL = re.compile(r'(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"')


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: (name, labels, value)."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        labels = {label["key"]: label["value"] for label in _LABEL.finditer(match["labels"] or "")}
        samples.append((match["name"], labels, float(match["value"])))
    return samples


def _resolve(document: dict[str, Any], reference: str) -> Any:
    assert reference.startswith("#/"), reference
    node: Any = document
    for part in reference[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _references(value)
    elif isinstance(node, list):
        for item in node:
            yield from _references(item)


def _deref(document: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        node = _resolve(document, node["$ref"])
    return node


def _parameters(document: dict[str, Any], path: str, method: str) -> list[dict[str, Any]]:
    item = document["paths"][path]
    return [_deref(document, p) for p in (*item.get("parameters", []), *item[method].get("parameters", []))]


NOT_READY = {"code": 986, "message": "Not ready: the database does not answer or its schema is not current."}


def assert_not_ready(response: httpx.Response) -> None:
    """The answer of /readyz (or /health) when the service cannot serve: a ServiceError, 503/986, Retry-After."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == NOT_READY
    assert int(response.headers["retry-after"]) >= 1


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def unreachable(make_settings: Callable[..., Settings], database_url: str, tmp_path: Path) -> Settings:
    """Settings naming a database that cannot be opened: a closed port, or a directory for SQLite."""
    if database_url.startswith("sqlite"):
        return make_settings(database_url=f"sqlite:///{tmp_path}")
    return make_settings(
        database_url=f"postgresql://postgres@127.0.0.1:{_closed_port()}/petrecords", db_connect_timeout_seconds=2
    )


class TestHealth:
    async def test_healthz_is_200_ok(self, client: Client) -> None:
        response = await client.get("/healthz")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert response.json() == {"status": "ok"}

    @pytest.mark.parametrize("path", ["/readyz", "/health"])
    async def test_ready_when_migrated(self, client: Client, path: str) -> None:
        response = await client.get(path)

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        assert response.json() == {"status": "ready"}

    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/health", "/metrics", "/openapi.json", "/docs"])
    async def test_ops_endpoints_need_no_token_and_ignore_a_bad_one(self, client: Client, path: str) -> None:
        without = await client.get(path)
        with_garbage = await client.get(path, headers={"Authorization": "Bearer garbage"})

        assert without.status_code == 200
        assert with_garbage.status_code == 200

    @pytest.mark.parametrize("path", ["/readyz", "/health"])
    async def test_not_ready_when_the_schema_is_not_current(self, client: Client, database_url: str, path: str) -> None:
        await run_sql(database_url, "UPDATE alembic_version SET version_num = 'x' || version_num")
        try:
            response = await client.get(path)
            healthz = await client.get("/healthz")
        finally:
            await run_sql(database_url, "UPDATE alembic_version SET version_num = substr(version_num, 2)")
        recovered = await client.get(path)

        assert_not_ready(response)
        assert healthz.json() == {"status": "ok"}
        assert recovered.json() == {"status": "ready"}

    async def test_not_ready_until_every_worker_of_the_server_accepts(self, settings: Settings, tmp_path: Path) -> None:
        ready = tmp_path / "ready"  # made by `petrecords serve` once its last worker accepts connections
        async with AsyncTestClient(app=create_app(settings, ready_file=ready)) as client:  # type: ignore[arg-type]
            starting = await client.get("/readyz")
            ready.touch()
            started = await client.get("/readyz")

        assert starting.status_code == 503
        assert starting.json() == {"code": 986, "message": "Not ready: the instance's workers are still starting."}
        assert int(starting.headers["retry-after"]) >= 1
        assert started.json() == {"status": "ready"}


class TestUnreachableDatabase:
    @pytest.mark.parametrize("path", ["/readyz", "/health"])
    async def test_not_ready_when_the_database_is_unreachable(
        self, make_client: MakeClient, unreachable: Settings, path: str
    ) -> None:
        async with make_client(unreachable) as client:
            response = await client.get(path)
            healthz = await client.get("/healthz")

        assert_not_ready(response)
        assert healthz.status_code == 200
        assert healthz.json() == {"status": "ok"}

    @pytest.mark.parametrize(("method", "path"), [("GET", "/v1/pets"), ("POST", "/v1/pets"), ("GET", "/v1/pets/x")])
    async def test_api_answers_503_when_the_database_is_unreachable(
        self, make_client: MakeClient, unreachable: Settings, method: str, path: str
    ) -> None:
        path = path.replace("/x", f"/{uuid.uuid4()}")
        async with make_client(unreachable) as client:
            response = await client.request(method, path, json=pet_body() if method == "POST" else None, headers=auth())

        assert response.status_code == 503
        assert response.json() == {"code": 986, "message": response.json()["message"]}
        assert int(response.headers["retry-after"]) >= 1


class TestMetrics:
    async def test_metrics_is_prometheus_text(self, client: Client) -> None:
        await client.get("/healthz")

        response = await client.get("/metrics")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        assert "# TYPE petrecords_http_requests_total counter" in response.text
        assert _samples(response.text)

    async def test_request_counts_by_route_and_status(self, client: Client) -> None:
        await client.get("/v1/pets", headers=auth())
        await client.get("/v1/pets", headers=auth())
        await client.get("/v1/pets")

        samples = _samples((await client.get("/metrics")).text)

        counts = {
            (labels.get("route"), labels.get("status")): value
            for name, labels, value in samples
            if name == "petrecords_http_requests_total"
        }
        assert counts[("/v1/pets", "200")] >= 2
        assert counts[("/v1/pets", "401")] >= 1

    async def test_routes_are_templates_not_concrete_paths(self, client: Client) -> None:
        created = await client.post("/v1/pets", json=pet_body(), headers=auth())
        pet_id = created.json()["id"]
        await client.get(f"/v1/pets/{pet_id}", headers=auth())
        await client.get(f"/v1/pets/{uuid.uuid4()}", headers=auth())

        text = (await client.get("/metrics")).text

        assert pet_id not in text
        routes = {labels["route"] for name, labels, _ in _samples(text) if name == "petrecords_http_requests_total"}
        assert len([route for route in routes if route.startswith("/v1/pets/")]) == 1

    async def test_latency_histogram_by_route_and_status(self, client: Client) -> None:
        await client.get("/v1/pets", headers=auth())

        samples = _samples((await client.get("/metrics")).text)

        buckets = [
            labels
            for name, labels, _ in samples
            if name.startswith("petrecords_") and name.endswith("_bucket") and labels.get("route") == "/v1/pets"
        ]
        assert any(labels.get("status") == "200" and "le" in labels for labels in buckets)

    async def test_database_pool_figures(self, client: Client) -> None:
        await client.get("/v1/pets", headers=auth())

        samples = _samples((await client.get("/metrics")).text)

        assert [value for name, _, value in samples if name == "petrecords_db_pool_connections"]

    async def test_database_pool_figures_by_state(self, client: Client) -> None:
        await client.get("/v1/pets", headers=auth())

        samples = _samples((await client.get("/metrics")).text)

        pool = {labels["state"]: value for name, labels, value in samples if name == "petrecords_db_pool_connections"}
        assert {"size", "checked_out", "overflow"} <= set(pool)
        assert pool["size"] >= 1
        assert 0 <= pool["checked_out"] <= pool["size"] + pool["overflow"]

    async def test_database_outages_are_counted_by_cause(self, make_client: MakeClient, unreachable: Settings) -> None:
        async with make_client(unreachable) as client:
            await client.get("/v1/pets", headers=auth())
            await client.post("/v1/pets", json=pet_body(), headers=auth())

            text = (await client.get("/metrics")).text

        assert "# TYPE petrecords_db_unavailable_total counter" in text
        counter = "petrecords_db_unavailable_total"
        counts = {labels["cause"]: value for name, labels, value in _samples(text) if name == counter}
        assert counts == {"connection": 2}


@pytest.mark.only_on("sqlite")  # the document is made from the endpoint table, whatever the database
class TestOpenApi:
    @pytest.fixture
    async def document(self, client: Client) -> dict[str, Any]:
        response = await client.get("/openapi.json")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/json")
        body: dict[str, Any] = response.json()
        return body

    async def test_is_openapi_3_1(self, document: dict[str, Any]) -> None:
        assert re.fullmatch(r"3\.1\.\d+", document["openapi"])
        assert document["info"]["title"]
        assert document["info"]["version"]

    async def test_documents_the_six_operations(self, document: dict[str, Any]) -> None:
        operations = {
            (path, method)
            for path in ("/v1/pets", RECORD_PATH)
            for method in document["paths"][path]
            if method in {"get", "put", "post", "delete", "patch", "head", "options"}
        }

        assert operations == set(DOCUMENTED_STATUSES)

    @pytest.mark.parametrize(("path", "method"), list(DOCUMENTED_STATUSES), ids=lambda value: str(value))
    async def test_every_contract_status_is_documented(self, document: dict[str, Any], path: str, method: str) -> None:
        responses = document["paths"][path][method]["responses"]

        documented = {int(status) for status in responses if status.isdigit()}
        assert DOCUMENTED_STATUSES[(path, method)] <= documented

    @pytest.mark.parametrize(("path", "method"), list(DOCUMENTED_STATUSES), ids=lambda value: str(value))
    async def test_error_responses_are_service_errors(self, document: dict[str, Any], path: str, method: str) -> None:
        responses = document["paths"][path][method]["responses"]

        for status, response in responses.items():
            if int(status) >= 400 and status not in ("414", "431"):
                schema = _deref(document, response)["content"]["application/json"]["schema"]
                assert _deref(document, schema) == document["components"]["schemas"]["ServiceError"], status

    async def test_only_an_over_long_request_target_has_no_service_error(self, document: dict[str, Any]) -> None:
        """The HTTP server refuses a request target over 64 KiB (414), or a head over 80 KiB (431), before the
        service sees it: the lists (the due list among them), whose targets can hold thousands of ids, say so."""
        bare = {
            (path, method, status)
            for path, operations in document["paths"].items()
            for method, operation in operations.items()
            if method != "parameters"
            for status, response in operation["responses"].items()
            if int(status) >= 400 and "content" not in _deref(document, response)
        }

        lists = [*(resource.path for resource in RESOURCES.resources), "/v1/due"]
        assert bare == {(path, "get", status) for path in lists for status in ("414", "431")}

    async def test_success_responses_describe_the_record(self, document: dict[str, Any]) -> None:
        for path, method, status in [
            ("/v1/pets", "post", "201"),
            (RECORD_PATH, "get", "200"),
            (RECORD_PATH, "put", "200"),
            (RECORD_PATH, "delete", "200"),
        ]:
            response = _deref(document, document["paths"][path][method]["responses"][status])
            schema = _deref(document, response["content"]["application/json"]["schema"])
            assert set(schema["properties"]) == PET_FIELDS
            assert set(schema["required"]) == PET_FIELDS

    async def test_list_response_describes_the_page(self, document: dict[str, Any]) -> None:
        response = _deref(document, document["paths"]["/v1/pets"]["get"]["responses"]["200"])

        schema = _deref(document, response["content"]["application/json"]["schema"])

        page_fields = {"items", "pageIndex", "pageSize", "totalPages", "totalCount", "hasPreviousPage", "hasNextPage"}
        assert set(schema["properties"]) == page_fields

    async def test_documented_headers(self, document: dict[str, Any]) -> None:
        def headers(path: str, method: str, status: str) -> set[str]:
            response = _deref(document, document["paths"][path][method]["responses"][status])
            return {name.lower() for name in response.get("headers", {})}

        assert {"location", "etag"} <= headers("/v1/pets", "post", "201")
        assert "etag" in headers(RECORD_PATH, "get", "200")
        assert "www-authenticate" in headers("/v1/pets", "get", "401")
        assert "retry-after" in headers("/v1/pets", "get", "429")
        assert "retry-after" in headers("/v1/pets", "get", "503")

    async def test_service_error_schema(self, document: dict[str, Any]) -> None:
        schema = document["components"]["schemas"]["ServiceError"]

        assert set(schema["properties"]) == {"code", "message", "errors"}
        assert set(schema["required"]) == {"code", "message"}
        assert schema["properties"]["code"]["type"] == "integer"
        assert schema["properties"]["message"]["type"] == "string"
        assert schema["properties"]["errors"]["type"] == "object"

    async def test_every_list_parameter_is_documented(self, document: dict[str, Any]) -> None:
        parameters = _parameters(document, "/v1/pets", "get")

        assert {p["name"] for p in parameters if p["in"] == "query"} == LIST_PARAMETERS

    @pytest.mark.parametrize("name", ["ids", "id", "petType", "sort", "order"])
    async def test_multi_valued_parameters_are_arrays(self, document: dict[str, Any], name: str) -> None:
        parameter = next(p for p in _parameters(document, "/v1/pets", "get") if p["name"] == name)

        assert _deref(document, parameter["schema"])["type"] == "array"

    async def test_default_pet_types_are_documented(self, document: dict[str, Any]) -> None:
        text = json.dumps(document)

        for pet_type in DEFAULT_PET_TYPES:
            assert f'"{pet_type}"' in text or f" {pet_type}," in text or f" {pet_type}." in text, pet_type

    async def test_request_headers_are_documented(self, document: dict[str, Any]) -> None:
        def header_names(path: str, method: str) -> set[str]:
            return {p["name"].lower() for p in _parameters(document, path, method) if p["in"] == "header"}

        assert "idempotency-key" in header_names("/v1/pets", "post")
        assert "if-none-match" in header_names(RECORD_PATH, "get")
        assert "if-match" in header_names(RECORD_PATH, "put")
        assert "if-match" in header_names(RECORD_PATH, "delete")

    async def test_bearer_security_is_documented(self, document: dict[str, Any]) -> None:
        schemes = document["components"]["securitySchemes"].values()

        assert any(s["type"] == "http" and s["scheme"].lower() == "bearer" for s in schemes)
        for method in ("get", "post"):
            operation = document["paths"]["/v1/pets"][method]
            assert operation.get("security", document.get("security"))

    @pytest.mark.parametrize("path", ["/healthz", "/readyz", "/health", "/metrics", "/openapi.json", "/docs"])
    async def test_operational_endpoints_are_documented(self, document: dict[str, Any], path: str) -> None:
        assert "200" in document["paths"][path]["get"]["responses"]

    @pytest.mark.parametrize("path", ["/readyz", "/health"])
    async def test_readiness_failure_is_documented(self, document: dict[str, Any], path: str) -> None:
        assert "503" in document["paths"][path]["get"]["responses"]

    async def test_a_certificates_json_is_documented_with_nothing_else(self, document: dict[str, Any]) -> None:
        content = document["paths"]["/public/certificates/{token}"]["get"]["responses"]["200"]["content"]
        facts = content["application/json"]["schema"]
        pet, dose = facts["properties"]["pet"], facts["properties"]["vaccinations"]["items"]

        for schema in (facts, pet, dose):
            assert schema["additionalProperties"] is False
            assert set(schema["required"]) == set(schema["properties"])
        assert dose["properties"]["state"]["enum"] == ["overdue", "due-soon", "current", "deceased", "superseded"]

    async def test_every_reference_resolves(self, document: dict[str, Any]) -> None:
        for reference in set(_references(document)):
            assert _resolve(document, reference) is not None, reference

    async def test_is_a_valid_openapi_document(self, document: dict[str, Any]) -> None:
        validator = pytest.importorskip("openapi_spec_validator")

        validator.validate(document)


@pytest.mark.only_on("sqlite")  # the page and its assets are files of the package
class TestDocs:
    async def test_docs_page_uses_only_local_assets(self, client: Client) -> None:
        response = await client.get("/docs")

        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/html")
        assets = re.findall(r"<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", response.text)
        assert assets
        assert not [asset for asset in assets if re.match(r"(?i)^(?:[a-z][a-z0-9+.-]*:|//)", asset)]

    async def test_docs_assets_load(self, client: Client) -> None:
        page = (await client.get("/docs")).text
        assets = re.findall(r"<(?:script|link)\b[^>]*?\b(?:src|href)\s*=\s*[\"']([^\"']+)[\"']", page)

        responses = {asset: await client.get(urljoin("/docs", asset)) for asset in assets}

        assert {asset: r.status_code for asset, r in responses.items()} == dict.fromkeys(assets, 200)
        assert all(r.content for r in responses.values())

    async def test_docs_load_this_services_openapi_document(self, client: Client) -> None:
        page = (await client.get("/docs")).text
        scripts = re.findall(r"<script\b[^>]*?\bsrc\s*=\s*[\"']([^\"']+)[\"']", page)
        local_scripts = [(await client.get(urljoin("/docs", src))).text for src in scripts]

        assert any("/openapi.json" in text for text in (page, *local_scripts))

    async def test_unknown_docs_asset_is_404(self, client: Client) -> None:
        response = await client.get("/docs/assets/..%2F..%2F..%2Fetc%2Fpasswd")
        other = await client.get("/docs/assets/nope.js")

        assert response.status_code == 404
        assert other.status_code == 404
        assert other.json()["code"] == 995
