"""A change as clients see it: its wire form, its cursor, and who may see it."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from petrecords.auth import Caller
from petrecords.errors import ValidationFailed
from petrecords.store.base import Change, Cursor, Viewer
from petrecords.tables import SHARED
from petrecords.values import format_timestamp

_CURSOR = re.compile(r"(0|[1-9a-f][0-9a-f]{0,15})-(0|[1-9a-f][0-9a-f]{0,15})")
"""A cursor as `encode_cursor` writes it: two parts in lower-case hexadecimal, without leading zeros."""
_CURSOR_PART_LIMIT = 1 << 63
"""Each part of a cursor is a signed 64-bit integer in the database."""
NOT_HANDED_OUT = "must be a cursor this service handed out (nextCursor, a change's cursor)."


def encode_cursor(cursor: Cursor) -> str:
    return f"{cursor[0]:x}-{cursor[1]:x}"


def decode_cursor(name: str, text: str) -> Cursor:
    match = _CURSOR.fullmatch(text)
    cursor = (int(match.group(1), 16), int(match.group(2), 16)) if match else None
    if cursor is None or max(cursor) >= _CURSOR_PART_LIMIT:
        raise ValidationFailed.single(name, NOT_HANDED_OUT)
    return cursor


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


WRITES = ("created", "replaced", "deleted")
"""The actions that move a record's version; any other (a reminder, contract section 15) keeps it."""


def change_id(change: Change) -> str:
    """A change's stable id: NATS' `Nats-Msg-Id` and a webhook delivery's `webhook-id`, the same on every sending. A
    change that is not a write keeps its record's version: its action tells it apart from the write of that version
    and from another such change (a new dueAt is a new version)."""
    written = f"{change.resource}:{change.record_id}:{change.version}"
    return written if change.action in WRITES else f"{written}:{change.action}"


def viewer_of(caller: Caller) -> Viewer | None:
    """Whose changes the caller may see (None: an administrator, every one)."""
    return None if caller.is_admin else Viewer(caller.email, caller.grantees)


def sees(reader: Viewer | None, change: Change) -> bool:
    """Whether a caller (None: an administrator) may see a change, as far as the change says: of the shared
    catalogue, of a record they owned before or after the write (they, or one of their groups: their grantees name
    both), or one a share let one of their grantees see (as the read that found it looked: Change.seen_by)."""
    if reader is None or change.owner_after == SHARED:
        return True
    if change.owner_after in reader.grantees or change.owner_before in reader.grantees:
        return True
    return any(grantee in change.seen_by for grantee in reader.grantees)
