"""Prometheus figures: requests and latency by route and status, database pool use and outages, the background
duties' failures, what is waiting to be published to NATS, and how long the change log's horizon has waited."""

from __future__ import annotations

import asyncio
import bisect
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, multiprocess
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

FLUSH_INTERVAL = 1.0
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_LATENCY = "petrecords_http_request_duration_seconds"
_LATENCY_HELP = "Time to answer an HTTP request."
_LATENCY_PARTS = "petrecords_http_request_duration_seconds_parts"
"""A counter of the histogram's parts, by the request's labels and `part`: the time of the requests (`sum`), or how
many fell in each bucket, not counting the ones before (the bucket's upper bound). It is never shown as it is."""
_LABELS = ("method", "route", "status")
_PARTS = (*(repr(bound) for bound in _LATENCY_BUCKETS), "+Inf")
"""The buckets' upper bounds, as Prometheus writes them."""


class _LatencyHistogram(Collector):
    """Shows the latency histogram, made from the counter of its parts, beside the other metrics of `source`.

    A request is tallied in the process and the tallies handed to the collectors once a second: a histogram's
    public API takes one observation at a time, which would cost a bucket and a sum update per request, each a
    write of a shared file under several workers. Counters take a batch in one `inc` each."""

    def __init__(self, source: Callable[[], Iterable[Metric]]) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        parts: dict[tuple[str, ...], dict[str, float]] = {}
        for metric in self._source():
            if metric.name != _LATENCY_PARTS:
                yield metric
                continue
            for sample in metric.samples:
                if sample.name.endswith("_total"):
                    of = sample.labels
                    parts.setdefault(tuple(of[name] for name in _LABELS), {})[of["part"]] = sample.value
        histogram = HistogramMetricFamily(_LATENCY, _LATENCY_HELP, labels=_LABELS)
        for labels, counts in sorted(parts.items()):
            cumulative = 0.0
            buckets = []
            for part in _PARTS:
                cumulative += counts.get(part, 0.0)
                buckets.append((part, cumulative))
            histogram.add_metric(labels, buckets, counts.get("sum", 0.0))
        yield histogram


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
        parts = CollectorRegistry()
        """Where the latency's parts are kept in one process, out of what /metrics shows."""
        self.registry.register(_LatencyHistogram(parts.collect))
        self.requests = Counter(
            "petrecords_http_requests",
            "HTTP requests answered.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency_parts = Counter(
            _LATENCY_PARTS, "The parts of the latency histogram.", [*_LABELS, "part"], registry=parts
        )
        self.database_unavailable = Counter(
            "petrecords_db_unavailable",
            "Requests answered 503 because the database could not serve them, by cause: timeout, pool, "
            "connection, locked, storage, vanished, other.",
            ["cause"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, str, int], tuple[Any, Any, list[Any]]] = {}
        self._tallies: dict[tuple[str, str, int], _Tally] = {}
        self._flush_scheduled = False
        self.pool_figures: Callable[[], dict[str, int]] | None = None
        """The database pool's state by state name, shown by the pool gauge each time the tallies are handed over."""
        pool_mode = {"multiprocess_mode": "livesum"} if self._multiprocess else {}
        self.pool = Gauge(
            "petrecords_db_pool_connections",
            "Database connections of this service by state: size, checked_out, idle, overflow.",
            ["state"],
            registry=self.registry,
            **pool_mode,  # type: ignore[arg-type]
        )

        self.duty_failures = Counter(
            "petrecords_duty_failures",
            "Unexpected failures of a background duty (each logged with its traceback; the duty goes on), by duty: "
            "retention, grant-expiry, publisher, horizon, reminders.",
            ["duty"],
            registry=self.registry,
        )
        unpublished_mode = {"multiprocess_mode": "livemostrecent"} if self._multiprocess else {}
        self.nats_unpublished = Gauge(
            "petrecords_nats_unpublished_changes",
            "Committed changes not yet published to NATS JetStream: counted when publishing pauses and every minute "
            "while it is paused, 0 once it has caught up.",
            registry=self.registry,
            **unpublished_mode,  # type: ignore[arg-type]
        )

        # Every process looks at the same database: the longest wait any of them saw last.
        horizon_mode = {"multiprocess_mode": "livemax"} if self._multiprocess else {}
        self.horizon_wait = Gauge(
            "petrecords_changes_horizon_wait_seconds",
            "How long the oldest write still in flight in the database has run (PostgreSQL; 0: none): the change feed, "
            "the live streams and publishing to NATS hold back every change committed after it began until it ends.",
            registry=self.registry,
            **horizon_mode,  # type: ignore[arg-type]
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
        """Hand the tallied requests, and the pool's state, to the collectors."""
        self._flush_scheduled = False
        if self.pool_figures is not None:
            for state, value in self.pool_figures().items():
                self.pool.labels(state).set(value)
        tallies, self._tallies = self._tallies, {}
        for key, tally in tallies.items():
            children = self._children.get(key)
            if children is None:
                labels = (key[0], key[1], str(key[2]))
                children = self._children[key] = (
                    self.requests.labels(*labels),
                    self.latency_parts.labels(*labels, "sum"),
                    [self.latency_parts.labels(*labels, part) for part in _PARTS],
                )
            requests, total, buckets = children
            requests.inc(tally.count)
            total.inc(tally.total)
            for bucket, count in zip(buckets, tally.buckets, strict=True):
                if count:
                    bucket.inc(count)

    def observe_database_unavailable(self, cause: str) -> None:
        self.database_unavailable.labels(cause).inc()

    def render(self) -> bytes:
        self.flush()
        if self._multiprocess:
            registry = CollectorRegistry()
            every_worker = multiprocess.MultiProcessCollector(None)  # type: ignore[no-untyped-call]
            registry.register(_LatencyHistogram(every_worker.collect))
            return generate_latest(registry)
        return generate_latest(self.registry)
