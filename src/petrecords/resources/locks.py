"""The locks of a write: a write transaction first takes the locks of every record it will write (exclusive) and
of every record it needs to stay as it is (shared), and only then reads them and writes (see Transaction.lock).
Which records those are, and holding them: references, values that must stay unique, a share's target, the records
that follow, go with or are shared through a record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from petrecords.errors import ReferencedRecord
from petrecords.resources.access import forget_granted
from petrecords.resources.declaration import OnDelete, Resource, ResourceSet, Unique, Values
from petrecords.store.base import (
    Condition,
    Lock,
    Operator,
    Row,
    Transaction,
)


async def hold(tx: Transaction, locks: Sequence[Lock]) -> None:
    """Take the locks (see Transaction.lock); the shares looked up before them are looked up again after."""
    await tx.lock(locks)
    forget_granted(tx)


def reference_locks(
    resources: ResourceSet, resource: Resource, values: Values, *, restricting_only: bool = False
) -> list[Lock]:
    return [
        Lock(resources.rank(reference.target), reference.target.name, values[column], shared=not reference.exclusive)
        for reference in resource.references
        if (column := resource.field_named(reference.field).column) in values
        and not (restricting_only and reference.on_delete is not OnDelete.RESTRICT)
    ]


def own_lock(resources: ResourceSet, resource: Resource, record_id: uuid.UUID) -> Lock:
    return Lock(resources.rank(resource), resource.name, record_id)


async def hold_followers(
    *, tx: Transaction, resources: ResourceSet, resource: Resource, record_id: uuid.UUID
) -> list[tuple[Resource, Row]]:
    """The records that always have this record's owner, held, as they are now."""
    held: list[tuple[Resource, Row]] = []
    for dependent in resources.dependents(resource):
        if dependent.resource.ownership.through != dependent.reference.field:
            continue
        found = await tx.referrers(dependent.resource.collection, dependent.column, record_id)
        await hold(tx, [own_lock(resources, dependent.resource, row["id"]) for row in found])
        for row in found:
            # Looked up again once held: one may have gone, or moved to another record, meanwhile.
            now = await tx.get(dependent.resource.collection, row["id"])
            if now is not None and now[dependent.column] == record_id:
                held.append(
                    (
                        dependent.resource,
                        await hold_references(tx=tx, resources=resources, row=now, of=dependent.resource),
                    )
                )
    return held


async def hold_references(
    *, tx: Transaction, resources: ResourceSet, row: Row, of: Resource, restricting_only: bool = False
) -> Row:
    """A held record, read again once the records it refers to are held (shared) too: the records it embeds are
    then as they are when the write commits, and its change shows them so.

    These locks come after the record's own, against the rank order. That cannot deadlock: the writers of a
    referenced record, once they hold it, wait only for the records that follow it or go with it (this one's
    other references are neither), or for nothing (a vaccine's replace or restricted delete)."""
    locks = reference_locks(resources, of, row, restricting_only=restricting_only)
    if not locks:
        return row
    await hold(tx, locks)
    again = await tx.get(of.collection, row["id"])
    if again is None:
        raise RuntimeError("a record held by this transaction went")
    return again


def exclusive_columns(resource: Resource) -> tuple[str, ...]:
    return tuple(
        resource.field_named(reference.field).column for reference in resource.references if reference.exclusive
    )


def exclusive_locks(resources: ResourceSet, resource: Resource, row: Row) -> list[Lock]:
    return [
        Lock(resources.rank(reference.target), reference.target.name, row[resource.field_named(reference.field).column])
        for reference in resource.references
        if reference.exclusive
    ]


async def hold_dependents(
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
        await hold(tx, [own_lock(resources, dependent.resource, one["id"]) for one in found])
        for one in found:
            now = await tx.get(collection, one["id"])
            if now is not None and now[dependent.column] == row["id"]:
                now = await hold_references(tx=tx, resources=resources, row=now, of=dependent.resource)
                held = await hold_dependents(tx=tx, resources=resources, resource=dependent.resource, row=now)
                (shares if dependent.resource.grants is not None else doomed).extend(held)
    return [*doomed, (resource, row), *shares]


_UNIQUE = uuid.UUID("5b0a3c64-8f7e-4f7b-9a53-6a3f0e7c2d11")
"""The namespace of the ids under which a transaction holds a value that must stay unique."""


def unique_fields(resource: Resource) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for unique in resource.unique for name in unique.fields))


def unique_conditions(resource: Resource, unique: Unique, values: Values) -> tuple[Condition, ...] | None:
    """The conditions that find the records whose values a record with `values` would repeat; None when it repeats
    none (a value is null, or the record is not among those whose values must differ)."""
    columns = [resource.field_named(name).column for name in unique.fields]
    if any(values.get(column) is None for column in columns):
        return None
    within = () if unique.within is None else unique.within(values)
    if within is None:
        return None
    return (*(Condition((column,), Operator.EQUAL, (values[column],)) for column in columns), *within)


def target_of(resource: Resource, values: Values) -> Any:
    """The record a share shares (None for what is no share)."""
    grants = resource.grants
    return None if grants is None else values.get(resource.field_named(grants.reference).column)


def value_locks(resources: ResourceSet, resource: Resource, values: Values) -> list[Lock]:
    """Locks on the values a write may make two records share, and on the target whose shares it counts: held
    until it commits, so that of two writers of the same value, the second sees the first's record."""
    locks = []
    for unique in resource.unique:
        conditions = unique_conditions(resource, unique, values)
        if conditions is not None:
            held = [str(value) for condition in conditions for value in condition.values]
            key = uuid.uuid5(_UNIQUE, msgspec.json.encode(held).decode())
            locks.append(Lock(resources.rank(resource), f"{resource.name}:{'+'.join(unique.fields)}", key))
    grants = resource.grants
    if grants is not None and (target := target_of(resource, values)) is not None:
        # The shared record itself, exclusively: its shares' writes wait for each other (their number is bounded),
        # and for the writes of the records shared through it, whose grants they count (see store/grants.py).
        locks.append(own_lock(resources, resource.reference_of(grants.reference).target, target))
    elif resource.most_per_reference is not None:
        # The record referred to, exclusively: two creates that would each make its last room wait for each other.
        reference = resource.reference_of(resource.most_per_reference[0])
        if (bounded := values.get(resource.field_named(reference.field).column)) is not None:
            locks.append(own_lock(resources, reference.target, bounded))
    return locks


async def hold_shared_through(*, tx: Transaction, resources: ResourceSet, shares: Resource, target: Any) -> None:
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
        await hold(tx, [own_lock(resources, granted, row["id"]) for row in found])
