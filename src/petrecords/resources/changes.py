"""A change as clients see it: its wire form, its cursor, and who may see it."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from petrecords.errors import ValidationFailed
from petrecords.store.base import Change, Cursor
from petrecords.tables import SHARED
from petrecords.values import format_timestamp

_CURSOR = re.compile(r"([0-9a-f]{1,16})-([0-9a-f]{1,16})")


def encode_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]:x}-{cursor[1]:x}"


def decode_cursor(name: str, text: str) -> Cursor:
    match = _CURSOR.fullmatch(text)
    if match is None:
        raise ValidationFailed.single(name, "must be a cursor this service handed out (nextCursor, a change's cursor).")
    return int(match.group(1), 16), int(match.group(2), 16)


def change_wire(change: Change) -> dict[str, Any]:
    return {
        "cursor": encode_cursor(change.cursor),
        "resource": change.resource,
        "id": str(change.record_id),
        "action": change.action,
        "version": change.version,
        "at": format_timestamp(change.at),
        "by": change.by,
        "record": msgspec.Raw(change.record),
    }


def sees(reader: str | None, change: Change) -> bool:
    """Whether a caller (None: an administrator) may see a change: of a shared record, or of a record they
    owned before or after the write."""
    return reader is None or change.owner_after in (SHARED, reader) or change.owner_before == reader
