"""The service functions every resource has, from its declaration: load what the caller may see, create,
replace, update, delete. They read and write through a transaction and never commit; the endpoint handlers of
resources/handlers.py call them. What they hold first is in locks.py, the rules they check in checks.py, what a
write keeps beside its record in kept.py; a list is listing.py's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from petrecords.auth import Caller
from petrecords.config import Settings
from petrecords.errors import Forbidden, NotFound, PreconditionFailed, ValidationFailed
from petrecords.resources.access import (
    Permission,
    Seen,
    is_owner,
    owner_column_of,
    permission,
    permission_as_written,
    permit_write,
    quick_permission,
    seen,
    visible,
)
from petrecords.resources.checks import (
    check_fixed,
    check_most_per_owner,
    check_referrers,
    check_review,
    check_room,
    check_unique,
)
from petrecords.resources.declaration import Preparing, Reference, Resource, ResourceSet, Values
from petrecords.resources.fields import Context
from petrecords.resources.kept import keep_change, keep_derived
from petrecords.resources.locks import (
    exclusive_columns,
    exclusive_locks,
    hold,
    hold_dependents,
    hold_followers,
    hold_references,
    hold_shared_through,
    own_lock,
    reference_locks,
    target_of,
    unique_fields,
    value_locks,
)
from petrecords.resources.requests import Body, EntityTags, Patch, entity_tag, read_body
from petrecords.resources.wire import show
from petrecords.store.base import Row, Store, Transaction
from petrecords.text import match_key
from petrecords.values import new_record_id, now_ms, parse_record_id


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
    # Nearly every resource has none: no tuple to build on the get-by-id path.
    moved = tuple(row[column] for column in resource.moved_without_write) if resource.moved_without_write else ()
    if not resource.embeds:
        return entity_tag((row["id"], row["revision"]), moved=moved)
    versions = [(row["id"], row["revision"])]
    versions.extend((row[embed.field]["id"], row[embed.field]["revision"]) for embed in resource.embeds)
    return entity_tag(*versions, moved=moved)


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
    await hold(tx, [*reference_locks(resources, resource, body.values), *value_locks(resources, resource, body.values)])
    referenced = await _referenced(tx=tx, caller=caller, resource=resource, values=body.values, creating=True)
    await hold_shared_through(tx=tx, resources=resources, shares=resource, target=target_of(resource, body.values))
    timestamp = now_ms()
    values = _writable_values(resource, body, creating_at=timestamp)
    check_review(resource, None, values)
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
    await check_most_per_owner(tx=tx, resources=resources, resource=resource, row=row)
    row.update(await _prepared(tx=tx, caller=caller, resource=resource, stored=None, written=row, settings=settings))
    await check_room(tx=tx, resource=resource, row=row)
    await check_unique(tx=tx, caller=caller, resource=resource, row=row)
    await tx.insert(resource.collection, row)
    await keep_derived(tx=tx, resources=resources, resource=resource, before=None, after=row)
    shown = _with_embeds(resource=resource, row=row, referenced=referenced)
    record = msgspec.json.encode(show(resource, shown))
    await keep_change(
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
    await hold(
        tx,
        [
            *reference_locks(resources, resource, body.values),
            own_lock(resources, resource, parsed),
            *value_locks(resources, resource, body.values),
        ],
    )
    await hold_shared_through(tx=tx, resources=resources, shares=resource, target=target_of(resource, body.values))
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
    await hold(
        tx,
        [
            *reference_locks(resources, resource, body.values),
            own_lock(resources, resource, parsed),
            *value_locks(resources, resource, body.values),
        ],
    )
    await hold_shared_through(tx=tx, resources=resources, shares=resource, target=target_of(resource, body.values))
    current = await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)
    columns = [
        resource.field_named(name).column
        for name in (*(reference.field for reference in resource.references), *unique_fields(resource))
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
    check_fixed(resource, body, current)
    values = _writable_values(resource, body, creating_at=None)
    check_review(resource, current, {**current, **values})
    await check_referrers(tx=tx, resources=resources, resource=resource, row={**current, **values})
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
    await check_unique(tx=tx, caller=caller, resource=resource, row=replaced)
    followers: list[tuple[Resource, Row]] = []
    if owner_column is not None and replaced[owner_column] != current[owner_column]:
        followers = await hold_followers(tx=tx, resources=resources, resource=resource, record_id=current["id"])
        # A new owner shares nothing yet, and issued nothing: the shares of the record, and what was issued for it
        # (certificates), go with its transfer.
        followers = await _delete_lapsing(tx=tx, resources=resources, followers=followers, by=caller.email)
    await tx.update(resource.collection, _stored(resource, replaced), previous=current)
    await keep_derived(tx=tx, resources=resources, resource=resource, before=current, after=replaced)
    shown = _with_embeds(resource=resource, row=replaced, referenced=referenced)
    await keep_change(
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


async def _follow(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row, owner: str, by: str
) -> None:
    """Give a record the new owner of the record it follows: a write of it, which keeps its modifiedAt and
    modifiedBy (no one replaced it) and is kept in its history."""
    moved = {**row, owner_column_of(resource): owner, "revision": row["revision"] + 1}
    await tx.update(resource.collection, _stored(resource, moved), previous=row)
    await keep_derived(tx=tx, resources=resources, resource=resource, before=row, after=moved)
    await keep_change(
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
    locks = [own_lock(resources, resource, parsed)]
    first = None
    if resource.grants is not None:
        # A share's deletion holds what it shares (see value_locks) first, in rank order with its own lock: its
        # target, which never changes, is read before either is held.
        first = await tx.get(resource.collection, parsed)
        locks.extend(value_locks(resources, resource, first) if first is not None else ())
    exclusive = exclusive_columns(resource)
    if exclusive:
        # What its referrers' writes hold exclusively (see Reference.exclusive) is held first, as they hold it.
        first = await tx.get(resource.collection, parsed)
        locks.extend(exclusive_locks(resources, resource, first) if first is not None else ())
    await hold(tx, locks)
    found = await load_seen(tx=tx, caller=caller, resource=resource, record_id=record_id)
    if first is not None and any(found.row[column] != first[column] for column in exclusive):
        raise ReferencesMoved()
    if not found.named:  # the user a share names may delete it: leave
        permit_write(resource, caller, found.permission)
    current = found.row
    await hold_shared_through(tx=tx, resources=resources, shares=resource, target=target_of(resource, current))
    _check_if_match(resource, if_match, current)
    # What it refers to and may not go while it exists (a vaccination's vaccine, which its change shows) held
    # too, so that its change shows them as they are when the deletion commits. Not what it goes with (its pet):
    # a deletion of that holds it first and then waits for this record.
    current = await hold_references(tx=tx, resources=resources, row=current, of=resource, restricting_only=True)
    doomed = await hold_dependents(tx=tx, resources=resources, resource=resource, row=current)
    at = now_ms()
    # The records go in the order they refer to each other (shares before what they share); their changes in
    # the order hold_dependents gives.
    for doomed_resource, row in doomed:
        if doomed_resource.grants is not None:
            await tx.delete(doomed_resource.collection, _stored(doomed_resource, row))
    for doomed_resource, row in doomed:
        if doomed_resource.grants is None:
            await tx.delete(doomed_resource.collection, _stored(doomed_resource, row))
            await _revoke(tx, doomed_resource, row)
        await keep_derived(tx=tx, resources=resources, resource=doomed_resource, before=row, after=None)
        await keep_change(
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
        await keep_derived(tx=tx, resources=resources, resource=resource, before=row, after=None)
        await keep_change(
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


async def _prepared(
    *, tx: Transaction, caller: Caller, resource: Resource, stored: Row | None, written: Row, settings: Settings | None
) -> Values:
    """What the resource's own rules that need the transaction add to a write (see Resource.prepare)."""
    if resource.prepare is None:
        return {}
    if settings is None:
        raise TypeError(f"a write of {resource.name} records needs the settings")
    return await resource.prepare(Preparing(tx, caller, stored, written, settings))


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
