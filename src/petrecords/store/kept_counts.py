"""The kept counts a transaction's writes move (each owner's records, by period, each grantee's), written last in
one fixed order; and the grants taken out of them when shares expire."""

from __future__ import annotations

import abc
import collections
import random
import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from petrecords.store.base import Collection, Granting, Row, SharedBy
from petrecords.store.counts import PERIOD_KEY, PeriodKey, count_changes, period_changes
from petrecords.store.grants import (
    EXPIRED_LISTINGS,
    IS_LISTED,
    LIST_EXPIRY,
    UNLIST_EXPIRY,
    add_grant_changes,
    changed_keys,
    counted_grantees_select,
    expiry_listing,
    granted_times_select,
    grantee_scope,
)
from petrecords.store.records import stored_uuid
from petrecords.store.runner import Runner
from petrecords.tables import ALL_OWNERS
from petrecords.values import now_ms


class KeptCounts(Runner):
    """The bookkeeping of counts and grants; a part of SqlTransaction."""

    counter_slots = 1
    """Rows over which each kept count is spread (see tables.record_counts); a transaction writes its count changes
    in one of them, at random unless `change_count` chooses."""
    change_count: sa.Insert
    """The dialect's `count_upsert`."""
    change_period_count: sa.Insert
    """The dialect's `count_upsert` of tables.period_counts."""

    def __init__(self) -> None:
        super().__init__()
        self._count_changes: collections.Counter[tuple[str, str, str]] = collections.Counter()
        self._counted: set[tuple[str, str, str]] = set()
        self._period_changes: collections.Counter[PeriodKey] = collections.Counter()
        self.regranted: set[str] = set()
        """The grantees of the shares this transaction wrote, as they were and as they are, and the owners of the
        records it wrote (a group's are read by each of its members, not only the writer): what they may read
        changes with its commit (see store/replicas.py)."""

    @abc.abstractmethod
    async def get(self, collection: Collection, record_id: uuid.UUID) -> Row | None: ...

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
