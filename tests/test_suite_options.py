"""The suite's own options (pyproject.toml's [tool.pytest.ini_options]), as a contributor uses them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_ONE_FAILS = """
def test_fails():
    assert False

def test_passes():
    pass
"""


# Plugins that a module of two plain tests does not use, and whose imports take seconds of a process's start.
_UNUSED_PLUGINS = ("xdist", "faker", "schemathesis", "hypothesispytest")


def _pytest(directory: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """pytest run on `directory` with the project's options, as `pytest` in the repository runs them."""
    project = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(directory)]
    unused = [option for plugin in _UNUSED_PLUGINS for option in ("-p", f"no:{plugin}")]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *project, *unused, *options, str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_last_failed_runs_only_the_failures_of_the_last_run(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(_ONE_FAILS)
    first = _pytest(tmp_path)
    assert "1 failed, 1 passed" in first.stdout, first.stdout + first.stderr

    again = _pytest(tmp_path, "--lf")

    assert "rerun previous 1 failure" in again.stdout, again.stdout + again.stderr
    assert " 1 failed in " in again.stdout.splitlines()[-1], again.stdout  # and no other test


def test_the_tests_sharing_a_server_are_one_workers_in_make_test() -> None:
    """`make test`'s order (tests/conftest.py): a module's server, one for each database, serves tests that all sit in
    one worker's share of the queue, so that no other worker starts it again."""
    order = _make_test_order(*_A_SHARED_SERVER_AND_OTHERS)
    share_of = _worksteal_shares(order)
    for database in ("sqlite", "postgresql"):
        served = {share_of[test] for test in order if _SHARED_SERVER in test and f"[{database}" in test}
        assert len(served) == 1, (database, sorted(served))


def test_the_tests_that_take_turns_at_a_lock_are_one_workers_in_make_test() -> None:
    """The documentation's pages that start servers on fixed ports take turns at one lock: they sit in one
    worker's share of the queue, where none waits for another."""
    order = _make_test_order("tests/docs/test_how_to.py", "tests/unit")
    serving = [test for test in order if "README.md" in test or "tutorial.md" in test or "keycloak.md" in test]
    assert len(serving) == 3, order
    share_of = _worksteal_shares(order)
    assert len({share_of[test] for test in serving}) == 1, [(test, share_of[test]) for test in serving]


def _make_test_order(*paths: str) -> list[str]:
    """The order of these tests in `make test`'s queue, as _WORKERS workers are dealt it."""
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_XDIST")}
    environment["PYTEST_XDIST_WORKER_COUNT"] = str(_WORKERS)
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "--collect-only", "-q", "-m", "not long", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=environment,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return [line for line in listed.stdout.splitlines() if "::" in line]


_WORKERS = 4
_SHARED_SERVER = "tests/e2e/test_stream_bounds.py::"
"""A module of eight tests on each database, whose server (one per database) is a fixture of the module."""
_A_SHARED_SERVER_AND_OTHERS = (_SHARED_SERVER.removesuffix("::"), "tests/e2e/test_serve.py", "tests/unit/test_turns.py")


def _worksteal_shares(order: list[str]) -> dict[str, int]:
    """Which worker's share each test falls in, as xdist's worksteal cuts the queue."""
    share_of: dict[str, int] = {}
    remaining, start = len(order), 0
    for share in range(_WORKERS):
        size = remaining // (_WORKERS - share)
        remaining -= size
        share_of.update(dict.fromkeys(order[start : start + size], share))
        start += size
    return share_of
