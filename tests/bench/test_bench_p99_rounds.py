"""bench/run.py holds get by id's p99 beside long searches to its p99 alone over rounds that measure the two one
right after the other, in turn first and second, and takes the median round: one stall of the machine (every
request in flight held at once) decides one round, not the figure."""

from __future__ import annotations

import argparse
import math
from typing import Any

import pytest

from tests.support import bench_module

run = bench_module("run")


def _figures(p99_ms: float, rps: float = 1000.0) -> dict[str, Any]:
    return {"rps": rps, "requests": int(rps), "p50_ms": p99_ms / 4, "p99_ms": p99_ms, "non_2xx": 0, "socket_errors": 0}


def test_get_by_id_alone_comes_first_in_odd_rounds_and_second_in_even_ones() -> None:
    assert [run.p99_phase_order(index) for index in range(3)] == [(False, True), (True, False), (False, True)]


def test_the_median_round_is_the_middle_ratio_and_the_lower_middle_of_an_even_number() -> None:
    rounds = [{"p99_ratio": ratio} for ratio in (9.2, 1.1, 1.6)]
    assert run.median_round(rounds)["p99_ratio"] == 1.6
    assert run.median_round([*rounds, {"p99_ratio": 0.9}])["p99_ratio"] == 1.1
    assert run.median_round(rounds[:1])["p99_ratio"] == 9.2


def test_a_round_with_no_answer_on_a_side_ranks_as_the_worst() -> None:
    rounds = [{"p99_ratio": ratio} for ratio in (math.nan, 1.1, 1.6)]
    assert run.median_round(rounds)["p99_ratio"] == 1.6


def test_rounds_alternate_and_report_the_median_round_with_each_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # In the order they run: p99 alone 10, 12 and 8 ms; beside 20 ms, a stall of 300 ms, 12 ms.
    alone_p99 = iter((10.0, 12.0, 8.0))
    beside_p99 = iter((20.0, 300.0, 12.0))
    ran: list[str] = []

    def run_once(args: Any, base: str, name: str, wrk_env: dict[str, str], url: str) -> dict[str, Any]:
        ran.append(name)
        if name == "get_by_id":
            return _figures(next(alone_p99), rps=2000.0)
        return {**_figures(next(beside_p99)), "alongside": _figures(500.0, rps=2.0)}

    monkeypatch.setattr(run, "run_once", run_once)
    args = argparse.Namespace(p99_rounds=3, timeout=30)
    scenario = "get_by_id_beside_long_reads"
    figures = run.run_scenario(args, "http://127.0.0.1:1", scenario, {}, "sqlite:///unused")
    assert ran == ["get_by_id", scenario, scenario, "get_by_id", "get_by_id", scenario]
    # Each beside against the alone of its own round, whichever of the two ran first.
    assert [pair["alone"]["p99_ms"] for pair in figures["rounds"]] == [10.0, 12.0, 8.0]
    assert [pair["p99_ratio"] for pair in figures["rounds"]] == [2.0, 25.0, 1.5]
    assert (figures["p99_ratio"], figures["p99_ms"], figures["alone"]["p99_ms"]) == (2.0, 20.0, 10.0)

    (line,) = run.write_latencies({1_000_000: {scenario: figures}})
    assert "20.00 ms, 2.00 × its p99 alone (10.00 ms;" in line
    assert "the median of 3 rounds (2.00, 25.00, 1.50)" in line


def test_other_scenarios_run_once(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []

    def run_once(args: Any, base: str, name: str, wrk_env: dict[str, str], url: str) -> dict[str, Any]:
        ran.append(name)
        return _figures(10.0)

    monkeypatch.setattr(run, "run_once", run_once)
    run.run_scenario(argparse.Namespace(p99_rounds=3, timeout=30), "http://127.0.0.1:1", "get_by_id", {}, "")
    assert ran == ["get_by_id"]
