"""The rules of pet records, free of HTTP and storage: validation, list queries, ETags."""

from __future__ import annotations

import hashlib
import json
import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any
from urllib.parse import parse_qsl

import msgspec

from petrecords.errors import MalformedRequest, ValidationFailed
from petrecords.schemas import PetWrite
from petrecords.store.base import PetFilter, PetRow, SortField, SortKey
from petrecords.text import clean_name, has_forbidden_pattern_characters, match_key
from petrecords.values import normalize_email, parse_datetime_ms, parse_record_id

NAME_MAX_LENGTH = 100
WRITABLE_FIELDS = ("name", "petType", "ownerId")
READ_ONLY_FIELDS = ("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy")


class PetTypes:
    """The configured pet types, matched case-insensitively, returned in their configured spelling."""

    def __init__(self, spellings: Iterable[str]) -> None:
        self.spellings = tuple(spellings)
        self._by_folded = {spelling.casefold(): spelling for spelling in self.spellings}

    @property
    def sort_order(self) -> tuple[str, ...]:
        """The spellings in case-insensitive order: how `sort=petType` ranks them."""
        return tuple(sorted(self.spellings, key=lambda spelling: (match_key(spelling), spelling)))

    def resolve(self, value: str) -> str | None:
        return self._by_folded.get(value.casefold())

    @property
    def expected(self) -> str:
        return "one of " + ", ".join(self.spellings)


def validate_pet_write(document: Any, *, pet_types: PetTypes, path_id: str | None = None) -> PetWrite:
    """Check a create/replace body, reporting every offending field at once.

    Read-only fields are ignored whatever their value, except that on replace (`path_id` given) an
    `id`, when present, must equal the id in the path.
    """
    if not isinstance(document, dict):
        raise ValidationFailed.single("body", "must be a JSON object with name and petType.")
    errors: dict[str, list[str]] = {}
    unknown = sorted(field for field in document if field not in WRITABLE_FIELDS + READ_ONLY_FIELDS)
    for field in unknown:
        errors[field] = ["is not a field of a pet record."]

    name, problem = (
        clean_name(document["name"], max_length=NAME_MAX_LENGTH) if "name" in document else (None, "is required.")
    )
    if problem:
        errors["name"] = [problem]

    pet_type: str | None = None
    raw_type = document.get("petType")
    if "petType" not in document:
        errors["petType"] = [f"is required: {pet_types.expected}."]
    elif not isinstance(raw_type, str) or (pet_type := pet_types.resolve(raw_type)) is None:
        errors["petType"] = [f"must be {pet_types.expected}."]

    owner_id: str | None = None
    raw_owner = document.get("ownerId")
    if raw_owner is not None:
        owner_id = normalize_email(raw_owner) if isinstance(raw_owner, str) else None
        if owner_id is None:
            errors["ownerId"] = ["must be an e-mail address."]

    if path_id is not None and "id" in document:
        raw_id = document["id"]
        if not isinstance(raw_id, str) or raw_id.lower() != path_id.lower():
            errors["id"] = ["must equal the id in the path when present."]

    if errors:
        raise ValidationFailed(errors, what="request body")
    if name is None or pet_type is None:  # unreachable: both were reported above
        raise ValidationFailed.single("body", "must have name and petType.")
    return PetWrite(name=name, pet_type=pet_type, owner_id=owner_id)


MAX_JSON_DEPTH = 32
"""How deeply arrays and objects may nest in a body: far more than any record needs, far less than what
would exhaust the interpreter's recursion limit anywhere a body is walked."""


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
        children = value.values() if isinstance(value, dict) else value
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


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


def _too_deep() -> MalformedRequest:
    return MalformedRequest(f"The request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")


def canonical_json_hash(document: Any) -> str:
    """Equal JSON documents hash equally, whatever their key order or spacing."""
    return hashlib.sha256(msgspec.json.encode(document, order="sorted")).hexdigest()


# --- ETags -------------------------------------------------------------------------------------

# RFC 9110 8.8.3: an entity tag may contain a comma, so a list of them is not split at every comma.
ENTITY_TAG = r'(?:W/)?"[\x21\x23-\x7e\x80-\xff]*"'
# Optional white space (RFC 9110 5.6.3) is spaces and tabs only.
_OWS = " \t"
ENTITY_TAG_LIST = rf"[ \t]*{ENTITY_TAG}(?:[ \t]*,[ \t]*{ENTITY_TAG})*[ \t]*"
_ENTITY_TAG_LIST = re.compile(ENTITY_TAG_LIST)
_ENTITY_TAG = re.compile(ENTITY_TAG)


def etag_for(pet: PetRow) -> str:
    digest = hashlib.blake2b(pet.id.bytes + pet.revision.to_bytes(8, "big"), digest_size=10).hexdigest()
    return f'"{digest}"'


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


# --- Idempotency keys ----------------------------------------------------------------------------

IDEMPOTENCY_KEY_MAX_LENGTH = 255
_IDEMPOTENCY_KEY = re.compile(rf"[\x20-\x7e]{{1,{IDEMPOTENCY_KEY_MAX_LENGTH}}}")


def check_idempotency_key(value: str) -> str:
    if not _IDEMPOTENCY_KEY.fullmatch(value):
        raise ValidationFailed.single("Idempotency-Key", "must be 1 to 255 printable ASCII characters.")
    return value


# --- Listing -------------------------------------------------------------------------------------

SORT_FIELDS = {
    "id": SortField.ID,
    "name": SortField.NAME,
    "pettype": SortField.PET_TYPE,
    "ownerid": SortField.OWNER_ID,
    "createdat": SortField.CREATED_AT,
    "createdby": SortField.CREATED_BY,
    "modifiedat": SortField.MODIFIED_AT,
    "modifiedby": SortField.MODIFIED_BY,
}
SORT_FIELD_NAMES = ("id", "name", "petType", "ownerId", "createdAt", "createdBy", "modifiedAt", "modifiedBy")
LIST_PARAMETERS = (
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
)
_MULTI_VALUED = frozenset({"ids", "petType", "sort"})
# The largest integer every JSON client reads exactly (IEEE 754 doubles).
MAX_SAFE_INTEGER = 2**53 - 1
MAX_QUERY_FIELDS = 200
MAX_IDS = 1000
MAX_PATTERN_LENGTH = 200


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """The query's name/value pairs in order; repeated names are kept."""
    try:
        return parse_qsl(
            query_string.decode("utf-8"), keep_blank_values=True, errors="strict", max_num_fields=MAX_QUERY_FIELDS
        )
    except UnicodeDecodeError:
        raise MalformedRequest("The query string is not valid UTF-8.") from None
    except ValueError:
        raise MalformedRequest(f"The query string has more than {MAX_QUERY_FIELDS} parameters.") from None


class ListRequest(msgspec.Struct, frozen=True, kw_only=True):
    page_index: int
    page_size: int
    filter: PetFilter
    sort: tuple[SortKey, ...]
    pet_type_order: tuple[str, ...]

    @property
    def offset(self) -> int:
        return (self.page_index - 1) * self.page_size


def like_pattern(user_pattern: str, *, substring: bool) -> str:
    """A LIKE pattern (escape `\\`) over lower-cased names from the API's pattern syntax.

    `%` and `_` are wildcards; `\\%`, `\\_` and `\\\\` stand for themselves; any other backslash is literal.
    """
    user_pattern = unicodedata.normalize("NFC", user_pattern)
    out: list[str] = []
    index = 0
    while index < len(user_pattern):
        char = user_pattern[index]
        if char == "\\" and index + 1 < len(user_pattern) and user_pattern[index + 1] in "%_\\":
            out.append("\\" + user_pattern[index + 1])
            index += 2
            continue
        out.append("\\\\" if char == "\\" else char if char in "%_" else match_key(char))
        index += 1
    pattern = "".join(out)
    return f"%{pattern}%" if substring else pattern


def _positive_int(name: str, value: str, errors: dict[str, list[str]], *, maximum: int | None = None) -> int | None:
    """A whole number ≥ 1; above `maximum` it is reduced to it, or is an error when there is none."""
    digits = value.lstrip("0")
    if not value.isascii() or not value.isdigit() or not digits:
        errors[name] = ["must be a whole number of at least 1."]
        return None
    if len(digits) > len(str(MAX_SAFE_INTEGER)) or int(digits) > MAX_SAFE_INTEGER:
        if maximum is not None:
            return maximum
        errors[name] = [f"must be a whole number from 1 to {MAX_SAFE_INTEGER}."]
        return None
    number = int(digits)
    return number if maximum is None else min(number, maximum)


def _time_bound(name: str, value: str, errors: dict[str, list[str]]) -> int | None:
    # A `+` in a query string decodes to a space; read `... 01:00` as the offset `+01:00` it was.
    moment = parse_datetime_ms(re.sub(r" (\d{2}:\d{2})$", r"+\1", value, flags=re.ASCII))
    if moment is None:
        errors[name] = ["must be an RFC 3339 date-time, e.g. 2026-11-21T16:06:29.123Z."]
        return None
    # Stored times are whole milliseconds, so `>= t` and `< t` both mean `>= ceil(t)` / `< ceil(t)`.
    return math.ceil(moment) if isinstance(moment, Fraction) else int(moment)


def _split_values(values: Sequence[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",")]


def parse_list_query(
    pairs: Sequence[tuple[str, str]], *, pet_types: PetTypes, default_page_size: int, max_page_size: int
) -> tuple[ListRequest, str | None]:
    """The listing request, and the `ownerId` asked for (applied by the caller's permissions).

    Reports every offending parameter at once.
    """
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    errors: dict[str, list[str]] = {}
    for name in values:
        if name not in LIST_PARAMETERS:
            errors[name] = ["is not a parameter of this operation; expected one of " + ", ".join(LIST_PARAMETERS) + "."]
    for name, given in values.items():
        if name in LIST_PARAMETERS and name not in _MULTI_VALUED and len(given) > 1:
            errors[name] = ["must be given once."]

    def single(name: str) -> str | None:
        given = values.get(name)
        return given[0] if given and name not in errors else None

    page_index = 1
    if (raw := single("pageIndex")) is not None:
        page_index = _positive_int("pageIndex", raw, errors) or 1
    page_size = default_page_size
    if (raw := single("pageSize")) is not None:
        page_size = _positive_int("pageSize", raw, errors, maximum=max_page_size) or max_page_size

    ids: tuple[uuid.UUID, ...] | None = None
    if "ids" in values:
        parsed_ids = [parse_record_id(item) for item in _split_values(values["ids"])]
        if any(item is None for item in parsed_ids) or len(parsed_ids) > MAX_IDS:
            errors["ids"] = [f"must be at most {MAX_IDS} record ids (UUIDs), comma-separated or repeated."]
        else:
            ids = tuple(dict.fromkeys(item for item in parsed_ids if item is not None))

    type_filter: tuple[str, ...] | None = None
    if "petType" in values:
        resolved = [pet_types.resolve(item) for item in _split_values(values["petType"])]
        if any(item is None for item in resolved):
            errors["petType"] = [f"must be {pet_types.expected} (comma-separated or repeated)."]
        else:
            type_filter = tuple(dict.fromkeys(item for item in resolved if item is not None))

    owner_id: str | None = None
    if (raw := single("ownerId")) is not None:
        owner_id = normalize_email(raw.strip())
        if owner_id is None:
            errors["ownerId"] = ["must be an e-mail address."]

    patterns: list[str] = []
    for name in ("name", "search"):
        if (raw := single(name)) is not None:
            if len(raw) > MAX_PATTERN_LENGTH:
                errors[name] = [f"must be at most {MAX_PATTERN_LENGTH} characters long."]
            elif has_forbidden_pattern_characters(raw):
                errors[name] = ["must not contain control characters (no name contains them)."]
            patterns.append(like_pattern(raw, substring=name == "search"))

    bounds = {
        name: _time_bound(name, raw, errors)
        for name in ("createdFrom", "createdTo", "modifiedFrom", "modifiedTo")
        if (raw := single(name)) is not None
    }

    descending_default = False
    if (raw := single("order")) is not None:
        if raw.lower() not in ("asc", "desc"):
            errors["order"] = ["must be asc or desc."]
        descending_default = raw.lower() == "desc"

    sort: list[SortKey] = []
    if "sort" in values:
        seen: set[SortField] = set()
        for item in _split_values(values["sort"]):
            descending = item.startswith("-")
            field = SORT_FIELDS.get(item.removeprefix("-").lower())
            if field is None or field in seen:
                errors["sort"] = [
                    "must be distinct fields of " + ", ".join(SORT_FIELD_NAMES) + ", each optionally prefixed with -."
                ]
                break
            seen.add(field)
            sort.append(SortKey(field, descending or descending_default))
    else:
        sort.append(SortKey(SortField.CREATED_AT, descending_default))
    if all(key.field is not SortField.ID for key in sort):
        sort.append(SortKey(SortField.ID))  # the tie-breaker that makes the order total

    if errors:
        raise ValidationFailed(errors, what="query")

    pet_filter = PetFilter(
        ids=ids,
        pet_types=type_filter,
        name_like=tuple(patterns),
        created_from=bounds.get("createdFrom"),
        created_before=bounds.get("createdTo"),
        modified_from=bounds.get("modifiedFrom"),
        modified_before=bounds.get("modifiedTo"),
    )
    request = ListRequest(
        page_index=page_index,
        page_size=page_size,
        filter=pet_filter,
        sort=tuple(sort),
        pet_type_order=pet_types.sort_order,
    )
    return request, owner_id
