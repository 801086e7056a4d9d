"""The OpenAPI 3.1 document of the service, written to say exactly what the contract says."""

from __future__ import annotations

from typing import Any

import msgspec

from petrecords.config import Settings
from petrecords.pets.rules import (
    CONTROL_CHARACTERS,
    ENTITY_TAG_LIST,
    IDEMPOTENCY_KEY_MAX_LENGTH,
    LIST_PARAMETERS,
    MAX_IDS,
    MAX_PATTERN_LENGTH,
    MAX_SAFE_INTEGER,
    NAME_MAX_LENGTH,
    SORT_FIELD_NAMES,
    WHITE_SPACE,
)
from petrecords.values import EMAIL_PATTERN, MAX_EMAIL_LENGTH

_ERROR_CODES: dict[int, tuple[int, str]] = {
    304: (0, "Not modified: If-None-Match matches the current ETag."),
    400: (994, "Malformed JSON, or a field, parameter or header that fails validation or is unknown."),
    401: (997, "Missing, malformed, expired or otherwise invalid bearer token."),
    403: (997, "Authenticated but not permitted (a non-admin naming another owner)."),
    404: (995, "The specified resource was not found (unknown or malformed id, or a record of another owner)."),
    405: (993, "Method not allowed on this path."),
    408: (984, "The request body did not arrive in time; the connection is closed after this answer."),
    409: (991, "An idempotent request with the same key is still in progress."),
    412: (992, "If-Match does not match the record's current ETag."),
    413: (989, "Request body larger than the limit."),
    415: (988, "Request body not sent as application/json."),
    422: (990, "Idempotency-Key reused with a different request body."),
    429: (987, "Rate limit exceeded."),
    500: (500, "Unexpected error."),
    503: (986, "The database is unavailable."),
}

_TIMESTAMP = {
    "type": "string",
    "format": "date-time",
    "pattern": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
    "description": "RFC 3339, UTC, millisecond precision.",
    "examples": ["2026-11-21T16:06:29.123Z"],
}
# An e-mail address as the service reads one: an ASCII dot-atom local part and a host name of at least two
# labels. Not `format: email`, whose validators differ from it (some limit the local part to 64 characters).
_EMAIL = {
    "type": "string",
    "maxLength": MAX_EMAIL_LENGTH,
    "pattern": f"^{EMAIL_PATTERN}$",
    "examples": ["alice@example.com"],
}
_UUID = {"type": "string", "format": "uuid", "examples": ["019a8a4e-1f2b-7c3d-8e4f-5a6b7c8d9e0f"]}


def _character_class(chars: str) -> str:
    """The body of a character class of `chars`, runs of consecutive code points as ranges."""
    points = sorted({ord(char) for char in chars})
    runs: list[list[int]] = []
    for point in points:
        if runs and runs[-1][1] == point - 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    return "".join(f"\\u{first:04x}" if first == last else f"\\u{first:04x}-\\u{last:04x}" for first, last in runs)


# The rules of the service as JSON Schema patterns: ECMA 262 syntax, which Python's `re` reads alike.
_SPACE = _character_class(WHITE_SPACE)
_NAME_CORE = (
    f"[^{_SPACE}{CONTROL_CHARACTERS}](?:[^{CONTROL_CHARACTERS}]{{0,{NAME_MAX_LENGTH - 2}}}"
    f"[^{_SPACE}{CONTROL_CHARACTERS}])?"
)
# A stored name: trimmed, 1 to NAME_MAX_LENGTH characters, no control characters.
_NAME_PATTERN = f"^{_NAME_CORE}$"
# A name as sent: the same once the white space at both ends is trimmed.
_NAME_INPUT_PATTERN = f"^[{_SPACE}]*{_NAME_CORE}[{_SPACE}]*$"
_ENTITY_TAGS_PATTERN = rf"^(?:[ \t]*\*[ \t]*|{ENTITY_TAG_LIST})$"
# HTTP drops white space at both ends of a header value, so a key cannot start or end with a space.
_IDEMPOTENCY_KEY_PATTERN = rf"^[\x21-\x7e](?:[\x20-\x7e]{{0,{IDEMPOTENCY_KEY_MAX_LENGTH - 2}}}[\x21-\x7e])?$"


def _read_only(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "readOnly": True, "description": description}


def _schemas(settings: Settings) -> dict[str, Any]:
    pet_type = {
        "type": "string",
        "enum": list(settings.pet_types),
        "description": "One of the configured pet types, matched case-insensitively (any letter case is "
        "accepted); returned in its configured spelling.",
        "examples": [settings.pet_types[0]],
    }
    name_rule = (
        f"Trimmed of white space at both ends, then 1–{NAME_MAX_LENGTH} characters (code points) "
        "with no control characters (C0, DEL, C1)."
    )
    name = {
        "type": "string",
        "minLength": 1,
        "maxLength": NAME_MAX_LENGTH,
        "pattern": _NAME_PATTERN,
        "description": name_rule,
        "examples": ["Rex"],
    }
    # Sent names may carry white space at both ends, so their length is only known after trimming.
    name_input = {"type": "string", "pattern": _NAME_INPUT_PATTERN, "description": name_rule, "examples": ["Rex"]}
    read_only_props = {
        "id": _read_only(_UUID, "Record id (UUID version 7). In a PUT body, when present, it must equal the path id."),
        "createdAt": _read_only(_TIMESTAMP, "When the record was created."),
        "createdBy": _read_only(_EMAIL, "Who created the record."),
        "modifiedAt": _read_only(_TIMESTAMP, "Time of the last create or replace."),
        "modifiedBy": _read_only(_EMAIL, "Who last wrote the record."),
    }
    owner = {
        **_EMAIL,
        "description": "The owner. Defaults to the caller (on replace: the current owner); "
        "only an admin may name another user.",
    }
    return {
        "PetWrite": {
            "type": "object",
            "description": "The body of create and replace. Read-only fields may be sent back and are ignored "
            "(except `id` on replace). Any other field is rejected.",
            "required": ["name", "petType"],
            "additionalProperties": False,
            "properties": {
                "name": name_input,
                "petType": pet_type,
                "ownerId": {"oneOf": [owner, {"type": "null"}], "description": owner["description"]},
                **read_only_props,
            },
        },
        "Pet": {
            "type": "object",
            "required": ["id", "createdAt", "createdBy", "modifiedAt", "modifiedBy", "ownerId", "name", "petType"],
            "additionalProperties": False,
            "properties": {**read_only_props, "ownerId": owner, "name": name, "petType": pet_type},
        },
        "PetPage": {
            "type": "object",
            "required": [
                "items",
                "pageIndex",
                "pageSize",
                "totalPages",
                "totalCount",
                "hasPreviousPage",
                "hasNextPage",
            ],
            "additionalProperties": False,
            "properties": {
                "items": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}},
                "pageIndex": {"type": "integer", "minimum": 1},
                "pageSize": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": settings.max_page_size,
                    "description": "The page size used.",
                },
                "totalPages": {"type": "integer", "minimum": 0, "description": "ceil(totalCount / pageSize)."},
                "totalCount": {"type": "integer", "minimum": 0},
                "hasPreviousPage": {"type": "boolean", "description": "pageIndex > 1."},
                "hasNextPage": {"type": "boolean", "description": "pageIndex < totalPages."},
            },
        },
        "ServiceError": {
            "type": "object",
            "required": ["code", "message"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "integer", "enum": sorted({code for code, _ in _ERROR_CODES.values() if code})},
                "message": {"type": "string"},
                "errors": {
                    "type": "object",
                    "description": "Validation failures (994) only: each offending field or parameter → messages.",
                    "additionalProperties": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
        "Health": {
            "type": "object",
            "required": ["status"],
            "additionalProperties": False,
            "properties": {"status": {"type": "string", "enum": ["ok", "ready"]}},
        },
    }


_HEADERS = {
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
            "pattern": "^/v1/pets/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
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
    "Connection": {
        "description": "`close`: the server closes the connection after this answer.",
        "required": True,
        "schema": {"type": "string", "const": "close"},
    },
    "X-Content-Type-Options": {
        "description": "`nosniff`.",
        "required": True,
        "schema": {"type": "string", "const": "nosniff"},
    },
}

_STANDARD_HEADERS = ("X-Request-ID", "X-Content-Type-Options")


def _headers(*names: str) -> dict[str, Any]:
    return {name: {"$ref": f"#/components/headers/{name}"} for name in (*_STANDARD_HEADERS, *names)}


def _error(status: int, *extra_headers: str) -> dict[str, Any]:
    code, description = _ERROR_CODES[status]
    return {
        "description": f"{description} (code {code})",
        "headers": _headers(*extra_headers),
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServiceError"}}},
    }


def _json(description: str, schema: str, *headers: str, links: dict[str, Any] | None = None) -> dict[str, Any]:
    response = {
        "description": description,
        "headers": _headers(*headers),
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
    }
    if links:
        response["links"] = links
    return response


_CONDITIONAL_HEADERS = {"getPet": "If-None-Match", "replacePet": "If-Match", "deletePet": "If-Match"}


def _links(*operation_ids: str, with_etag: bool = True) -> dict[str, Any]:
    """Links from a response with a record to the operations on that record; with its ETag, each also
    has a variant that sends the ETag in the operation's conditional header."""
    pet_id = "$response.body#/id"
    links: dict[str, Any] = {}
    for operation_id in operation_ids:
        name = operation_id[0].upper() + operation_id[1:]
        links[name] = {"operationId": operation_id, "parameters": {"path.petId": pet_id}}
        if with_etag:
            header = _CONDITIONAL_HEADERS[operation_id]
            links[f"{name}{header.replace('-', '')}"] = {
                "operationId": operation_id,
                "parameters": {"path.petId": pet_id, f"header.{header}": "$response.header.ETag"},
            }
    return links


def _api_errors(*statuses: int) -> dict[str, Any]:
    """Errors every API operation can answer, plus the given ones."""
    private = ("Cache-Control",)
    errors = {
        "400": _error(400, *private),
        "401": _error(401, "WWW-Authenticate", *private),
        "429": _error(429, "Retry-After", *private),
        "500": _error(500, *private),
        "503": _error(503, "Retry-After", *private),
    }
    for status in statuses:
        extra = {405: ("Allow",), 408: ("Connection", *private)}.get(status, private)
        errors[str(status)] = _error(status, *extra)
    return errors


def _parameter(
    name: str,
    where: str,
    schema: dict[str, Any],
    description: str,
    *,
    required: bool = False,
    explode: bool | None = None,
) -> dict[str, Any]:
    parameter: dict[str, Any] = {
        "name": name,
        "in": where,
        "required": required,
        "description": description,
        "schema": schema,
    }
    if explode is not None:
        parameter["style"], parameter["explode"] = "form", explode
    return parameter


def _list_parameters(settings: Settings) -> list[dict[str, Any]]:
    date_time = {
        "type": "string",
        "format": "date-time",
        # Of RFC 3339 date-times, the service reads those with at most nine digits of a second, no leap
        # second and a year from 0001. (It also reads a space for the `+` of an offset sent unencoded.)
        "pattern": r"^(?:000[1-9]|00[1-9]\d|0[1-9]\d{2}|[1-9]\d{3})-\d{2}-\d{2}[Tt]\d{2}:\d{2}:[0-5]\d(?:\.\d{1,9})?"
        r"(?:[Zz]|[+-]\d{2}:\d{2})$",
    }
    patterns = "`%` and `_` are wildcards as in SQL LIKE; `\\%`, `\\_` and `\\\\` match themselves."
    pet_types = {"type": "string", "enum": list(settings.pet_types)}
    pattern = {"type": "string", "maxLength": MAX_PATTERN_LENGTH, "pattern": f"^[^{CONTROL_CHARACTERS}]*$"}
    several = "Comma-separated (as documented here) or repeated."
    parameters = [
        _parameter(
            "pageIndex",
            "query",
            {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER, "default": 1},
            "Page number, 1-based.",
        ),
        _parameter(
            "pageSize",
            "query",
            {"type": "integer", "minimum": 1, "default": settings.default_page_size},
            f"Records per page; values above {settings.max_page_size} are reduced to it.",
        ),
        _parameter(
            "ids",
            "query",
            {"type": "array", "minItems": 1, "maxItems": MAX_IDS, "items": _UUID},
            "Only these record ids. " + several,
            explode=False,
        ),
        _parameter(
            "petType",
            "query",
            {"type": "array", "minItems": 1, "items": pet_types},
            "Only these pet types (case-insensitive). " + several,
            explode=False,
        ),
        _parameter("ownerId", "query", _EMAIL, "Only this owner. For a non-admin, another owner matches nothing."),
        _parameter("name", "query", pattern, "Case-insensitive match of the whole name. " + patterns),
        _parameter("search", "query", pattern, "Case-insensitive substring of the name. " + patterns),
        _parameter("createdFrom", "query", date_time, "createdAt ≥ this (RFC 3339, `Z` or an offset)."),
        _parameter("createdTo", "query", date_time, "createdAt < this."),
        _parameter("modifiedFrom", "query", date_time, "modifiedAt ≥ this."),
        _parameter("modifiedTo", "query", date_time, "modifiedAt < this."),
        _parameter(
            "sort",
            "query",
            {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {
                    "type": "string",
                    "enum": [prefix + field for field in SORT_FIELD_NAMES for prefix in ("", "-")],
                },
                # Each field at most once, in one direction.
                "not": {
                    "anyOf": [
                        {"allOf": [{"contains": {"const": field}}, {"contains": {"const": "-" + field}}]}
                        for field in SORT_FIELD_NAMES
                    ]
                },
            },
            "Distinct fields, names matched case-insensitively; `-` sorts that field descending. " + several + " "
            "Default `createdAt`. Ties are broken by `id` ascending, so the order is total and stable; "
            "text sorts case-insensitively.",
            explode=False,
        ),
        _parameter(
            "order",
            "query",
            {"type": "string", "enum": ["asc", "desc"], "default": "asc"},
            "Direction of the sort fields without a `-` prefix.",
        ),
    ]
    if [parameter["name"] for parameter in parameters] != list(LIST_PARAMETERS):
        raise RuntimeError("the documented list parameters differ from the ones the service reads")
    return parameters


def build_openapi(settings: Settings) -> bytes:
    pet_id = _parameter("petId", "path", _UUID, "Record id. A malformed id answers 404.", required=True)
    entity_tags = {"type": "string", "pattern": _ENTITY_TAGS_PATTERN, "examples": ['"0f1e2d3c4b5a69788796"', "*"]}
    if_match = _parameter(
        "If-Match",
        "header",
        entity_tags,
        "`*` or a comma-separated list of ETags; when none matches (a weak one never does), nothing is written "
        "and the answer is 412. Anything else is 400.",
    )
    write_body = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PetWrite"}}},
    }
    pet_headers = ("ETag", "Cache-Control")
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Pet Records API",
            "version": "1.0.0",
            "description": "Pet records with a full audit trail. Every `/v1` operation needs a bearer token. "
            "Every failure is a ServiceError body. Checks run in this order: 401, 429, 413, 415, 400, 404, 403, 412. "
            "Someone else's record answers exactly as one that does not exist (404). OPTIONS on a `/v1` path "
            "answers 204 with `Allow` (after the token check); another undocumented method is 405 with `Allow`. "
            f"A request body must arrive within {settings.body_timeout_seconds:g} seconds, counted from when the "
            "service starts to read it (after the token and rate-limit checks), or the answer is 408 and the "
            "connection is closed. A request head must be complete within "
            f"{settings.idle_timeout_seconds:g} seconds of the connection opening or of the previous answer on "
            "it, or the connection is closed without an answer.\n\n"
            "Exception to the ServiceError bodies: the HTTP server refuses some requests before the service "
            "runs, with an empty body, none of the headers documented here, and the connection closed. "
            "400: a raw 0xFF or NUL byte, or a space, in the target; a header line without a colon, with white "
            "space before the colon, folded, or with a NUL byte in its value; a negative, non-numeric or "
            "list-valued Content-Length, or two different ones; a Transfer-Encoding other than chunked; a "
            "malformed method, an unknown HTTP version or none, or bytes that are not HTTP. 431: more than 100 "
            "header lines, or a request head over 80 KiB (always over 160 KiB). 414: a target of 65,535 bytes "
            "or more. The HTTP/2 preface is answered by closing the connection.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "paths": {
            "/v1/pets": {
                "post": {
                    "operationId": "createPet",
                    "summary": "Create a pet record",
                    "parameters": [
                        _parameter(
                            "Idempotency-Key",
                            "header",
                            {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
                                "pattern": _IDEMPOTENCY_KEY_PATTERN,
                            },
                            f"1–{IDEMPOTENCY_KEY_MAX_LENGTH} printable ASCII characters (anything else is 400). "
                            "Makes the create safe to retry: a repeat with the same key and body replays the "
                            f"first response, for at least {settings.idempotency_ttl_seconds} seconds; the same "
                            "key with another body is 422, and a repeat while the first is in progress is 409. "
                            "The key is looked at after the body is validated (400), before the owner (403).",
                        ),
                    ],
                    "requestBody": write_body,
                    "responses": {
                        "201": _json(
                            "Created (or replayed).",
                            "Pet",
                            "Location",
                            "Idempotent-Replayed",
                            *pet_headers,
                            links=_links("getPet", "replacePet", "deletePet"),
                        ),
                        **_api_errors(403, 408, 409, 413, 415, 422),
                    },
                },
                "get": {
                    "operationId": "listPets",
                    "summary": "List pet records, a page at a time",
                    "parameters": _list_parameters(settings),
                    "responses": {
                        "200": _json("A page of records.", "PetPage", "Cache-Control"),
                        **_api_errors(),
                        "414": {
                            "description": "The request target is 65,535 bytes or longer (say, thousands of ids). "
                            "The HTTP server refuses it before the service sees it, so this answer has no body and "
                            "none of the usual headers."
                        },
                    },
                },
            },
            "/v1/pets/{petId}": {
                "parameters": [pet_id],
                "get": {
                    "operationId": "getPet",
                    "summary": "Get a pet record",
                    "parameters": [
                        _parameter(
                            "If-None-Match",
                            "header",
                            entity_tags,
                            "`*` or a comma-separated list of ETags; when one matches (weak comparison), the answer "
                            "is 304 without a body. Anything else is 400.",
                        ),
                    ],
                    "responses": {
                        "200": _json(
                            "The record.", "Pet", *pet_headers, links=_links("getPet", "replacePet", "deletePet")
                        ),
                        "304": {"description": _ERROR_CODES[304][1], "headers": _headers(*pet_headers)},
                        **_api_errors(404),
                    },
                },
                "put": {
                    "operationId": "replacePet",
                    "summary": "Replace a pet record's name, type and (optionally) owner",
                    "parameters": [if_match],
                    "requestBody": write_body,
                    "responses": {
                        "200": _json(
                            "The replaced record.",
                            "Pet",
                            *pet_headers,
                            links=_links("getPet", "replacePet", "deletePet"),
                        ),
                        **_api_errors(403, 404, 408, 412, 413, 415),
                    },
                },
                "delete": {
                    "operationId": "deletePet",
                    "summary": "Delete a pet record",
                    "parameters": [if_match],
                    "responses": {
                        "200": _json(
                            "The record as it was just before deletion.",
                            "Pet",
                            *pet_headers,
                            links=_links("getPet", "replacePet", "deletePet", with_etag=False),
                        ),
                        **_api_errors(404, 412),
                    },
                },
            },
            "/healthz": _ops_get("healthz", "Liveness: 200 while the process serves.", ready=False),
            "/readyz": _ops_get("readyz", "Readiness: the database answers and the schema is current.", ready=True),
            "/health": _ops_get("health", "Same as /readyz.", ready=True),
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "summary": "Prometheus metrics",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "Prometheus text format.",
                            "headers": _headers(),
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        },
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "OpenAPI 3.1 document.",
                            "headers": _headers(),
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                }
            },
            "/docs": {
                "get": {
                    "operationId": "docs",
                    "summary": "Interactive API documentation (works offline)",
                    "security": [],
                    "responses": {
                        "200": {
                            "description": "HTML page.",
                            "headers": _headers(),
                            "content": {"text/html": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "schemas": _schemas(settings),
            "headers": _HEADERS,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "bearerFormat": "JWT",
                    "description": "The caller is the token's e-mail claim; the role `admin` in its roles claim "
                    "makes the administrator.",
                }
            },
        },
    }
    return msgspec.json.encode(document)


def _ops_get(operation_id: str, summary: str, *, ready: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": _json("OK", "Health")}
    if ready:
        responses["503"] = _error(503, "Retry-After")
    return {"get": {"operationId": operation_id, "summary": summary, "security": [], "responses": responses}}
