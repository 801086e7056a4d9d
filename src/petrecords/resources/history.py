"""A record's history: its changes, oldest first, for whoever may read the record (or could, before it was
deleted)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from petrecords.auth import Caller
from petrecords.errors import NotFound
from petrecords.resources.access import Permission, permission
from petrecords.resources.changes import change_wire, sees, viewer_of
from petrecords.resources.declaration import Resource
from petrecords.store.base import Change, Transaction
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
    total = await tx.count_history(resource.name, parsed)
    offset = (page_index - 1) * page_size
    items: Sequence[Change] = []
    if offset < total:
        items = await tx.history(resource.name, parsed, limit=page_size, offset=offset)
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
