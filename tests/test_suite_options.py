"""The suite's own options (pyproject.toml's [tool.pytest.ini_options]), as a contributor uses them."""

from __future__ import annotations

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
