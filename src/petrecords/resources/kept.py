"""What a write keeps beside its record, in its transaction: its change in the change log (with whose it was and
through what it is seen), and the records derived from it (see Kept)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from petrecords.resources.access import forget_granted
from petrecords.resources.declaration import Resource, ResourceSet
from petrecords.resources.wire import show
from petrecords.store.base import (
    NewChange,
    Row,
    ShareWindow,
    Transaction,
)
from petrecords.tables import SHARED


def _owner(resource: Resource, row: Row | None) -> str | None:
    """Whose the record is, as the change log files it: '' for a shared one, None when there is none."""
    if row is None:
        return None
    column = resource.ownership.column
    return SHARED if column is None else str(row[column])


async def keep_change(
    *,
    tx: Transaction,
    resource: Resource,
    action: str,
    row: Row,
    version: int,
    by: str,
    at: int,
    before: Row | None,
    after: Row | None,
    record: bytes | None = None,
) -> None:
    """Keep a write of `row` (with its embedded records) in the change log, in the write's transaction; `record`:
    its wire form, when it is already encoded."""
    if resource.grants is not None:
        forget_granted(tx)  # a share's write: what the shares grant is looked up again
    change, window = _change(
        resource=resource,
        action=action,
        row=row,
        version=version,
        by=by,
        at=at,
        before=before,
        after=after,
        record=msgspec.json.encode(show(resource, row)) if record is None else record,
    )
    await tx.record_change(change, window)


def _change(
    *,
    resource: Resource,
    action: str,
    row: Row,
    version: int,
    by: str,
    at: int,
    before: Row | None,
    after: Row | None,
    record: bytes,
) -> tuple[NewChange, ShareWindow | None]:
    """The change of a write of `row` (`record`: its wire form), and the share window it moves. A change of a record
    seen through shares names the record it is shared through; a share's change also names its grantee, and moves
    the window in which the share grants."""
    shared = resource.ownership.column is None
    stored = after if after is not None else before
    shared_key = grantee = window = None
    key_column, grantee_column = resource.shared_through
    if stored is not None and key_column is not None:
        shared_key = stored[key_column]
    if stored is not None and grantee_column is not None:
        grantee = stored[grantee_column]
    grants = resource.grants
    if stored is not None and grants is not None and grantee is not None and shared_key is not None:
        window = ShareWindow(
            share_id=stored["id"],
            grantee=grantee,
            shared_key=shared_key,
            expires_at=None if after is None else after[grants.expires_column],
            opens=after is not None,
        )
    owner_before, owner_after = _owner(resource, before), _owner(resource, after)
    issuer = resource.ownership.issuer
    if stored is not None and issuer is not None:
        # An issued record's owner never changes (its transfer deletes it): the log files it under its issuer as
        # the owner before each write and its owner after, so that the feed shows its changes to both.
        owner_before, owner_after = stored[issuer], _owner(resource, stored)
    change = NewChange(
        resource=resource.name,
        record_id=row["id"],
        action=action,
        version=version,
        at=at,
        by=by,
        owner_before=SHARED if shared else owner_before,
        owner_after=SHARED if shared else owner_after,
        record=record,
        shared_key=shared_key,
        grantee=grantee,
    )
    return change, window


async def keep_notice(*, tx: Transaction, resource: Resource, row: Row, action: str, by: str, at: int) -> None:
    """Keep a change that tells of a record without writing it (a reminder, contract section 15): the record as it
    is (`row`, with its embedded records), at its current version, seen by whoever may see the record now. The
    transaction holds the record (or what it is held through) as a write of it would."""
    await keep_notices(tx=tx, resource=resource, rows=[row], action=action, by=by, at=at)


async def keep_notices(
    *, tx: Transaction, resource: Resource, rows: Sequence[Row], action: str, by: str, at: int
) -> None:
    """`keep_notice` of many records, in this order, in one statement (no share's window moves with a notice)."""
    encoded: dict[tuple[str, object, int], msgspec.Raw] = {}

    def embed(embedded: Resource, value: Row) -> msgspec.Raw:
        # Many records embed the same few (a batch of reminders: a few vaccines in 500 doses): each state of one,
        # told by its id and revision as its ETag tells it, is shown and encoded once; msgspec writes it in place.
        key = (embedded.name, value["id"], value["revision"])
        raw = encoded.get(key)
        if raw is None:
            raw = encoded[key] = msgspec.Raw(msgspec.json.encode(show(embedded, value)))
        return raw

    changes: list[NewChange] = []
    for row in rows:
        change, _ = _change(
            resource=resource,
            action=action,
            row=row,
            version=row["revision"],
            by=by,
            at=at,
            before=row,
            after=row,
            record=msgspec.json.encode(show(resource, row, embed)),
        )
        # A notice writes nothing: the record's owner is filed once, as its owner after. Filed as its owner before
        # too, each notice also had an entry in the log's index of owners before, which only a write that moves a
        # record needs: on SQLite a page written for each of 100,000 reminders, 7 % of their pass's CPU.
        changes.append(msgspec.structs.replace(change, owner_before=None))
    await tx.record_changes(changes)


async def keep_derived(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, before: Row | None, after: Row | None
) -> None:
    """Keep the records derived from the resource's (see Kept) as this write of one leaves them."""
    for kept in resources.keeping(resource):
        await kept.keep(tx, resource, before, after)
