"""The rules a write is checked against once its records are held: values that must stay unique, an owner's and a
record's room for more, the declaration's review, what referring records require, fields set once."""

from __future__ import annotations

import uuid

from petrecords.auth import Caller
from petrecords.errors import Duplicate, ValidationFailed
from petrecords.resources.access import (
    Permission,
    owner_column_of,
    permission,
)
from petrecords.resources.declaration import Resource, ResourceSet, Values
from petrecords.resources.locks import hold, unique_conditions
from petrecords.resources.requests import Body
from petrecords.store.base import (
    Condition,
    Lock,
    Operator,
    PageQuery,
    Row,
    SortKey,
    Transaction,
)


async def check_unique(*, tx: Transaction, caller: Caller, resource: Resource, row: Row) -> None:
    """409 when another record already has the values that must stay unique, with its Location when the caller
    may see it."""
    for unique in resource.unique:
        conditions = unique_conditions(resource, unique, row)
        if conditions is None:
            continue
        others = (*conditions, Condition(("id",), Operator.DIFFERS, (row["id"],)))
        # Almost every write repeats nothing: a count of the others says so without reading (and joining) a record,
        # a third of the CPU time of the read of the page that finds one.
        if not await tx.count(resource.collection, others):
            continue
        query = PageQuery(conditions=others, sort=(SortKey("id"),), limit=1, offset=0)
        other = next(iter(await tx.list(resource.collection, query)), None)
        if other is not None:
            may = await permission(tx, caller, resource, other)
            location = f"{resource.path}/{other['id']}" if may is not Permission.NONE else None
            among = f" {unique.among}" if unique.among else ""
            raise Duplicate(
                f"Another {resource.title} record already has this {' and '.join(unique.fields)}{among}.",
                location=location,
            )


_OWNER_ROOM = uuid.UUID("0d7f4c2e-9a61-4b38-8e25-3c1a7b9f6d40")
"""The namespace of the ids under which a create holds an owner's room for records (Resource.most_per_owner)."""


async def check_most_per_owner(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
    """400 naming the owner field when the new record's owner already has as many records as they may. Two creates
    for one owner wait for each other, so that neither counts without the other's record."""
    most = resource.most_per_owner
    if most is None:
        return
    owner_column = owner_column_of(resource)
    owner = row[owner_column]
    await hold(tx, [Lock(resources.rank(resource), f"{resource.name}:owner", uuid.uuid5(_OWNER_ROOM, owner))])
    held = await tx.count(resource.collection, (Condition((owner_column,), Operator.EQUAL, (owner,)),))
    if held >= most:
        raise ValidationFailed.single(
            resource.ownership.field, f"already has {most} {resource.title} records, the most an owner may have."
        )


def check_review(resource: Resource, stored: Values | None, written: Values) -> None:
    """400 naming each field that breaks a rule between the record as written and as stored (see Resource.review)."""
    errors = resource.review(stored, written) if resource.review is not None else {}
    if errors:
        raise ValidationFailed(errors, what="request body")


async def check_referrers(*, tx: Transaction, resources: ResourceSet, resource: Resource, row: Row) -> None:
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


async def check_room(*, tx: Transaction, resource: Resource, row: Row) -> None:
    """400 naming the reference when the record it refers to already has as many of these records as it may."""
    room = _room(resource)
    if room is None:
        return
    reference, most = room
    column = resource.field_named(reference).column
    held = await tx.count(resource.collection, (Condition((column,), Operator.EQUAL, (row[column],)),))
    if held >= most:
        raise ValidationFailed.single(reference, f"already has {most} {resource.title} records, the most it may have.")


def check_fixed(resource: Resource, body: Body, current: Row) -> None:
    """400 naming each field that is set once and for all, when a replace or update would change it."""
    errors = {
        field.name: ["cannot change: it is set when the record is created."]
        for field in resource.fields
        if field.fixed and field.column in body.values and body.values[field.column] != current[field.column]
    }
    if errors:
        raise ValidationFailed(errors, what="request body")
