"""bench/webhooks.py runs end to end at a tiny scale and says what it measured: the delivery rate of one webhook,
and the creates' ratio beside 20 hanging receivers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "webhooks.py"


def test_the_bench_measures_both_figures() -> None:
    finished = subprocess.run(
        [sys.executable, str(SCRIPT), "--changes", "40", "--duration", "0.5", "--rounds", "1", "--connections", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    assert re.search(r"one webhook to a local receiver: \d+ changes/s \(40 changes\)", finished.stdout)
    assert re.search(r"hanging receivers ÷ without: median \d+\.\d{3}", finished.stdout), finished.stdout
