"""What a resource declares: its table, its fields and their rules, who may do what, its references, its
filters and sort fields. Routes, validation, listing, counts, ETags, idempotency, history and the OpenAPI
document follow from a declaration; nothing else in the layer knows a resource by name."""

from __future__ import annotations

import enum
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from petrecords.auth import Caller
from petrecords.config import ConfigurationError, Settings
from petrecords.endpoints import Endpoint
from petrecords.resources.fields import Kind
from petrecords.resources.filters import Filter
from petrecords.store.base import Collection, Condition, Granting, Join, Row, SharedBy, Transaction
from petrecords.tables import HOUR_INDEXED, SEARCHABLE

if TYPE_CHECKING:
    from petrecords.services import Services  # which holds the registered resources

Values = dict[str, Any]
"""A record as stored: column name -> value (ids as UUIDs, times as epoch milliseconds)."""
Errors = dict[str, list[str]]
"""Wire field name -> what was expected of it."""


@dataclass(frozen=True)
class Field:
    """One field of the wire form, stored in `column`."""

    name: str
    column: str
    kind: Kind
    required: bool = False
    read_only: bool = False
    """Set by the service; a client may send it back, and it is ignored."""
    description: str = ""
    derived: bool = False
    """Computed by the resource's rules when a body does not give it, on a replace too: a replace that omits it
    computes it again instead of keeping the stored value."""
    fixed: bool = False
    """Set when the record is created and never changed: a replace or update naming another value is 400."""
    default: Any = None
    """The stored value a new record takes when its create does not give the field (or gives null), for a field that
    cannot be null; an import of a record written before the field existed takes it too."""
    default_ahead_ms: int | None = None
    """For a moment: a new record whose create does not give the field (or gives null) takes the moment this many
    milliseconds after its creation."""

    @property
    def key_column(self) -> str | None:
        """The column that holds the field's matching and sorting key, when it has one."""
        return self.kind.key_column

    @property
    def nullable(self) -> bool:
        return self.kind.nullable

    @property
    def embedded(self) -> bool:
        return self.kind.embeds is not None


class OnDelete(enum.Enum):
    CASCADE = "cascade"
    """Deleting the referenced record deletes the referring ones, in the same transaction."""
    RESTRICT = "restrict"
    """A referenced record cannot be deleted (409/985)."""


@dataclass(frozen=True)
class Reference:
    """A field that names a record of `target`. The record must exist and, when the target is owned, be one
    the caller may see; otherwise the answer is 400 naming the field, alike whether it is missing or another
    owner's."""

    field: str
    target: Resource
    on_delete: OnDelete
    message: str
    owned: bool = False
    """The caller must own the target record (an administrator: any), not only see it."""
    requires: TargetRule | None = None
    """What the referring records require of the record they refer to, checked on every replace or update of it."""
    exclusive: bool = False
    """The writes of referring records hold the record they refer to exclusively, so that they wait for each other:
    what is kept for each such record from all its referrers (a pet's due doses, see Kept) is written by one at a
    time."""


@dataclass(frozen=True)
class Refused:
    """Referring records that a referenced record may not have: any that matches `conditions` (and refers to it)
    makes its write 400, with `errors`."""

    conditions: tuple[Condition, ...]
    errors: Errors


TargetRule = Callable[[Values], Refused | None]
"""Given a referenced record as a write would leave it (every column), the referring records it may then not have;
None when it may have any."""


@dataclass(frozen=True)
class Unique:
    """Fields whose values no two records share (null excepted): a write that would repeat them is 409. `within`:
    given a record as written, the conditions that pick the records it must differ from (beside its values), or None
    when it may share its values with any; `among` says which those are, as the message's tail."""

    fields: tuple[str, ...]
    within: Callable[[Values], tuple[Condition, ...] | None] | None = None
    among: str = ""


@dataclass(frozen=True)
class Embed:
    """A read-only field holding the referenced record itself, as its own GET returns it."""

    field: str
    reference: str


class Writers(enum.Enum):
    OWNER = "owner"
    """Whoever may see a record may write it (and a non-admin sees only their own)."""
    ADMIN = "admin"
    """Everyone may read; only an administrator may create, replace or delete (403 after the 404 check)."""


@dataclass(frozen=True)
class Ownership:
    """Whose a record is. `column` None: the records are shared by every caller."""

    column: str | None = None
    field: str = "ownerId"
    settable: bool = False
    """A client may name the owner (an admin anyone; a non-admin only themselves, 403 otherwise)."""
    through: str | None = None
    """The reference whose target's owner this record's owner always is (it follows that record)."""
    writers: Writers = Writers.OWNER
    issuer: str | None = None
    """The column naming the user who issued the record (`created_by`): besides its owner and an administrator, they
    alone may read and write it, and see its changes. Such a record is between the two of them: no share of the
    record it follows shows it to anyone else, and a transfer of that record deletes it (its new owner issued
    nothing)."""


Check = Callable[[Values], Errors]
"""Rules between fields of one body, on the values as read (wire field names -> stored values)."""
Complete = Callable[[Values, Mapping[str, Values]], Errors]
"""Rules that need the referenced records (reference field -> that record as stored): may fill in values."""
Review = Callable[[Values | None, Values], Errors]
"""Rules on a record as a write would leave it (every column), beside the record as stored (None for a create)."""
Screen = Callable[[Values, Settings], Awaitable[Errors]]
"""Rules on the values a body sets that must look outside the database (a host name's addresses): run before the
write's transaction begins, so that a slow look-up holds no lock and no connection."""


@dataclass(frozen=True)
class Preparing:
    """A write about to be made, as Resource.prepare sees it: in the write's transaction, once the record is held and
    the caller may make the write."""

    tx: Transaction
    caller: Caller
    stored: Row | None
    """The record as stored; None for a create."""
    written: Values
    """The record as the write leaves it (every column the body and the service set)."""
    settings: Settings


Prepare = Callable[[Preparing], Awaitable[Values]]
"""Rules that need the transaction (how many records an owner has, what the change log keeps), and the columns the
service sets that are no field of the record (a secret): the values returned are written with the record. Raises
ValidationFailed for a write that breaks a rule."""


@dataclass(frozen=True)
class Revealed:
    """A secret the service makes for each new record (a webhook's signing key, a certificate's link): shown beside
    the record in the answer to its create, and nothing else ever shows it: not a GET, a list, the history, the
    change feed, NATS nor a log. An idempotent replay of the create answers it again (the kept answer holds it)."""

    make: Callable[[], tuple[Values, Mapping[str, Any]]]
    """A new secret: (the columns the record stores of it, before Resource.prepare runs: the secret itself, or a
    digest of it; the members the create's answer shows)."""
    schemas: Mapping[str, Mapping[str, Any]]
    """Each member's JSON Schema: the document's `{schema_name}Created` is the record's with these."""
    revoke: Callable[[Transaction, Row], Awaitable[None]] | None = None
    """What a deletion of a record (however it goes: its own, or with what it follows) does, in its transaction,
    so that its secret is known as revoked rather than unknown."""


MoreEndpoints = Callable[["Resource", "Services"], Sequence[Endpoint]]
"""A resource's endpoints beyond those every resource has (`/v1/webhooks/{id}/secret`)."""


@dataclass(eq=False)
class Resource:
    """A resource: `/v1/{name}` and `/v1/{name}/{id}`."""

    name: str
    table: sa.Table
    title: str
    """The record's name in prose: "pet", "vaccine", "pet vaccination"."""
    schema_name: str
    """The OpenAPI schema and operation noun: "Pet" gives Pet, PetWrite, PetPage, createPet, listPets."""
    plural: str
    path_parameter: str
    description: str
    fields: tuple[Field, ...]
    ownership: Ownership = field(default_factory=Ownership)
    filters: tuple[Filter, ...] = ()
    sort_fields: tuple[str, ...] = ()
    references: tuple[Reference, ...] = ()
    counted_by: str | None = None
    """The column whose values partition the kept counts (besides the owner, for owned records)."""
    counted_over: str | None = None
    """A time column whose records are also counted by day (see Collection.counted_over): its lists bounded by
    it (what is overdue) count their records from a few kept rows."""
    tolerated: tuple[str, ...] = ()
    """Members a body may carry that are no field of the record (clients send back what they read): ignored."""
    unique: tuple[Unique, ...] = ()
    """Sets of fields whose values no two records share (null excepted): a write that would repeat one is 409."""
    grants: Grants | None = None
    """The records of this resource grant access to others' records (shares)."""
    check: Check | None = None
    complete: Complete | None = None
    review: Review | None = None
    screen: Screen | None = None
    prepare: Prepare | None = None
    revealed: Revealed | None = None
    more_endpoints: MoreEndpoints | None = None
    record_operations: tuple[str, ...] = ()
    """The operation ids of those of its more endpoints that act on one record (`/v1/{name}/{id}/…`): the document
    links every answer with a record to them, as it links to the record's history."""
    most_per_owner: int | None = None
    """How many records one owner may have (a create beyond it is 400 naming ownerId)."""
    examples: Mapping[str, Any] = field(default_factory=dict)
    most_per_reference: tuple[str, int] | None = None
    """(a reference, n): at most n records refer to one record through it (400 naming the reference)."""
    command: str = ""
    """The name of its `petrecords` client command; its name when not given."""
    moved_without_write: tuple[str, ...] = ()
    """Columns the service moves without a write, so without a new revision (a webhook's position, as its
    deliveries are acknowledged): their values take part in the ETag, which must change whenever what a read
    shows does (a strong validator), so that If-None-Match never keeps a stale copy and If-Match never passes one."""
    sharing: Sharing | None = field(default=None, init=False, repr=False)
    """How others than their owners come to see its records: set by the ResourceSet it is registered in."""
    granted: tuple[Resource, ...] = field(default=(), init=False, repr=False)
    """For shares, the resources whose records they let their grantees see: set by the ResourceSet."""
    granted_kept: tuple[Kept, ...] = field(default=(), init=False, repr=False)
    """For shares, the kept records they let their grantees see (see Kept): set by the ResourceSet."""

    def __post_init__(self) -> None:
        if not self.command:
            self.command = self.name

    @functools.cached_property
    def embeds(self) -> tuple[Embed, ...]:
        return tuple(
            Embed(declared.name, declared.kind.embeds) for declared in self.fields if declared.kind.embeds is not None
        )

    @functools.cached_property
    def collection(self) -> Collection:
        """What the store needs to know of the resource."""
        joins = tuple(
            Join(
                embed.field,
                self.field_named(embed.reference).column,
                self.reference_of(embed.reference).target.collection,
            )
            for embed in self.embeds
        )
        sharing = self.sharing
        shared_by = None
        if sharing is not None:
            grants = sharing.grants
            shared_by = SharedBy(
                table=sharing.shares.table,
                target_column=sharing.shares.field_named(grants.reference).column,
                grantee_column=grants.grantee_column,
                expires_column=grants.expires_column,
                key_column=sharing.key_column,
                shares=sharing.shares.name,
            )
        granting = None
        if self.grants is not None:
            granting = Granting(
                target_column=self.field_named(self.grants.reference).column,
                grantee_column=self.grants.grantee_column,
                expires_column=self.grants.expires_column,
                granted=(
                    *(resource.collection for resource in self.granted),
                    *(kept.collection for kept in self.granted_kept),
                ),
            )
        return Collection(
            name=self.name,
            table=self.table,
            owner_column=self.ownership.column,
            counted_by=self.counted_by,
            counted_over=self.counted_over,
            joins=joins,
            searchable=self.table.info.get(SEARCHABLE, ()),
            shared_by=shared_by,
            granting=granting,
        )

    @functools.cached_property
    def shared_through(self) -> tuple[str | None, str | None]:
        """The columns that name, in each change of one of its records, the record others see it through (a pet),
        and, for a share, whom the share names: (None, None) for a resource that no share lets others see."""
        grants = self.grants
        if grants is not None:
            return self.field_named(grants.reference).column, grants.grantee_column
        if self.sharing is not None:
            return self.sharing.key_column, None
        return None, None

    @property
    def path(self) -> str:
        return f"/v1/{self.name}"

    def field_named(self, name: str) -> Field:
        for candidate in self.fields:
            if candidate.name == name:
                return candidate
        raise KeyError(name)

    def reference_of(self, field_name: str) -> Reference:
        for reference in self.references:
            if reference.field == field_name:
                return reference
        raise KeyError(field_name)


@dataclass(frozen=True)
class Grants:
    """What a resource whose records are shares grants: each names, by its `reference`, a record of the target
    resource (a pet), a `grantee` (a user's e-mail, or `group:NAME` for every member of a group) and an `access`;
    while it has not expired it lets the grantee read that record, the records that follow its owner (its
    vaccinations) and their history, and, with an access among `writing`, write those followers (never the record
    itself, nor its shares). A user grantee may delete a share that names them (leave); the grantee may read it."""

    reference: str
    grantee_column: str
    access_column: str
    expires_column: str
    writing: tuple[str, ...]
    most_per_target: int


@dataclass(frozen=True)
class Sharing:
    """How a resource's records are seen by others than their owners: through the shares of `shares`, which name
    the record a record is shared through in `key_column` (a pet's own id; a vaccination's pet). `writable`: a
    share of a writing access lets its grantee write these records (the pet's followers, never the pet)."""

    shares: Resource
    key_column: str
    writable: bool

    @property
    def grants(self) -> Grants:
        grants = self.shares.grants
        if grants is None:
            raise TypeError(f"{self.shares.name} records are no shares")
        return grants


@dataclass(frozen=True)
class Dependent:
    """A resource whose records refer to another resource's records through `reference`."""

    resource: Resource
    reference: Reference

    @property
    def column(self) -> str:
        return self.resource.field_named(self.reference.field).column


KeepWrite = Callable[[Transaction, "Resource", Row | None, Row | None], Awaitable[None]]
"""Keep derived records as a write of a record of the resource leaves them: given the record as it was and as it
is (None: it was created, or deleted), in the write's transaction, after the write."""


@dataclass(eq=False)
class Kept:
    """Records derived from resources' records and kept with them: `keep` runs in the transaction of every write of
    a record of the resources it `follows`, after the write, so that a read sees them as the records are. They are
    seen by whoever may see the records of `seen_as` (their owner column and shared-through column have the same
    names), and their kept counts follow the same shares."""

    name: str
    """The name its kept counts are filed under: never a resource's."""
    follows: tuple[Resource, ...]
    seen_as: Resource
    keep: KeepWrite
    make_collection: Callable[[Collection], Collection]
    """Its collection, from the collection of `seen_as` (which says how that is shared)."""
    fill: Callable[[], Sequence[sa.Insert]]
    """The statements that derive every kept record from the stored records, into empty tables, in order: after a
    load."""

    @functools.cached_property
    def collection(self) -> Collection:
        return self.make_collection(self.seen_as.collection)


class ResourceSet:
    """The registered resources and kept records, and who refers to whom."""

    def __init__(self, resources: Sequence[Resource], kept: Sequence[Kept] = ()) -> None:
        self.resources = tuple(resources)
        self.kept = tuple(kept)
        self._dependents: dict[str, tuple[Dependent, ...]] = {
            target.name: tuple(
                Dependent(resource, reference)
                for resource in resources
                for reference in resource.references
                if reference.target is target
            )
            for target in resources
        }
        for resource in self.resources:
            resource.sharing = self._sharing_of(resource)
        for shares in self.resources:
            shares.granted = tuple(
                resource
                for resource in self.resources
                if resource.sharing is not None and resource.sharing.shares is shares
            )
            shares.granted_kept = tuple(
                one for one in self.kept if (sharing := one.seen_as.sharing) is not None and sharing.shares is shares
            )
        self._keeping = {
            resource.name: tuple(one for one in self.kept if resource in one.follows) for resource in self.resources
        }
        self._ranks: dict[str, int] = {}

    def keeping(self, resource: Resource) -> tuple[Kept, ...]:
        """The kept records that follow the writes of a resource's records."""
        return self._keeping.get(resource.name, ())

    def _sharing_of(self, resource: Resource) -> Sharing | None:
        """Through which shares others see the resource's records: the target of the shares' reference is shared
        by its own id, and the records that follow its owner by their reference to it (but those of an issuer,
        which no one else sees)."""
        if resource.ownership.issuer is not None:
            return None
        for shares in self.resources:
            if shares.grants is None or shares is resource:
                continue
            target = shares.reference_of(shares.grants.reference).target
            if resource is target:
                return Sharing(shares, "id", writable=False)
            through = resource.ownership.through
            if through is not None and resource.reference_of(through).target is target:
                return Sharing(shares, resource.field_named(through).column, writable=True)
        return None

    def check(self) -> None:
        """Refuse declarations that name what does not exist (a sort field, a filter's column, a reference), so
        that a typo stops the start-up with one line instead of answering 500: raises DeclarationError."""
        for resource in self.resources:
            problem = _problem_of(resource, self.resources)
            if problem is not None:
                raise DeclarationError(f"resource {resource.name}: {problem}")

    def named(self, name: str) -> Resource | None:
        return next((resource for resource in self.resources if resource.name == name), None)

    def dependents(self, resource: Resource) -> tuple[Dependent, ...]:
        return self._dependents.get(resource.name, ())

    def rank(self, resource: Resource) -> int:
        """How many references away from records that refer to nothing: the order in which a transaction
        takes the locks of several resources' records (referenced ones first), so that none waits in a cycle.
        Found once for each resource: every lock a write takes asks it (a batch of reminders, a thousand)."""
        known = self._ranks.get(resource.name)
        if known is None:
            known = self._ranks[resource.name] = max(
                (self.rank(reference.target) + 1 for reference in resource.references), default=0
            )
        return known


class DeclarationError(ConfigurationError):
    """A resource's declaration names something that does not exist."""


AUDIT_FIELDS = ("id", "createdAt", "createdBy", "modifiedAt", "modifiedBy")
AUDIT_COLUMNS = ("id", "created_at", "created_by", "modified_at", "modified_by", "revision")
"""The columns the layer writes in every record (tables.audit_columns)."""


def _problem_of(resource: Resource, registered: Sequence[Resource]) -> str | None:
    """What is wrong with one declaration, in a few words, or None."""
    columns = set(resource.table.columns.keys())
    names = [field.name for field in resource.fields]
    lacking = [column for column in AUDIT_COLUMNS if column not in columns]
    if lacking:
        return f"its table {resource.table.name} lacks the audit columns {', '.join(lacking)} (tables.audit_columns)"
    if len(set(names)) != len(names) or set(names) & set(AUDIT_FIELDS):
        return "its fields' names must be distinct, and none may be an audit field's"
    for declared in resource.fields:
        defaulted = declared.default is not None or declared.default_ahead_ms is not None
        if defaulted and (declared.nullable or declared.required or declared.read_only):
            return f"field {declared.name!r} has a default, which only an optional field that cannot be null takes"
        if declared.kind.embeds is not None:
            if declared.kind.embeds not in {reference.field for reference in resource.references}:
                return f"field {declared.name!r} embeds {declared.kind.embeds!r}, which is not one of its references"
            continue
        for column in (declared.column, declared.kind.key_column):
            if column is not None and column not in columns:
                return (
                    f"field {declared.name!r} names the column {column!r}, which its table {resource.table.name} lacks"
                )
    sortable = {*AUDIT_FIELDS, *(field.name for field in resource.fields if field.kind.embeds is None)}
    for name in resource.sort_fields:
        if name not in sortable:
            return f"sort field {name!r} is not one of its fields ({', '.join(sorted(sortable))})"
    if len({name.lower() for name in resource.sort_fields}) != len(resource.sort_fields):
        return "its sort fields must be distinct"
    for unique in resource.unique:
        if not unique.fields or not set(unique.fields) <= set(names):
            return f"unique fields {', '.join(unique.fields)} are not among its fields"
    for one in resource.filters:
        for column in one.columns:
            if column not in columns:
                return f"filter {', '.join(one.parameters)} names the column {column!r}, which its table lacks"
    for reference in resource.references:
        if reference.field not in names:
            return f"reference {reference.field!r} is not one of its fields"
        if reference.target not in registered:
            return f"reference {reference.field!r} names the resource {reference.target.name}, which is not registered"
    ownership = resource.ownership
    if ownership.column is not None and ownership.column not in columns:
        return f"its owner column {ownership.column!r} is not a column of its table"
    if ownership.issuer is not None and ownership.issuer not in columns:
        return f"its issuer column {ownership.issuer!r} is not a column of its table"
    bounded = resource.most_per_reference
    if bounded is not None and bounded[0] not in {reference.field for reference in resource.references}:
        return f"it bounds the records per {bounded[0]!r}, which is not one of its references"
    if ownership.through is not None and ownership.through not in {
        reference.field for reference in resource.references
    }:
        return f"its owner follows {ownership.through!r}, which is not one of its references"
    if resource.counted_by is not None and resource.counted_by not in columns:
        return f"it is counted by {resource.counted_by!r}, which is not a column of its table"
    counted_over = resource.counted_over
    if counted_over is not None and (counted_over not in columns or resource.table.c[counted_over].nullable):
        return f"it is counted over {counted_over!r}, which is not a column of its table without nulls"
    if counted_over is not None and resource.table.info.get(HOUR_INDEXED) != counted_over:
        return f"it is counted over {counted_over!r}, whose hour is not indexed (tables.hour_indexed)"
    return None
