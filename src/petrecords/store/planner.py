"""The list planner: how a list's page and its total read (gathered or walked, the owner's kept counts or the
shares, where a search reads its candidates, whether it is a long read), from the kept counts."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence
from functools import partial

import msgspec

from petrecords.store.base import Collection, Condition, Operator, PageQuery, Row
from petrecords.store.grants import (
    SHARED_GATHERING_COST,
    PlanSizes,
    SharedCount,
    SizesKey,
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
from petrecords.store.records import reader_of
from petrecords.store.runner import Runner
from petrecords.tables import ALL_OWNERS

LOOKED_UP_EACH = {Operator.SHARED: Operator.SHARED_EACH, Operator.OWNED_OR_SHARED: Operator.OWNED_OR_SHARED_EACH}
"""The shared-list operators, and the form of each that walks a list's order (see Plan.each)."""

SEARCH_SCOPE_COUNTED_UP_TO = 100_000
"""How far the records a search's other conditions let through are counted when no kept count says how many
there are: beyond, the trigram index gives the candidates."""
LONG_READ_SCOPE = 10_000
"""A read that checks a pattern no index serves on at least this many records is a long read: it waits for a turn
(see store/turns.py)."""
SEARCH_SCANNED_AT_MOST = 10_000
"""Where a pattern's matches cannot be counted one at a time (PostgreSQL's GIN index gives them all at once), the
most records a search reads one by one rather than from the trigram index: a few milliseconds' work."""


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a page of a list reads, each choice a field (PostgREST's `Plan` is the model), made by
    `ListPlanner.plan` from the kept counts; `read` is the query as the list's statement takes it."""

    query: PageQuery
    """The list's query, with the caller's own records or those shared with them read as their own alone where the
    grantees' kept counts hold none of the collection (see ListPlanner._own_unless_shared); from a deep page's
    anchor, the offset after it."""
    each: bool = False
    """Walk the list's order and look each record up in the shares, rather than gather every record shared
    (see ListPlanner._walks_shared)."""
    after_key: SortKeyValues | None = None
    """The sort key of the anchor the page is read after (see store/pages.py), if any."""
    search: TrigramSearch | None = None
    """Where a substring search reads its candidates (see ListPlanner._search)."""

    @property
    def read(self) -> PageQuery:
        """The query with the plan's choices in it: with `each`, the shared condition in its form that is looked
        up for each record (LOOKED_UP_EACH), which is how the statement is told."""
        if not self.each:
            return self.query
        condition = next((c for c in self.query.conditions if c.operator in LOOKED_UP_EACH), None)
        if condition is None:
            return self.query
        each = LOOKED_UP_EACH[condition.operator]
        conditions = tuple(
            msgspec.structs.replace(c, operator=each) if c is condition else c for c in self.query.conditions
        )
        return msgspec.structs.replace(self.query, conditions=conditions)


class ListPlanner(Runner):
    """Counts and pages of lists, planned from the kept counts; a part of SqlTransaction."""

    page_anchors: PageAnchors
    plan_sizes: PlanSizes
    trigram_search: TrigramSearch
    """How the database finds the candidates of a substring pattern (see TrigramSearch)."""
    probe_search: TrigramSearch | None
    """The trigram index that yields a pattern's matches one at a time, so that they can be counted up to a bound
    at the cost of that bound; None where there is none."""

    def __init__(self) -> None:
        super().__init__()
        self._searches: dict[tuple[Condition, ...], TrigramSearch | None] = {}
        self._sizes: dict[SizesKey, dict[str, int]] = {}
        self._scoped: set[tuple[Condition, ...]] = set()

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
        plan = await self.plan(collection, query)
        statement = list_statement(collection, plan.read, after_key=plan.after_key, search=plan.search)
        reader = reader_of(collection)
        return [reader.row(row) for row in await self.fetch(statement)]

    async def plan(self, collection: Collection, query: PageQuery) -> Plan:
        """How a page of a list reads: each choice made from the kept counts, in this order (a deep page's anchors
        read the list as its page does)."""
        conditions, _ = await self._own_unless_shared(collection, query.conditions)
        plan = Plan(msgspec.structs.replace(query, conditions=conditions))
        plan = dataclasses.replace(plan, each=await self._walks_shared(collection, plan.query))
        read = plan.read
        # Anchors are row values, which a null in a sort column would compare as unknown: such a sort steps over.
        anchored = uniform_direction(sort_directions(collection, read)) and not any(k.nullable for k in read.sort)
        if read.offset >= BLOCK and anchored:
            version = await self.data_version()
            if version is not None:
                anchors = self.page_anchors.of(version, (collection.name, read.conditions, read.sort))
                after_key, remaining = await seek_position(
                    anchors, read.offset, partial(self._key_at, collection, read)
                )
                query = msgspec.structs.replace(plan.query, offset=remaining)
                plan = dataclasses.replace(plan, query=query, after_key=after_key)
        return dataclasses.replace(plan, search=await self._search(collection, plan.read.conditions))

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

    async def _walks_shared(self, collection: Collection, query: PageQuery) -> bool:
        """Whether a page of what is shared with a caller (and, without `access`, their own) reads by walking the
        list's order and looking each record up in the shares, rather than gathering every record it holds (and
        sorting them): whichever reads fewer rows by the kept counts. SQLite, left to choose, gathers: 40 ms a page
        for a clinic with 47,000 patients, 80 ms with the vet's own."""
        condition = next((c for c in query.conditions if c.operator in LOOKED_UP_EACH), None)
        shared = shared_condition(condition) if condition is not None else None
        if condition is None or shared is None or not shared.grantees:
            return False
        sizes = await self._kept_sizes(collection, shared.grantees, owned=shared.owned)
        held = sum(sizes.get(grantee_scope(name), 0) for name in shared.grantees)
        if shared.owned:
            held += sum(sizes.get(name, 0) for name in shared.grantees)
        every_count = sizes.get(ALL_OWNERS, 0)
        walked = (query.offset + query.limit) * every_count / max(held, 1)
        return walked <= SHARED_GATHERING_COST * held

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
