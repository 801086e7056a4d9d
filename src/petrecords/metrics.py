"""Prometheus figures: requests and latency by route and status, database pool use and outages."""

from __future__ import annotations

import asyncio
import bisect
import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess

POOL_INTERVAL = 1.0
FLUSH_INTERVAL = 1.0
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Tally:
    """Requests of one label set since the last flush: how many, their total time, how many per bucket (the last
    one for those slower than every bound)."""

    __slots__ = ("buckets", "count", "total")

    def __init__(self, buckets: int) -> None:
        self.count = 0
        self.total = 0.0
        self.buckets = [0] * buckets


class Metrics:
    """One set of metrics per app. Under several workers (PROMETHEUS_MULTIPROC_DIR set by `serve`),
    every worker writes its figures to that directory and any worker's /metrics reports them all."""

    def __init__(self) -> None:
        self._multiprocess = "PROMETHEUS_MULTIPROC_DIR" in os.environ
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "petrecords_http_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "petrecords_http_request_duration_seconds",
            "Time to answer an HTTP request.",
            ["method", "route", "status"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.database_unavailable = Counter(
            "petrecords_db_unavailable",
            "Requests answered 503 because the database could not serve them, by cause: timeout, pool, "
            "connection, locked, storage, vanished, other.",
            ["cause"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._tallies: dict[tuple[str, str, int], _Tally] = {}
        self._flush_scheduled = False
        self._pool_set_at = -POOL_INTERVAL
        pool_mode = {"multiprocess_mode": "livesum"} if self._multiprocess else {}
        self.pool = Gauge(
            "petrecords_db_pool_connections",
            "Database connections of this service by state: size, checked_out, idle, overflow.",
            ["state"],
            registry=self.registry,
            **pool_mode,  # type: ignore[arg-type]
        )

    def observe(self, *, method: str, route: str, status: int, seconds: float) -> None:
        """Count a request. Requests are tallied in the process and handed to the collectors at most every
        FLUSH_INTERVAL seconds (and before /metrics renders): under several workers every update of a
        collector writes a shared memory-mapped file behind a lock, which cost as much as a fifth of a lookup."""
        key = (method, route, status)
        tally = self._tallies.get(key)
        if tally is None:
            tally = self._tallies[key] = _Tally(len(_LATENCY_BUCKETS) + 1)
        tally.count += 1
        tally.total += seconds
        tally.buckets[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_later(FLUSH_INTERVAL, self.flush)

    def flush(self) -> None:
        """Hand the tallied requests to the collectors."""
        self._flush_scheduled = False
        tallies, self._tallies = self._tallies, {}
        for key, tally in tallies.items():
            children = self._children.get(key)
            if children is None:
                labels = (key[0], key[1], str(key[2]))
                children = self._children[key] = (self.requests.labels(*labels), self.latency.labels(*labels))
            children[0].inc(tally.count)
            histogram = children[1]
            histogram._sum.inc(tally.total)
            for bucket, count in zip(histogram._buckets, tally.buckets, strict=False):
                if count:
                    bucket.inc(count)

    def observe_database_unavailable(self, cause: str) -> None:
        self.database_unavailable.labels(cause).inc()

    def set_pool(self, figures: Callable[[], dict[str, int]]) -> None:
        """Record the pool's state, at most every POOL_INTERVAL seconds: it is a gauge, not a tally.
        `figures` is only asked for when it is due."""
        now = time.monotonic()
        if now - self._pool_set_at < POOL_INTERVAL:
            return
        self._pool_set_at = now
        for state, value in figures().items():
            self.pool.labels(state).set(value)

    def render(self) -> bytes:
        self.flush()
        if self._multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        return generate_latest(self.registry)
