"""Shares over time: the grants of expired shares taken out of the grantees' kept counts, and the duty that does it."""

from __future__ import annotations

import asyncio

from petrecords.duties import StoreLookup, every
from petrecords.metrics import Metrics
from petrecords.resources.declaration import ResourceSet
from petrecords.resources.locks import hold, hold_shared_through, own_lock
from petrecords.store.base import (
    Store,
)
from petrecords.values import now_ms


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
            await hold(tx, [own_lock(resources, shared, target)])
            await hold_shared_through(tx=tx, resources=resources, shares=shares, target=target)
            await tx.uncount_expired_grant(shares.collection, share_id, now=now)
    return len(expired)


class GrantExpiry:
    """Takes the grants of expired shares out of the grantees' kept counts, once a second, in small batches (each
    share in a short transaction of its own). Counts are exact without it (they subtract what has expired since);
    it keeps that part of them small. Instances may do it at once: each share's is done once."""

    INTERVAL_SECONDS = 1.0
    BATCH = 100

    def __init__(self, store: StoreLookup, *, resources: ResourceSet, metrics: Metrics) -> None:
        self._store = store
        self._resources = resources
        self._metrics = metrics

    async def run(self) -> None:
        await every(
            self.INTERVAL_SECONDS, self.expire, self._metrics, "grant-expiry", "taking expired shares out of the counts"
        )

    async def expire(self, *, now: int | None = None) -> int:
        """How many expired shares were taken out of the counts."""
        store = self._store()
        if store is None:
            return 0
        now = now_ms() if now is None else now
        done = 0
        while True:
            batch = await expire_grants(store=store, resources=self._resources, now=now, limit=self.BATCH)
            done += batch
            if batch < self.BATCH:
                return done
            await asyncio.sleep(0)  # let requests in between batches
