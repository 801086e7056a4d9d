"""The change log kept within its retention (PETRECORDS_CHANGES_RETENTION_DAYS): a duty of every instance, done by
one at a time."""

from __future__ import annotations

import asyncio

from petrecords.config import Settings
from petrecords.duties import StoreLookup, every
from petrecords.metrics import Metrics
from petrecords.values import now_ms

DAY_MS = 86_400_000


class Retention:
    """Removes changes older than the retention, oldest first, in small batches (each its own short
    transaction), once a minute."""

    INTERVAL_SECONDS = 60.0
    BATCH = 1000
    LEASE = "changes-retention"

    def __init__(self, settings: Settings, store: StoreLookup, *, instance: str, metrics: Metrics) -> None:
        self._days = settings.changes_retention_days
        self._store = store
        self._instance = instance
        self._metrics = metrics

    async def run(self) -> None:
        await every(self.INTERVAL_SECONDS, self.purge, self._metrics, "retention", "removing expired changes")

    async def purge(self, *, now: int | None = None) -> int:
        """Remove what has expired, if this instance holds the lease; how many changes were removed."""
        store = self._store()
        if self._days == 0 or store is None:
            return 0
        now = now_ms() if now is None else now
        async with store.transaction(write=True) as tx:
            until = now + int(2 * self.INTERVAL_SECONDS * 1000)
            if not await tx.take_lease(self.LEASE, holder=self._instance, now_ms=now, until_ms=until):
                return 0
        removed = 0
        while True:
            async with store.transaction(write=True) as tx:
                batch = await tx.purge_changes(before_ms=now - self._days * DAY_MS, limit=self.BATCH)
            removed += batch
            if batch < self.BATCH:
                return removed
            await asyncio.sleep(0)  # let requests in between batches
