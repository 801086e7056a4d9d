"""What the metrics cost, in process: a request's tally (`Metrics.observe`), handing the tallies to the collectors
(`Metrics.flush`, once a second, per label set), and rendering /metrics; in one process and as under several
workers (figures shared through files in PROMETHEUS_MULTIPROC_DIR). CPU time of the thread, best of five passes.

    .venv/bin/python bench/metrics.py [--requests 100000] [--label-sets 40]

The code before a change: PYTHONPATH=<its src> .venv/bin/python bench/metrics.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

PASSES = 5
FLUSHES = 50
ROUTES = ("/v1/pets", "/v1/pets/{id}", "/v1/vaccines", "/v1/vaccines/{id}", "/v1/pet-vaccination", "/v1/changes")
STATUSES = (200, 201, 304, 400, 404, 412, 429)


def _best(run: Callable[[], None]) -> float:
    """The least CPU time of PASSES runs, in seconds."""
    best = float("inf")
    for _ in range(PASSES):
        began = time.thread_time()
        run()
        best = min(best, time.thread_time() - began)
    return best


async def _measure(requests: int, label_sets: int) -> dict[str, float]:
    from petrecords.metrics import Metrics  # after PROMETHEUS_MULTIPROC_DIR is set: prometheus_client reads it once

    metrics = Metrics()
    keys = [("GET", route, status) for route in ROUTES for status in STATUSES][:label_sets]
    durations = [0.0003 * (1 + number % 97) for number in range(requests)]

    def observe() -> None:
        for number, seconds in enumerate(durations):
            method, route, status = keys[number % len(keys)]
            metrics.observe(method=method, route=route, status=status, seconds=seconds)
        metrics._tallies.clear()  # what a pass tallied is not flushed: the next pass starts as this one did

    def tally() -> None:
        for number, seconds in enumerate(durations[: len(keys) * 20]):
            method, route, status = keys[number % len(keys)]
            metrics.observe(method=method, route=route, status=status, seconds=seconds)

    def flush() -> float:
        """The CPU time of FLUSHES flushes, each of a second's tallies of every label set."""
        spent = 0.0
        for _ in range(FLUSHES):
            tally()
            began = time.thread_time()
            metrics.flush()
            spent += time.thread_time() - began
        return spent

    tally()
    metrics.flush()  # the collectors' children exist from the first flush on, as in a running server
    flushed = min(flush() for _ in range(PASSES)) / FLUSHES
    render = _best(lambda: [metrics.render() for _ in range(20)]) / 20
    return {
        "observe_us": _best(observe) / requests * 1e6,
        "flush_us_per_label_set": flushed / len(keys) * 1e6,
        "render_us": render * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--label-sets", type=int, default=40)
    parser.add_argument("--mode", choices=("single", "multi"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mode is not None:
        print(json.dumps(asyncio.run(_measure(args.requests, args.label_sets))))
        return
    for mode in ("single", "multi"):
        env = {name: value for name, value in os.environ.items() if name != "PROMETHEUS_MULTIPROC_DIR"}
        with tempfile.TemporaryDirectory(prefix="petrecords-bench-metrics-") as directory:
            if mode == "multi":
                env["PROMETHEUS_MULTIPROC_DIR"] = directory
            command = [sys.executable, __file__, "--mode", mode, "--requests", str(args.requests)]
            command += ["--label-sets", str(args.label_sets)]
            figures = json.loads(subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout)
        print(
            f"{mode:>6}: observe {figures['observe_us']:.3f} µs a request; flush "
            f"{figures['flush_us_per_label_set']:.2f} µs a label set; render {figures['render_us']:.0f} µs"
        )


if __name__ == "__main__":
    main()
