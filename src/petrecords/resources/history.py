"""A record's history: its changes, oldest first, for whoever may read the record (or could, before it was
deleted)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from petrecords.auth import Caller
from petrecords.errors import NotFound
from petrecords.resources.changes import change_wire, sees
from petrecords.resources.declaration import Resource
from petrecords.resources.service import visible
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
    row = await tx.get(resource.collection, parsed)
    if row is not None:
        if not visible(resource, caller, row):
            raise NotFound()
    else:
        last = await tx.last_change(resource.name, parsed)
        if last is None or last.action != "deleted" or not (caller.is_admin or sees(caller.email, last)):
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
