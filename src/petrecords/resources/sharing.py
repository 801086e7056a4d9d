"""Shares over time: the grants of expired shares taken out of the grantees' kept counts."""

from __future__ import annotations

from petrecords.resources.declaration import ResourceSet
from petrecords.resources.locks import hold_shared_through, own_lock
from petrecords.store.base import (
    Store,
)


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
            await tx.lock([own_lock(resources, shared, target)])
            await hold_shared_through(tx=tx, resources=resources, shares=shares, target=target)
            await tx.uncount_expired_grant(shares.collection, share_id, now=now)
    return len(expired)
