"""The operations every resource has, from its declaration: load what the caller may see, create, replace,
delete, list. They read and write through a transaction and never commit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from petrecords.auth import Caller
from petrecords.errors import Forbidden, NotFound, PreconditionFailed, ReferencedRecord, ValidationFailed
from petrecords.resources.declaration import OnDelete, Resource, ResourceSet, Values, Writers
from petrecords.resources.listing import ListRequest
from petrecords.resources.requests import Body, EntityTags, entity_tag
from petrecords.resources.wire import Shown, show
from petrecords.store.base import Condition, Operator, PageQuery, Row, Transaction
from petrecords.text import match_key
from petrecords.values import new_record_id, now_ms, parse_record_id

# --- visibility ------------------------------------------------------------------------------------


def owner_column_of(resource: Resource) -> str:
    column = resource.ownership.column
    if column is None:
        raise TypeError(f"{resource.name} records have no owner")
    return column


def visible(resource: Resource, caller: Caller, row: Row) -> bool:
    column = resource.ownership.column
    return column is None or caller.is_admin or row[column] == caller.email


async def load_visible(
    *, tx: Transaction, caller: Caller, resource: Resource, record_id: str, for_update: bool = False
) -> Row:
    """The record the caller may see. Someone else's record is as absent as one that does not exist."""
    parsed = parse_record_id(record_id)
    row = None if parsed is None else await tx.get(resource.collection, parsed, for_update=for_update)
    if row is None or not visible(resource, caller, row):
        raise NotFound()
    return row


def etag_of(resource: Resource, row: Row) -> str:
    versions = [(row["id"], row["revision"])]
    versions.extend((row[embed.field]["id"], row[embed.field]["revision"]) for embed in resource.embeds)
    return entity_tag(*versions)


# --- writes ----------------------------------------------------------------------------------------


async def _referenced(*, tx: Transaction, caller: Caller, resource: Resource, values: Values) -> dict[str, Row]:
    """The records a body refers to, each held against change until the transaction ends (so that it cannot
    be deleted, or change owner, under a record that is being written to refer to it)."""
    found: dict[str, Row] = {}
    errors: dict[str, list[str]] = {}
    for reference in resource.references:
        column = resource.field_named(reference.field).column
        row = await tx.get(reference.target.collection, values[column], for_share=True)
        if row is None or not visible(reference.target, caller, row):
            errors[reference.field] = [reference.message]
        else:
            found[reference.field] = row
    if not errors and resource.complete is not None:
        errors.update(resource.complete(values, found))
    if errors:
        raise ValidationFailed(errors, what="request body")
    return found


def _permit_write(resource: Resource, caller: Caller) -> None:
    if resource.ownership.writers is Writers.ADMIN and not caller.is_admin:
        raise Forbidden(f"Only an administrator may create, replace or delete {resource.title} records.")


def _owner_of(
    resource: Resource, caller: Caller, body: Body, referenced: Mapping[str, Row], *, current: str | None
) -> dict[str, Any]:
    ownership = resource.ownership
    if ownership.column is None:
        return {}
    if ownership.through is not None:
        target = resource.reference_of(ownership.through).target
        return {ownership.column: referenced[ownership.through][owner_column_of(target)]}
    requested = body.values.get(ownership.column)
    owner = requested or current or caller.email
    if requested is not None and owner != caller.email and not caller.is_admin:
        raise Forbidden(f"Only an administrator may set {ownership.field} to another user.")
    return {ownership.column: owner}


def _keys(resource: Resource, values: Values) -> dict[str, Any]:
    """The matching and sorting keys of the text fields."""
    keys: dict[str, Any] = {}
    for declared in resource.fields:
        if (key_column := declared.key_column) is not None and declared.column in values:
            text = values[declared.column]
            keys[key_column] = None if text is None else match_key(text)
    return keys


def _writable_values(resource: Resource, body: Body) -> Values:
    """What a body sets, without the owner (which `_owner_of` decides); a field holding null that was not
    sent is reset to null, as a replace replaces every field."""
    values = {column: value for column, value in body.values.items() if column != resource.ownership.column}
    for declared in resource.fields:
        if declared.nullable and not declared.read_only and declared.column not in values:
            values[declared.column] = None
    return values


async def create_record(*, tx: Transaction, caller: Caller, resource: Resource, body: Body) -> Row:
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values)
    _permit_write(resource, caller)
    values = _writable_values(resource, body)
    timestamp = now_ms()
    row: Row = {
        "id": new_record_id(),
        "created_at": timestamp,
        "created_by": caller.email,
        "modified_at": timestamp,
        "modified_by": caller.email,
        "revision": 1,
        **values,
        **_owner_of(resource, caller, body, referenced, current=None),
        **_keys(resource, values),
    }
    await tx.insert(resource.collection, row)
    return await _with_embeds(tx=tx, resource=resource, row=row, referenced=referenced)


async def replace_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    record_id: str,
    body: Body,
    if_match: EntityTags | None,
) -> Row:
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values)
    current = await load_visible(tx=tx, caller=caller, resource=resource, record_id=record_id, for_update=True)
    _permit_write(resource, caller)
    owner_column = resource.ownership.column
    owner = _owner_of(resource, caller, body, referenced, current=current[owner_column] if owner_column else None)
    _check_if_match(resource, if_match, current)
    values = _writable_values(resource, body)
    replaced: Row = {
        **current,
        **values,
        **owner,
        **_keys(resource, values),
        # Never earlier than the last write, even when another instance's clock runs ahead.
        "modified_at": max(now_ms(), current["modified_at"]),
        "modified_by": caller.email,
        "revision": current["revision"] + 1,
    }
    for embed in resource.embeds:
        replaced.pop(embed.field, None)
    await tx.update(resource.collection, replaced, previous=current)
    if owner_column is not None and replaced[owner_column] != current[owner_column]:
        await _move_dependents(tx=tx, resources=resources, resource=resource, row=replaced)
    return await _with_embeds(tx=tx, resource=resource, row=replaced, referenced=referenced)


async def _move_dependents(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
    """Records that always have the owner of this one follow it to its new owner."""
    for dependent in resources.dependents(resource):
        ownership = dependent.resource.ownership
        if ownership.through != dependent.reference.field or ownership.column is None:
            continue
        owner_column = owner_column_of(resource)
        for follower in await tx.referrers(dependent.resource.collection, dependent.column, row["id"]):
            moved = {**follower, ownership.column: row[owner_column], "revision": follower["revision"] + 1}
            await tx.update(dependent.resource.collection, moved, previous=follower)


async def delete_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    record_id: str,
    if_match: EntityTags | None,
) -> Row:
    current = await load_visible(tx=tx, caller=caller, resource=resource, record_id=record_id, for_update=True)
    _permit_write(resource, caller)
    _check_if_match(resource, if_match, current)
    await _delete_with_dependents(tx=tx, resources=resources, resource=resource, row=current)
    return current


async def _delete_with_dependents(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
    for dependent in resources.dependents(resource):
        collection = dependent.resource.collection
        if dependent.reference.on_delete is OnDelete.RESTRICT:
            if await tx.has_referrer(collection, dependent.column, row["id"]):
                raise ReferencedRecord(
                    f"The {resource.title} is still referenced by {dependent.resource.title} records and cannot "
                    "be deleted."
                )
        else:
            for referrer in await tx.referrers(collection, dependent.column, row["id"]):
                await _delete_with_dependents(tx=tx, resources=resources, resource=dependent.resource, row=referrer)
    without_embeds = {name: value for name, value in row.items() if name not in {e.field for e in resource.embeds}}
    await tx.delete(resource.collection, without_embeds)


def _check_if_match(resource: Resource, if_match: EntityTags | None, row: Row) -> None:
    if if_match is not None and not if_match.match_strong(etag_of(resource, row)):
        raise PreconditionFailed()


async def _with_embeds(*, tx: Transaction, resource: Resource, row: Row, referenced: Mapping[str, Row]) -> Row:
    """The row with the records it embeds, as they are now (the references hold them)."""
    if not resource.embeds:
        return row
    embedded = dict(row)
    for embed in resource.embeds:
        target = resource.reference_of(embed.reference).target
        found = referenced.get(embed.reference)
        if found is None:
            column = resource.field_named(embed.reference).column
            found = await tx.get(target.collection, row[column])
        embedded[embed.field] = found
    return embedded


# --- listing ---------------------------------------------------------------------------------------


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
    conditions = list(request.conditions)
    owner_column = resource.ownership.column
    visible_at_all = True
    if owner_column is not None:
        if request.owner is not None:
            conditions.append(Condition((owner_column,), Operator.EQUAL, (request.owner,)))
            visible_at_all = caller.is_admin or request.owner == caller.email
        elif not caller.is_admin:
            conditions.append(Condition((owner_column,), Operator.EQUAL, (caller.email,)))
    total = await tx.count(resource.collection, tuple(conditions)) if visible_at_all else 0
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
