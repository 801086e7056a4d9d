"""The JSON Schemas of a resource's records, made from its declaration: the record as the service returns it,
as a client writes it (create, replace), as a client patches it, and a page of them."""

from __future__ import annotations

from typing import Any

from petrecords.config import Settings
from petrecords.resources.declaration import Field, Resource
from petrecords.resources.fields import EMAIL_SCHEMA, TIMESTAMP_SCHEMA, UUID_SCHEMA, SchemaContext


def _read_only(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {**schema, "readOnly": True, "description": description}


AUDIT_PROPERTIES = {
    "id": _read_only(
        UUID_SCHEMA, "Record id (UUID version 7). In a PUT or PATCH body, when present, it must equal the path id."
    ),
    "createdAt": _read_only(TIMESTAMP_SCHEMA, "When the record was created."),
    "createdBy": _read_only(EMAIL_SCHEMA, "Who created the record."),
    "modifiedAt": _read_only(TIMESTAMP_SCHEMA, "Time of the last write (create, replace or update)."),
    "modifiedBy": _read_only(EMAIL_SCHEMA, "Who last wrote the record."),
}


def _not_given(schema: dict[str, Any]) -> dict[str, Any]:
    """A value that a client may also send as null, meaning "not given"."""
    return {"oneOf": [schema, {"type": "null"}], "description": schema.get("description", "")}


def _field_schema(resource: Resource, field: Field, context: SchemaContext, *, sent: bool) -> dict[str, Any]:
    if field.kind.embeds is not None:
        target = resource.reference_of(field.kind.embeds).target
        if sent:
            return {"description": f"{field.description} Ignored when sent."}
        return {"$ref": f"#/components/schemas/{target.schema_name}", "description": field.description}
    schema = field.kind.schema(context, sent=sent)
    if field.description and "description" not in schema:
        schema["description"] = field.description
    optional_owner = sent and field.name == resource.ownership.field and resource.ownership.settable
    if optional_owner or (sent and not field.required and not field.nullable and not field.read_only):
        given = _not_given(schema)
        if field.default is not None:
            given["default"] = field.kind.show(field.default)
        return given
    if field.read_only:
        return _read_only(schema, schema.get("description", field.description))
    return schema


def _patch_schema(resource: Resource, field: Field, context: SchemaContext) -> dict[str, Any]:
    schema = _field_schema(resource, field, context, sent=True)
    if field.required and not field.read_only:
        # Null would remove a required field, which a patch may not do.
        return {**schema, "description": f"{schema.get('description', '')} Not null: the field is required."}
    return schema


def resource_schemas(resource: Resource, context: SchemaContext, settings: Settings) -> dict[str, Any]:
    name = resource.schema_name
    write_properties: dict[str, Any] = {}
    read_properties: dict[str, Any] = dict(AUDIT_PROPERTIES)
    patch_properties: dict[str, Any] = {}
    for field in resource.fields:
        write_properties[field.name] = _field_schema(resource, field, context, sent=True)
        patch_properties[field.name] = _patch_schema(resource, field, context)
        shown = _field_schema(resource, field, context, sent=False)
        read_properties[field.name] = {key: value for key, value in shown.items() if key != "readOnly"}
    for tolerated in resource.tolerated:
        accepted = {"description": "Accepted for the clients that send it back, and ignored."}
        write_properties[tolerated] = patch_properties[tolerated] = accepted
    ignored = "Read-only fields may be sent back and are ignored (except `id`). Any other field is rejected."
    kept = [field.name for field in resource.fields if not field.required and not field.read_only]
    omitted = (
        f" An omitted optional field ({', '.join(kept)}) keeps its stored value on replace"
        + "".join(f"; `{field.name}`, derived, is computed again" for field in resource.fields if field.derived)
        + "; null clears what may be null."
        if kept
        else ""
    )
    return {
        **_created_schema(resource, read_properties),
        f"{name}Write": {
            "type": "object",
            "description": f"The body of create and replace. {ignored}{omitted}",
            "required": [field.name for field in resource.fields if field.required],
            "additionalProperties": False,
            "properties": {**AUDIT_PROPERTIES, **write_properties},
            "examples": [dict(resource.examples)],
        },
        f"{name}Patch": {
            "type": "object",
            "description": "A JSON Merge Patch (RFC 7396) of the fields a client sets: the members it names change, "
            "null clears an optional field (a required one cannot be null), and the stored record with the patch "
            f"applied is then checked as a replace's body carrying every field would be. {ignored}",
            "additionalProperties": False,
            "properties": {**AUDIT_PROPERTIES, **patch_properties},
            "examples": [{next(iter(resource.examples)): next(iter(resource.examples.values()))}],
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


def _created_schema(resource: Resource, read_properties: dict[str, Any]) -> dict[str, Any]:
    """The answer to a create of a record that is made a secret (Resource.revealed): the record and the secret,
    shown only there."""
    revealed = resource.revealed
    if revealed is None:
        return {}
    properties = {**read_properties, **{member: dict(schema) for member, schema in revealed.schemas.items()}}
    return {
        f"{resource.schema_name}Created": {
            "type": "object",
            "description": f"{resource.description} As the answer to its create shows it, once: with "
            f"{', '.join(f'`{member}`' for member in revealed.schemas)}, which no other answer shows (but this "
            "answer's idempotent replay).",
            "required": list(properties),
            "additionalProperties": False,
            "properties": properties,
        }
    }


def created_schema_name(resource: Resource) -> str:
    """The schema of the answer to a create."""
    return f"{resource.schema_name}Created" if resource.revealed is not None else resource.schema_name


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
