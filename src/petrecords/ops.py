"""Operational endpoints (no token): liveness, readiness, metrics, the API description and its docs page."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

from petrecords import errors
from petrecords.endpoints import Access, Answer, Call, Endpoint
from petrecords.errors import DatabaseUnavailable, NotFound
from petrecords.http import error_answer
from petrecords.openapi import DocumentContext, error_response, headers, json_response, parameter
from petrecords.services import Services

# Found, not imported: the package's import brings Jinja with it, for templates the service does not use.
_DOCS_ASSETS = Path(str(importlib.util.find_spec("swagger_ui").origin)).parent / "static"  # type: ignore[union-attr]
_DOCS_FILES = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}
_DOCS_PAGE = b"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Pet Records API</title>
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
  <link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/docs-init.js"></script>
</body>
</html>
"""
# Kept out of the page so that a strict Content-Security-Policy (no inline script) can hold.
_DOCS_INIT = b"""window.ui = SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true});
"""
_DOCS_CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"


OPS_TAG = "operations"
HEALTH_SCHEMA = {
    "type": "object",
    "required": ["status"],
    "additionalProperties": False,
    "properties": {"status": {"type": "string", "enum": ["ok", "ready"]}},
}


class OpsHandlers:
    """The handlers of the operational endpoints, those an operator's tools call (no resource's: those are
    resources/handlers.py)."""

    def __init__(self, services: Services, openapi: Callable[[], bytes]) -> None:
        self.services = services
        self._openapi = openapi

    async def healthz(self, call: Call) -> Answer:
        return Answer(200, b'{"status":"ok"}')

    async def readyz(self, call: Call) -> Answer:
        unready = await self._unready()
        if unready is None:
            return Answer(200, b'{"status":"ready"}')
        return error_answer(DatabaseUnavailable(f"Not ready: {unready}."))

    async def _unready(self) -> str | None:
        """Why the instance should get no requests yet, or None when it is ready."""
        stopping = self.services.stopping_file
        if stopping is not None and stopping.exists():
            # Shutting down: a load balancer takes this instance out while it still answers what it gets.
            return "the instance is shutting down"
        ready = self.services.ready_file
        if ready is not None and not ready.exists():
            return "the instance's workers are still starting"
        store = self.services.store_or_none
        if store is None or not await store.schema_is_current():
            return "the database does not answer or its schema is not current"
        return await self.services.verifier.unready()

    async def metrics(self, call: Call) -> Answer:
        return Answer(200, self.services.metrics.render(), media_type="text/plain; version=0.0.4")

    async def openapi(self, call: Call) -> Answer:
        return Answer(200, self._openapi())

    async def docs_page(self, call: Call) -> Answer:
        return Answer(200, _DOCS_PAGE, {"Content-Security-Policy": _DOCS_CSP}, media_type="text/html")

    async def docs_asset(self, call: Call) -> Answer:
        name = call.params["name"]
        if name == "docs-init.js":
            return Answer(200, _DOCS_INIT, media_type="text/javascript")
        media_type = _DOCS_FILES.get(name)
        if media_type is None:
            raise NotFound()
        return Answer(
            200,
            (_DOCS_ASSETS / name).read_bytes(),
            {"Cache-Control": "public, max-age=86400"},
            media_type=media_type,
        )


def _health(ready: bool) -> Callable[[DocumentContext], dict[str, Any]]:
    def document(context: DocumentContext) -> dict[str, Any]:
        responses: dict[str, Any] = {"200": json_response("OK", "Health")}
        if ready:
            responses["503"] = error_response(errors.DatabaseUnavailable, private=False)
        return {"security": [], "responses": responses}

    return document


def _plain(description: str, media_type: str, schema: dict[str, Any]) -> Callable[[DocumentContext], dict[str, Any]]:
    def document(context: DocumentContext) -> dict[str, Any]:
        return {
            "security": [],
            "responses": {
                "200": {"description": description, "headers": headers(), "content": {media_type: {"schema": schema}}}
            },
        }

    return document


def _asset_document(context: DocumentContext) -> dict[str, Any]:
    names = sorted((*_DOCS_FILES, "docs-init.js"))
    return {
        "security": [],
        "parameters": [
            parameter("name", {"type": "string", "enum": names}, "The file's name.", where="path", required=True)
        ],
        "responses": {
            "200": {
                "description": "The file.",
                "headers": headers(),
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            },
            "404": error_response(errors.NotFound, private=False),
        },
    }


def ops_endpoints(services: Services, openapi: Callable[[], bytes]) -> list[Endpoint]:
    """The operational endpoints: no token."""
    ops = OpsHandlers(services, openapi)

    def endpoint(path: str, operation_id: str, summary: str, handle: Any, document: Any) -> Endpoint:
        return Endpoint("GET", path, operation_id, OPS_TAG, summary, handle, document, access=Access.OPEN)

    return [
        endpoint("/healthz", "healthz", "Liveness: 200 while the process serves", ops.healthz, _health(ready=False)),
        endpoint(
            "/readyz",
            "readyz",
            "Readiness: the database answers, the schema is current and tokens can be verified",
            ops.readyz,
            _health(ready=True),
        ),
        endpoint("/health", "health", "Readiness, as /readyz", ops.readyz, _health(ready=True)),
        endpoint(
            "/metrics",
            "metrics",
            "Prometheus metrics",
            ops.metrics,
            _plain("Prometheus text format.", "text/plain", {"type": "string"}),
        ),
        endpoint(
            "/openapi.json",
            "openapi",
            "This document",
            ops.openapi,
            _plain("OpenAPI 3.1 document.", "application/json", {"type": "object"}),
        ),
        endpoint(
            "/docs",
            "docs",
            "Interactive API documentation (works offline)",
            ops.docs_page,
            _plain("HTML page.", "text/html", {"type": "string"}),
        ),
        endpoint(
            "/docs/assets/{name}", "docsAsset", "A file of the documentation page", ops.docs_asset, _asset_document
        ),
    ]
