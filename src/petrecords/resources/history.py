"""A record's history: its changes, oldest first, for whoever may read the record (or could, before it was
deleted)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from petrecords.auth import Caller
from petrecords.changes.change import change_wire, sees, viewer_of
from petrecords.errors import NotFound
from petrecords.resources.access import Permission, list_scope, moves_between, owner_keys, permission
from petrecords.resources.declaration import Resource
from petrecords.store.base import Change, Condition, Operator, PageQuery, Row, SortKey, Transaction, Versions
from petrecords.values import parse_record_id


async def history_page(
    *, tx: Transaction, caller: Caller, resource: Resource, record_id: str, page_index: int, page_size: int
) -> dict[str, Any]:
    """A record's changes, oldest first: for whoever may read the record now, or, once it is deleted, whoever
    could read it just before. Anyone else gets 404, as for a record that never existed."""
    parsed = parse_record_id(record_id)
    if parsed is None:
        raise NotFound()
    # The same reads whatever the record is that the caller may not see now (someone else's, deleted, never
    # existed), so that neither the answer nor its timing tells them apart: whether they could read it before it
    # went is looked up for a live record too, though only a deleted one's answer depends on it.
    row = await tx.get(resource.collection, parsed)
    last = await tx.last_change(resource.name, parsed)
    may = await permission(tx, caller, resource, row, asked=parsed)
    if may is Permission.NONE:
        could_read_before = await _could_read_before(tx, caller, last)
        if row is not None or not could_read_before:
            raise NotFound()
    versions = await _versions_shown(tx, caller, resource, parsed, row, last)
    total = await tx.count_history(resource.name, parsed, versions=versions)
    offset = (page_index - 1) * page_size
    items: Sequence[Change] = []
    if offset < total:
        items = await tx.history(resource.name, parsed, limit=page_size, offset=offset, versions=versions)
    total_pages = -(-total // page_size)
    return {
        "items": [change_wire(change) for change in items],
        "pageIndex": page_index,
        "pageSize": page_size,
        "totalPages": total_pages,
        "totalCount": total,
        "hasPreviousPage": page_index > 1,
        "hasNextPage": page_index < total_pages,
    }


async def _versions_shown(
    tx: Transaction, caller: Caller, resource: Resource, record_id: uuid.UUID, row: Row | None, last: Change | None
) -> Versions | None:
    """Which versions of a record the caller may read the history of are shown to them (None: every one). A record
    that moves between the records it is shared through (a vaccination between pets) shows a non-administrator
    the versions from while it was shared through one they may see now (the one they see it through now, or, once
    it is deleted, saw it through just before it went), and those of the writes before or after which it was
    theirs: the others tell of pets never shared with them."""
    sharing, through = resource.sharing, moves_between(resource)
    if caller.is_admin or sharing is None or through is None:
        return None
    keys = await tx.history_keys(resource.name, record_id)
    if len(keys) < 2:
        return None
    if row is not None:
        seen = {row[sharing.key_column]}
    else:
        seen = {last.shared_key} if last is not None and last.shared_key is not None else set()
    others = tuple(key for key in keys if key not in seen)
    scope = await list_scope(tx, caller, through, owner=None, scope=None)
    if scope is not None:
        conditions = (Condition(("id",), Operator.IN, others), *scope)
        query = PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=len(others), offset=0)
        seen.update(found["id"] for found in await tx.list(through.collection, query))
    return Versions(owner_keys(caller), tuple(key for key in keys if key in seen))


async def _could_read_before(tx: Transaction, caller: Caller, last: Change | None) -> bool:
    """Whether a deleted record's last change (its deletion) was one the caller could see: an administrator, its
    owner, or someone it was shared with then. The shares are looked at whether or not there is such a change."""
    viewer = viewer_of(caller)
    if viewer is None:
        return last is not None and last.action == "deleted"
    if last is not None and last.action == "deleted" and sees(viewer, last):
        return True
    key = last.shared_key if last is not None and last.shared_key is not None else _NO_KEY
    cursor, at = (last.cursor, last.at) if last is not None else ((0, 0), 0)
    shared = await tx.shared_at(key, viewer.grantees, cursor, at)
    return shared and last is not None and last.action == "deleted"


_NO_KEY = uuid.UUID(int=0)
