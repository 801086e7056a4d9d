"""Operational endpoints (no token): liveness, readiness, metrics, the API description and its docs page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import swagger_ui
from litestar import Request, Response, get
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import FromPath

from petrecords.errors import DatabaseUnavailable
from petrecords.metrics import Metrics
from petrecords.responses import service_error_response
from petrecords.store.base import Store

_DOCS_ASSETS = Path(swagger_ui.__file__).parent / "static"
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


@get("/healthz", sync_to_thread=False)
def healthz() -> Response[bytes]:
    return Response(content=b'{"status":"ok"}', media_type="application/json")


@get(["/readyz", "/health"])
async def readyz(request: Request[Any, Any, Any], store: NamedDependency[Store]) -> Response[bytes]:
    stopping: Path | None = request.app.state.stopping_file
    if stopping is not None and stopping.exists():  # noqa: ASYNC240 - one stat costs less than a hop to a thread
        # Shutting down: a load balancer takes this instance out while it still answers what it gets.
        return service_error_response(DatabaseUnavailable("Not ready: the instance is shutting down."))
    ready: Path | None = request.app.state.ready_file
    if ready is not None and not ready.exists():  # noqa: ASYNC240 - as above
        return service_error_response(DatabaseUnavailable("Not ready: the instance's workers are still starting."))
    if await store.schema_is_current():
        return Response(content=b'{"status":"ready"}', media_type="application/json")
    return service_error_response(
        DatabaseUnavailable("Not ready: the database does not answer or its schema is not current.")
    )


@get("/metrics", sync_to_thread=False)
def metrics(metrics: NamedDependency[Metrics]) -> Response[bytes]:
    return Response(content=metrics.render(), media_type="text/plain; version=0.0.4")


@get("/openapi.json", sync_to_thread=False)
def openapi_document(openapi: NamedDependency[bytes]) -> Response[bytes]:
    return Response(content=openapi, media_type="application/json")


@get("/docs", sync_to_thread=False)
def docs_page() -> Response[bytes]:
    return Response(content=_DOCS_PAGE, media_type="text/html", headers={"Content-Security-Policy": _DOCS_CSP})


@get("/docs/assets/{name:str}", sync_to_thread=False)
def docs_asset(name: FromPath[str]) -> Response[bytes]:
    if name == "docs-init.js":
        return Response(content=_DOCS_INIT, media_type="text/javascript")
    media_type = _DOCS_FILES.get(name)
    if media_type is None:
        raise NotFoundException()
    return Response(
        content=(_DOCS_ASSETS / name).read_bytes(),
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=86400"},
    )


OPS_ROUTES = [healthz, readyz, metrics, openapi_document, docs_page, docs_asset]
