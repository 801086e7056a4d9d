"""bench/changes.py measures idle subscribers in rounds whose two phases swap places every round, so that what
drifts over a run weighs on both sides of the ratio alike."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import bench_module

# bench/changes.py imports bench/run.py by its bare name, as it does when run from bench/.
if "run" not in sys.modules:
    sys.modules["run"] = bench_module("run")
changes = bench_module("changes")


def _phases(rounds: int, subscribers: int) -> list[dict[str, Any]]:
    """The phases of a run as measure_subscribers records them, with made-up figures: get by id's req/s is 100 +
    the phase's position in the run, a drift of one per phase through the whole of it."""
    phases: list[dict[str, Any]] = []
    for round_index in range(rounds):
        for measured, attached in changes.phase_order(round_index, subscribers):
            figures = {"rps": 100.0 + len(phases)}
            phases.append(
                {"round": round_index + 1, "subscribers": attached, "measured": measured, "get_by_id": figures}
            )
    return phases


def test_the_phase_with_subscribers_comes_second_in_odd_rounds_and_first_in_even_ones() -> None:
    assert [changes.phase_order(index, 1000) for index in range(3)] == [
        ((False, 0), (True, 1000)),
        ((True, 1000), (False, 0)),
        ((False, 0), (True, 1000)),
    ]
    assert changes.phase_order(1, 0) == ((True, 0), (False, 0))


def test_pairs_set_each_rounds_phase_with_the_streams_against_its_phase_without() -> None:
    pairs = changes.measured_pairs(_phases(4, 1000))
    assert [(with_["round"], with_["subscribers"], without["subscribers"]) for with_, without in pairs] == [
        (1, 1000, 0),
        (2, 1000, 0),
        (3, 1000, 0),
        (4, 1000, 0),
    ]


def test_a_steady_drift_cancels_out_over_an_even_number_of_rounds() -> None:
    """Each round alone shows the drift, one way or the other; the ratio over all of them does not."""
    pairs = changes.measured_pairs(_phases(2, 0))
    assert [with_["get_by_id"]["rps"] / without["get_by_id"]["rps"] for with_, without in pairs] == [
        101 / 100,
        102 / 103,
    ]
    assert changes.pooled_ratio(pairs, "get_by_id") == 1.0


def test_the_ratio_over_all_rounds_sums_the_requests_rather_than_averaging_the_rounds_ratios() -> None:
    pairs = [
        ({"get_by_id": {"rps": 50.0}}, {"get_by_id": {"rps": 100.0}}),
        ({"get_by_id": {"rps": 300.0}}, {"get_by_id": {"rps": 200.0}}),
    ]
    assert changes.pooled_ratio(pairs, "get_by_id") == 350 / 300  # the mean of the rounds' ratios would be 1.0
    assert math.isnan(changes.pooled_ratio([({"get_by_id": {"rps": 5.0}}, {"get_by_id": {"rps": 0.0}})], "get_by_id"))


def test_make_bench_states_each_ratio_against_its_target_and_the_way_to_a_stream() -> None:
    subscribed = {
        "pooled": {"get_by_id": 0.9473, "create": 0.95, "delete": 0.8996, "mixed_80_20": 0.91},
        "ratios": {
            "get_by_id": [0.95, 0.91],
            "create": [0.97, 0.93],
            "delete": [0.9, 0.9],
            "mixed_80_20": [0.96, 0.86],
        },
        "latency": {"p99_ms": 198.4, "missing": 0},
    }
    assert sys.modules["run"].subscriber_lines(subscribed) == [
        "  get_by_id with 1,000 idle subscribers ÷ none: 0.947 × (target ≥ 0.95, missed); rounds 0.95, 0.91",
        "  create with 1,000 idle subscribers ÷ none: 0.950 × (target ≥ 0.9); rounds 0.97, 0.93",
        # Cut, not rounded: a miss never prints as its target.
        "  delete with 1,000 idle subscribers ÷ none: 0.899 × (target ≥ 0.9, missed); rounds 0.90, 0.90",
        "  mixed_80_20 with 1,000 idle subscribers ÷ none: 0.910 × (no target); rounds 0.96, 0.86",
        "  a create's change at a stream: p99 198 ms (target ≤ 250 ms), missing 0",
    ]
    assert sys.modules["run"].subscriber_lines(None) == []


def test_make_bench_gives_the_subscribers_rounds_every_option_of_changes_py(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its own command line's defaults, with the run's values over them: none missing, whatever it gains."""
    run = sys.modules["run"]
    given: list[Any] = []
    monkeypatch.setitem(sys.modules, "changes", changes)
    monkeypatch.setattr(changes, "measure_subscribers", lambda options: given.append(options) or {})
    settings = ["PETRECORDS_DB_POOLER=transaction"]
    args = run.argparse.Namespace(
        database="postgresql", subscriber_rows=400_000, subscriber_rounds=4, duration=10, connections=64, workers=2,
        threads=2, setting=settings,
    )  # fmt: skip
    run.idle_subscribers(args)
    (options,) = given
    assert set(vars(changes.arguments().parse_args([]))) <= set(vars(options))
    assert (options.mode, options.database, options.rows, options.rounds, options.duration) == (
        "subscribers", "postgresql", 400_000, 4, 10,
    )  # fmt: skip
    assert (options.subscribers, options.subscribers_as, options.setting) == (1000, "other", settings)
    assert options.subscriber_scenarios == changes.READ_WRITE_SCENARIOS


def test_each_phase_of_the_subscribers_rounds_has_its_seconds_of_deletes_in_its_slice(tmp_path: Path) -> None:
    """8 rounds of 5 s once took 200,000 pets, 12,500 a phase: deletes at 2,500 a second used a slice up and the
    rest answered 404. The rows now follow from the rounds and the phases' length."""
    assert changes.rows_for_subscriber_rounds(8, 5) == 400_000
    for rounds, duration in ((1, 1), (3, 8), (8, 5)):
        rows = changes.rows_for_subscriber_rounds(rounds, duration)
        served = changes.Served(
            changes.Checkout("current", tmp_path), "", 0, [f'{i} "e"' for i in range(rows)], {}, tmp_path, {}
        )
        phases = 2 * rounds
        sliced = [
            Path(changes.ids_for_round(served, index, phases)["IDS_FILE"]).read_text().splitlines()
            for index in range(phases)
        ]
        assert all(len(ids) >= changes.MOST_DELETES_PER_SECOND * duration for ids in sliced)
        assert len({line for ids in sliced for line in ids}) == len([line for ids in sliced for line in ids])


def test_rounds_that_delete_nothing_need_no_slices() -> None:
    assert changes.rows_for_subscriber_rounds(12, 5, ("get_by_id",)) == 0
    assert changes.rows_for_subscriber_rounds(12, 5, ("get_by_id", "replace")) == 0
    assert changes.too_few_rows(1, 12, 5, ("get_by_id",)) is None


def _command_line(monkeypatch: pytest.MonkeyPatch, module: Any, *arguments: str) -> list[Any]:
    """The options `module.main()` measures with, from `arguments`: nothing is seeded, served or measured."""
    measured: list[Any] = []
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *arguments])
    monkeypatch.setattr(module.shutil, "which", lambda name: f"/usr/bin/{name}")
    for name in ("measure_writes", "measure_subscribers", "compare_configurations"):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, lambda *options: measured.append(options[0]) or {})
    module.main()
    return measured


def test_the_subscribers_mode_seeds_enough_for_its_deletes_and_refuses_fewer(monkeypatch: pytest.MonkeyPatch) -> None:
    (options,) = _command_line(monkeypatch, changes, "--mode", "subscribers", "--rounds", "8", "--duration", "5")
    assert options.rows == 400_000
    (options,) = _command_line(monkeypatch, changes, "--mode", "subscribers", "--rounds", "2", "--duration", "5")
    assert options.rows == changes.ROWS
    (options,) = _command_line(
        monkeypatch, changes, "--mode", "subscribers", "--rounds", "12", "--subscriber-scenarios", "get_by_id"
    )
    assert options.rows == changes.ROWS
    assert _command_line(monkeypatch, changes, "--mode", "subscribers", "--rounds", "8", "--duration", "5",
                         "--rows", "400000")  # fmt: skip
    with pytest.raises(SystemExit) as refused:
        _command_line(monkeypatch, changes, "--rounds", "8", "--duration", "5", "--rows", "399999")
    assert refused.value.code == 2


def test_make_bench_seeds_the_subscribers_rounds_enough_for_their_deletes_and_refuses_fewer_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before the datasets are measured, not after them."""
    run = sys.modules["run"]
    monkeypatch.setitem(sys.modules, "changes", changes)
    (options,) = _command_line(monkeypatch, run, "--configs", "1x1", "--duration", "5")
    assert (options.subscriber_rounds, options.subscriber_rows) == (8, 400_000)
    (options,) = _command_line(monkeypatch, run, "--configs", "1x1", "--subscriber-rounds", "2")
    assert options.subscriber_rows == 2 * 2 * 5_000 * 10
    with pytest.raises(SystemExit) as refused:
        _command_line(monkeypatch, run, "--configs", "1x1", "--duration", "5", "--subscriber-rows", "399999")
    assert refused.value.code == 2
    assert "8 rounds of 5 s delete up to 400,000 pets; 399,999 are too few" in capsys.readouterr().err
