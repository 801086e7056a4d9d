"""The wire form of a stored record: every declared field, in order, and nothing else. The only place that
formats stored values (timestamps, ids) for clients."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from petrecords.resources.declaration import Resource
from petrecords.resources.fields import PlainKind
from petrecords.store.base import Row
from petrecords.values import format_timestamp

Shown = dict[str, Any]
_Part = tuple[str, str, Callable[[Any], Any] | None, Resource | None]
"""(wire name, column, how a value is shown (None: as stored), the resource of a record embedded there)."""


@functools.cache
def _parts_of(resource: Resource) -> tuple[_Part, ...]:
    """How each declared field is shown, worked out once: a record is shown on nearly every answer."""
    parts: list[_Part] = []
    for declared in resource.fields:
        kind = declared.kind
        if (reference := kind.embeds) is not None:
            parts.append((declared.name, declared.name, None, resource.reference_of(reference).target))
            continue
        as_stored = getattr(type(kind), "show", None) is PlainKind.show
        parts.append((declared.name, declared.column, None if as_stored else kind.show, None))
    return tuple(parts)


Embed = Callable[[Resource, Row], Any]
"""How a record embedded in another is shown: `show` by default."""


def show(resource: Resource, row: Row, embed: Embed | None = None) -> Shown:
    shown: Shown = {
        "id": str(row["id"]),
        "createdAt": format_timestamp(row["created_at"]),
        "createdBy": row["created_by"],
        "modifiedAt": format_timestamp(row["modified_at"]),
        "modifiedBy": row["modified_by"],
    }
    for name, column, show_value, embedded in _parts_of(resource):
        value = row[column]
        if embedded is not None:
            shown[name] = show(embedded, value) if embed is None else embed(embedded, value)
        elif value is None or show_value is None:
            shown[name] = value
        else:
            shown[name] = show_value(value)
    return shown
