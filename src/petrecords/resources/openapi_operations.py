"""The OpenAPI operation of each endpoint of a resource, made from its declaration (see handlers.py for the
endpoints themselves). The operation id, summary and tag come from the endpoint; petrecords.openapi_document puts
every endpoint's operation into the whole document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from petrecords import errors
from petrecords.config import Settings
from petrecords.errors import ServiceError
from petrecords.openapi import (
    PRIVATE,
    DocumentContext,
    api_errors,
    headers,
    json_response,
    parameter,
)
from petrecords.resources.access import moves_between
from petrecords.resources.declaration import OnDelete, Resource, ResourceSet, Writers
from petrecords.resources.fields import MAX_SAFE_INTEGER, UUID_SCHEMA
from petrecords.resources.filters import SEVERAL
from petrecords.resources.listing import list_filters, list_parameters, sort_field_names
from petrecords.resources.requests import ENTITY_TAG_LIST, IDEMPOTENCY_KEY_MAX_LENGTH
from petrecords.resources.schemas import created_schema_name

Document = Callable[[DocumentContext], dict[str, Any]]
OperationDocument = Callable[[Resource, ResourceSet, DocumentContext], dict[str, Any]]

# HTTP drops white space at both ends of a header value, so a key cannot start or end with a space.
_IDEMPOTENCY_KEY_PATTERN = rf"^[\x21-\x7e](?:[\x20-\x7e]{{0,{IDEMPOTENCY_KEY_MAX_LENGTH - 2}}}[\x21-\x7e])?$"
_ENTITY_TAGS_PATTERN = rf"^(?:[ \t]*\*[ \t]*|{ENTITY_TAG_LIST})$"
_ENTITY_TAGS = {"type": "string", "pattern": _ENTITY_TAGS_PATTERN, "examples": ['"0f1e2d3c4b5a69788796"', "*"]}
_RECORD_HEADERS = ("ETag", *PRIVATE)
_NOT_MODIFIED = "Not modified: If-None-Match matches the current ETag."
TOO_LONG_TARGET = {
    "414": {
        "description": "The request target is 65,535 bytes or longer (say, thousands of ids). The HTTP server "
        "refuses it before the service sees it, so this answer has no body and none of the usual headers."
    },
    "431": {
        "description": "The request head is over 80 KiB (always when over 160 KiB), as a target of thousands of "
        "ids with its headers can be. The HTTP server refuses it before the service sees it, so this answer has "
        "no body and none of the usual headers."
    },
}


def _record_parameter(resource: Resource) -> dict[str, Any]:
    return parameter(
        resource.path_parameter, UUID_SCHEMA, "Record id. A malformed id answers 404.", where="path", required=True
    )


def if_match_parameter() -> dict[str, Any]:
    """`If-Match`, as every write of one record takes it."""
    return _if_match()


def _if_match() -> dict[str, Any]:
    return parameter(
        "If-Match",
        _ENTITY_TAGS,
        "`*` or a comma-separated list of ETags; when none matches (a weak one never does), nothing is written and "
        "the answer is 412. Anything else is 400.",
        where="header",
    )


def _admin_only(resource: Resource) -> bool:
    return resource.ownership.writers is Writers.ADMIN


def _writers(resource: Resource) -> dict[str, Any]:
    # OpenAPI 3.1 lets a requirement of a scheme other than OAuth name the roles an operation needs.
    return {"security": [{"bearerAuth": ["admin"]}]} if _admin_only(resource) else {}


def _forbidden(resource: Resource, *, existing: bool = True, written: bool = True) -> str | None:
    """When a write of the resource is 403 (None: never). `existing`: of a record that exists (not a create);
    `written`: that sends the record (not a deletion)."""
    if _admin_only(resource):
        return "Only an administrator may do this (answered after the 404 check)."
    title, through = resource.title, moves_between(resource)
    cases = []
    if written and resource.ownership.settable:
        cases.append(
            f"a non-admin naming another user, or a group they are not a member of, as {resource.ownership.field}"
        )
    if existing and resource.sharing is not None:
        cases.append(f"a caller who may see the {title} record through a share but not write it")
    if existing and resource.grants is not None:
        cases.append(
            "its grantee, who may read it but not change it"
            if written
            else "a member of the group it names, who may read it but not delete it (a user it names may, to leave)"
        )
    if written and through is not None:
        cases.append(
            f"a write that would leave the record on a {through.title} whose {title} records the caller may not write"
            + (f" (moving one to another {through.title} needs the right to write those of both)" if existing else "")
        )
    if not cases:
        return None
    text = "; ".join(cases)
    return f"{text[:1].upper()}{text[1:]}{' (answered after the 404 check, before 412)' if existing else ''}."


def _described(forbidden: str | None) -> dict[type[ServiceError], str]:
    return {} if forbidden is None else {errors.Forbidden: forbidden}


def _links(resource: Resource, *operations: str, with_etag: bool = True) -> dict[str, Any]:
    """Links from a response with a record to the operations on that record; with its ETag, each also has a
    variant that sends the ETag in the operation's conditional header."""
    conditional = {"get": "If-None-Match", "replace": "If-Match", "update": "If-Match", "delete": "If-Match"}
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
    for operation_id in (f"get{resource.schema_name}History", *resource.record_operations):
        links[operation_id[0].upper() + operation_id[1:]] = {
            "operationId": operation_id,
            "parameters": {f"path.{resource.path_parameter}": record_id},
        }
    return links


_ALL_LINKS = ("get", "replace", "update", "delete")


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


def _record_links(resource: Resource, resources: ResourceSet) -> dict[str, Any]:
    return {**_links(resource, *_ALL_LINKS), **_reference_links(resource, resources)}


def paging_parameters(context: DocumentContext, *, counted: str = "Records") -> list[dict[str, Any]]:
    """`pageIndex` and `pageSize`, of a list of `counted` (a list of what is due counts items, not records)."""
    settings = context.settings
    return [
        parameter(
            "pageIndex",
            {"type": "integer", "minimum": 1, "maximum": MAX_SAFE_INTEGER, "default": 1},
            "Page number, 1-based.",
        ),
        parameter(
            "pageSize",
            {"type": "integer", "minimum": 1, "default": settings.default_page_size},
            f"{counted} per page; values above {settings.max_page_size} are reduced to it.",
        ),
    ]


def _list_parameters(resource: Resource, context: DocumentContext) -> list[dict[str, Any]]:
    fields = sort_field_names(resource)
    documented = [
        *paging_parameters(context),
        *(document for one in list_filters(resource) for document in one.document(context.schemas)),
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
            {
                "type": "array",
                "minItems": 1,
                "maxItems": len(fields),
                "items": {"type": "string", "enum": ["asc", "desc"]},
                "default": ["asc"],
            },
            "`asc` or `desc`: the direction of the sort fields without a `-` prefix. Or one direction for each sort "
            "field, in the same order (`sort=petType,name&order=asc,desc`, as web data providers send them), when no "
            f"sort field carries a `-`. {SEVERAL}",
            several=True,
        ),
    ]
    if [document["name"] for document in documented] != list(list_parameters(resource)):
        raise RuntimeError(f"the documented list parameters of {resource.name} differ from the ones it reads")
    return documented


def list_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    return {
        "description": "Every filter applies within the records the caller may see. Unknown parameters are 400.",
        "parameters": _list_parameters(resource, context),
        "responses": {
            "200": json_response("A page of records.", f"{resource.schema_name}Page", *PRIVATE),
            **api_errors(),
            **TOO_LONG_TARGET,
        },
    }


def _references(resource: Resource) -> str:
    return "".join(
        f" `{reference.field}` must name an existing {reference.target.title}"
        + (" the caller may see" if reference.target.ownership.column else "")
        + " (400 naming it otherwise, alike whether it is missing or another owner's)."
        for reference in resource.references
    )


def idempotency_key_parameter(settings: Settings, what: str, more: str = "") -> dict[str, Any]:
    """The `Idempotency-Key` header of a POST (contract section 3), which makes `what` safe to retry."""
    return parameter(
        "Idempotency-Key",
        {
            "type": "string",
            "minLength": 1,
            "maxLength": IDEMPOTENCY_KEY_MAX_LENGTH,
            "pattern": _IDEMPOTENCY_KEY_PATTERN,
        },
        f"1–{IDEMPOTENCY_KEY_MAX_LENGTH} printable ASCII characters (anything else is 400). Makes the {what} safe to "
        "retry: a repeat with the same key and body replays the first response, for at least "
        f"{settings.idempotency_ttl_seconds} seconds; the same key with another request is 422, and a repeat while "
        f"the first is in progress is 409.{' ' + more if more else ''}",
        where="header",
    )


def create_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    settings = context.settings
    failures: list[type[ServiceError]] = [
        errors.BodyTimeout,
        errors.IdempotencyInProgress,
        errors.PayloadTooLarge,
        errors.UnsupportedMediaType,
        errors.IdempotencyKeyReused,
    ]
    forbidden = _forbidden(resource, existing=False)
    if forbidden is not None:
        failures.append(errors.Forbidden)
    if resource.unique:
        failures.append(errors.Duplicate)
    return {
        "description": f"{resource.description}{_references(resource)}",
        **_writers(resource),
        "parameters": [
            idempotency_key_parameter(
                settings,
                "create",
                "The key is looked at after the body is validated (400), before anything that depends on stored "
                "records (references, 403).",
            ),
        ],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{resource.schema_name}Write"}}},
        },
        "responses": {
            "201": json_response(
                "Created (or replayed).",
                created_schema_name(resource),
                "Location",
                "Idempotent-Replayed",
                *_RECORD_HEADERS,
                links=_record_links(resource, resources),
            ),
            **api_errors(*failures, descriptions=_described(forbidden)),
        },
    }


def get_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    return {
        "parameters": [
            _record_parameter(resource),
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
                "The record.", resource.schema_name, *_RECORD_HEADERS, links=_record_links(resource, resources)
            ),
            "304": {"description": _NOT_MODIFIED, "headers": headers(*_RECORD_HEADERS)},
            **api_errors(errors.NotFound),
        },
    }


def _write_failures(resource: Resource) -> list[type[ServiceError]]:
    failures: list[type[ServiceError]] = [
        errors.NotFound,
        errors.BodyTimeout,
        errors.PreconditionFailed,
        errors.PayloadTooLarge,
        errors.UnsupportedMediaType,
    ]
    if _forbidden(resource) is not None:
        failures.append(errors.Forbidden)
    if resource.unique:
        failures.append(errors.Duplicate)
    return failures


def replace_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    return {
        "description": "Replaces the fields a client sets. An omitted optional field keeps its stored value "
        "(a derived one is computed again) and null clears it; every replace is a write (new modifiedAt, "
        f"modifiedBy and ETag), even when no value changed. Never creates.{_references(resource)}",
        **_writers(resource),
        "parameters": [_record_parameter(resource), _if_match()],
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{resource.schema_name}Write"}}},
        },
        "responses": {
            "200": json_response(
                "The replaced record.", resource.schema_name, *_RECORD_HEADERS, links=_record_links(resource, resources)
            ),
            **api_errors(*_write_failures(resource), descriptions=_described(_forbidden(resource))),
        },
    }


def update_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    patch = {"schema": {"$ref": f"#/components/schemas/{resource.schema_name}Patch"}}
    derived = [field.name for field in resource.fields if field.derived]
    kept = "".join(
        f" A stored `{name}` is kept unless the patch names it (null computes it again)." for name in derived
    )
    return {
        "description": "Changes only the members the patch names (JSON Merge Patch, RFC 7396): null clears an "
        "optional field, and is 400 for a required one. The stored record with the patch applied is then checked "
        f"as a replace's body carrying every field would be.{kept} The same callers may update as may replace; "
        "If-Match is honoured alike; an empty patch `{}` is a write with no change of value. Never creates."
        f"{_references(resource)}",
        **_writers(resource),
        "parameters": [_record_parameter(resource), _if_match()],
        "requestBody": {
            "required": True,
            "content": {"application/merge-patch+json": patch, "application/json": patch},
        },
        "responses": {
            "200": json_response(
                "The updated record.", resource.schema_name, *_RECORD_HEADERS, links=_record_links(resource, resources)
            ),
            **api_errors(*_write_failures(resource), descriptions=_described(_forbidden(resource))),
        },
    }


def delete_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    failures: list[type[ServiceError]] = [errors.NotFound, errors.PreconditionFailed]
    forbidden = _forbidden(resource, written=False)
    if forbidden is not None:
        failures.append(errors.Forbidden)
    dependents = resources.dependents(resource)
    restricted = [d for d in dependents if d.reference.on_delete is OnDelete.RESTRICT]
    cascaded = [d.resource.title for d in dependents if d.reference.on_delete is OnDelete.CASCADE]
    if restricted:
        failures.append(errors.ReferencedRecord)
    description = (
        " ".join(
            [
                *(
                    f"A {resource.title} that {d.resource.title} records still refer to cannot be deleted (409, code "
                    f"{errors.ReferencedRecord.code}), and nothing is deleted."
                    for d in restricted
                ),
                *(f"Deleting it deletes its {name} records in the same transaction." for name in cascaded),
            ]
        )
        or f"Deletes the {resource.title} record."
    )
    return {
        "description": description,
        **_writers(resource),
        "parameters": [_record_parameter(resource), _if_match()],
        "responses": {
            "200": json_response(
                "The record as it was just before deletion.",
                resource.schema_name,
                *_RECORD_HEADERS,
                links=_links(resource, *_ALL_LINKS, with_etag=False),
            ),
            **api_errors(*failures, descriptions=_described(forbidden)),
        },
    }


def history_operation(resource: Resource, resources: ResourceSet, context: DocumentContext) -> dict[str, Any]:
    through = moves_between(resource)
    shown = (
        ""
        if through is None
        else f" A non-admin is shown the versions from while the record belonged to a {through.title} they may see "
        f"now (or, once it is deleted, the {through.title} they saw it through just before), from before a share "
        f"too, and those of the writes before or after which it was theirs; never those from while it belonged to "
        f"a {through.title} they may not see. totalCount counts what is shown."
    )
    return {
        "description": f"The {resource.title} record's changes (create, replace, update, delete, and each write that "
        "followed another record), oldest first, a page at a time. It stays readable after the record is deleted: "
        "whoever may read the record now may read it, or for a deleted record whoever could read it just before; "
        f"anyone else gets 404, as for a record that never existed.{shown}",
        "parameters": [_record_parameter(resource), *paging_parameters(context)],
        "responses": {
            "200": json_response("A page of the record's changes.", "ChangeHistoryPage", *PRIVATE),
            **api_errors(errors.NotFound),
        },
    }
