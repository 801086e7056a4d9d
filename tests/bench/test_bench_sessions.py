"""The bench starts each server in the bench's session, beside wrk, or with --own-sessions in a session of its own:
where the kernel shares the cores between sessions first, that decides a server's share of the machine beside wrk
(bench/results/2026-11-28-sessions.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.support import bench_module

run = bench_module("run")
# Prints its session and its process group, then waits to be stopped.
_REPORT_AND_WAIT = "import os, time; print(os.getsid(0), os.getpgid(0), flush=True); time.sleep(60)"


@pytest.mark.parametrize("own_session", [True, False, None], ids=["own", "bench's", "default"])
def test_a_measured_process_runs_in_the_session_asked_for_and_is_stopped_with_its_group(
    tmp_path: Path, own_session: bool | None
) -> None:
    """Unless asked for a session of its own, in the bench's."""
    log = tmp_path / "child.log"
    asked = {} if own_session is None else {"own_session": own_session}
    with run.process([sys.executable, "-c", _REPORT_AND_WAIT], dict(os.environ), log, **asked) as child:
        deadline = time.monotonic() + 30
        while not log.read_text().endswith("\n") and time.monotonic() < deadline:
            time.sleep(0.01)
        session, group = map(int, log.read_text().split())
    assert group == child.pid
    assert session == (child.pid if own_session else os.getsid(0))
    assert child.returncode is not None
