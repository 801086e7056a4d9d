"""The OpenAPI 3.1 document of the service, derived from the resource declarations, so that it says exactly
what the service does."""

from __future__ import annotations

from typing import Any

import msgspec

from petrecords.config import Settings
from petrecords.resources.declaration import Field, OnDelete, Resource, ResourceSet, Writers
from petrecords.resources.fields import (
    EMAIL_SCHEMA,
    MAX_SAFE_INTEGER,
    TIMESTAMP_SCHEMA,
    UUID_SCHEMA,
    Embedded,
    SchemaContext,
)
from petrecords.resources.filters import SEVERAL, parameter
from petrecords.resources.listing import list_filters, list_parameters, sort_field_names
from petrecords.resources.requests import ENTITY_TAG_LIST, IDEMPOTENCY_KEY_MAX_LENGTH

CHECK_ORDER = "401, 429, 413, 415, 400, 404, 403, 412, 409"
ERROR_CODES: dict[int, tuple[int, str]] = {
    304: (0, "Not modified: If-None-Match matches the current ETag."),
    400: (994, "Malformed JSON, or a field, parameter or header that fails validation or is unknown."),
    401: (997, "Missing, malformed, expired or otherwise invalid bearer token."),
    403: (997, "Authenticated but not permitted."),
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
# Codes the service answers that the table above does not tie to one status.
OTHER_CODES = {985: "the record is still referenced (409)", 983: "a change-feed cursor older than what is kept (410)"}

# HTTP drops white space at both ends of a header value, so a key cannot start or end with a space.
_IDEMPOTENCY_KEY_PATTERN = rf"^[\x21-\x7e](?:[\x20-\x7e]{{0,{IDEMPOTENCY_KEY_MAX_LENGTH - 2}}}[\x21-\x7e])?$"
_ENTITY_TAGS_PATTERN = rf"^(?:[ \t]*\*[ \t]*|{ENTITY_TAG_LIST})$"
_ENTITY_TAGS = {"type": "string", "pattern": _ENTITY_TAGS_PATTERN, "examples": ['"0f1e2d3c4b5a69788796"', "*"]}

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


def headers(*names: str) -> dict[str, Any]:
    return {name: {"$ref": f"#/components/headers/{name}"} for name in (*_STANDARD_HEADERS, *names)}


def error_response(
    status: int, *extra_headers: str, description: str | None = None, code: int | None = None
) -> dict[str, Any]:
    default_code, default = ERROR_CODES[status]
    code = code or default_code
    return {
        "description": f"{description or default} (code {code})",
        "headers": headers(*extra_headers),
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


def api_errors(
    *statuses: int, descriptions: dict[int, str] | None = None, codes: dict[int, int] | None = None
) -> dict[str, Any]:
    """Errors every API operation can answer, plus the given ones (with their own description or code)."""
    private = ("Cache-Control",)
    described = descriptions or {}
    errors = {
        "400": error_response(400, *private),
        "401": error_response(401, "WWW-Authenticate", *private),
        "429": error_response(429, "Retry-After", *private),
        "500": error_response(500, *private),
        "503": error_response(503, "Retry-After", *private),
    }
    for status in statuses:
        extra: tuple[str, ...] = {405: ("Allow",), 408: (*private, "Connection")}.get(status, private)
        errors[str(status)] = error_response(
            status, *extra, description=described.get(status), code=(codes or {}).get(status)
        )
    return errors


# --- schemas ---------------------------------------------------------------------------------------


def _read_only(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "readOnly": True, "description": description}


AUDIT_PROPERTIES = {
    "id": _read_only(
        UUID_SCHEMA, "Record id (UUID version 7). In a PUT body, when present, it must equal the path id."
    ),
    "createdAt": _read_only(TIMESTAMP_SCHEMA, "When the record was created."),
    "createdBy": _read_only(EMAIL_SCHEMA, "Who created the record."),
    "modifiedAt": _read_only(TIMESTAMP_SCHEMA, "Time of the last create or replace."),
    "modifiedBy": _read_only(EMAIL_SCHEMA, "Who last wrote the record."),
}


def _field_schema(resource: Resource, field: Field, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
    if isinstance(field.kind, Embedded):
        target = resource.reference_of(field.kind.reference).target
        if sent:
            return {"description": f"{field.description} Ignored when sent."}
        return {"$ref": f"#/components/schemas/{target.schema_name}", "description": field.description}
    schema = field.kind.schema(context, sent=sent)
    if field.description and "description" not in schema:
        schema["description"] = field.description
    optional_owner = sent and field.name == resource.ownership.field and resource.ownership.settable
    if optional_owner or (sent and not field.required and not field.nullable and not field.read_only):
        # `null` stands for "not given".
        return {"oneOf": [schema, {"type": "null"}], "description": schema.get("description", "")}
    if field.read_only:
        return _read_only(schema, schema.get("description", field.description))
    return schema


def resource_schemas(resource: Resource, context: SchemaContext, settings: Settings) -> dict[str, Any]:
    name = resource.schema_name
    write_properties: dict[str, Any] = {}
    read_properties: dict[str, Any] = dict(AUDIT_PROPERTIES)
    for field in resource.fields:
        write_properties[field.name] = _field_schema(resource, field, context, sent=True)
        read_properties[field.name] = _field_schema(resource, field, context, sent=False)
        if read_properties[field.name].get("readOnly"):
            read_properties[field.name] = {
                key: value for key, value in read_properties[field.name].items() if key != "readOnly"
            }
    for tolerated in resource.tolerated:
        write_properties[tolerated] = {"description": "Accepted for the clients that send it back, and ignored."}
    ignored = "Read-only fields may be sent back and are ignored (except `id` on replace). Any other field is rejected."
    return {
        f"{name}Write": {
            "type": "object",
            "description": f"The body of create and replace. {ignored}",
            "required": [field.name for field in resource.fields if field.required],
            "additionalProperties": False,
            "properties": {**AUDIT_PROPERTIES, **write_properties},
            "examples": [dict(resource.examples)],
        },
        name: {
            "type": "object",
            "description": resource.description,
            "required": list(read_properties),
            "additionalProperties": False,
            "properties": read_properties,
        },
        f"{name}Page": page_schema(name, settings),
    }


def page_schema(item_schema: str, settings: Settings) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["items", "pageIndex", "pageSize", "totalPages", "totalCount", "hasPreviousPage", "hasNextPage"],
        "additionalProperties": False,
        "properties": {
            "items": {"type": "array", "items": {"$ref": f"#/components/schemas/{item_schema}"}},
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
    }


SERVICE_ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "additionalProperties": False,
    "properties": {
        "code": {
            "type": "integer",
            "enum": sorted({*(code for code, _ in ERROR_CODES.values() if code), *OTHER_CODES}),
        },
        "message": {"type": "string"},
        "errors": {
            "type": "object",
            "description": "Validation failures (994) only: each offending field or parameter → messages.",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        },
    },
}


# --- operations ------------------------------------------------------------------------------------


def paging_parameters(settings: Settings) -> list[dict[str, Any]]:
    return [
        parameter(
            "pageIndex",
            {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER, "default": 1},
            "Page number, 1-based.",
        ),
        parameter(
            "pageSize",
            {"type": "integer", "minimum": 1, "default": settings.default_page_size},
            f"Records per page; values above {settings.max_page_size} are reduced to it.",
        ),
    ]


def _list_parameters(resource: Resource, context: SchemaContext, settings: Settings) -> list[dict[str, Any]]:
    fields = sort_field_names(resource)
    documented = [
        *paging_parameters(settings),
        *(document for one in list_filters(resource) for document in one.document(context)),
        parameter(
            "sort",
            {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "enum": [prefix + field for field in fields for prefix in ("", "-")]},
                # Each field at most once, in one direction.
                "not": {
                    "anyOf": [
                        {"allOf": [{"contains": {"const": field}}, {"contains": {"const": "-" + field}}]}
                        for field in fields
                    ]
                },
            },
            "Distinct fields, names matched case-insensitively; `-` sorts that field descending. " + SEVERAL + " "
            "Default `createdAt`. Ties are broken by `id` ascending, so the order is total and stable; "
            "text sorts case-insensitively.",
            several=True,
        ),
        parameter(
            "order",
            {"type": "string", "enum": ["asc", "desc"], "default": "asc"},
            "Direction of the sort fields without a `-` prefix.",
        ),
    ]
    if [document["name"] for document in documented] != list(list_parameters(resource)):
        raise RuntimeError(f"the documented list parameters of {resource.name} differ from the ones it reads")
    return documented


def _links(resource: Resource, *operations: str, with_etag: bool = True) -> dict[str, Any]:
    """Links from a response with a record to the operations on that record; with its ETag, each also has a
    variant that sends the ETag in the operation's conditional header."""
    conditional = {"get": "If-None-Match", "replace": "If-Match", "delete": "If-Match"}
    record_id = "$response.body#/id"
    links: dict[str, Any] = {}
    for operation in operations:
        operation_id = f"{operation}{resource.schema_name}"
        name = operation_id[0].upper() + operation_id[1:]
        path_parameter = f"path.{resource.path_parameter}"
        links[name] = {"operationId": operation_id, "parameters": {path_parameter: record_id}}
        if with_etag:
            header = conditional[operation]
            links[f"{name}{header.replace('-', '')}"] = {
                "operationId": operation_id,
                "parameters": {path_parameter: record_id, f"header.{header}": "$response.header.ETag"},
            }
    return links


def _reference_links(resource: Resource, resources: ResourceSet) -> dict[str, Any]:
    """Links from a response with a record along its references: to the records it names, and to the records
    that may name it (a new one, and the list of those that do)."""
    links: dict[str, Any] = {}
    for reference in resource.references:
        target = reference.target
        for operation in ("get", "replace", "delete"):
            operation_id = f"{operation}{target.schema_name}"
            links[operation_id[0].upper() + operation_id[1:]] = {
                "operationId": operation_id,
                "description": f"The {target.title} that `{reference.field}` names.",
                "parameters": {f"path.{target.path_parameter}": f"$response.body#/{reference.field}"},
            }
    for dependent in resources.dependents(resource):
        field, title = dependent.reference.field, dependent.resource.title
        links[f"Create{dependent.resource.schema_name}"] = {
            "operationId": f"create{dependent.resource.schema_name}",
            "description": f"A new {title} naming this {resource.title} as `{field}`; its other members are the "
            "caller's to choose.",
            "requestBody": {field: "$response.body#/id"},
        }
        if field in list_parameters(dependent.resource):
            links[f"List{dependent.resource.plural}"] = {
                "operationId": f"list{dependent.resource.plural}",
                "description": f"The {title} records that name this {resource.title} as `{field}`.",
                "parameters": {f"query.{field}": "$response.body#/id"},
            }
    return links


def resource_paths(
    resource: Resource, resources: ResourceSet, context: SchemaContext, settings: Settings
) -> dict[str, Any]:
    noun = resource.schema_name
    title = resource.title
    record_headers = ("ETag", "Cache-Control")
    all_links = ("get", "replace", "delete")
    reference_links = _reference_links(resource, resources)
    admin_only = resource.ownership.writers is Writers.ADMIN
    # OpenAPI 3.1 lets a requirement of a scheme other than OAuth name the roles an operation needs.
    writers = {"security": [{"bearerAuth": ["admin"]}]} if admin_only else {}
    forbidden = (
        "Only an administrator may do this (answered after the 404 check)."
        if admin_only
        else f"A non-admin naming another user as {resource.ownership.field}."
    )
    may_forbid = admin_only or resource.ownership.settable
    write_body = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{noun}Write"}}},
    }
    if_match = parameter(
        "If-Match",
        _ENTITY_TAGS,
        "`*` or a comma-separated list of ETags; when none matches (a weak one never does), nothing is written and "
        "the answer is 412. Anything else is 400.",
        where="header",
    )
    record_id = parameter(
        resource.path_parameter, UUID_SCHEMA, "Record id. A malformed id answers 404.", where="path", required=True
    )
    create_errors = [408, 409, 413, 415, 422] + ([403] if may_forbid else [])
    replace_errors = [404, 408, 412, 413, 415] + ([403] if may_forbid else [])
    delete_errors = [404, 412] + ([403] if admin_only else [])
    create_descriptions = {403: forbidden}
    delete_descriptions = {403: forbidden}
    dependents = resources.dependents(resource)
    restricted = [d for d in dependents if d.reference.on_delete is OnDelete.RESTRICT]
    cascaded = [d.resource.title for d in dependents if d.reference.on_delete is OnDelete.CASCADE]
    if restricted:
        delete_errors.append(409)
        delete_descriptions[409] = "The record is still referenced and cannot be deleted; nothing is deleted."
    delete_description = (
        " ".join(
            [
                *(
                    f"A {title} that {d.resource.title} records still refer to cannot be deleted (409, code 985), "
                    "and nothing is deleted."
                    for d in restricted
                ),
                *(f"Deleting it deletes its {name} records in the same transaction." for name in cascaded),
            ]
        )
        or f"Deletes the {title} record."
    )
    references = "".join(
        f" `{reference.field}` must name an existing {reference.target.title}"
        + (" the caller may see" if reference.target.ownership.column else "")
        + " (400 naming it otherwise, alike whether it is missing or another owner's)."
        for reference in resource.references
    )
    collection: dict[str, Any] = {
        "post": {
            "operationId": f"create{noun}",
            "summary": f"Create a {title} record",
            "description": f"{resource.description}{references}",
            **writers,
            "parameters": [
                parameter(
                    "Idempotency-Key",
                    {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
                        "pattern": _IDEMPOTENCY_KEY_PATTERN,
                    },
                    f"1–{IDEMPOTENCY_KEY_MAX_LENGTH} printable ASCII characters (anything else is 400). Makes the "
                    "create safe to retry: a repeat with the same key and body replays the first response, for at "
                    f"least {settings.idempotency_ttl_seconds} seconds; the same key with another request is 422, and "
                    "a repeat while the first is in progress is 409. The key is looked at after the body is "
                    "validated (400), before anything that depends on stored records (references, 403).",
                    where="header",
                ),
            ],
            "requestBody": write_body,
            "responses": {
                "201": json_response(
                    "Created (or replayed).",
                    noun,
                    "Location",
                    "Idempotent-Replayed",
                    *record_headers,
                    links={**_links(resource, *all_links), **reference_links},
                ),
                **api_errors(*create_errors, descriptions=create_descriptions),
            },
        },
        "get": {
            "operationId": f"list{resource.plural}",
            "summary": f"List {title} records, a page at a time",
            "parameters": _list_parameters(resource, context, settings),
            "responses": {
                "200": json_response("A page of records.", f"{noun}Page", "Cache-Control"),
                **api_errors(),
                "414": {
                    "description": "The request target is 65,535 bytes or longer (say, thousands of ids). The HTTP "
                    "server refuses it before the service sees it, so this answer has no body and none of the "
                    "usual headers."
                },
                "431": {
                    "description": "The request head is over 80 KiB (always when over 160 KiB), as a target of "
                    "thousands of ids with its headers can be. The HTTP server refuses it before the service sees "
                    "it, so this answer has no body and none of the usual headers."
                },
            },
        },
    }
    record: dict[str, Any] = {
        "parameters": [record_id],
        "get": {
            "operationId": f"get{noun}",
            "summary": f"Get a {title} record",
            "parameters": [
                parameter(
                    "If-None-Match",
                    _ENTITY_TAGS,
                    "`*` or a comma-separated list of ETags; when one matches (weak comparison), the answer is 304 "
                    "without a body. Anything else is 400.",
                    where="header",
                ),
            ],
            "responses": {
                "200": json_response(
                    "The record.", noun, *record_headers, links={**_links(resource, *all_links), **reference_links}
                ),
                "304": {"description": ERROR_CODES[304][1], "headers": headers(*record_headers)},
                **api_errors(404),
            },
        },
        "put": {
            "operationId": f"replace{noun}",
            "summary": f"Replace a {title} record",
            **writers,
            "parameters": [if_match],
            "requestBody": write_body,
            "responses": {
                "200": json_response(
                    "The replaced record.",
                    noun,
                    *record_headers,
                    links={**_links(resource, *all_links), **reference_links},
                ),
                **api_errors(*replace_errors, descriptions={403: forbidden}),
            },
        },
        "delete": {
            "operationId": f"delete{noun}",
            "summary": f"Delete a {title} record",
            "description": delete_description,
            **writers,
            "parameters": [if_match],
            "responses": {
                "200": json_response(
                    "The record as it was just before deletion.",
                    noun,
                    *record_headers,
                    links=_links(resource, *all_links, with_etag=False),
                ),
                **api_errors(*delete_errors, descriptions=delete_descriptions, codes={409: 985}),
            },
        },
    }
    return {resource.path: collection, f"{resource.path}/{{{resource.path_parameter}}}": record}


def _ops_get(operation_id: str, summary: str, *, ready: bool) -> dict[str, Any]:
    responses: dict[str, Any] = {"200": json_response("OK", "Health")}
    if ready:
        responses["503"] = error_response(503, "Retry-After")
    return {"get": {"operationId": operation_id, "summary": summary, "security": [], "responses": responses}}


def _plain_get(
    operation_id: str, summary: str, description: str, media_type: str, schema: dict[str, Any]
) -> dict[str, Any]:
    return {
        "get": {
            "operationId": operation_id,
            "summary": summary,
            "security": [],
            "responses": {
                "200": {"description": description, "headers": headers(), "content": {media_type: {"schema": schema}}}
            },
        }
    }


def build_openapi(settings: Settings, resources: ResourceSet) -> bytes:
    context = SchemaContext(pet_types=tuple(settings.pet_types))
    schemas: dict[str, Any] = {}
    paths: dict[str, Any] = {}
    for resource in resources.resources:
        schemas.update(resource_schemas(resource, context, settings))
        paths.update(resource_paths(resource, resources, context, settings))
    schemas["ServiceError"] = SERVICE_ERROR
    schemas["Health"] = {
        "type": "object",
        "required": ["status"],
        "additionalProperties": False,
        "properties": {"status": {"type": "string", "enum": ["ok", "ready"]}},
    }
    paths.update(
        {
            "/healthz": _ops_get("healthz", "Liveness: 200 while the process serves.", ready=False),
            "/readyz": _ops_get("readyz", "Readiness: the database answers and the schema is current.", ready=True),
            "/health": _ops_get("health", "Same as /readyz.", ready=True),
            "/metrics": _plain_get(
                "metrics", "Prometheus metrics", "Prometheus text format.", "text/plain", {"type": "string"}
            ),
            "/openapi.json": _plain_get(
                "openapi", "This document", "OpenAPI 3.1 document.", "application/json", {"type": "object"}
            ),
            "/docs": _plain_get(
                "docs", "Interactive API documentation (works offline)", "HTML page.", "text/html", {"type": "string"}
            ),
        }
    )
    document = {
        "openapi": "3.1.0",
        "info": {
            "title": "Pet Records API",
            "version": "2.0.0",
            "description": "Pets' records: the pets, the vaccine catalogue, each pet's vaccinations and when the next "
            "dose is due, with a full audit trail. Every `/v1` operation needs a bearer token. Every failure is a "
            f"ServiceError body. Checks run in this order: {CHECK_ORDER}. Someone else's record answers exactly as "
            "one that does not exist (404). OPTIONS on a `/v1` path answers 204 with `Allow` (after the token "
            "check); HEAD is answered wherever GET is, without the body; another undocumented method is 405 with "
            "`Allow`. A path the router would read as another one (an empty segment, an encoded slash or "
            "backslash) is 404. Request bodies are strict JSON: no duplicate members, no NaN, at most 32 levels "
            f"deep. A request body must arrive within {settings.body_timeout_seconds:g} seconds, counted from when "
            "the service starts to read it (after the token and rate-limit checks), or the answer is 408 and the "
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
                    "makes the administrator. A request with more than one Authorization header is 401. An operation "
                    "whose security requirement names the role `admin` is the administrator's alone (403 otherwise).",
                }
            },
        },
    }
    return msgspec.json.encode(document)
