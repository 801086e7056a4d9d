"""What a write request carries, read strictly: its JSON body checked against a resource's fields, the
conditional headers, the Idempotency-Key."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from petrecords.errors import MalformedRequest, ValidationFailed
from petrecords.resources.declaration import Errors, Field, Resource
from petrecords.resources.fields import Context

READ_ONLY_AUDIT_FIELDS = ("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy")
MAX_JSON_DEPTH = 32
"""How deeply arrays and objects may nest in a body: far more than any record needs, far less than what
would exhaust the interpreter's recursion limit anywhere a body is walked."""


# --- JSON bodies -----------------------------------------------------------------------------------


class _DuplicateMember(Exception):
    def __init__(self, name: str) -> None:
        self.name = name


def _refuse_duplicate_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document = dict(pairs)
    if len(document) != len(pairs):
        names = [name for name, _ in pairs]
        raise _DuplicateMember(next(name for index, name in enumerate(names) if name in names[:index]))
    return document


def _nested_deeper_than(document: Any, limit: int) -> bool:
    pending: list[tuple[Any, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def _too_deep() -> MalformedRequest:
    return MalformedRequest(f"The request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")


def decode_json(body: bytes) -> Any:
    """The JSON document of a request body, read strictly: UTF-8 (RFC 8259), no lone surrogates, no NaN or
    Infinity, no object with the same member twice (RFC 8259 leaves its meaning open, so a careful reader
    refuses it), at most MAX_JSON_DEPTH levels deep."""
    try:
        # msgspec is strict about what it reads; the standard library's reader, run second, sees every pair.
        msgspec.json.decode(body)
        document = json.loads(body, object_pairs_hook=_refuse_duplicate_members)
    except msgspec.DecodeError as exc:
        raise MalformedRequest(f"The request body is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise MalformedRequest("The request body is not valid UTF-8.") from None
    except RecursionError:
        raise _too_deep() from None
    except _DuplicateMember as exc:
        raise ValidationFailed.single(exc.name, "is given more than once; each member may appear once.") from None
    if isinstance(document, dict | list) and _nested_deeper_than(document, MAX_JSON_DEPTH):
        raise _too_deep()
    return document


def canonical_json_hash(document: Any) -> str:
    """Equal JSON documents hash equally, whatever their key order or spacing."""
    return hashlib.sha256(msgspec.json.encode(document, order="sorted")).hexdigest()


@dataclass(frozen=True)
class Body:
    """A write body, read: the stored value of each field sent (by column), and which fields were sent."""

    values: dict[str, Any]
    sent: frozenset[str]
    document: Any


def _ignored(resource: Resource) -> set[str]:
    """Members a body may carry that are not written: the read-only fields and what clients send back."""
    return {*READ_ONLY_AUDIT_FIELDS, *resource.tolerated, *(field.name for field in resource.fields if field.read_only)}


def _unknown_members(resource: Resource, document: dict[str, Any], writable: Mapping[str, Field]) -> Errors:
    ignored = _ignored(resource)
    return {
        name: [f"is not a field of a {resource.title} record."]
        for name in sorted(document)
        if name not in writable and name not in ignored
    }


def _check_path_id(document: dict[str, Any], path_id: str | None, errors: Errors) -> None:
    if path_id is not None and "id" in document:
        raw_id = document["id"]
        if not isinstance(raw_id, str) or raw_id.lower() != path_id.lower():
            errors["id"] = ["must equal the id in the path when present."]


def read_body(resource: Resource, document: Any, *, context: Context, path_id: str | None = None) -> Body:
    """Check a create/replace body against `resource`'s fields, reporting every offending field at once.

    Read-only fields are ignored whatever their value (and so are embedded records, which clients send back),
    except that on replace (`path_id` given) an `id`, when present, must equal the id in the path. `null`
    clears a field that may be null, and stands for "not given" for any other.
    """
    required = ", ".join(field.name for field in resource.fields if field.required)
    if not isinstance(document, dict):
        raise ValidationFailed.single("body", f"must be a JSON object with {required}.")
    writable = {field.name: field for field in resource.fields if not field.read_only}
    errors = _unknown_members(resource, document, writable)
    values: dict[str, Any] = {}
    sent: set[str] = set()
    for name, field in writable.items():
        if name not in document:
            if field.required:
                errors[name] = ["is required" + _expected_tail(field.kind.read(None, context)[1]) + "."]
            continue
        value = document[name]
        if value is None and not field.required:
            if field.nullable:
                values[field.column] = None
                sent.add(name)
            continue
        stored, problem = field.kind.read(value, context)
        if problem is not None:
            errors[name] = [problem]
            continue
        values[field.column] = stored
        sent.add(name)
    _check_path_id(document, path_id, errors)
    if not errors and resource.check is not None:
        errors.update(resource.check(values))
    if errors:
        raise ValidationFailed(errors, what="request body")
    return Body(values=values, sent=frozenset(sent), document=document)


@dataclass(frozen=True)
class Patch:
    """A JSON Merge Patch of a record's client-set fields, read: the members it names, each checked on its own
    (null kept as null: it clears the field, or, for one that cannot be null, asks for it as not given)."""

    members: dict[str, Any]
    """Wire name -> the value as sent."""
    values: dict[str, Any]
    """Column -> the stored value of each member that names a value."""


def read_patch(resource: Resource, document: Any, *, context: Context, path_id: str) -> Patch:
    """Check a patch alone, before the record it applies to is read: every member a field a client may write (or
    one a client may send back), each value valid for its field, no null for a required field."""
    if not isinstance(document, dict):
        raise ValidationFailed.single("body", "must be a JSON object (a JSON Merge Patch of the record's fields).")
    writable = {field.name: field for field in resource.fields if not field.read_only}
    errors = _unknown_members(resource, document, writable)
    members: dict[str, Any] = {}
    values: dict[str, Any] = {}
    for name, value in document.items():
        field = writable.get(name)
        if field is None:
            continue
        members[name] = value
        if value is None:
            if field.required:
                errors[name] = ["must not be null: the field is required (leave it out to keep it)."]
            continue
        stored, problem = field.kind.read(value, context)
        if problem is not None:
            errors[name] = [problem]
        else:
            values[field.column] = stored
    _check_path_id(document, path_id, errors)
    if errors:
        raise ValidationFailed(errors, what="request body")
    return Patch(members=members, values=values)


def _expected_tail(problem: str | None) -> str:
    """`: one of Dog, Cat` from `must be one of Dog, Cat.`: what a required field that is absent must be."""
    if problem and problem.startswith("must be one of "):
        return ": " + problem.removeprefix("must be ").rstrip(".")
    return ""


# --- ETags -----------------------------------------------------------------------------------------

# RFC 9110 8.8.3: an entity tag may contain a comma, so a list of them is not split at every comma.
ENTITY_TAG = r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"'
# Optional white space (RFC 9110 5.6.3) is spaces and tabs only.
_OWS = " \t"
ENTITY_TAG_LIST = rf"[ \t]*{ENTITY_TAG}(?:[ \t]*,[ \t]*{ENTITY_TAG})*[ \t]*"
_ENTITY_TAG_LIST = re.compile(ENTITY_TAG_LIST)
_ENTITY_TAG = re.compile(ENTITY_TAG)


def entity_tag(*versions: tuple[uuid.UUID, int], moved: tuple[object, ...] = ()) -> str:
    """A strong ETag of a record (id, revision), of the records it embeds, and of the values the service moves
    without a write (Resource.moved_without_write): it changes with any of them."""
    if len(versions) == 1:  # a record that embeds none: most answers
        record_id, revision = versions[0]
        data = record_id.bytes + revision.to_bytes(8, "big")
    else:
        data = b"".join(record_id.bytes + revision.to_bytes(8, "big") for record_id, revision in versions)
    if moved:
        data += msgspec.json.encode(moved)
    return f'"{hashlib.blake2b(data, digest_size=10).hexdigest()}"'


class EntityTags(msgspec.Struct, frozen=True):
    """An If-Match or If-None-Match header; `tags` None stands for `*`."""

    tags: tuple[str, ...] | None

    @classmethod
    def parse(cls, header: str, value: str) -> EntityTags:
        if value.strip(_OWS) == "*":
            return cls(None)
        if not _ENTITY_TAG_LIST.fullmatch(value):
            raise ValidationFailed.single(header, 'must be "*" or a comma-separated list of quoted entity tags.')
        return cls(tuple(_ENTITY_TAG.findall(value)))

    def match_strong(self, current: str) -> bool:
        """If-Match (RFC 9110 13.1.1): a weak tag never matches."""
        return self.tags is None or current in self.tags

    def match_weak(self, current: str) -> bool:
        """If-None-Match (RFC 9110 13.1.2): weak comparison."""
        return self.tags is None or current in (tag.removeprefix("W/") for tag in self.tags)


# --- Idempotency keys ------------------------------------------------------------------------------

IDEMPOTENCY_KEY_MAX_LENGTH = 255
_IDEMPOTENCY_KEY = re.compile(rf"[\x20-\x7e]{{1,{IDEMPOTENCY_KEY_MAX_LENGTH}}}")


def check_idempotency_key(value: str) -> str:
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise ValidationFailed.single("Idempotency-Key", "must be 1 to 255 printable ASCII characters.")
    return value
