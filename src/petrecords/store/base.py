"""The storage interface the service is written against: records of declared collections, generic over
their tables."""

from __future__ import annotations

import abc
import enum
import uuid
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import sqlalchemy as sa

Row = dict[str, Any]
"""A stored record: column name -> value (ids as UUIDs, times as epoch milliseconds), plus, under the name of
each join of its collection, the joined record."""


@dataclass(frozen=True, eq=False)
class Join:
    """A record of `target` that each record of a collection names in `column`, read with it as `name`."""

    name: str
    column: str
    target: Collection


@dataclass(frozen=True, eq=False)
class SharedBy:
    """The shares through which a collection's records are seen by others than their owners: the records of
    `table` name, in `target_column`, the record a collection's record is shared through (its `key_column`)."""

    table: sa.Table
    target_column: str
    grantee_column: str
    expires_column: str
    key_column: str
    shares: str = ""
    """The name of the shares' collection."""


@dataclass(frozen=True, eq=False)
class Granting:
    """What a collection's records, shares, grant: each names in `target_column` the record it shares, in
    `grantee_column` whom, and in `expires_column` until when (null: for ever); each lets its grantee see that
    record's records in the `granted` collections (see SharedBy)."""

    target_column: str
    grantee_column: str
    expires_column: str
    granted: tuple[Collection, ...]


@dataclass(frozen=True, eq=False)
class Collection:
    """What the store knows of a resource: where its records live, whose they are, how they are counted.
    Compared by identity: statements are built once per collection."""

    name: str
    """The resource's name, under which its kept counts are filed."""
    table: sa.Table
    owner_column: str | None = None
    counted_by: str | None = None
    """The column whose values partition the kept counts, besides the owner."""
    counted_over: str | None = None
    """A time column (epoch milliseconds) by whose days the kept counts are also kept (see tables.period_counts):
    the records before an instant, or from it, are counted from them."""
    joins: tuple[Join, ...] = ()
    searchable: tuple[str, ...] = ()
    """The columns that a trigram index covers (see tables.trigram_indexed): a LIKE over exactly these, with a
    literal run of at least three characters, reads its candidates from that index."""
    shared_by: SharedBy | None = None
    granting: Granting | None = None
    """Set for a collection of shares: what its records grant, which the grantees' kept counts follow."""


class Operator(enum.Enum):
    EQUAL = "="
    IN = "in"
    AT_LEAST = ">="
    BELOW = "<"
    AT_MOST = "<="
    LIKE = "like"
    """Each value is a LIKE pattern (escape `\\`) that one of the columns must match."""
    NEVER = "never"
    """Matches nothing (a bound that no stored value can meet)."""
    DIFFERS = "differs"
    """The value differs from each of those given, null included."""
    AFTER_OR_NULL = "after or null"
    """The value is greater than the one given, or null (a moment that has not passed, or none)."""
    SHARED = "shared"
    """The record is shared with one of the grantees: values (now, *grantees), columns (the collection's key column);
    see SharedBy."""
    SHARED_EACH = "shared, looked up for each record"
    """As SHARED, written so that each record in the list's order is looked up in the shares: what a page reads
    when the records shared are many (see SqlTransaction.list), instead of gathering and sorting all of them."""
    OWNED_OR_SHARED = "owned or shared"
    """The record is owned by one of a caller's keys, or shared with one of them: values (now, *keys), columns (owner
    column, key column). A caller's keys (their e-mail address and `group:NAME` of each of their groups) name both the
    owners whose records are theirs and the grantees whose shares grant to them."""
    OWNED_OR_SHARED_EACH = "owned or shared, looked up for each record"
    """As OWNED_OR_SHARED, each record looked up as SHARED_EACH does."""
    OWNED_OR_NAMED = "owned or named"
    """The record is owned by one of a caller's keys, or names one of them as its grantee (a share): values (*keys),
    columns (owner column, grantee column)."""


class Condition(msgspec.Struct, frozen=True):
    """One condition of a list: `column operator value`; with several columns, any one of them."""

    columns: tuple[str, ...]
    operator: Operator
    values: tuple[Any, ...]


class SortKey(msgspec.Struct, frozen=True):
    column: str
    descending: bool = False
    rank: tuple[str, ...] | None = None
    """Values in the order they sort in; others follow, by their lower-cased value."""
    nullable: bool = False
    """The column may hold null, which sorts after every value (before them, descending), on every database."""


class PageQuery(msgspec.Struct, frozen=True, kw_only=True):
    conditions: tuple[Condition, ...]
    sort: tuple[SortKey, ...]
    """Already total: ends with the id."""
    limit: int
    offset: int


Cursor = tuple[int, int]
"""A place in the change log: (xid, position). Changes are ordered by it, which is their commit order."""


class NewChange(msgspec.Struct, frozen=True, kw_only=True):
    """A write of a record, to be kept with it."""

    resource: str
    record_id: uuid.UUID
    action: str
    version: int
    at: int
    by: str
    owner_before: str | None
    """The record's owner before the write (None when it did not exist); '' for a shared record."""
    owner_after: str | None
    """The record's owner after the write (None when it was deleted); '' for a shared record."""
    record: bytes
    """The record's JSON after the write; as it was before, for a deletion."""
    shared_key: uuid.UUID | None = None
    """The record through whose shares the record is seen by others than its owner (a pet), if any."""
    grantee: str | None = None
    """Of a share's change: whom the share names (only they see it through the share)."""


class Change(NewChange, frozen=True, kw_only=True):
    """A committed write, as the change log keeps it."""

    cursor: Cursor
    seen_by: tuple[str, ...] = ()
    """The grantees that a share let see it when it committed, as far as the read that found it looked."""


class Versions(msgspec.Struct, frozen=True):
    """Which of a record's changes its history shows a reader: those of the writes before or after which the record
    was one of `owners`' (the reader's, or one of their groups'), and those that left it shared through one of
    `keys` (the records, pets, through which it may be seen: a vaccination moves between pets)."""

    owners: tuple[str, ...]
    keys: tuple[uuid.UUID, ...]


HISTORY_KEYS = 100
"""The most records shared through which a history tells a record's versions apart (its latest ones): a record moved
between more has the versions of the others shown only to whoever owned it then."""


class ShareWindow(msgspec.Struct, frozen=True, kw_only=True):
    """A share's write, as it moves the window in which the share grants access: the window open until now
    closes with the write's change, and, unless the share is deleted, another opens with it."""

    share_id: uuid.UUID
    grantee: str
    shared_key: uuid.UUID
    expires_at: int | None
    opens: bool


class Principal(Protocol):
    """Whose request a transaction serves (an authenticated caller is one): their e-mail address, and every
    grantee a share may name to grant to them (that address, and `group:NAME` for each of their groups)."""

    @property
    def email(self) -> str: ...

    @property
    def grantees(self) -> tuple[str, ...]: ...


class WriteInFlight(msgspec.Struct, frozen=True, kw_only=True):
    """A write transaction of the database still in flight, as the database shows it."""

    seconds: float | None
    """How long ago its transaction began; None where the database does not show it (another role's)."""
    process: int
    """The process id of its session on the server."""
    state: str | None
    """The session's state (`idle in transaction`: it waits for its client)."""
    application: str | None


class Viewer(msgspec.Struct, frozen=True):
    """Whose changes a non-administrator may see: their own and their groups' (as owners, by the same names as
    their grantees), the shared catalogue's, and those that their shares let them see (as any of their grantees:
    their e-mail, or a group)."""

    email: str
    grantees: tuple[str, ...]


class Lock(msgspec.Struct, frozen=True, order=True):
    """A record held for the rest of a transaction: `shared` by readers that others must not change under
    them, exclusively by its writers. Locks are taken in their sort order, so that no two transactions wait
    for each other."""

    rank: int
    """How many references away from a record that refers to nothing: referenced records first."""
    resource: str
    record_id: uuid.UUID
    shared: bool = False


class StoredResponse(msgspec.Struct, frozen=True, kw_only=True):
    """A successful response kept for an Idempotency-Key."""

    resource: str
    request_hash: str
    status: int
    body: bytes
    location: str | None
    etag: str | None


class Records(Protocol):
    """A transaction's records of the declared collections: locks, reads, writes, counts and pages."""

    one_writer: bool = False
    """Whether a write transaction is the database's only writer until it commits (SQLite): `lock` has nothing to
    hold, and what the transaction has read stays as read but for its own writes."""

    @abc.abstractmethod
    async def lock(self, locks: Sequence[Lock]) -> None:
        """Hold these records for the rest of the transaction, in order. A write transaction takes every lock
        it needs before it writes anything: that is what makes the change log's order the commit order."""

    @abc.abstractmethod
    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        """The record with its joined records."""

    @abc.abstractmethod
    async def insert(self, collection: Collection, row: Row) -> None: ...

    @abc.abstractmethod
    async def insert_many(self, collection: Collection, rows: Sequence[Row]) -> None:
        """Many new records at once (bulk loads)."""

    @abc.abstractmethod
    async def update(self, collection: Collection, row: Row, *, previous: Row) -> None: ...

    @abc.abstractmethod
    async def delete(self, collection: Collection, row: Row) -> None: ...

    @abc.abstractmethod
    async def set_if(self, collection: Collection, record_id: uuid.UUID, *, expected: Row, values: Row) -> bool:
        """Set columns of a record (`values`) if others still hold `expected`, a compare-and-set; whether it did. No
        kept count follows it: for columns that none counts by."""

    async def set_all_if(
        self, collection: Collection, record_ids: Sequence[uuid.UUID], *, expected: Row, values: Row
    ) -> set[uuid.UUID]:
        """`set_if` of many records at once, each expected to hold the same `expected`; the ids of those set."""
        return {
            record_id
            for record_id in record_ids
            if await self.set_if(collection, record_id, expected=expected, values=values)
        }

    @abc.abstractmethod
    async def count(self, collection: Collection, conditions: tuple[Condition, ...]) -> int: ...

    @abc.abstractmethod
    async def list(self, collection: Collection, query: PageQuery) -> Sequence[Row]: ...

    @abc.abstractmethod
    async def referrers(self, collection: Collection, column: str, record_id: uuid.UUID) -> Sequence[Row]:
        """The records whose `column` names `record_id`, held for this transaction's writes."""

    @abc.abstractmethod
    async def has_referrer(self, collection: Collection, column: str, record_id: uuid.UUID) -> bool: ...


class ChangeLog(Protocol):
    """A transaction's change log: a change kept with its write, a record's history, the feed's reads in commit
    order, retention, and the cursors kept beside the log."""

    @abc.abstractmethod
    async def record_change(self, change: NewChange, window: ShareWindow | None = None) -> None:
        """Keep a write of a record, in this transaction; of a share, with the window it moves."""

    async def record_changes(self, changes: Sequence[NewChange]) -> None:
        """Keep many changes that move no share's window, in this order, in this transaction."""
        for change in changes:
            await self.record_change(change)

    @abc.abstractmethod
    async def shared_at(self, shared_key: uuid.UUID, grantees: tuple[str, ...], cursor: Cursor, at: int) -> bool:
        """Whether a share let one of the grantees see the change at `cursor` (made at `at`) of a record shared
        through `shared_key`."""

    @abc.abstractmethod
    async def history(
        self, resource: str, record_id: uuid.UUID, *, limit: int, offset: int, versions: Versions | None = None
    ) -> Sequence[Change]:
        """A record's changes, oldest first: every one, or those `versions` says."""

    @abc.abstractmethod
    async def count_history(self, resource: str, record_id: uuid.UUID, *, versions: Versions | None = None) -> int: ...

    @abc.abstractmethod
    async def history_keys(self, resource: str, record_id: uuid.UUID) -> Sequence[uuid.UUID]:
        """The records through which a record was shared at its changes (a vaccination's pets), the latest first, at
        most HISTORY_KEYS of them."""

    @abc.abstractmethod
    async def last_change(self, resource: str, record_id: uuid.UUID) -> Change | None: ...

    @abc.abstractmethod
    async def kept_actions(
        self, resource: str, record_ids: Sequence[uuid.UUID], actions: tuple[str, ...]
    ) -> set[tuple[uuid.UUID, str, int]]:
        """(record id, action, version) of the changes the log keeps of these records with these actions."""

    @abc.abstractmethod
    async def changes_after(
        self, cursor: Cursor, *, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> Sequence[Change]:
        """The committed changes after `cursor`, in commit order: every one, or (with `reader`) those of the shared
        catalogue, of records `reader` owned before or after the write, and those that a share let them see when
        it committed. Never a change that a transaction still in flight could come to precede."""

    async def changes_page(
        self, cursor: Cursor, *, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> tuple[Sequence[Change], bool]:
        """`changes_after`, and whether it is whole: False when changes after `cursor` have committed but are
        held back behind a transaction still in flight, so that a read from the same place will soon find more.
        Where nothing is ever held back (one writer), always True."""
        return await self.changes_after(cursor, limit=limit, reader=reader, resources=resources), True

    @abc.abstractmethod
    async def changes_seen_by(
        self, cursor: Cursor, *, through: Cursor, readers: Sequence[str], limit: int
    ) -> Sequence[Change]:
        """The changes after `cursor` and at or before `through` (a head cursor read before), in commit order,
        that any of `readers` (e-mail addresses and group grantees) may see: those of the shared catalogue, of
        records one of them owned before or after the write, and those that a share let one of them see, each
        with the grantees that saw it so (Change.seen_by)."""

    @abc.abstractmethod
    async def head_cursor(self) -> Cursor:
        """The cursor after which the changes committed from now on will come (and, on PostgreSQL, a few
        committed already while an older transaction was still in flight: see `committed_after`)."""

    @abc.abstractmethod
    async def committed_after(self, cursor: Cursor, *, limit: int) -> Sequence[Cursor]:
        """The cursors of the changes after `cursor` that have committed by now, whether or not a transaction
        still in flight may come to precede them."""

    @abc.abstractmethod
    async def count_changes_after(self, cursor: Cursor) -> int:
        """How many changes after `cursor` have committed by now (what NATS has not been sent yet, say)."""

    @abc.abstractmethod
    async def oldest_write_in_flight(self) -> WriteInFlight | None:
        """The write of this database still in flight with the oldest transaction id: the one the change log's
        horizon waits for (see `committed_after`). None when there is none, or no horizon (one writer)."""

    @abc.abstractmethod
    async def is_a_change(self, cursor: Cursor) -> bool:
        """Whether a committed change has this cursor (whatever is still in flight before it)."""

    @abc.abstractmethod
    async def purged_through(self) -> Cursor:
        """The cursor of the last change removed by retention: anything at or before it is gone."""

    @abc.abstractmethod
    async def purge_changes(self, *, before_ms: int, limit: int) -> int:
        """Remove up to `limit` of the oldest changes made before `before_ms`; how many were removed."""

    @abc.abstractmethod
    async def state_cursor(self, name: str) -> Cursor: ...

    @abc.abstractmethod
    async def set_state_cursor(self, name: str, cursor: Cursor, *, holder: str) -> bool:
        """Move the cursor kept under `name`, if `holder` still holds its lease."""


class Grants(Protocol):
    """The grants of shares in the grantees' kept counts, taken out when the shares expire."""

    @abc.abstractmethod
    async def expired_grants(self, *, now: int, limit: int) -> Sequence[tuple[str, uuid.UUID, uuid.UUID]]:
        """Up to `limit` of the shares whose grants the kept counts still hold though they have expired by `now`:
        (shares' resource, share id, id of the record it shares)."""

    @abc.abstractmethod
    async def uncount_expired_grant(self, collection: Collection, share_id: uuid.UUID, *, now: int) -> bool:
        """Take an expired share's grants out of the kept counts; whether they were still in them. The caller holds
        the record it shares, exclusively, and the records shared through it."""


class Bookkeeping(Protocol):
    """What requests and duties keep beside the records: idempotency keys, stream tickets, leases."""

    @abc.abstractmethod
    async def take_lease(self, name: str, *, holder: str, now_ms: int, until_ms: int) -> bool:
        """Hold the lease `name` until `until_ms` when it is free, expired or already `holder`'s."""

    @abc.abstractmethod
    async def lapsed_leases(self, prefix: str, *, after: str, now_ms: int, limit: int) -> Sequence[str]:
        """Up to `limit` of the names after `after` that start with `prefix`, of leases that no one holds at `now_ms`
        (lapsed), in order."""

    @abc.abstractmethod
    async def drop_lease(self, name: str, *, now_ms: int) -> bool:
        """Remove the lease `name` if no one holds it at `now_ms`; whether it did."""

    @abc.abstractmethod
    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        """The response kept for this key, or None when the key is free and now held by this transaction.

        Raises IdempotencyInProgress while another transaction holds the key.
        """

    @abc.abstractmethod
    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None: ...

    @abc.abstractmethod
    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None: ...

    @abc.abstractmethod
    async def keep_ticket(self, ticket_hash: str, caller: bytes, *, expires_at_ms: int) -> None:
        """Keep a stream ticket (by its hash) for its caller until it expires."""

    @abc.abstractmethod
    async def take_ticket(self, ticket_hash: str, *, now_ms: int) -> bytes | None:
        """The caller of a ticket, which is gone once taken; None when there is no such ticket, or it expired."""

    @abc.abstractmethod
    async def purge_expired_tickets(self, *, now_ms: int, limit: int) -> None: ...


class Transaction(Records, ChangeLog, Grants, Bookkeeping, abc.ABC):
    """One database transaction, used as an async context manager: it begins on the first statement and
    commits when the block ends normally, rolls back when it raises. What it offers is four protocols, each of
    which a caller may ask for alone: Records, ChangeLog, Grants and Bookkeeping."""

    @abc.abstractmethod
    async def __aenter__(self) -> Transaction: ...

    @abc.abstractmethod
    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None: ...

    async def data_version(self) -> Hashable | None:
        """A value that changes whenever the stored records may have; None when there is no cheap one."""
        return None


class Store(abc.ABC):
    dialect: str

    @abc.abstractmethod
    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> Transaction:
        """A transaction that reads, or (with `write`) writes. `single`: a read of one statement, which needs no
        BEGIN and COMMIT around it where a statement alone sees one state of the data. With `caller`, it serves
        that caller's request: a read may then be answered by a read replica that has every write that caller
        was answered for and every write of a share naming one of their grantees, and a write tells the replicas'
        readers where that caller's reads must start. Without it a read is answered by the primary. (Whoever
        writes shares, the write tells where their grantees' reads must start.)"""

    async def read(self, collection: Collection, record_id: uuid.UUID, caller: Principal | None) -> Row | None:
        """One record by id, in a read of that one statement (`caller` as for `transaction`)."""
        async with self.transaction(write=False, single=True, caller=caller) as tx:
            return await tx.get(collection, record_id)

    def unread_data_version(self) -> Hashable | None:
        """A value that changes whenever a stored record may have, when the store can tell it without running a
        statement (SQLite asks its connection); None otherwise. Read it before whatever it is to vouch for."""
        return None

    @abc.abstractmethod
    async def schema_is_current(self) -> bool: ...

    @abc.abstractmethod
    def pool_figures(self) -> dict[str, int]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...
