"""What a caller may see and do: the one place it is decided, for every resource, from its declaration (its owner,
who writes it, and the shares through which others see it). Every endpoint asks here: get, lists and their
counts, writes, history, the change feed."""

from __future__ import annotations

import enum
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from petrecords.auth import GROUP_PREFIX, Caller
from petrecords.errors import Forbidden, NotFound
from petrecords.resources.declaration import Resource, Sharing, Writers
from petrecords.store.base import Condition, Operator, PageQuery, Row, SortKey, Transaction
from petrecords.values import now_ms

_ABSENT_KEY = uuid.UUID(int=0)
"""What the share lookup of a record that does not exist asks for, so that it does the same work as one of
someone else's record."""


class Permission(enum.IntEnum):
    NONE = 0
    """As if the record did not exist (404)."""
    READ = 1
    """The caller may read it, and is refused writing it (403)."""
    WRITE = 2


@dataclass(frozen=True)
class Seen:
    """A record as the caller may see it, and what they may do with it."""

    row: Row
    permission: Permission
    named: bool = False
    """A share that names the caller as its user grantee: they may delete it (leave), not change it."""


def is_owner(caller: Caller, owner: str) -> bool:
    """Whether the caller has the owner's rights over the records of `owner`: they are that user, or `owner` is
    `group:NAME` and their token lists NAME (a clinic's vets, over the clinic's patients). The one owner check: every
    rule of whose a record is asks here."""
    if owner == caller.email:
        return True
    return bool(caller.groups) and owner.startswith(GROUP_PREFIX) and owner[len(GROUP_PREFIX) :] in caller.groups


def owner_keys(caller: Caller) -> tuple[str, ...]:
    """Every owner whose records are the caller's own (`is_owner`): the caller, and each of their groups. The same
    names as the grantees a share may name to grant to them (Caller.grantees): a list condition names them once for
    both."""
    return caller.grantees


def quick_permission(caller: Caller, resource: Resource, row: Row | None) -> Permission | None:
    """What the caller may do with a record, when that needs no look at its shares; None when it does."""
    column = resource.ownership.column
    if caller.is_admin:
        return Permission.WRITE if row is not None else Permission.NONE
    if column is None:
        if row is None:
            return Permission.NONE
        return Permission.READ if resource.ownership.writers is Writers.ADMIN else Permission.WRITE
    if row is not None and is_owner(caller, row[column]):
        return Permission.WRITE
    issuer = resource.ownership.issuer
    if issuer is not None:
        return Permission.WRITE if row is not None and row[issuer] == caller.email else Permission.NONE
    grants = resource.grants
    if grants is not None:
        return Permission.READ if row is not None and row[grants.grantee_column] in caller.grantees else Permission.NONE
    return None if resource.sharing is not None else Permission.NONE


async def permission(
    tx: Transaction, caller: Caller, resource: Resource, row: Row | None, *, asked: uuid.UUID | None = None
) -> Permission:
    """What the caller may do with a record (None: one that does not exist, `asked` its id). A record of someone
    else's that is not shared with the caller, and one that does not exist, cost the same (the same lookup of
    shares), so that neither its answer nor its timing tells them apart."""
    quick = quick_permission(caller, resource, row)
    sharing = resource.sharing
    if quick is not None or sharing is None:
        return quick or Permission.NONE
    key = row[sharing.key_column] if row is not None else (asked or _ABSENT_KEY)
    accesses = await granted(tx, sharing, key, caller)
    if row is None or not accesses:
        return Permission.NONE
    writing = sharing.writable and any(access in sharing.grants.writing for access in accesses)
    return Permission.WRITE if writing else Permission.READ


_GRANTED: weakref.WeakKeyDictionary[Transaction, dict[tuple[str, Any, tuple[str, ...]], list[str]]] = (
    weakref.WeakKeyDictionary()
)
"""What `granted` found in each transaction, by shares, record and grantees: the same question is asked once."""


async def granted(tx: Transaction, sharing: Sharing, key: Any, caller: Caller) -> list[str]:
    """The accesses that the shares of the record `key` grant the caller now (none: not shared with them). Looked
    up once per record a transaction asks about, until it takes locks or writes a share (`forget_granted`): a
    vet's create of a vaccination asks of the pet's shares for the pet and again for the new record."""
    grants = sharing.grants
    shares = sharing.shares
    memo = _GRANTED.setdefault(tx, {})
    asked = (shares.name, key, caller.grantees)
    found = memo.get(asked)
    if found is not None:
        return found
    conditions = (
        Condition((shares.field_named(grants.reference).column,), Operator.EQUAL, (key,)),
        Condition((grants.grantee_column,), Operator.IN, caller.grantees),
        Condition((grants.expires_column,), Operator.AFTER_OR_NULL, (now_ms(),)),
    )
    query = PageQuery(conditions=conditions, sort=(SortKey("id"),), limit=len(caller.grantees), offset=0)
    found = memo[asked] = [row[grants.access_column] for row in await tx.list(shares.collection, query)]
    return found


def forget_granted(tx: Transaction) -> None:
    """Forget what `granted` found in the transaction: once it holds new locks (what it found before them may have
    changed while it waited), and once it writes a share."""
    _GRANTED.pop(tx, None)


def moves_between(resource: Resource) -> Resource | None:
    """The resource whose records a record of `resource` is shared through when it is another one, so that the
    record may move from one of them to another (a vaccination between pets); None otherwise (a pet is shared
    through itself)."""
    sharing = resource.sharing
    if sharing is None:
        return None
    through = sharing.shares.reference_of(sharing.grants.reference).target
    return None if through is resource else through


def visible(row: Row | None, found: Permission) -> Row:
    """The record, when the caller may see it; 404 when they may not (or there is none)."""
    if row is None or found is Permission.NONE:
        raise NotFound()
    return row


def seen(caller: Caller, resource: Resource, row: Row | None, found: Permission) -> Seen:
    """The record with what the caller may do with it; 404 when they may not even see it."""
    row = visible(row, found)
    grants = resource.grants
    named = grants is not None and row[grants.grantee_column] == caller.email
    return Seen(row, found, named)


async def permission_as_written(
    tx: Transaction, caller: Caller, resource: Resource, held: Seen, written: Row
) -> Permission:
    """What the caller may do with a record as a write leaves it (`written`, the record `held` replaced): the same
    as with it now while what decides that stays (its owner, whom it names, the record it is shared through),
    else looked at anew, as a new record's is. A vaccination moved to another pet is written there."""
    if all(written[column] == held.row[column] for column in _deciding_columns(resource)):
        return held.permission
    return await permission(tx, caller, resource, written)


def _deciding_columns(resource: Resource) -> tuple[str, ...]:
    """The columns whose values decide what a caller may do with a record (see `permission`)."""
    grants, sharing = resource.grants, resource.sharing
    columns = (
        resource.ownership.column,
        None if grants is None else grants.grantee_column,
        None if sharing is None else sharing.key_column,
    )
    return tuple(column for column in columns if column is not None)


def permit_write(resource: Resource, caller: Caller, found: Permission) -> None:
    """403 for a caller who may see a record but not write it (after the 404 check)."""
    if resource.ownership.writers is Writers.ADMIN and not caller.is_admin:
        raise Forbidden(f"Only an administrator may create, replace or delete {resource.title} records.")
    if found is not Permission.WRITE:
        raise Forbidden(f"You may see this {resource.title} record but not change it.")


async def list_scope(
    tx: Transaction, caller: Caller, resource: Resource, *, owner: str | None, scope: str | None
) -> list[Condition] | None:
    """The conditions that keep a list to what the caller may see (with the `ownerId` and `access` asked for);
    None when nothing can match. The caller's own records are those of each of their owner keys (`owner_keys`)."""
    column = resource.ownership.column
    if column is None:
        return []
    named_owner = [Condition((column,), Operator.EQUAL, (owner,))] if owner is not None else []
    sharing = resource.sharing
    keys = owner_keys(caller)
    mine = _owned_by(column, keys)
    if caller.is_admin:
        if scope == "owned":
            return [*named_owner, mine]
        if scope == "shared" and sharing is not None:
            return [*named_owner, _not_owned_by(column, keys), _shared(sharing, caller)]
        return named_owner
    if owner is not None and scope != "shared" and is_owner(caller, owner):
        # Every record of one of their own owners is theirs to see: that owner's kept counts answer the total.
        return named_owner
    grants = resource.grants
    if grants is not None:
        # Theirs (as an owner of the pet), or naming them (as the grantee): owners and grantees are named alike.
        visible = Condition((column, grants.grantee_column), Operator.OWNED_OR_NAMED, keys)
        return [*named_owner, visible]
    issuer = resource.ownership.issuer
    if issuer is not None:
        # Theirs (as an owner of what it follows), or issued by them (another owner's pet they may read, or could
        # when they issued it): owners and issuers are named alike.
        return [*named_owner, Condition((column, issuer), Operator.OWNED_OR_NAMED, keys)]
    if sharing is None or scope == "owned":
        # Another owner's records are never theirs; with no sharing, never seen either.
        return None if owner is not None else [mine]
    if scope == "shared":
        # Shared with them and not their own (an owner may share a pet with a group they belong to).
        return [*named_owner, _not_owned_by(column, keys), _shared(sharing, caller)]
    both = Condition((column, sharing.key_column), Operator.OWNED_OR_SHARED, (now_ms(), *keys))
    return [*named_owner, both]


def _owned_by(column: str, keys: tuple[str, ...]) -> Condition:
    """The records of one of these owners (one: an equality, which the owner's kept counts answer alone)."""
    return Condition((column,), Operator.EQUAL if len(keys) == 1 else Operator.IN, keys)


def _not_owned_by(column: str, keys: tuple[str, ...]) -> Condition:
    return Condition((column,), Operator.DIFFERS, keys)


def _shared(sharing: Sharing, caller: Caller) -> Condition:
    return Condition((sharing.key_column,), Operator.SHARED, (now_ms(), *caller.grantees))


def owner_column_of(resource: Resource) -> str:
    column = resource.ownership.column
    if column is None:
        raise TypeError(f"{resource.name} records have no owner")
    return column
