"""The wire form of a stored record: every declared field, in order, and nothing else. The only place that
formats stored values (timestamps, ids) for clients."""

from __future__ import annotations

from typing import Any

from petrecords.resources.declaration import Resource
from petrecords.store.base import Row
from petrecords.values import format_timestamp

Shown = dict[str, Any]


def show(resource: Resource, row: Row) -> Shown:
    shown: Shown = {
        "id": str(row["id"]),
        "createdAt": format_timestamp(row["created_at"]),
        "createdBy": row["created_by"],
        "modifiedAt": format_timestamp(row["modified_at"]),
        "modifiedBy": row["modified_by"],
    }
    for declared in resource.fields:
        if (reference := declared.kind.embeds) is not None:
            shown[declared.name] = show(resource.reference_of(reference).target, row[declared.name])
            continue
        value = row[declared.column]
        shown[declared.name] = None if value is None else declared.kind.show(value)
    return shown
