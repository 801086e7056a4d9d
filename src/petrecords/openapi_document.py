"""The OpenAPI 3.1 document of the service, made from the table of endpoints it answers (each one's operation)
and the declarations of its resources (their schemas), so that it says exactly what the service does.

The whole document is put together here; petrecords.openapi holds its building blocks (parameters, headers,
failure answers), and resources/openapi_operations.py the operation of each endpoint of a resource."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import msgspec

from petrecords.changes.feed import CHANGES_TAG, change_schemas
from petrecords.config import Settings, configured_lists
from petrecords.endpoints import EndpointTable
from petrecords.openapi import HEADERS, SERVICE_ERROR, DocumentContext
from petrecords.ops import HEALTH_SCHEMA, OPS_TAG
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.fields import SchemaContext
from petrecords.resources.schemas import resource_schemas

CHECK_ORDER = "401, 429, 413, 415, 400, 404, 403, 412, 409"


def service_version() -> str:
    """The version of the installed package: the one `petrecords --version` and the document both state."""
    return metadata.version("petrecords")


def _description(settings: Settings) -> str:
    return (
        "Pets' records: the pets, the vaccine catalogue, each pet's vaccinations and when the next dose is due, "
        "with the full history of every record and a feed of every change. Every `/v1` operation needs a bearer "
        "token. Every failure is a ServiceError body. Every JSON answer ends with a newline. Checks run in this "
        f"order: {CHECK_ORDER}. Someone else's "
        "record answers exactly as one that does not exist (404). OPTIONS on a path answers 204 with `Allow` (on a "
        "`/v1` path after the token check); HEAD is answered wherever GET is, without the body; a method a path "
        "does not allow is 405 with `Allow`. A path the router would read as another one (an empty segment, an "
        "encoded slash or backslash) is 404. Request bodies are strict JSON: no duplicate members, no NaN, at most "
        f"32 levels deep. A request body must arrive within {settings.body_timeout_seconds:g} seconds, counted from "
        "when the service starts to read it (after the token and rate-limit checks), or the answer is 408 and the "
        f"connection is closed. A request head must be complete within {settings.idle_timeout_seconds:g} seconds "
        "of the connection opening or of the previous answer on it, or the connection is closed without an "
        "answer.\n\n"
        "Exception to the ServiceError bodies: the HTTP server refuses some requests before the service "
        "runs, with an empty body, none of the headers documented here, and the connection closed. "
        "400: a raw 0xFF or NUL byte, or a space, in the target; a header line without a colon, with white "
        "space before the colon, folded, or with a NUL byte in its value; a negative, non-numeric or "
        "list-valued Content-Length, or two different ones; a Transfer-Encoding other than chunked; a "
        "malformed method, an unknown HTTP version or none, or bytes that are not HTTP. 431: more than 100 "
        "header lines, or a request head over 80 KiB (always over 160 KiB). 414: a target of 65,535 bytes "
        "or more. The HTTP/2 preface is answered by closing the connection."
    )


def _tags(resources: ResourceSet) -> list[dict[str, str]]:
    return [
        *({"name": resource.name, "description": resource.description} for resource in resources.resources),
        {"name": CHANGES_TAG, "description": "The history of every record, as one feed in commit order."},
        {"name": OPS_TAG, "description": "Liveness, readiness, metrics and this document: no token."},
    ]


def build_openapi(settings: Settings, resources: ResourceSet, table: EndpointTable) -> bytes:
    context = DocumentContext(settings=settings, schemas=SchemaContext(configured_lists(settings)))
    paths: dict[str, Any] = {}
    for endpoint in table.endpoints:
        operation = {
            "operationId": endpoint.operation_id,
            "tags": [endpoint.tag],
            "summary": endpoint.summary,
            **endpoint.document(context),
        }
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = operation
    schemas: dict[str, Any] = {}
    for resource in resources.resources:
        schemas.update(resource_schemas(resource, context.schemas, settings))
    schemas.update(change_schemas(resources, settings))
    schemas["ServiceError"] = SERVICE_ERROR
    schemas["Health"] = HEALTH_SCHEMA
    document = {
        "openapi": "3.1.0",
        "info": {"title": "Pet Records API", "version": service_version(), "description": _description(settings)},
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "tags": _tags(resources),
        "paths": paths,
        "components": {
            "schemas": schemas,
            "headers": HEADERS,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "The caller is the token's e-mail claim; the role `admin` in its roles claim "
                    "makes the administrator; its groups claim lists the caller's groups (names of 1-100 letters, "
                    "digits and `. _ : @ - /`; one leading `/`, as Keycloak writes a group's full path, is not part "
                    "of the name). Each claim is named by a setting: a claim's name, taken whole when the token has "
                    "it, or a dotted path into nested objects (`realm_access.roles`). A token that is not valid is "
                    "401 with the same message whatever the reason, which goes to the service's log. A request with "
                    "more than one Authorization header is 401. An operation whose security requirement names the "
                    "role `admin` is the administrator's alone (403 otherwise).",
                }
            },
        },
    }
    return msgspec.json.encode(document)
