"""Building blocks of the OpenAPI document: parameters, headers, and answers, each failure's from the one
exception tree of petrecords.errors. petrecords.openapi_document puts the whole document together from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from petrecords import errors
from petrecords.config import Settings
from petrecords.errors import ServiceError
from petrecords.resources.fields import SchemaContext

HEADERS: dict[str, Any] = {
    "X-Request-ID": {
        "description": "The request's id: echoed when the request sent a sane token (at most 128 characters "
        "of letters, digits and ._:+/=-), generated otherwise. It also appears in the access log.",
        "required": True,
        "schema": {"type": "string", "pattern": "^[A-Za-z0-9._:+/=-]{1,128}$"},
    },
    "ETag": {
        "description": "Strong validator of the record; changes on every write.",
        "required": True,
        "schema": {"type": "string", "pattern": '^"[\\x21\\x23-\\x7e\\x80-\\xff]*"$'},
    },
    "Location": {
        "description": "Path of the created record.",
        "required": True,
        "schema": {
            "type": "string",
            "pattern": "^/v1/[a-z-]+/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        },
    },
    "Allow": {"description": "Methods allowed on this path.", "required": True, "schema": {"type": "string"}},
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    },
    "WWW-Authenticate": {
        "description": '`Bearer`, plus `error="invalid_token"` when a token was sent.',
        "required": True,
        "schema": {"type": "string", "enum": ["Bearer", 'Bearer error="invalid_token"']},
    },
    "Idempotent-Replayed": {
        "description": "`true` when the response is the replay of an earlier request with the same Idempotency-Key.",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "Cache-Control": {
        "description": "`no-store` on every response to an authenticated request, and on every `/v1` response.",
        "required": True,
        "schema": {"type": "string", "const": "no-store"},
    },
    "X-Content-Type-Options": {
        "description": "`nosniff`.",
        "required": True,
        "schema": {"type": "string", "const": "nosniff"},
    },
    "Connection": {
        "description": "`close`: the server closes the connection after this answer.",
        "required": True,
        "schema": {"type": "string", "const": "close"},
    },
}
_STANDARD_HEADERS = ("X-Request-ID", "X-Content-Type-Options")
PRIVATE = ("Cache-Control",)
"""The headers of an answer that is the caller's alone."""


def headers(*names: str) -> dict[str, Any]:
    return {name: {"$ref": f"#/components/headers/{name}"} for name in (*_STANDARD_HEADERS, *names)}


def parameter(
    name: str,
    schema: dict[str, Any],
    description: str,
    *,
    where: str = "query",
    required: bool = False,
    several: bool = False,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": name,
        "in": where,
        "required": required,
        "description": description,
        "schema": schema,
    }
    if several:
        document["style"], document["explode"] = "form", False
    return document


# The headers each failure carries besides the standard ones.
_ERROR_HEADERS: dict[type[ServiceError], tuple[str, ...]] = {
    errors.Unauthenticated: ("WWW-Authenticate",),
    errors.RateLimited: ("Retry-After",),
    errors.DatabaseUnavailable: ("Retry-After",),
    errors.MethodNotAllowed: ("Allow",),
    errors.BodyTimeout: ("Connection",),
}


def error_response(
    error: type[ServiceError], *, description: str | None = None, private: bool = True
) -> dict[str, Any]:
    """The answer of one failure: a ServiceError body with its code."""
    extra = _ERROR_HEADERS.get(error, ())
    if private and error is not errors.MethodNotAllowed:
        extra = (*extra, *PRIVATE)
    return {
        "description": f"{description or error.meaning} (code {error.code})",
        "headers": headers(*extra),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServiceError"}}},
    }


def json_response(
    description: str, schema: str, *header_names: str, links: dict[str, Any] | None = None
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "headers": headers(*header_names),
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }
    if links:
        response["links"] = links
    return response


EVERY_API_FAILURE: tuple[type[ServiceError], ...] = (
    errors.ValidationFailed,
    errors.Unauthenticated,
    errors.RateLimited,
    errors.InternalError,
    errors.DatabaseUnavailable,
)
"""The failures every API operation can answer."""


def api_errors(
    *failures: type[ServiceError], descriptions: dict[type[ServiceError], str] | None = None
) -> dict[str, Any]:
    """The failures of an API operation: those every one can answer, and the given ones (with their own
    description). Two failures of one status are one answer, whose description names both codes."""
    described = descriptions or {}
    by_status: dict[int, list[type[ServiceError]]] = {}
    for failure in (*EVERY_API_FAILURE, *failures):
        listed = by_status.setdefault(failure.status, [])
        if failure not in listed:
            listed.append(failure)
    answers: dict[str, Any] = {}
    for status, listed in sorted(by_status.items()):
        answer = error_response(listed[0], description=described.get(listed[0]))
        for other in listed[1:]:
            answer["description"] += f"; or: {described.get(other, other.meaning)} (code {other.code})"
        answers[str(status)] = answer
    return answers


SERVICE_ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "additionalProperties": False,
    "properties": {
        "code": {"type": "integer", "enum": sorted({failure.code for failure in errors.ANSWERED})},
        "message": {"type": "string"},
        "errors": {
            "type": "object",
            "description": "Validation failures (994) only: each offending field or parameter → messages.",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
}


@dataclass(frozen=True)
class DocumentContext:
    """What an operation's document depends on: the settings (limits, page sizes) and the configured lists."""

    settings: Settings
    schemas: SchemaContext
