"""The transaction logic both SQL stores run their statements with, and the statements of idempotency keys.

Statements are built once per collection and query shape (which conditions, how many values each has, the
sort) with named parameters, and reused: building and hashing a SQLAlchemy statement for every request costs
more than running it. Each store compiles each statement once for its database and runs it on its driver.
"""

from __future__ import annotations

import abc
import collections
import itertools
import random
import uuid
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any

import msgspec
import sqlalchemy as sa

from petrecords.db import head_revision
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import (
    Change,
    Collection,
    Condition,
    Cursor,
    Granting,
    Lock,
    NewChange,
    Operator,
    PageQuery,
    Principal,
    Row,
    SharedBy,
    ShareWindow,
    Store,
    StoredResponse,
    Transaction,
    Versions,
    Viewer,
    WriteInFlight,
)
from petrecords.store.changelog import (
    DROP_LAPSED_LEASE,
    PURGE_CHANGES,
    PURGED,
    SEEN_BY_SEPARATOR,
    SELECT_CHANGE_AT,
    SELECT_HISTORY_KEYS,
    SELECT_LAPSED_LEASES,
    SELECT_LAST_CHANGE,
    SELECT_STATE_CURSOR,
    SET_LEASED_CURSOR,
    Horizon,
    change_of,
    changes_after_select,
    changes_values,
    committed_after_select,
    count_after_select,
    count_history_statement,
    head_select,
    history_statement,
    kept_actions_statement,
    oldest_changes_select,
)
from petrecords.store.counts import PERIOD_KEY, PeriodKey, count_changes, period_changes
from petrecords.store.faults import DATABASE_ERRORS, raise_translated
from petrecords.store.grants import (
    EXPIRED_LISTINGS,
    IS_LISTED,
    LIST_EXPIRY,
    SHARED_GATHERING_COST,
    UNLIST_EXPIRY,
    PlanSizes,
    SharedCount,
    SizesKey,
    add_grant_changes,
    changed_keys,
    counted_grantees_select,
    expiry_listing,
    granted_times_select,
    grantee_scope,
    kept_sizes_select,
    kept_sizes_values,
    shared_condition,
    shared_count_scope,
    shared_count_select,
    shared_count_values,
)
from petrecords.store.pages import BLOCK, PageAnchors, SortKeyValues, seek_position, uniform_direction
from petrecords.store.queries import (
    TrigramSearch,
    bounded_count_statement,
    checked_by_unindexed_patterns,
    count_statement,
    list_statement,
    sort_directions,
    trigram_pattern,
)
from petrecords.store.records import (
    Statement,
    delete_statement,
    insert_statement,
    reader_of,
    record_values,
    referrers_statement,
    select_by_id,
    set_all_if_statement,
    set_if_statement,
    stored_uuid,
    table_reader,
    update_statement,
    values_of,
)
from petrecords.store.turns import LongReadTurns, Turn
from petrecords.tables import (
    ALL_OWNERS,
    idempotency_keys,
    stream_tickets,
)
from petrecords.values import now_ms

LOOKED_UP_EACH = {Operator.SHARED: Operator.SHARED_EACH, Operator.OWNED_OR_SHARED: Operator.OWNED_OR_SHARED_EACH}
"""The shared-list operators, and the form of each that walks a list's order (see SqlTransaction._shared_plan)."""

SEARCH_SCOPE_COUNTED_UP_TO = 100_000
"""How far the records a search's other conditions let through are counted when no kept count says how many
there are: beyond, the trigram index gives the candidates."""
LONG_READ_SCOPE = 10_000
"""A read that checks a pattern no index serves on at least this many records is a long read: it waits for a turn
(see store/turns.py)."""
SEARCH_SCANNED_AT_MOST = 10_000
"""Where a pattern's matches cannot be counted one at a time (PostgreSQL's GIN index gives them all at once), the
most records a search reads one by one rather than from the trigram index: a few milliseconds' work."""

_IDEMPOTENCY_KEY_IS = (idempotency_keys.c.caller == sa.bindparam("caller")) & (
    idempotency_keys.c.key == sa.bindparam("key")
)
SELECT_IDEMPOTENT_RESPONSE = sa.select(
    idempotency_keys.c.resource,
    idempotency_keys.c.request_hash,
    idempotency_keys.c.status,
    idempotency_keys.c.body,
    idempotency_keys.c.location,
    idempotency_keys.c.etag,
    idempotency_keys.c.expires_at,
).where(_IDEMPOTENCY_KEY_IS)
_EXPIRED_IDEMPOTENCY_KEYS = (
    sa.select(idempotency_keys.c.caller, idempotency_keys.c.key)
    .where(idempotency_keys.c.expires_at <= sa.bindparam("now_ms"))
    .limit(sa.bindparam("limit"))
)
PURGE_EXPIRED_IDEMPOTENCY_KEYS = sa.delete(idempotency_keys).where(
    sa.tuple_(idempotency_keys.c.caller, idempotency_keys.c.key).in_(_EXPIRED_IDEMPOTENCY_KEYS)
)

INSERT_TICKET = sa.insert(stream_tickets).values(values_of(stream_tickets))
# Taken and gone in one statement: of two that send the same ticket at once, one gets it.
TAKE_TICKET = (
    sa.delete(stream_tickets)
    .where(stream_tickets.c.ticket_hash == sa.bindparam("ticket_hash"))
    .returning(stream_tickets.c.caller, stream_tickets.c.expires_at)
)
PURGE_EXPIRED_TICKETS = sa.delete(stream_tickets).where(
    stream_tickets.c.ticket_hash.in_(
        sa.select(stream_tickets.c.ticket_hash)
        .where(stream_tickets.c.expires_at <= sa.bindparam("now_ms"))
        .limit(sa.bindparam("limit"))
    )
)

# Alembic's own table, which tables.py does not describe.
SCHEMA_VERSION = sa.select(sa.column("version_num", sa.String())).select_from(sa.table("alembic_version"))


def idempotency_upsert(insert: Callable[[sa.Table], Any]) -> sa.Insert:
    """Keep a response for a key, over an expired one kept before, with the dialect's INSERT … ON CONFLICT."""
    statement = insert(idempotency_keys).values(values_of(idempotency_keys))
    upsert: sa.Insert = statement.on_conflict_do_update(
        index_elements=[idempotency_keys.c.caller, idempotency_keys.c.key],
        set_={column.name: statement.excluded[column.name] for column in idempotency_keys.c if not column.primary_key},
    )
    return upsert


class SqlTransaction(Transaction):
    """The statements of one transaction; subclasses say how to run them.

    The transaction begins on its first statement, so that a request holds no connection (or, on SQLite, the
    process's connection) while it is still reading and checking its input. The kept counts a transaction
    changes are written last, in one fixed order, so that concurrent writers lock counter rows alike and
    cannot deadlock.
    """

    page_anchors: PageAnchors
    plan_sizes: PlanSizes
    trigram_search: TrigramSearch
    """How the database finds the candidates of a substring pattern (see TrigramSearch)."""
    probe_search: TrigramSearch | None
    """The trigram index that yields a pattern's matches one at a time, so that they can be counted up to a bound
    at the cost of that bound; None where there is none."""
    counter_slots = 1
    """Rows over which each kept count is spread (see tables.record_counts); a transaction writes its count changes
    in one of them, at random unless `change_count` chooses."""
    change_count: sa.Insert
    """The dialect's `count_upsert`."""
    change_period_count: sa.Insert
    """The dialect's `count_upsert` of tables.period_counts."""
    idempotency_insert: sa.Insert
    """The dialect's `idempotency_upsert`."""

    defers_writes = False
    """Whether writes wait for the transaction's next read or its commit, to go to the database together
    (see `_write_deferred`); else each runs when it is made."""

    def __init__(self, *, write: bool) -> None:
        self.write = write
        self.begun = False
        self._count_changes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._counted: set[tuple[str, str, str]] = set()
        self._period_changes: collections.Counter[PeriodKey] = collections.Counter()
        self._searches: dict[tuple[Condition, ...], TrigramSearch | None] = {}
        self._sizes: dict[SizesKey, dict[str, int]] = {}
        self._deferred: list[tuple[sa.ClauseElement, dict[str, Any] | Sequence[dict[str, Any]]]] = []
        self.long_read_turns: LongReadTurns | None = None
        """Where a long read of this transaction takes its turn; None: it takes none."""
        self._turn: Turn | None = None
        self._scoped: set[tuple[Condition, ...]] = set()
        self.regranted: set[str] = set()
        """The grantees of the shares this transaction wrote, as they were and as they are, and the owners of the
        records it wrote (a group's are read by each of its members, not only the writer): what they may read
        changes with its commit (see store/replicas.py)."""

    async def __aenter__(self) -> SqlTransaction:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        commit = exc_type is None
        try:
            if commit and self._counted:
                await self._write_counts()
            if commit and self._deferred:
                await self._write_deferred(last=True)
        except BaseException:
            commit = False
            raise
        finally:
            self._deferred.clear()
            turn, self._turn = self._turn, None
            try:
                if turn is not None:
                    turn.give_back(rest=self._turn_rests)
            finally:
                if self.begun:
                    self.begun = False
                    await self._end(commit=commit)

    @property
    def _turn_rests(self) -> bool:
        """Whether a long read's turn rests after this transaction (see store/turns.py): where it read from is
        where the rest spares cores."""
        return True

    async def _write_deferred(self, *, last: bool) -> None:
        """Run the deferred writes, in the order they were made. `last`: nothing follows them but the commit."""
        deferred, self._deferred = self._deferred, []
        for statement, rows in deferred:
            await self._execute_now(statement, rows)

    @abc.abstractmethod
    async def _begin(self) -> None: ...

    @abc.abstractmethod
    async def _end(self, *, commit: bool) -> None: ...

    @abc.abstractmethod
    async def fetch(self, statement: Statement) -> Sequence[Sequence[Any]]:
        """The rows of a query, as sequences of column values."""

    @abc.abstractmethod
    async def _execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        """Run a statement that returns no rows, once (with the given parameters), or once per row of them."""

    async def execute(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if self.defers_writes:
            self._deferred.append((statement, rows))
        else:
            await self._execute_now(statement, rows)

    async def _execute_now(self, statement: sa.ClauseElement, rows: dict[str, Any] | Sequence[dict[str, Any]]) -> None:
        if not self.begun:
            await self._begin()
            self.begun = True
        try:
            await self._execute(statement, rows)
        except DATABASE_ERRORS as exc:
            raise_translated(exc)

    async def lock(self, locks: Sequence[Lock]) -> None:
        """Nothing to do where there is one writer (SQLite): a write transaction holds the database."""

    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None:
        rows = await self.fetch((select_by_id(collection), {"record_id": record_id}))
        return reader_of(collection).row(rows[0]) if rows else None

    async def insert(self, collection: Collection, row: Row) -> None:
        await self.execute(insert_statement(collection), record_values(collection, row))
        await self._count(collection, (), [row], inserted=True)

    async def insert_many(self, collection: Collection, rows: Sequence[Row]) -> None:
        await self.execute(insert_statement(collection), [record_values(collection, row) for row in rows])
        await self._count(collection, (), rows, inserted=True)

    async def update(self, collection: Collection, row: Row, *, previous: Row) -> None:
        values = record_values(collection, row)
        values["record_id"] = values.pop("id")
        await self.execute(update_statement(collection), values)
        await self._count(collection, [previous], [row])

    async def delete(self, collection: Collection, row: Row) -> None:
        await self.execute(delete_statement(collection), {"record_id": row["id"]})
        await self._count(collection, [row], ())

    async def set_if(self, collection: Collection, record_id: uuid.UUID, *, expected: Row, values: Row) -> bool:
        statement = set_if_statement(collection, tuple(expected), tuple(values))
        parameters = {f"expected_{name}": value for name, value in expected.items()}
        parameters.update(values, record_id=record_id)
        return bool(await self.fetch((statement, parameters)))

    async def set_all_if(
        self, collection: Collection, record_ids: Sequence[uuid.UUID], *, expected: Row, values: Row
    ) -> set[uuid.UUID]:
        if not record_ids:
            return set()
        statement = set_all_if_statement(collection, len(record_ids), tuple(expected), tuple(values))
        parameters = {f"expected_{name}": value for name, value in expected.items()}
        parameters.update(values)
        parameters.update({f"record_id_{index}": record_id for index, record_id in enumerate(record_ids)})
        return {stored_uuid(row[0]) for row in await self.fetch((statement, parameters))}

    async def referrers(self, collection: Collection, column: str, record_id: uuid.UUID) -> Sequence[Row]:
        rows = await self.fetch((referrers_statement(collection, column, exists=False), {"record_id": record_id}))
        reader = table_reader(collection.table)
        return [reader.row(row) for row in rows]

    async def has_referrer(self, collection: Collection, column: str, record_id: uuid.UUID) -> bool:
        return bool(await self.fetch((referrers_statement(collection, column, exists=True), {"record_id": record_id})))

    async def _count(
        self, collection: Collection, removed: Sequence[Row], added: Sequence[Row], *, inserted: bool = False
    ) -> None:
        changes = count_changes(collection, removed, added)
        if collection.owner_column is not None:
            self.regranted.update(row[collection.owner_column] for row in (*removed, *added))
        self._count_changes.update(changes)
        self._counted.update(changes)
        if collection.counted_over is not None:
            self._period_changes.update(period_changes(collection, removed, added))
        shared_by = collection.shared_by
        # A record just made, shared through itself (a pet), has no share yet.
        if shared_by is not None and not (inserted and shared_by.key_column == "id"):
            await self._count_shared(collection, shared_by, removed, added)
        if collection.granting is not None:
            await self._count_granted(collection, collection.granting, removed, added)

    async def _count_shared(
        self, collection: Collection, shared_by: SharedBy, removed: Sequence[Row], added: Sequence[Row]
    ) -> None:
        """A shared record's write, for the grantees whose counts hold what is shared through its key."""
        grantees: dict[Any, list[str]] = {}
        for key, time, sign in changed_keys(collection, removed, added):
            if key not in grantees:
                rows = await self.fetch((counted_grantees_select(shared_by), {"key": key}))
                grantees[key] = [row[0] for row in rows]
            for grantee in grantees[key]:
                add_grant_changes(self._count_changes, self._period_changes, collection, grantee, (time,), sign)
                self._counted.add((collection.name, grantee_scope(grantee), ""))

    async def _count_granted(
        self, collection: Collection, granting: Granting, removed: Sequence[Row], added: Sequence[Row]
    ) -> None:
        """A share's write: its grants out of its grantee's counts as it was, and in as it is while its expiry is in
        the future; its listing in tables.grant_expiries with them."""
        self.regranted.update(row[granting.grantee_column] for row in (*removed, *added))
        for row in removed:
            listed = row[granting.expires_column] is not None and bool(
                await self.fetch((IS_LISTED, {"share_id": row["id"]}))
            )
            if row[granting.expires_column] is None or listed:
                await self._grant(granting, row, -1)
            if listed:
                await self.execute(UNLIST_EXPIRY, {"share_id": row["id"]})
        now = now_ms()
        for row in added:
            expires = row[granting.expires_column]
            if expires is None or expires > now:
                await self._grant(granting, row, 1)
                if expires is not None:
                    await self.execute(LIST_EXPIRY, expiry_listing(collection, row))

    async def _grant(self, granting: Granting, share: Row, sign: int) -> None:
        grantee = share[granting.grantee_column]
        for granted in granting.granted:
            rows = await self.fetch((granted_times_select(granted), {"target": share[granting.target_column]}))
            add_grant_changes(
                self._count_changes, self._period_changes, granted, grantee, (row[0] for row in rows), sign
            )
            self._counted.add((granted.name, grantee_scope(grantee), ""))

    async def uncount_expired_grant(self, collection: Collection, share_id: uuid.UUID, *, now: int) -> bool:
        """Take an expired share's grants out of its grantee's counts, and it out of tables.grant_expiries, if it is
        still listed there; whether it was. The caller holds what the share shares (see store/grants.py)."""
        granting = collection.granting
        if granting is None:
            raise TypeError(f"{collection.name} records are no shares")
        share = await self.get(collection, share_id)
        listed = share is not None and bool(await self.fetch((IS_LISTED, {"share_id": share_id})))
        if share is None or not listed:
            # A listing outlives its share only if the share went without the store (never): it goes too.
            await self.execute(UNLIST_EXPIRY, {"share_id": share_id})
            return False
        expires = share[granting.expires_column]
        if expires is not None and expires > now:
            return False
        await self._grant(granting, share, -1)
        await self.execute(UNLIST_EXPIRY, {"share_id": share_id})
        return True

    async def expired_grants(self, *, now: int, limit: int) -> Sequence[tuple[str, uuid.UUID, uuid.UUID]]:
        """Up to `limit` of the listed shares that have expired by `now`: (resource, share id, target id)."""
        rows = await self.fetch((EXPIRED_LISTINGS, {"now": now, "limit": limit}))
        return [(row[1], stored_uuid(row[0]), stored_uuid(row[2])) for row in rows]

    async def _write_counts(self) -> None:
        slot = random.randrange(self.counter_slots)  # noqa: S311 - spreads lock contention, not a secret
        keys = sorted(key for key in self._counted if self._count_changes[key] or key[1] == ALL_OWNERS)
        rows = [
            {
                "resource": resource,
                "scope": scope,
                "partition": partition,
                "slot": slot,
                "count": self._count_changes[(resource, scope, partition)],
                "writes": 0,
            }
            for resource, scope, partition in keys
        ]
        # The transaction counts itself once, in its first every-owner row: the data's version moves. (A
        # transaction that only moves grants, the expiry duty's, changes no record.)
        first = next((row for row in rows if row["scope"] == ALL_OWNERS), None)
        if first is not None:
            first["writes"] = 1
        self._count_changes.clear()
        self._counted.clear()
        await self.execute(self.change_count, rows)
        # After record_counts, in the order of their keys, as every transaction writes them: none waits for a row
        # that a transaction holds while it waits for one of this one's.
        periods = sorted(key for key, change in self._period_changes.items() if change)
        if periods:
            changes = self._period_changes
            period_rows = [dict(zip(PERIOD_KEY, key, strict=True), slot=slot, count=changes[key]) for key in periods]
            await self.execute(self.change_period_count, period_rows)
        self._period_changes.clear()

    async def count(self, collection: Collection, conditions: tuple[Condition, ...]) -> int:
        conditions, owners_total = await self._own_unless_shared(collection, conditions)
        if owners_total is not None and len(conditions) == 1:
            return owners_total
        shared = shared_count_scope(collection, conditions)
        if shared is not None:
            return await self._count_shared_with(collection, shared)
        search = await self._search(collection, conditions)
        counted = self.count_long_read if self._turn is not None else self.count_at_once
        return await counted(collection, conditions, search)

    async def count_at_once(
        self, collection: Collection, conditions: tuple[Condition, ...], search: TrigramSearch | None
    ) -> int:
        return int((await self.fetch(count_statement(collection, conditions, search=search)))[0][0])

    async def count_long_read(
        self, collection: Collection, conditions: tuple[Condition, ...], search: TrigramSearch | None
    ) -> int:
        """The count of a long read, which holds a turn: here in one statement; a store may count in slices."""
        return await self.count_at_once(collection, conditions, search)

    async def _count_shared_with(self, collection: Collection, shared: SharedCount) -> int:
        """From the grantees' kept counts (see store/grants.py). The grantee whose counts hold the most comes first:
        what the others share too is looked up share by share. Every grantee stays in the statement, whatever the
        sizes read before it (on PostgreSQL another snapshot) say: the order only sets its cost."""
        order = list(shared.grantees)
        if len(order) > 1:
            sizes = await self._kept_sizes(collection, shared.grantees, owned=shared.with_own)
            order.sort(key=lambda name: -sizes.get(grantee_scope(name), 0))
        statement = shared_count_select(
            collection,
            len(order),
            below=shared.below is not None,
            at_least=shared.at_least is not None,
            with_own=shared.with_own,
        )
        return int((await self.fetch((statement, shared_count_values(collection, shared, order))))[0][0])

    async def _kept_sizes(
        self, collection: Collection, grantees: tuple[str, ...], *, owned: bool, fresh: bool = False
    ) -> dict[str, int]:
        """How many records each grantee's kept counts hold, by scope, each grantee's as an owner (their scope, when
        `owned`: the caller's keys) and every owner's (ALL_OWNERS): read once for a page and its total. Unless
        `fresh`, as the store's lists read them a moment ago, if they did (see grants.PlanSizes): for choosing a
        plan."""
        key = (collection.name, owned, grantees)
        if key in self._sizes:
            return self._sizes[key]
        if not fresh and (remembered := self.plan_sizes.get(key)) is not None:
            return remembered
        values = kept_sizes_values(collection, grantees, owned=owned)
        statement = (kept_sizes_select(len(grantees), owned=owned), values)
        sizes = self._sizes[key] = {row[0]: int(row[1]) for row in await self.fetch(statement)}
        self.plan_sizes.put(key, sizes)
        return sizes

    async def _search(self, collection: Collection, conditions: tuple[Condition, ...]) -> TrigramSearch | None:
        """Where a substring search reads its candidates: from the trigram index (the pattern's matches among all
        records, whoever may see them) or from the records the other conditions let through (for most callers,
        the ones they may see), so that a search costs in proportion to what the caller may see, not to the
        matches among records they may not: the pattern's matches are counted only as far as those records go
        (SQLite), or those records are read one by one when they are few (PostgreSQL)."""
        await self._turn_if_long(collection, conditions)
        pattern = trigram_pattern(collection, conditions)
        others = conditions[:pattern] + conditions[pattern + 1 :] if pattern is not None else ()
        if pattern is None or not others:
            return self.trigram_search
        if conditions in self._searches:
            return self._searches[conditions]
        if self.probe_search is None:
            # No index yields a pattern's matches one at a time: the other conditions' records are read when they
            # are few enough for that to be quick.
            scope = await self._count_up_to(collection, others, SEARCH_SCANNED_AT_MOST, search=None)
            search = self.trigram_search if scope >= SEARCH_SCANNED_AT_MOST else None
        else:
            scope = await self._count_up_to(collection, others, SEARCH_SCOPE_COUNTED_UP_TO, search=None)
            matches = await self._count_up_to(collection, (conditions[pattern],), scope, search=self.probe_search)
            search = self.trigram_search if matches < scope or scope >= SEARCH_SCOPE_COUNTED_UP_TO else None
        self._searches[conditions] = search
        return search

    async def _turn_if_long(self, collection: Collection, conditions: tuple[Condition, ...]) -> None:
        """Wait for a long read's turn, held to the end of the transaction, when these conditions check a pattern
        that no index serves on LONG_READ_SCOPE records or more."""
        if self.long_read_turns is None or self._turn is not None or conditions in self._scoped:
            return
        others = checked_by_unindexed_patterns(collection, conditions)
        if len(others) == len(conditions):
            return
        self._scoped.add(conditions)
        if await self._count_up_to(collection, others, LONG_READ_SCOPE, search=None) >= LONG_READ_SCOPE:
            self._turn = await self.long_read_turns.take()

    async def _count_up_to(
        self, collection: Collection, conditions: tuple[Condition, ...], bound: int, *, search: TrigramSearch | None
    ) -> int:
        statement = bounded_count_statement(collection, conditions, bound, search=search)
        return int((await self.fetch(statement))[0][0])

    async def list(self, collection: Collection, query: PageQuery) -> Sequence[Row]:
        after_key = None
        # Planned first: a deep page's anchors read the list as its page does.
        conditions, _ = await self._own_unless_shared(collection, query.conditions)
        query = msgspec.structs.replace(query, conditions=conditions)
        query = await self._shared_plan(collection, query)
        # Anchors are row values, which a null in a sort column would compare as unknown: such a sort steps over.
        anchored = uniform_direction(sort_directions(collection, query)) and not any(k.nullable for k in query.sort)
        if query.offset >= BLOCK and anchored:
            version = await self.data_version()
            if version is not None:
                anchors = self.page_anchors.of(version, (collection.name, query.conditions, query.sort))
                after_key, remaining = await seek_position(
                    anchors, query.offset, partial(self._key_at, collection, query)
                )
                query = msgspec.structs.replace(query, offset=remaining)
        reader = reader_of(collection)
        search = await self._search(collection, query.conditions)
        statement = list_statement(collection, query, after_key=after_key, search=search)
        return [reader.row(row) for row in await self.fetch(statement)]

    async def _own_unless_shared(
        self, collection: Collection, conditions: tuple[Condition, ...]
    ) -> tuple[tuple[Condition, ...], int | None]:
        """The conditions, with the caller's own records or those shared with them read as their own records alone
        when the grantees' kept counts hold none of this collection, and then how many records the owner's kept
        counts hold (else None). (They hold shares that have expired until they are taken out: then the shares
        decide.) One read of the kept sizes, which the list's plan and its total read too, instead of a lookup in
        the shares."""
        index = next((i for i, c in enumerate(conditions) if c.operator is Operator.OWNED_OR_SHARED), None)
        if index is None or collection.shared_by is None:
            return conditions, None
        condition = conditions[index]
        shared = shared_condition(condition)
        if shared is None or not shared.owned or not shared.grantees:
            return conditions, None
        for fresh in (False, True):
            sizes = await self._kept_sizes(collection, shared.grantees, owned=True, fresh=fresh)
            if any(sizes.get(grantee_scope(name), 0) for name in shared.grantees):
                return conditions, None
        # The caller's keys as owners: one (a caller in no group) is an equality, which the kept counts answer.
        owners = shared.grantees
        own = Condition(condition.columns[:1], Operator.EQUAL if len(owners) == 1 else Operator.IN, owners)
        return (*conditions[:index], own, *conditions[index + 1 :]), sum(sizes.get(name, 0) for name in owners)

    async def _shared_plan(self, collection: Collection, query: PageQuery) -> PageQuery:
        """How a page of what is shared with a caller (and, without `access`, their own) reads: gathering every
        record it holds (and sorting them), or walking the list's order and looking each record up in the shares,
        whichever reads fewer rows by the kept counts. SQLite, left to choose, gathers: 40 ms a page for a clinic
        with 47,000 patients, 80 ms with the vet's own."""
        condition = next((c for c in query.conditions if c.operator in LOOKED_UP_EACH), None)
        shared = shared_condition(condition) if condition is not None else None
        if condition is None or shared is None or not shared.grantees:
            return query
        sizes = await self._kept_sizes(collection, shared.grantees, owned=shared.owned)
        held = sum(sizes.get(grantee_scope(name), 0) for name in shared.grantees)
        if shared.owned:
            held += sum(sizes.get(name, 0) for name in shared.grantees)
        every_count = sizes.get(ALL_OWNERS, 0)
        walked = (query.offset + query.limit) * every_count / max(held, 1)
        if walked > SHARED_GATHERING_COST * held:
            return query
        each = LOOKED_UP_EACH[condition.operator]
        conditions = tuple(msgspec.structs.replace(c, operator=each) if c is condition else c for c in query.conditions)
        return msgspec.structs.replace(query, conditions=conditions)

    async def _key_at(
        self, collection: Collection, query: PageQuery, after_key: SortKeyValues | None, skip: int
    ) -> SortKeyValues | None:
        one_row = msgspec.structs.replace(query, limit=1, offset=skip)
        search = await self._search(collection, query.conditions)
        statement = list_statement(collection, one_row, keys_only=True, after_key=after_key, search=search)
        rows = await self.fetch(statement)
        return tuple(rows[0]) if rows else None

    async def data_version(self) -> Hashable | None:
        """A value that changes whenever the stored records may have; None when there is no cheap one."""
        return None

    # --- the change log ---------------------------------------------------------------------------------

    horizon: Horizon
    change_insert: sa.Insert
    changes_seen_by_statement: sa.Select[Any]
    """`changes_seen_by_select` in the dialect's form."""
    state_upserts: tuple[sa.Insert, sa.Insert]

    window_statements: tuple[sa.Update, sa.Insert]
    """`changelog.window_statements` at the dialect's cursor of the change just kept."""
    shared_at_statement: sa.Select[Any]
    dialect_name: str

    async def record_change(self, change: NewChange, window: ShareWindow | None = None) -> None:
        values = msgspec.structs.asdict(change)
        await self.execute(self.change_insert, values)
        if window is not None:
            # Right after the change: they take its cursor from the database, as the log gave it.
            close, open_ = self.window_statements
            await self.execute(close, {"share_id": window.share_id})
            if window.opens:
                opened = {
                    "share_id": window.share_id,
                    "grantee": window.grantee,
                    "shared_key": window.shared_key,
                    "expires_at": window.expires_at,
                }
                await self.execute(open_, opened)

    async def record_changes(self, changes: Sequence[NewChange]) -> None:
        if changes:
            await self.execute(self.change_insert, [msgspec.structs.asdict(change) for change in changes])

    async def shared_at(self, shared_key: uuid.UUID, grantees: tuple[str, ...], cursor: Cursor, at: int) -> bool:
        values = {
            "shared_key": shared_key,
            "grantees": self.readers_value(grantees),
            "xid": cursor[0],
            "position": cursor[1],
            "at": at,
        }
        return bool(await self.fetch((self.shared_at_statement, values)))

    async def history(
        self, resource: str, record_id: uuid.UUID, *, limit: int, offset: int, versions: Versions | None = None
    ) -> Sequence[Change]:
        statement = history_statement(resource, record_id, versions, limit=limit, offset=offset)
        return [change_of(row) for row in await self.fetch(statement)]

    async def count_history(self, resource: str, record_id: uuid.UUID, *, versions: Versions | None = None) -> int:
        return int((await self.fetch(count_history_statement(resource, record_id, versions)))[0][0])

    async def history_keys(self, resource: str, record_id: uuid.UUID) -> Sequence[uuid.UUID]:
        rows = await self.fetch((SELECT_HISTORY_KEYS, {"resource": resource, "record_id": record_id}))
        return [stored_uuid(row[0]) for row in rows]

    async def last_change(self, resource: str, record_id: uuid.UUID) -> Change | None:
        rows = await self.fetch((SELECT_LAST_CHANGE, {"resource": resource, "record_id": record_id}))
        return change_of(rows[0]) if rows else None

    async def kept_actions(
        self, resource: str, record_ids: Sequence[uuid.UUID], actions: tuple[str, ...]
    ) -> set[tuple[uuid.UUID, str, int]]:
        if not record_ids:
            return set()
        rows = await self.fetch(kept_actions_statement(resource, record_ids, actions))
        return {(stored_uuid(row[0]), row[1], row[2]) for row in rows}

    async def changes_after(
        self, cursor: Cursor, *, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> Sequence[Change]:
        statement = changes_after_select(
            self.horizon,
            by_reader=reader is not None,
            resources=None if resources is None else len(resources),
            dialect=self.dialect_name,
            owners=1 if reader is None else len(reader.grantees),
        )
        values = self.changes_values(cursor, limit, reader, resources)
        return [change_of(row) for row in await self.fetch((statement, values))]

    def changes_values(
        self, cursor: Cursor, limit: int, reader: Viewer | None, resources: tuple[str, ...] | None
    ) -> dict[str, Any]:
        grantees = None if reader is None else self.readers_value(reader.grantees)
        return changes_values(cursor, limit, reader, resources, grantees)

    async def changes_seen_by(
        self, cursor: Cursor, *, through: Cursor, readers: Sequence[str], limit: int
    ) -> Sequence[Change]:
        values = {
            "after_xid": cursor[0],
            "after_position": cursor[1],
            "through_xid": through[0],
            "through_position": through[1],
            "readers": self.readers_value(readers),
            "limit": limit,
        }
        rows = await self.fetch((self.changes_seen_by_statement, values))
        return [change_of(row, tuple(row[13].split(SEEN_BY_SEPARATOR)) if row[13] is not None else ()) for row in rows]

    @staticmethod
    def readers_value(readers: Sequence[str]) -> Any:
        """A list of callers as `changes_seen_by_statement` takes it."""
        raise NotImplementedError

    async def head_cursor(self) -> Cursor:
        rows = await self.fetch((head_select(self.horizon), {}))
        return max(((row[0], row[1]) for row in rows), default=(0, 0))

    async def committed_after(self, cursor: Cursor, *, limit: int) -> Sequence[Cursor]:
        values = {"after_xid": cursor[0], "after_position": cursor[1], "limit": limit}
        return [(row[0], row[1]) for row in await self.fetch((committed_after_select(self.horizon), values))]

    async def count_changes_after(self, cursor: Cursor) -> int:
        values = {"after_xid": cursor[0], "after_position": cursor[1]}
        return int((await self.fetch((count_after_select(self.horizon), values)))[0][0])

    async def oldest_write_in_flight(self) -> WriteInFlight | None:
        return None  # one writer (SQLite): the log has no horizon to wait for anything

    async def is_a_change(self, cursor: Cursor) -> bool:
        # One point of the (xid, position) index, not bounded by the horizon: a transaction still in flight
        # (of another database, on PostgreSQL, that the horizon cannot tell apart) must not unmake a cursor.
        return bool(await self.fetch((SELECT_CHANGE_AT, {"xid": cursor[0], "position": cursor[1]})))

    async def purged_through(self) -> Cursor:
        return await self.state_cursor(PURGED)

    async def state_cursor(self, name: str) -> Cursor:
        rows = await self.fetch((SELECT_STATE_CURSOR, {"name": name}))
        return (rows[0][0], rows[0][1]) if rows else (0, 0)

    async def purge_changes(self, *, before_ms: int, limit: int) -> int:
        oldest = await self.fetch((oldest_changes_select(self.horizon), {"limit": limit}))
        expired = list(itertools.takewhile(lambda row: row[2] < before_ms, oldest))
        if not expired:
            return 0
        through = (expired[-1][0], expired[-1][1])
        await self.execute(PURGE_CHANGES, {"through_xid": through[0], "through_position": through[1]})
        await self.execute(self.state_upserts[0], {"name": PURGED, "xid": through[0], "position": through[1]})
        return len(expired)

    async def take_lease(self, name: str, *, holder: str, now_ms: int, until_ms: int) -> bool:
        values = {"name": name, "holder": holder, "until": until_ms, "now": now_ms}
        return bool(await self.fetch((self.state_upserts[1], values)))

    async def lapsed_leases(self, prefix: str, *, after: str, now_ms: int, limit: int) -> Sequence[str]:
        pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        values = {"pattern": pattern, "after": after, "now": now_ms, "limit": limit}
        return [row[0] for row in await self.fetch((SELECT_LAPSED_LEASES, values))]

    async def drop_lease(self, name: str, *, now_ms: int) -> bool:
        return bool(await self.fetch((DROP_LAPSED_LEASE, {"name": name, "now": now_ms})))

    async def set_state_cursor(self, name: str, cursor: Cursor, *, holder: str) -> bool:
        values = {"name": name, "holder": holder, "xid": cursor[0], "position": cursor[1]}
        return bool(await self.fetch((SET_LEASED_CURSOR, values)))

    async def _hold_idempotency_key(self, caller: str, key: str) -> None:
        """Make concurrent holders of the same key exclusive; the default relies on a single writer."""

    async def claim_idempotency_key(self, caller: str, key: str, *, now_ms: int) -> StoredResponse | None:
        await self._hold_idempotency_key(caller, key)
        held = {"caller": caller, "key": key}
        rows = await self.fetch((SELECT_IDEMPOTENT_RESPONSE, held))
        if not rows:
            return None
        resource, request_hash, status, body, location, etag, expires_at = rows[0]
        if expires_at <= now_ms:
            # Free again, and replaced when the new response is kept. Not deleted here: that would be a write
            # before the request has taken the locks of what it writes (see Transaction.lock).
            return None
        return StoredResponse(
            resource=resource, request_hash=request_hash, status=status, body=bytes(body), location=location, etag=etag
        )

    async def save_idempotent_response(
        self, caller: str, key: str, response: StoredResponse, *, expires_at_ms: int
    ) -> None:
        await self.execute(
            self.idempotency_insert,
            {
                "caller": caller,
                "key": key,
                "resource": response.resource,
                "request_hash": response.request_hash,
                "status": response.status,
                "body": response.body,
                "location": response.location,
                "etag": response.etag,
                "expires_at": expires_at_ms,
            },
        )

    async def purge_expired_idempotency_keys(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_IDEMPOTENCY_KEYS, {"now_ms": now_ms, "limit": limit})

    async def keep_ticket(self, ticket_hash: str, caller: bytes, *, expires_at_ms: int) -> None:
        await self.execute(INSERT_TICKET, {"ticket_hash": ticket_hash, "caller": caller, "expires_at": expires_at_ms})

    async def take_ticket(self, ticket_hash: str, *, now_ms: int) -> bytes | None:
        rows = await self.fetch((TAKE_TICKET, {"ticket_hash": ticket_hash}))
        if not rows:
            return None
        caller, expires_at = rows[0]
        return bytes(caller) if expires_at > now_ms else None

    async def purge_expired_tickets(self, *, now_ms: int, limit: int) -> None:
        await self.execute(PURGE_EXPIRED_TICKETS, {"now_ms": now_ms, "limit": limit})


class SqlStore(Store):
    """What both SQL stores share: readiness means the database answers and its schema is at head."""

    def __init__(self) -> None:
        self.head = head_revision()
        """The schema revision this version of the service runs on."""
        self.long_read_turns: LongReadTurns | None = None
        """Where long reads take their turns (see store/turns.py); None: they take none."""
        self.long_read_share = 1.0
        """The share of a database core that each turn's long reads may take (see store/turns.py): the whole, but
        where the store rests them."""

    @property
    @abc.abstractmethod
    def read_connections(self) -> int:
        """Connections a process reads through at once (besides lookups by id)."""

    async def schema_is_current(self) -> bool:
        try:
            async with self.transaction(write=False) as tx:
                rows = await tx.fetch((SCHEMA_VERSION, {}))
        except (DatabaseUnavailable, *DATABASE_ERRORS):
            return False
        return bool(rows) and rows[0][0] == self.head

    @abc.abstractmethod
    def transaction(self, *, write: bool, single: bool = False, caller: Principal | None = None) -> SqlTransaction: ...
