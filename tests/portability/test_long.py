"""The data commands at a million records (`make test-long`): rates, and memory that stays flat whatever the size;
a backup of a million-row database while a server's writers write."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.portability.support import PETRECORDS, migrated, synthetic_export
from tests.portability.test_backup import backup_under_writers
from tests.support import throwaway_postgres

pytestmark = [pytest.mark.long, pytest.mark.slow]

RECORDS = 1_000_000
FEW = 10_000
MORE_MEMORY_BYTES = 96 * 1024 * 1024
"""How much more a data command may hold at its peak (resident) for RECORDS records than for FEW: what fills is
SQLite's page cache, 64 MiB at most while a load runs (databases.LOAD_CACHE_KIB); nothing grows with the size."""


# Peak memory is measured by a small process between the test and the command: a child's peak counts from the
# memory of the process it was forked from, which for the test itself is large.
_MEASURE = """
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def measured(url: str, data: Path, *args: str) -> tuple[float, int]:
    """Run `petrecords ARGS`: seconds taken and peak resident memory in bytes."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env.update(PETRECORDS_DATABASE_URL=url, PETRECORDS_DATA_DIR=str(data))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(PETRECORDS), *args], env=env, capture_output=True, text=True, check=False
    )
    seconds = time.monotonic() - started
    status, peak_kib = (int(part) for part in done.stdout.split())
    assert status == 0, done.stderr
    return seconds, peak_kib * 1024


def _same_lines_after_first(one: Path, other: Path) -> bool:
    with one.open("rb") as first, other.open("rb") as second:
        first.readline()
        second.readline()
        return all(a == b for a, b in itertools.zip_longest(first, second))


def test_a_million_records_export_and_import_at_flat_memory_on_both_databases(tmp_path: Path) -> None:
    source = tmp_path / "million.jsonl"
    synthetic_export(source, RECORDS)
    lines = 2 * RECORDS  # each pet, and its change
    figures = []
    sqlite_url = f"sqlite:///{tmp_path / 'million.sqlite3'}"
    migrated(sqlite_url, tmp_path)
    with throwaway_postgres() as postgres_url:
        migrated(postgres_url, tmp_path)
        for name, url in (("SQLite", sqlite_url), ("PostgreSQL", postgres_url)):
            seconds, peak = measured(url, tmp_path, "import", str(source))
            figures.append((f"import into {name}", seconds, peak))
            out = tmp_path / f"{name}.jsonl"
            seconds, peak = measured(url, tmp_path, "export", "--output", str(out))
            figures.append((f"export from {name}", seconds, peak))
            assert _same_lines_after_first(out, source)
            out.unlink()
    few = tmp_path / "few.jsonl"
    synthetic_export(few, FEW)
    few_url = f"sqlite:///{tmp_path / 'few.sqlite3'}"
    migrated(few_url, tmp_path)
    _, few_peak = measured(few_url, tmp_path, "import", str(few))
    _, few_export_peak = measured(few_url, tmp_path, "export", "--output", str(tmp_path / "few-out.jsonl"))
    print(f"peak RSS at {FEW:,} records: import {few_peak / 2**20:.0f} MiB, export {few_export_peak / 2**20:.0f} MiB")
    for what, seconds, peak in figures:
        print(
            f"{what}: {RECORDS:,} records and {RECORDS:,} changes in {seconds:.1f} s "
            f"({lines / seconds:,.0f} lines/s), peak RSS {peak / 2**20:.0f} MiB"
        )
    assert all(peak < max(few_peak, few_export_peak) + MORE_MEMORY_BYTES for _, _, peak in figures)


def test_a_backup_of_a_million_rows_while_a_server_writes(tmp_path: Path) -> None:
    figures = backup_under_writers(tmp_path, RECORDS)
    print(f"backup of {RECORDS:,} pets under 4 writers: " + ", ".join(f"{k} {v:.1f}" for k, v in figures.items()))
