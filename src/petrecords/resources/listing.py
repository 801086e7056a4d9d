"""List queries, for every resource: paging, the common and declared filters, the sort. Reports every
offending parameter at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl

from petrecords.errors import MalformedRequest, ValidationFailed
from petrecords.resources.declaration import Resource
from petrecords.resources.fields import MAX_SAFE_INTEGER, Context
from petrecords.resources.filters import Errors, Filter, Owner, TimeBound, ids_filter, split_values
from petrecords.store.base import Condition, Operator, SortKey

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
        TimeBound("createdFrom", "created_at", Operator.AT_LEAST, "createdAt ≥ this (RFC 3339, `Z` or an offset)."),
        TimeBound("createdTo", "created_at", Operator.BELOW, "createdAt < this."),
        TimeBound("modifiedFrom", "modified_at", Operator.AT_LEAST, "modifiedAt ≥ this."),
        TimeBound("modifiedTo", "modified_at", Operator.BELOW, "modifiedAt < this."),
    )


def list_filters(resource: Resource) -> tuple[Filter, ...]:
    """Every filter of a resource's list, in the order its parameters are documented."""
    common = common_filters()
    return (common[0], *resource.filters, *common[1:])


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


def _positive_int(name: str, value: str, errors: Errors, *, maximum: int | None = None) -> int | None:
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
            page_index = _positive_int(name, value, errors) or 1
        else:
            page_size = _positive_int(name, value, errors, maximum=max_page_size) or max_page_size
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
    several = {"sort"} | {name for one in filters if one.several for name in one.parameters}
    values: dict[str, list[str]] = {}
    for name, value in pairs:
        values.setdefault(name, []).append(value)
    errors: Errors = {}
    for name, given in values.items():
        if name not in known:
            errors[name] = ["is not a parameter of this operation; expected one of " + ", ".join(known) + "."]
        elif name not in several and len(given) > 1:
            errors[name] = ["must be given once."]
    single = {name: given for name, given in values.items() if name not in errors}

    page_index = 1
    if (raw := single.get("pageIndex")) is not None:
        page_index = _positive_int("pageIndex", raw[0], errors) or 1
    page_size = default_page_size
    if (raw := single.get("pageSize")) is not None:
        page_size = _positive_int("pageSize", raw[0], errors, maximum=max_page_size) or max_page_size

    conditions: list[Condition] = []
    owner: str | None = None
    for one in filters:
        if isinstance(one, Owner):
            owner = one.owner(single, errors)
        else:
            conditions.extend(one.read(single, errors, context))

    sort = _sort(resource, single, errors, context)
    if errors:
        raise ValidationFailed(errors, what="query")
    return ListRequest(page_index=page_index, page_size=page_size, conditions=tuple(conditions), owner=owner, sort=sort)


def _sort(resource: Resource, values: dict[str, list[str]], errors: Errors, context: Context) -> tuple[SortKey, ...]:
    descending_default = False
    if (raw := values.get("order")) is not None:
        if raw[0].lower() not in ("asc", "desc"):
            errors["order"] = ["must be asc or desc."]
        descending_default = raw[0].lower() == "desc"
    columns = sort_columns(resource, context)
    sort: list[SortKey] = []
    if "sort" in values:
        seen: set[str] = set()
        for item in split_values(values["sort"]):
            descending = item.startswith("-")
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
            sort.append(SortKey(key.column, descending or descending_default, key.rank))
    else:
        sort.append(SortKey("created_at", descending_default))
    if all(key.column != "id" for key in sort):
        sort.append(SortKey("id"))  # the tie-breaker that makes the order total
    return tuple(sort)
