"""List queries, for every resource: paging, the common and declared filters, the sort. Reports every
offending parameter at once."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import parse_qsl

from petrecords.auth import Caller
from petrecords.errors import MalformedRequest, ValidationFailed
from petrecords.resources.access import list_scope
from petrecords.resources.declaration import Resource
from petrecords.resources.fields import MAX_SAFE_INTEGER, Comparison, Context, Email, Kind, RecordId
from petrecords.resources.filters import (
    ANY_MOMENT,
    AnyOf,
    Compared,
    Errors,
    Filter,
    Matches,
    Owner,
    Scope,
    ids_filter,
    split_values,
    time_bound,
)
from petrecords.resources.wire import Shown, show
from petrecords.store.base import Condition, Operator, PageQuery, Row, SortKey, Transaction

MAX_QUERY_FIELDS = 200
PAGING_PARAMETERS = ("pageIndex", "pageSize")
ORDER_PARAMETERS = ("sort", "order")
AUDIT_SORT_FIELDS = {
    "id": "id",
    "createdAt": "created_at",
    "createdBy": "created_by",
    "modifiedAt": "modified_at",
    "modifiedBy": "modified_by",
}


def common_filters() -> tuple[Filter, ...]:
    """The filters every resource has, before its own."""
    return (
        ids_filter(),
        time_bound("createdFrom", "created_at", Operator.AT_LEAST, "createdAt ≥ this (RFC 3339, `Z` or an offset)."),
        time_bound("createdTo", "created_at", Operator.BELOW, "createdAt < this."),
        time_bound("modifiedFrom", "modified_at", Operator.AT_LEAST, "modifiedAt ≥ this."),
        time_bound("modifiedTo", "modified_at", Operator.BELOW, "modifiedAt < this."),
    )


# Cached: a resource's filters are fixed once it is declared, and reading a list would otherwise build them again.
@functools.lru_cache(maxsize=64)
def list_filters(resource: Resource) -> tuple[Filter, ...]:
    """Every filter of a resource's list, in the order its parameters are documented: the common ones, its own,
    and those of the web data providers' conventions."""
    common = common_filters()
    scope = (Scope(),) if resource.sharing is not None else ()
    return (common[0], *resource.filters, *scope, *common[1:], *convention_filters(resource))


# --- the conventions of web data providers (Refine's and react-admin's simple REST, after json-server) ---------

AUDIT_FIELDS: dict[str, tuple[str, Kind]] = {
    "id": ("id", RecordId()),
    "createdAt": ("created_at", ANY_MOMENT),
    "createdBy": ("created_by", Email()),
    "modifiedAt": ("modified_at", ANY_MOMENT),
    "modifiedBy": ("modified_by", Email()),
}
"""The fields every record has: their columns and kinds."""
SUFFIXES = {"_like": Comparison.MATCH, "_gte": Comparison.BOUND, "_lte": Comparison.BOUND, "_ne": Comparison.DIFFER}


def compared_fields(resource: Resource) -> dict[str, tuple[str, Kind]]:
    """The fields that the conventions compare: the sort fields, and the other fields a declared filter reads
    (a vaccine's description, which `search` reads)."""
    fields = {**AUDIT_FIELDS, **{f.name: (f.column, f.kind) for f in resource.fields if f.kind.embeds is None}}
    filtered = {column for one in resource.filters for column in one.columns}
    names = [
        *resource.sort_fields,
        *(
            field.name
            for field in resource.fields
            if field.kind.embeds is None
            and field.name not in resource.sort_fields
            and {field.column, field.key_column} & filtered
        ),
    ]
    return {name: fields[name] for name in names}


def convention_filters(resource: Resource) -> tuple[Filter, ...]:
    """`{field}_like` (a substring of a text field that can be matched), `{field}_gte` and `{field}_lte`
    (inclusive bounds of a date-time or a number), `{field}_ne` (differs, null included: listed values, ids,
    e-mails), `q` (the same as `search`) and `id` (the same as `ids`)."""
    found: list[Filter] = []
    for name, (column, kind) in compared_fields(resource).items():
        if Comparison.MATCH in kind.comparisons:
            found.append(
                Matches(
                    f"{name}_like",
                    (kind.key_column or column,),
                    substring=True,
                    description=f"Case-insensitive substring of {name}.",
                    kept=kind.kept_controls,
                )
            )
        if Comparison.BOUND in kind.comparisons:
            found.append(Compared(f"{name}_gte", column, kind, Operator.AT_LEAST, f"{name} ≥ this."))
            found.append(Compared(f"{name}_lte", column, kind, Operator.AT_MOST, f"{name} ≤ this."))
        if Comparison.DIFFER in kind.comparisons:
            found.append(Compared(f"{name}_ne", column, kind, Operator.DIFFERS, f"{name} differs (null included)."))
    search = next((one for one in resource.filters if one.parameters == ("search",)), None)
    if isinstance(search, Matches):
        found.append(replace(search, parameter="q", description=f"The same as search: {search.description}"))
    found.append(AnyOf("id", "id", RecordId(), "The same as ids (as a data provider's getMany sends them)."))
    return tuple(found)


def _misfit(resource: Resource, name: str) -> str | None:
    """Why `name` is no parameter, when it is a convention's operator on a field it does not fit."""
    for suffix in SUFFIXES:
        field = name.removesuffix(suffix)
        if field != name and field in compared_fields(resource):
            fitting = [
                other
                for other, comparison in SUFFIXES.items()
                if comparison in compared_fields(resource)[field][1].comparisons
            ]
            takes = ", ".join(f"{field}{other}" for other in fitting) if fitting else "no such operator"
            return f"is not a parameter of this operation: {suffix} does not fit {field} (it takes {takes})."
    return None


@functools.lru_cache(maxsize=64)
def list_parameters(resource: Resource) -> tuple[str, ...]:
    names = [name for one in list_filters(resource) for name in one.parameters]
    return (*PAGING_PARAMETERS, *names, *ORDER_PARAMETERS)


@dataclass(frozen=True)
class ListRequest:
    page_index: int
    page_size: int
    conditions: tuple[Condition, ...]
    owner: str | None
    """The `ownerId` asked for, which the caller's permissions apply to."""
    sort: tuple[SortKey, ...]
    """Total: ends with the id."""
    scope: str | None = None
    """`access`: owned or shared (None: both), which the caller's permissions apply to."""

    @property
    def offset(self) -> int:
        return (self.page_index - 1) * self.page_size


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """The query's name/value pairs in order; repeated names are kept, empty parts (`?&a=1&`) skipped."""
    try:
        return parse_qsl(
            query_string.decode("utf-8"), keep_blank_values=True, errors="strict", max_num_fields=MAX_QUERY_FIELDS
        )
    except UnicodeDecodeError:
        raise MalformedRequest("The query string is not valid UTF-8.") from None
    except ValueError:
        raise MalformedRequest(f"The query string has more than {MAX_QUERY_FIELDS} parameters.") from None


def positive_int(name: str, value: str, errors: Errors, *, maximum: int | None = None) -> int | None:
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


def parse_paging(pairs: Sequence[tuple[str, str]], *, default_page_size: int, max_page_size: int) -> tuple[int, int]:
    """(pageIndex, pageSize) of a query that takes nothing else (a record's history)."""
    errors: Errors = {}
    seen: set[str] = set()
    page_index, page_size = 1, default_page_size
    for name, value in pairs:
        if name not in PAGING_PARAMETERS:
            errors[name] = ["is not a parameter of this operation; expected one of pageIndex, pageSize."]
        elif name in seen:
            errors[name] = ["must be given once."]
        elif name == "pageIndex":
            page_index = positive_int(name, value, errors) or 1
        else:
            page_size = positive_int(name, value, errors, maximum=max_page_size) or max_page_size
        seen.add(name)
    if errors:
        raise ValidationFailed(errors, what="query")
    return page_index, page_size


def sort_columns(resource: Resource, context: Context) -> dict[str, SortKey]:
    """Each sort field, by its lower-cased name, as the store sorts it (ascending)."""
    keys = {name.lower(): SortKey(column) for name, column in AUDIT_SORT_FIELDS.items()}
    for name in resource.sort_fields:
        if name.lower() not in keys:
            declared = resource.field_named(name)
            keys[name.lower()] = declared.kind.sort_key(declared.column, context)
    return {name.lower(): keys[name.lower()] for name in sort_field_names(resource)}


def sort_field_names(resource: Resource) -> tuple[str, ...]:
    return resource.sort_fields


@functools.lru_cache(maxsize=64)
def _given_several(resource: Resource) -> frozenset[str]:
    """The parameters that a list query may give more than once."""
    repeatable = {name for one in list_filters(resource) if one.several for name in one.parameters}
    return frozenset({"sort", "order"} | repeatable)


def parse_list_query(
    resource: Resource,
    pairs: Sequence[tuple[str, str]],
    *,
    context: Context,
    default_page_size: int,
    max_page_size: int,
) -> ListRequest:
    filters = list_filters(resource)
    known = list_parameters(resource)
    several = _given_several(resource)
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    errors: Errors = {}
    for name, given in values.items():
        if name not in known:
            errors[name] = [
                _misfit(resource, name)
                or "is not a parameter of this operation; expected one of " + ", ".join(known) + "."
            ]
        elif name not in several and len(given) > 1:
            errors[name] = ["must be given once."]
    single = {name: given for name, given in values.items() if name not in errors}

    page_index = 1
    if (raw := single.get("pageIndex")) is not None:
        page_index = positive_int("pageIndex", raw[0], errors) or 1
    page_size = default_page_size
    if (raw := single.get("pageSize")) is not None:
        page_size = positive_int("pageSize", raw[0], errors, maximum=max_page_size) or max_page_size

    conditions: list[Condition] = []
    owner: str | None = None
    scope: str | None = None
    for one in filters:
        if isinstance(one, Owner):
            owner = one.owner(single, errors)
        elif isinstance(one, Scope):
            scope = one.scope(single, errors)
        else:
            conditions.extend(one.read(single, errors, context))

    sort = _sort(resource, single, errors, context)
    if errors:
        raise ValidationFailed(errors, what="query")
    return ListRequest(
        page_index=page_index, page_size=page_size, conditions=tuple(conditions), owner=owner, sort=sort, scope=scope
    )


def _sort(resource: Resource, values: dict[str, list[str]], errors: Errors, context: Context) -> tuple[SortKey, ...]:
    """The sort: `sort` fields (`-` for descending) in the direction `order` gives those without `-`; or, with a
    list of directions in `order`, each field in its own (as data providers send `sort=petType,name&order=asc,desc`,
    no field then carrying a `-`)."""
    directions = [item.lower() for item in split_values(values.get("order", []))]
    if any(direction not in ("asc", "desc") for direction in directions):
        errors["order"] = ["must be asc or desc, or a comma-separated list of them, one for each sort field."]
        directions = []
    items = split_values(values["sort"]) if "sort" in values else []
    listed = len(directions) > 1
    if listed and (len(directions) != len(items) or any(item.startswith("-") for item in items)):
        errors["order"] = [
            "must be asc or desc, or one of them for each sort field, in the same order, when no sort field carries "
            f"a - (sort names {len(items)} field{'s' if len(items) != 1 else ''}; the default is createdAt)."
        ]
        listed, directions = False, []
    descending_default = directions == ["desc"]
    columns = sort_columns(resource, context)
    sort: list[SortKey] = []
    if items:
        seen: set[str] = set()
        for position, item in enumerate(items):
            name = item.removeprefix("-").lower()
            key = columns.get(name)
            if key is None or name in seen:
                errors["sort"] = [
                    "must be distinct fields of "
                    + ", ".join(sort_field_names(resource))
                    + ", each optionally prefixed with -."
                ]
                break
            seen.add(name)
            descending = directions[position] == "desc" if listed else item.startswith("-") or descending_default
            sort.append(SortKey(key.column, descending, key.rank, key.nullable))
    else:
        sort.append(SortKey("created_at", descending_default))
    if all(key.column != "id" for key in sort):
        sort.append(SortKey("id"))  # the tie-breaker that makes the order total
    return tuple(sort)


@dataclass(frozen=True)
class Page:
    items: list[Shown]
    page_index: int
    page_size: int
    total_pages: int
    total_count: int

    def wire(self) -> dict[str, Any]:
        return {
            "items": self.items,
            "pageIndex": self.page_index,
            "pageSize": self.page_size,
            "totalPages": self.total_pages,
            "totalCount": self.total_count,
            "hasPreviousPage": self.page_index > 1,
            "hasNextPage": self.page_index < self.total_pages,
        }


async def list_records(*, tx: Transaction, caller: Caller, resource: Resource, request: ListRequest) -> Page:
    scope = await list_scope(tx, caller, resource, owner=request.owner, scope=request.scope)
    conditions = [*request.conditions, *(scope or ())]
    total = await tx.count(resource.collection, tuple(conditions)) if scope is not None else 0
    rows: Sequence[Row] = []
    if request.offset < total:
        query = PageQuery(
            conditions=tuple(conditions), sort=request.sort, limit=request.page_size, offset=request.offset
        )
        rows = await tx.list(resource.collection, query)
    total_pages = math.ceil(total / request.page_size)
    return Page(
        items=[show(resource, row) for row in rows],
        page_index=request.page_index,
        page_size=request.page_size,
        total_pages=total_pages,
        total_count=total,
    )
