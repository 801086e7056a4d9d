"""What the change log's horizon waits for: a duty of every process, which says so when a write in flight holds
back the feed, the live streams and NATS."""

from __future__ import annotations

import logging
import time

from petrecords.duties import StoreLookup, every
from petrecords.metrics import Metrics

log = logging.getLogger("petrecords.duties")
"""The duties' log, as before they had modules of their own."""


class HorizonWatch:
    """Watches the write in flight that the change log's horizon waits for (PostgreSQL): its age is in /metrics,
    and a wait of WARN_SECONDS or more is said as a warning, once every REPEAT_SECONDS while it lasts. Such a wait
    holds back the feed, the live streams and NATS on every instance: a session of the service whose client went
    away is ended within seconds (see store/postgres/connections.py), so a long wait is someone else's (a migration, a
    session left open in psql, an import)."""

    INTERVAL_SECONDS = 5.0
    WARN_SECONDS = 30.0
    REPEAT_SECONDS = 60.0

    def __init__(self, store: StoreLookup, *, metrics: Metrics) -> None:
        self._store = store
        self._metrics = metrics
        self._warned_at: float | None = None
        """When (monotonic) it last warned; None while the horizon does not wait long."""

    async def run(self) -> None:
        await every(self.INTERVAL_SECONDS, self.look, self._metrics, "horizon", "watching the change log's horizon")

    async def look(self) -> None:
        store = self._store()
        if store is None:
            return
        async with store.transaction(write=False) as tx:
            oldest = await tx.oldest_write_in_flight()
        seconds = 0.0 if oldest is None or oldest.seconds is None else max(0.0, oldest.seconds)
        self._metrics.horizon_wait.set(seconds)
        if oldest is None or seconds < self.WARN_SECONDS:
            self._warned_at = None
            return
        now = time.monotonic()
        if self._warned_at is not None and now - self._warned_at < self.REPEAT_SECONDS:
            return
        self._warned_at = now
        fields = {
            "wait_seconds": round(seconds, 1),
            "process": oldest.process,
            "state": oldest.state,
            "application": oldest.application,
        }
        log.warning(
            "the change log's horizon has waited %.0f s for a write in flight (the database's process %s, %s, "
            "application %s): no change committed since it began reaches the feed, the live streams or NATS",
            seconds,
            oldest.process,
            oldest.state or "state not shown",
            oldest.application or "not named",
            extra={"fields": fields},
        )
