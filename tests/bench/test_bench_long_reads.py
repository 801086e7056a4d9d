"""bench/long_reads.py sets wrk's p99 beside the server's own, read from the access log: the searches and the gets
told apart by their paths, and only the lines written during the phase."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.support import bench_module

# bench/long_reads.py imports bench/run.py by its bare name, as it does when run from bench/.
if "run" not in sys.modules:
    sys.modules["run"] = bench_module("run")
long_reads = bench_module("long_reads")


def _line(path: str, duration_ms: float, method: str = "GET") -> str:
    return json.dumps({"method": method, "path": path, "status": 200, "duration_ms": duration_ms})


def test_the_phase_timings_are_the_gets_and_the_searches_logged_after_its_start(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    log.write_text(_line("/v1/pets/old", 900.0) + "\n")
    start = log.stat().st_size
    gets = [_line(f"/v1/pets/{index}", float(index)) for index in range(1, 201)]
    others = [_line("/v1/pets", 1500.0), _line("/v1/pets", 700.4), _line("/v1/pets/x", 5000.0, method="POST")]
    log.write_text(log.read_text() + "Listening at http://127.0.0.1:1\n" + "\n".join(gets + others) + "\n")

    timings = long_reads.served_timings(log, start)

    assert timings == {"server_p99_ms": 199.0, "server_max_ms": 200.0, "searches_ms": [1500, 700]}


def test_a_variant_names_its_settings() -> None:
    assert long_reads.variant("quarter:PETRECORDS_LONG_READ_SHARE=0.25,PETRECORDS_DB_POOL_SIZE=4") == (
        "quarter",
        {"PETRECORDS_LONG_READ_SHARE": "0.25", "PETRECORDS_DB_POOL_SIZE": "4"},
    )
    assert long_reads.variant("defaults:") == ("defaults", {})
