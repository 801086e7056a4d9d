"""The bench measures the configuration users run: its servers take the service's defaults, the access log among
them, whatever PETRECORDS_ settings the shell that starts the bench carries."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from petrecords.config import Settings
from tests.support import bench_module

run = bench_module("run")
# bench/changes.py imports bench/run.py by its bare name, as it does when run from bench/.
if "run" not in sys.modules:
    sys.modules["run"] = run
changes = bench_module("changes")

# What a measured server must be told: where its data is, a secret, and a load of one caller that the defaults
# would refuse (server_env says why).
_TOLD = {"data_dir", "database_url", "auth_secret", "rate_limit", "events_max_streams_per_caller"}


def _settings_from(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for name in list(os.environ):
        if name.startswith("PETRECORDS_"):
            monkeypatch.delenv(name)
    for name, value in environment.items():
        if name.startswith("PETRECORDS_"):
            monkeypatch.setenv(name, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def test_a_measured_server_runs_with_the_defaults_access_log_on_whatever_the_shell_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PETRECORDS_ACCESS_LOG", "false")
    monkeypatch.setenv("PETRECORDS_LOG_LEVEL", "error")
    monkeypatch.setenv("PETRECORDS_DEFAULT_PAGE_SIZE", "7")
    measured = _settings_from(run.server_env(tmp_path, f"sqlite:///{tmp_path}/bench.db"), monkeypatch)
    defaults = _settings_from({}, monkeypatch)

    assert measured.access_log is True
    differing = {name for name in Settings.model_fields if getattr(measured, name) != getattr(defaults, name)}
    assert differing == _TOLD
    assert measured.rate_limit > defaults.rate_limit


@pytest.mark.parametrize(("flag", "access_log"), [([], True), (["--no-access-log"], False)])
def test_the_change_log_bench_writes_the_access_log_unless_told_not_to(flag: list[str], access_log: bool) -> None:
    arguments = changes.arguments().parse_args(flag)
    assert arguments.no_access_log is not access_log
