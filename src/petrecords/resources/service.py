"""The service functions every resource has, from its declaration: load what the caller may see, create,
replace, delete, list. They read and write through a transaction and never commit; the endpoint handlers of
resources/operations.py call them."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from petrecords.auth import Caller
from petrecords.config import Settings
from petrecords.errors import Duplicate, Forbidden, NotFound, PreconditionFailed, ReferencedRecord, ValidationFailed
from petrecords.resources.access import (
    Permission,
    Seen,
    is_owner,
    list_scope,
    permission,
    permission_as_written,
    permit_write,
    quick_permission,
    seen,
    visible,
)
from petrecords.resources.declaration import OnDelete, Preparing, Reference, Resource, ResourceSet, Unique, Values
from petrecords.resources.fields import Context
from petrecords.resources.listing import ListRequest
from petrecords.resources.requests import Body, EntityTags, Patch, entity_tag, read_body
from petrecords.resources.wire import Shown, show
from petrecords.store.base import (
    Condition,
    Lock,
    NewChange,
    Operator,
    PageQuery,
    Row,
    ShareWindow,
    SortKey,
    Store,
    Transaction,
)
from petrecords.tables import SHARED
from petrecords.text import match_key
from petrecords.values import new_record_id, now_ms, parse_record_id

# --- visibility ------------------------------------------------------------------------------------


def owner_column_of(resource: Resource) -> str:
    column = resource.ownership.column
    if column is None:
        raise TypeError(f"{resource.name} records have no owner")
    return column


async def load_seen(*, tx: Transaction, caller: Caller, resource: Resource, record_id: str) -> Seen:
    """The record the caller may see, read in the transaction, with what they may do with it; 404 otherwise."""
    parsed = parse_record_id(record_id)
    row = None if parsed is None else await tx.get(resource.collection, parsed)
    return seen(caller, resource, row, await permission(tx, caller, resource, row, asked=parsed))


async def read_visible(
    *, store: Store, caller: Caller, resource: Resource, record_id: str, reader: Caller | None
) -> Row:
    """The record the caller may see, read on its own (see Store.read; `reader` as its `caller`), and, when it is
    not theirs, its shares looked at in a read of their own."""
    parsed = parse_record_id(record_id)
    row = None if parsed is None else await store.read(resource.collection, parsed, reader)
    found = quick_permission(caller, resource, row)
    if found is None:
        async with store.transaction(write=False, caller=reader) as tx:
            found = await permission(tx, caller, resource, row, asked=parsed)
    return visible(row, found)


def etag_of(resource: Resource, row: Row) -> str:
    if not resource.embeds:
        return entity_tag((row["id"], row["revision"]))
    versions = [(row["id"], row["revision"])]
    versions.extend((row[embed.field]["id"], row[embed.field]["revision"]) for embed in resource.embeds)
    return entity_tag(*versions)


# --- writes ----------------------------------------------------------------------------------------
#
# A write transaction first takes the locks of every record it will write (exclusive) and of every record it
# needs to stay as it is (shared), and only then reads them and writes: see Transaction.lock.


def _reference_locks(
    resources: ResourceSet, resource: Resource, values: Values, *, restricting_only: bool = False
) -> list[Lock]:
    return [
        Lock(resources.rank(reference.target), reference.target.name, values[column], shared=not reference.exclusive)
        for reference in resource.references
        if (column := resource.field_named(reference.field).column) in values
        and not (restricting_only and reference.on_delete is not OnDelete.RESTRICT)
    ]


def _own_lock(resources: ResourceSet, resource: Resource, record_id: uuid.UUID) -> Lock:
    return Lock(resources.rank(resource), resource.name, record_id)


async def _referenced(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    values: Values,
    only: Sequence[Reference] | None = None,
    creating: bool = False,
) -> dict[str, Row]:
    """The records a body refers to, each one the caller may see (or, for a reference to a record the caller must
    own, owns: on a replace that reference cannot change, and the record's own permissions decide), and the rules
    that need them; 400 naming each field that fails, alike whether its record is missing or someone else's.
    `only`: just these references, without the rules."""
    found: dict[str, Row] = {}
    errors: dict[str, list[str]] = {}
    for reference in resource.references if only is None else only:
        column = resource.field_named(reference.field).column
        row = await tx.get(reference.target.collection, values[column])
        may = await permission(tx, caller, reference.target, row, asked=values[column])
        owned = reference.owned and creating
        if row is None or may is Permission.NONE or (owned and may is not Permission.WRITE):
            errors[reference.field] = [reference.message]
        else:
            found[reference.field] = row
    if not errors and only is None and resource.complete is not None:
        errors.update(resource.complete(values, found))
    if errors:
        raise ValidationFailed(errors, what="request body")
    return found


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
    if requested is not None and not caller.is_admin and not is_owner(caller, owner):
        raise Forbidden(
            f"You may set {ownership.field} to yourself or to a group you are a member of; only an administrator may "
            "name another user or group."
        )
    return {ownership.column: owner}


def _keys(resource: Resource, values: Values) -> dict[str, Any]:
    """The matching and sorting keys of the text fields."""
    keys: dict[str, Any] = {}
    for declared in resource.fields:
        if (key_column := declared.key_column) is not None and declared.column in values:
            text = values[declared.column]
            keys[key_column] = None if text is None else match_key(text)
    return keys


def _writable_values(resource: Resource, body: Body, *, creating_at: int | None) -> Values:
    """What a body sets, without the owner (which `_owner_of` decides). A new record's (`creating_at`: its
    creation's moment) fields that may be null and were not sent are null, or take their defaults; a replace keeps
    them as they are."""
    values = {column: value for column, value in body.values.items() if column != resource.ownership.column}
    if creating_at is not None:
        for declared in resource.fields:
            if declared.read_only or declared.column in values:
                continue
            if declared.nullable:
                values[declared.column] = None
            elif declared.default is not None:
                values[declared.column] = declared.default
            elif declared.default_ahead_ms is not None:
                values[declared.column] = creating_at + declared.default_ahead_ms
    return values


def _owner(resource: Resource, row: Row | None) -> str | None:
    """Whose the record is, as the change log files it: '' for a shared one, None when there is none."""
    if row is None:
        return None
    column = resource.ownership.column
    return SHARED if column is None else str(row[column])


async def _keep(
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
    change, window = _change(
        resource=resource, action=action, row=row, version=version, by=by, at=at, before=before, after=after
    )
    await tx.record_change(
        msgspec.structs.replace(change, record=msgspec.json.encode(show(resource, row)) if record is None else record),
        window,
    )


def _change(
    *, resource: Resource, action: str, row: Row, version: int, by: str, at: int, before: Row | None, after: Row | None
) -> tuple[NewChange, ShareWindow | None]:
    """The change of a write of `row`, and the share window it moves. A change of a record seen through shares names
    the record it is shared through; a share's change also names its grantee, and moves the window in which the
    share grants."""
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
        record=b"",
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
    changes: list[NewChange] = []
    for row in rows:
        change, _ = _change(
            resource=resource, action=action, row=row, version=row["revision"], by=by, at=at, before=row, after=row
        )
        changes.append(msgspec.structs.replace(change, record=msgspec.json.encode(show(resource, row))))
    await tx.record_changes(changes)


async def create_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    body: Body,
    settings: Settings | None = None,
    revealed: Values | None = None,
) -> tuple[Row, bytes]:
    """The record created, with its embedded records, and its wire form (JSON): the answer's body, and what the
    change log keeps. `revealed`: what it stores of the secret made for it (see Resource.revealed)."""
    revealed = revealed or {}
    # A record the caller must own (a share's pet) is looked at before anything is held, and again once held: one
    # of someone else's is refused holding none of it, nor what is shared through it, with the work done for a
    # record that does not exist.
    owned = [reference for reference in resource.references if reference.owned]
    if owned:
        await _referenced(tx=tx, caller=caller, resource=resource, values=body.values, only=owned, creating=True)
    await tx.lock(
        [*_reference_locks(resources, resource, body.values), *_value_locks(resources, resource, body.values)]
    )
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values, creating=True)
    await _hold_shared_through(tx=tx, resources=resources, shares=resource, target=_target_of(resource, body.values))
    timestamp = now_ms()
    values = _writable_values(resource, body, creating_at=timestamp)
    _review(resource, None, values)
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
        **revealed,
    }
    permit_write(resource, caller, await permission(tx, caller, resource, row))
    await _check_most_per_owner(tx=tx, resources=resources, resource=resource, row=row)
    row.update(await _prepared(tx=tx, caller=caller, resource=resource, stored=None, written=row, settings=settings))
    await _check_room(tx=tx, resource=resource, row=row)
    await _check_unique(tx=tx, caller=caller, resource=resource, row=row)
    await tx.insert(resource.collection, row)
    await _keep_derived(tx=tx, resources=resources, resource=resource, before=None, after=row)
    shown = _with_embeds(resource=resource, row=row, referenced=referenced)
    record = msgspec.json.encode(show(resource, shown))
    await _keep(
        tx=tx,
        resource=resource,
        action="created",
        row=shown,
        version=1,
        by=caller.email,
        at=timestamp,
        before=None,
        after=row,
        record=record,
    )
    return shown, record


async def replace_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    record_id: str,
    body: Body,
    if_match: EntityTags | None,
    settings: Settings | None = None,
) -> Row:
    # A reference that fails is 400 before the record is looked up (404), as the check order says; it is looked
    # at again once held, in case it went meanwhile.
    await _referenced(tx=tx, caller=caller, resource=resource, values=body.values)
    parsed = parse_record_id(record_id)
    if parsed is None:
        raise NotFound()
    await tx.lock(
        [
            *_reference_locks(resources, resource, body.values),
            _own_lock(resources, resource, parsed),
            *_value_locks(resources, resource, body.values),
        ]
    )
    await _hold_shared_through(tx=tx, resources=resources, shares=resource, target=_target_of(resource, body.values))
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values)
    current = await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)
    return await _replace_held(
        tx=tx,
        caller=caller,
        resource=resource,
        resources=resources,
        held=current,
        body=body,
        referenced=referenced,
        if_match=if_match,
        settings=settings,
    )


class ReferencesMoved(Exception):
    """The record's references changed between its first read and its locks (a concurrent replace): the
    transaction holds the wrong records and must start again."""


async def update_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    record_id: str,
    patch: Patch,
    context: Context,
    if_match: EntityTags | None,
    settings: Settings | None = None,
) -> Row:
    """Apply a JSON Merge Patch: the record with the patch applied, checked and written as a replace with every
    field. Raises ReferencesMoved when the record's references changed while its locks were being taken."""
    named = [reference for reference in resource.references if reference.field in patch.members]
    # The references the patch names fail with 400 before the record is looked up (404), as a replace's do.
    await _referenced(tx=tx, caller=caller, resource=resource, values=patch.values, only=named)
    parsed = parse_record_id(record_id)
    if parsed is None:
        raise NotFound()
    first = (await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)).row
    body = _patched(resource, first, patch, context)
    await tx.lock(
        [
            *_reference_locks(resources, resource, body.values),
            _own_lock(resources, resource, parsed),
            *_value_locks(resources, resource, body.values),
        ]
    )
    await _hold_shared_through(tx=tx, resources=resources, shares=resource, target=_target_of(resource, body.values))
    current = await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)
    columns = [
        resource.field_named(name).column
        for name in (*(reference.field for reference in resource.references), *_unique_fields(resource))
    ]
    if any(current.row[column] != first[column] for column in columns):
        raise ReferencesMoved()
    if current.row != first:
        body = _patched(resource, current.row, patch, context)
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values)
    return await _replace_held(
        tx=tx,
        caller=caller,
        resource=resource,
        resources=resources,
        held=current,
        body=body,
        referenced=referenced,
        if_match=if_match,
        settings=settings,
    )


def _patched(resource: Resource, current: Row, patch: Patch, context: Context) -> Body:
    """The replace body that the stored record with the patch applied is: every field a client sets, as the
    record shows it, then the patch's members (null: clears the field, or, for one that cannot be null, leaves
    it as not given). The owner is in it only when the patch names it."""
    shown = show(resource, current)
    document: dict[str, Any] = {
        field.name: shown[field.name]
        for field in resource.fields
        if not field.read_only and field.name != resource.ownership.field
    }
    document.update(patch.members)
    return read_body(resource, document, context=context)


async def _replace_held(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    held: Seen,
    body: Body,
    referenced: Mapping[str, Row],
    if_match: EntityTags | None,
    settings: Settings | None = None,
) -> Row:
    """Write the record held by this transaction as `body` says: the rest of a replace once its records are held
    and read."""
    current = held.row
    _check_fixed(resource, body, current)
    values = _writable_values(resource, body, creating_at=None)
    _review(resource, current, {**current, **values})
    await _check_referrers(tx=tx, resources=resources, resource=resource, row={**current, **values})
    permit_write(resource, caller, held.permission)
    owner_column = resource.ownership.column
    owner = _owner_of(resource, caller, body, referenced, current=current[owner_column] if owner_column else None)
    timestamp = max(now_ms(), current["modified_at"])  # never earlier than the last write, whatever the clocks
    replaced: Row = {
        **current,
        **values,
        **owner,
        **_keys(resource, values),
        "modified_at": timestamp,
        "modified_by": caller.email,
        "revision": current["revision"] + 1,
    }
    # Permitted for the record as it will be too, as a new record is: a vaccination moved to another pet needs the
    # right to write that pet's vaccinations as well as this one's (403, before If-Match's 412).
    permit_write(resource, caller, await permission_as_written(tx, caller, resource, held, replaced))
    _check_if_match(resource, if_match, current)
    replaced.update(
        await _prepared(tx=tx, caller=caller, resource=resource, stored=current, written=replaced, settings=settings)
    )
    await _check_unique(tx=tx, caller=caller, resource=resource, row=replaced)
    followers: list[tuple[Resource, Row]] = []
    if owner_column is not None and replaced[owner_column] != current[owner_column]:
        followers = await _hold_followers(tx=tx, resources=resources, resource=resource, record_id=current["id"])
        # A new owner shares nothing yet, and issued nothing: the shares of the record, and what was issued for it
        # (certificates), go with its transfer.
        followers = await _delete_lapsing(tx=tx, resources=resources, followers=followers, by=caller.email)
    await tx.update(resource.collection, _stored(resource, replaced), previous=current)
    await _keep_derived(tx=tx, resources=resources, resource=resource, before=current, after=replaced)
    shown = _with_embeds(resource=resource, row=replaced, referenced=referenced)
    await _keep(
        tx=tx,
        resource=resource,
        action="replaced",
        row=shown,
        version=replaced["revision"],
        by=caller.email,
        at=timestamp,
        before=current,
        after=replaced,
    )
    for follower_resource, follower in followers:
        new_owner = replaced[owner_column_of(resource)]
        await _follow(
            tx=tx, resources=resources, resource=follower_resource, row=follower, owner=new_owner, by=caller.email
        )
    return shown


async def _hold_followers(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, record_id: uuid.UUID
) -> list[tuple[Resource, Row]]:
    """The records that always have this record's owner, held, as they are now."""
    held: list[tuple[Resource, Row]] = []
    for dependent in resources.dependents(resource):
        if dependent.resource.ownership.through != dependent.reference.field:
            continue
        found = await tx.referrers(dependent.resource.collection, dependent.column, record_id)
        await tx.lock([_own_lock(resources, dependent.resource, row["id"]) for row in found])
        for row in found:
            # Looked up again once held: one may have gone, or moved to another record, meanwhile.
            now = await tx.get(dependent.resource.collection, row["id"])
            if now is not None and now[dependent.column] == record_id:
                held.append(
                    (
                        dependent.resource,
                        await _hold_references(tx=tx, resources=resources, row=now, of=dependent.resource),
                    )
                )
    return held


async def _hold_references(
    *, tx: Transaction, resources: ResourceSet, row: Row, of: Resource, restricting_only: bool = False
) -> Row:
    """A held record, read again once the records it refers to are held (shared) too: the records it embeds are
    then as they are when the write commits, and its change shows them so.

    These locks come after the record's own, against the rank order. That cannot deadlock: the writers of a
    referenced record, once they hold it, wait only for the records that follow it or go with it (this one's
    other references are neither), or for nothing (a vaccine's replace or restricted delete)."""
    locks = _reference_locks(resources, of, row, restricting_only=restricting_only)
    if not locks:
        return row
    await tx.lock(locks)
    again = await tx.get(of.collection, row["id"])
    if again is None:
        raise RuntimeError("a record held by this transaction went")
    return again


async def _follow(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row, owner: str, by: str
) -> None:
    """Give a record the new owner of the record it follows: a write of it, which keeps its modifiedAt and
    modifiedBy (no one replaced it) and is kept in its history."""
    moved = {**row, owner_column_of(resource): owner, "revision": row["revision"] + 1}
    await tx.update(resource.collection, _stored(resource, moved), previous=row)
    await _keep_derived(tx=tx, resources=resources, resource=resource, before=row, after=moved)
    await _keep(
        tx=tx,
        resource=resource,
        action="replaced",
        row=moved,
        version=moved["revision"],
        by=by,
        at=now_ms(),
        before=row,
        after=moved,
    )


async def delete_record(
    *,
    tx: Transaction,
    caller: Caller,
    resource: Resource,
    resources: ResourceSet,
    record_id: str,
    if_match: EntityTags | None,
) -> Row:
    parsed = parse_record_id(record_id)
    if parsed is None:
        raise NotFound()
    locks = [_own_lock(resources, resource, parsed)]
    first = None
    if resource.grants is not None:
        # A share's deletion holds what it shares (see _value_locks) first, in rank order with its own lock: its
        # target, which never changes, is read before either is held.
        first = await tx.get(resource.collection, parsed)
        locks.extend(_value_locks(resources, resource, first) if first is not None else ())
    exclusive = _exclusive_columns(resource)
    if exclusive:
        # What its referrers' writes hold exclusively (see Reference.exclusive) is held first, as they hold it.
        first = await tx.get(resource.collection, parsed)
        locks.extend(_exclusive_locks(resources, resource, first) if first is not None else ())
    await tx.lock(locks)
    found = await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)
    if first is not None and any(found.row[column] != first[column] for column in exclusive):
        raise ReferencesMoved()
    if not found.named:  # the user a share names may delete it: leave
        permit_write(resource, caller, found.permission)
    current = found.row
    await _hold_shared_through(tx=tx, resources=resources, shares=resource, target=_target_of(resource, current))
    _check_if_match(resource, if_match, current)
    # What it refers to and may not go while it exists (a vaccination's vaccine, which its change shows) held
    # too, so that its change shows them as they are when the deletion commits. Not what it goes with (its pet):
    # a deletion of that holds it first and then waits for this record.
    current = await _hold_references(tx=tx, resources=resources, row=current, of=resource, restricting_only=True)
    doomed = await _hold_dependents(tx=tx, resources=resources, resource=resource, row=current)
    at = now_ms()
    # The records go in the order they refer to each other (shares before what they share); their changes in
    # the order _hold_dependents gives.
    for doomed_resource, row in doomed:
        if doomed_resource.grants is not None:
            await tx.delete(doomed_resource.collection, _stored(doomed_resource, row))
    for doomed_resource, row in doomed:
        if doomed_resource.grants is None:
            await tx.delete(doomed_resource.collection, _stored(doomed_resource, row))
            await _revoke(tx, doomed_resource, row)
        await _keep_derived(tx=tx, resources=resources, resource=doomed_resource, before=row, after=None)
        await _keep(
            tx=tx,
            resource=doomed_resource,
            action="deleted",
            row=row,
            version=row["revision"] + 1,
            by=caller.email,
            at=at,
            before=row,
            after=None,
        )
    return current


def _exclusive_columns(resource: Resource) -> tuple[str, ...]:
    return tuple(
        resource.field_named(reference.field).column for reference in resource.references if reference.exclusive
    )


def _exclusive_locks(resources: ResourceSet, resource: Resource, row: Row) -> list[Lock]:
    return [
        Lock(resources.rank(reference.target), reference.target.name, row[resource.field_named(reference.field).column])
        for reference in resource.references
        if reference.exclusive
    ]


async def _keep_derived(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, before: Row | None, after: Row | None
) -> None:
    """Keep the records derived from the resource's (see Kept) as this write of one leaves them."""
    for kept in resources.keeping(resource):
        await kept.keep(tx, resource, before, after)


async def _hold_dependents(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row
) -> list[tuple[Resource, Row]]:
    """The records a deletion takes with it, held, those that refer to others first, then `row` itself, then its
    shares (so that the deletion of what they share comes before their own ends, and their grantees see it);
    409 when a record that may not go is still referred to."""
    doomed: list[tuple[Resource, Row]] = []
    shares: list[tuple[Resource, Row]] = []
    for dependent in resources.dependents(resource):
        collection = dependent.resource.collection
        if dependent.reference.on_delete is OnDelete.RESTRICT:
            # The referring records hold this one shared while they are written; its lock keeps new ones away.
            if await tx.has_referrer(collection, dependent.column, row["id"]):
                raise ReferencedRecord(
                    f"The {resource.title} is still referenced by {dependent.resource.title} records and cannot "
                    "be deleted."
                )
            continue
        found = await tx.referrers(collection, dependent.column, row["id"])
        await tx.lock([_own_lock(resources, dependent.resource, one["id"]) for one in found])
        for one in found:
            now = await tx.get(collection, one["id"])
            if now is not None and now[dependent.column] == row["id"]:
                now = await _hold_references(tx=tx, resources=resources, row=now, of=dependent.resource)
                held = await _hold_dependents(tx=tx, resources=resources, resource=dependent.resource, row=now)
                (shares if dependent.resource.grants is not None else doomed).extend(held)
    return [*doomed, (resource, row), *shares]


async def _delete_lapsing(
    *, tx: Transaction, resources: ResourceSet, followers: list[tuple[Resource, Row]], by: str
) -> list[tuple[Resource, Row]]:
    """Delete the shares and the issued records among a transferred record's followers (each deletion a change);
    the other followers."""
    kept: list[tuple[Resource, Row]] = []
    at = now_ms()
    for resource, row in followers:
        if resource.grants is None and resource.ownership.issuer is None:
            kept.append((resource, row))
            continue
        await tx.delete(resource.collection, _stored(resource, row))
        await _revoke(tx, resource, row)
        await _keep_derived(tx=tx, resources=resources, resource=resource, before=row, after=None)
        await _keep(
            tx=tx,
            resource=resource,
            action="deleted",
            row=row,
            version=row["revision"] + 1,
            by=by,
            at=at,
            before=row,
            after=None,
        )
    return kept


async def _revoke(tx: Transaction, resource: Resource, row: Row) -> None:
    """What the deletion of a record that was made a secret leaves of it (see Revealed.revoke)."""
    revealed = resource.revealed
    if revealed is not None and revealed.revoke is not None:
        await revealed.revoke(tx, row)


# --- what must stay unique, and bounded --------------------------------------------------------------

_UNIQUE = uuid.UUID("5b0a3c64-8f7e-4f7b-9a53-6a3f0e7c2d11")
"""The namespace of the ids under which a transaction holds a value that must stay unique."""


def _unique_fields(resource: Resource) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for unique in resource.unique for name in unique.fields))


def _unique_conditions(resource: Resource, unique: Unique, values: Values) -> tuple[Condition, ...] | None:
    """The conditions that find the records whose values a record with `values` would repeat; None when it repeats
    none (a value is null, or the record is not among those whose values must differ)."""
    columns = [resource.field_named(name).column for name in unique.fields]
    if any(values.get(column) is None for column in columns):
        return None
    within = () if unique.within is None else unique.within(values)
    if within is None:
        return None
    return (*(Condition((column,), Operator.EQUAL, (values[column],)) for column in columns), *within)


def _target_of(resource: Resource, values: Values) -> Any:
    """The record a share shares (None for what is no share)."""
    grants = resource.grants
    return None if grants is None else values.get(resource.field_named(grants.reference).column)


def _value_locks(resources: ResourceSet, resource: Resource, values: Values) -> list[Lock]:
    """Locks on the values a write may make two records share, and on the target whose shares it counts: held
    until it commits, so that of two writers of the same value, the second sees the first's record."""
    locks = []
    for unique in resource.unique:
        conditions = _unique_conditions(resource, unique, values)
        if conditions is not None:
            held = [str(value) for condition in conditions for value in condition.values]
            key = uuid.uuid5(_UNIQUE, msgspec.json.encode(held).decode())
            locks.append(Lock(resources.rank(resource), f"{resource.name}:{'+'.join(unique.fields)}", key))
    grants = resource.grants
    if grants is not None and (target := _target_of(resource, values)) is not None:
        # The shared record itself, exclusively: its shares' writes wait for each other (their number is bounded),
        # and for the writes of the records shared through it, whose grants they count (see store/grants.py).
        locks.append(_own_lock(resources, resource.reference_of(grants.reference).target, target))
    elif resource.most_per_reference is not None:
        # The record referred to, exclusively: two creates that would each make its last room wait for each other.
        reference = resource.reference_of(resource.most_per_reference[0])
        if (bounded := values.get(resource.field_named(reference.field).column)) is not None:
            locks.append(_own_lock(resources, reference.target, bounded))
    return locks


async def _hold_shared_through(*, tx: Transaction, resources: ResourceSet, shares: Resource, target: Any) -> None:
    """Hold the records shared through a share's target (a pet's vaccinations) that hold it no lock while they are
    written (a deletion): a share's write counts them for its grantee as they are (see store/grants.py)."""
    grants = shares.grants
    if grants is None or target is None:
        return
    shared = shares.reference_of(grants.reference).target
    for granted in shares.granted:
        if granted is shared or granted.sharing is None:
            continue
        found = await tx.referrers(granted.collection, granted.sharing.key_column, target)
        await tx.lock([_own_lock(resources, granted, row["id"]) for row in found])


async def expire_grants(*, store: Store, resources: ResourceSet, now: int, limit: int) -> int:
    """Take the grants of up to `limit` shares that have expired by `now` out of the kept counts, each in a short
    transaction of its own; how many there were."""
    async with store.transaction(write=False) as tx:
        expired = await tx.expired_grants(now=now, limit=limit)
    for resource_name, share_id, target in expired:
        shares = resources.named(resource_name)
        if shares is None or shares.grants is None:
            continue
        async with store.transaction(write=True) as tx:
            shared = shares.reference_of(shares.grants.reference).target
            await tx.lock([_own_lock(resources, shared, target)])
            await _hold_shared_through(tx=tx, resources=resources, shares=shares, target=target)
            await tx.uncount_expired_grant(shares.collection, share_id, now=now)
    return len(expired)


async def _check_unique(*, tx: Transaction, caller: Caller, resource: Resource, row: Row) -> None:
    """409 when another record already has the values that must stay unique, with its Location when the caller
    may see it."""
    for unique in resource.unique:
        conditions = _unique_conditions(resource, unique, row)
        if conditions is None:
            continue
        query = PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=2, offset=0)
        other = next((found for found in await tx.list(resource.collection, query) if found["id"] != row["id"]), None)
        if other is not None:
            may = await permission(tx, caller, resource, other)
            location = f"{resource.path}/{other['id']}" if may is not Permission.NONE else None
            among = f" {unique.among}" if unique.among else ""
            raise Duplicate(
                f"Another {resource.title} record already has this {' and '.join(unique.fields)}{among}.",
                location=location,
            )


async def _prepared(
    *, tx: Transaction, caller: Caller, resource: Resource, stored: Row | None, written: Row, settings: Settings | None
) -> Values:
    """What the resource's own rules that need the transaction add to a write (see Resource.prepare)."""
    if resource.prepare is None:
        return {}
    if settings is None:
        raise TypeError(f"a write of {resource.name} records needs the settings")
    return await resource.prepare(Preparing(tx, caller, stored, written, settings))


_OWNER_ROOM = uuid.UUID("0d7f4c2e-9a61-4b38-8e25-3c1a7b9f6d40")
"""The namespace of the ids under which a create holds an owner's room for records (Resource.most_per_owner)."""


async def _check_most_per_owner(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
    """400 naming the owner field when the new record's owner already has as many records as they may. Two creates
    for one owner wait for each other, so that neither counts without the other's record."""
    most = resource.most_per_owner
    if most is None:
        return
    owner_column = owner_column_of(resource)
    owner = row[owner_column]
    await tx.lock([Lock(resources.rank(resource), f"{resource.name}:owner", uuid.uuid5(_OWNER_ROOM, owner))])
    held = await tx.count(resource.collection, (Condition((owner_column,), Operator.EQUAL, (owner,)),))
    if held >= most:
        raise ValidationFailed.single(
            resource.ownership.field, f"already has {most} {resource.title} records, the most an owner may have."
        )


def _review(resource: Resource, stored: Values | None, written: Values) -> None:
    """400 naming each field that breaks a rule between the record as written and as stored (see Resource.review)."""
    errors = resource.review(stored, written) if resource.review is not None else {}
    if errors:
        raise ValidationFailed(errors, what="request body")


async def _check_referrers(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
    """400 when records that refer to this one require what it would no longer be (see Reference.requires)."""
    errors: dict[str, list[str]] = {}
    for dependent in resources.dependents(resource):
        requires = dependent.reference.requires
        refused = None if requires is None else requires(row)
        if refused is None:
            continue
        conditions = (Condition((dependent.column,), Operator.EQUAL, (row["id"],)), *refused.conditions)
        query = PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=1, offset=0)
        if await tx.list(dependent.resource.collection, query):
            errors.update(refused.errors)
    if errors:
        raise ValidationFailed(errors, what="request body")


def _room(resource: Resource) -> tuple[str, int] | None:
    """The reference whose records may each have at most so many of this resource's referring to them, and how
    many: a share's target, or what the declaration bounds (Resource.most_per_reference)."""
    grants = resource.grants
    if grants is not None:
        return grants.reference, grants.most_per_target
    return resource.most_per_reference


async def _check_room(*, tx: Transaction, resource: Resource, row: Row) -> None:
    """400 naming the reference when the record it refers to already has as many of these records as it may."""
    room = _room(resource)
    if room is None:
        return
    reference, most = room
    column = resource.field_named(reference).column
    held = await tx.count(resource.collection, (Condition((column,), Operator.EQUAL, (row[column],)),))
    if held >= most:
        raise ValidationFailed.single(reference, f"already has {most} {resource.title} records, the most it may have.")


def _check_fixed(resource: Resource, body: Body, current: Row) -> None:
    """400 naming each field that is set once and for all, when a replace or update would change it."""
    errors = {
        field.name: ["cannot change: it is set when the record is created."]
        for field in resource.fields
        if field.fixed and field.column in body.values and body.values[field.column] != current[field.column]
    }
    if errors:
        raise ValidationFailed(errors, what="request body")


def _stored(resource: Resource, row: Row) -> Row:
    """The row without the records it embeds, which live in their own tables."""
    return {name: value for name, value in row.items() if name not in {embed.field for embed in resource.embeds}}


def _check_if_match(resource: Resource, if_match: EntityTags | None, row: Row) -> None:
    if if_match is not None and not if_match.match_strong(etag_of(resource, row)):
        raise PreconditionFailed()


def _with_embeds(*, resource: Resource, row: Row, referenced: Mapping[str, Row]) -> Row:
    """The row with the records it embeds, as they are now (the transaction holds them)."""
    if not resource.embeds:
        return row
    return {**row, **{embed.field: referenced[embed.reference] for embed in resource.embeds}}


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
    scope = await list_scope(tx, caller, resource, owner=request.owner, scope=request.scope)
    conditions = [*request.conditions, *(scope or ())]
    total = await tx.count(resource.collection, tuple(conditions)) if scope is not None else 0
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
