"""Get by id's p99 beside long searches (issue target: within 2 × its p99 alone), for settings compared on one
database: each round starts a server for each variant in turn (the order swapped every round) and measures get by
id alone and beside two connections searching with one letter (scenarios/long_search.lua), in turn first and
second. Beside wrk's p99 it prints the server's own, from the access log's `duration_ms`: the time from the
request reaching the app to its answer, so that a tail wrk sees and the app does not is time spent waiting for a
core or in the sockets, not in the service's code.

Usage: .venv/bin/python bench/long_reads.py --database postgresql --rows 1000000 --rounds 10 \
         --variant half:PETRECORDS_LONG_READ_SHARE=0.5 --variant quarter:PETRECORDS_LONG_READ_SHARE=0.25
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from run import (
    BENCH,
    BIN,
    LONG_READS_P99_TARGET,
    OWNER,
    database,
    free_port,
    in_turn,
    process,
    run_wrk,
    server_env,
    wait_until_answering,
)

SEARCH_PATH = "/v1/pets"
"""The access log's path of the searches (the query string is not logged); a get by id's is below it."""
SEARCH_CONNECTIONS = 2


def variant(text: str) -> tuple[str, dict[str, str]]:
    """`name:PETRECORDS_A=1,PETRECORDS_B=2` (or `name:` for the defaults)."""
    name, _, settings = text.partition(":")
    return name, dict(setting.split("=", 1) for setting in settings.split(",") if setting)


def quantile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else math.nan


def served_timings(log: Path, start: int) -> dict[str, Any]:
    """The access log's lines after byte `start`: the gets' server-side p99 and slowest, the searches' times."""
    gets: list[float] = []
    searches: list[float] = []
    for line in log.read_bytes()[start:].decode(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        path = entry.get("path", "")
        if entry.get("method") != "GET" or "duration_ms" not in entry:
            continue
        if path == SEARCH_PATH:
            searches.append(entry["duration_ms"])
        elif path.startswith(SEARCH_PATH + "/"):
            gets.append(entry["duration_ms"])
    return {
        "server_p99_ms": quantile(gets, 0.99),
        "server_max_ms": max(gets, default=math.nan),
        "searches_ms": [round(duration) for duration in searches],
    }


def phase(base: str, log: Path, wrk_env: dict[str, str], duration: int, *, beside: bool) -> dict[str, Any]:
    start = log.stat().st_size
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        gets = pool.submit(run_wrk, base, "get_by_id", duration=duration, connections=64, env=wrk_env)
        searches = (
            pool.submit(run_wrk, base, "long_search", duration=duration, connections=SEARCH_CONNECTIONS, env=wrk_env)
            if beside
            else None
        )
        figures = gets.result()
        alongside = searches.result() if searches is not None else None
    # Requests wrk left in flight finish (and are logged) before the next phase.
    time.sleep(min(30.0, max(1.0, (alongside or figures)["p99_ms"] / 1000)))
    return {**figures, **served_timings(log, start), "alongside": alongside}


def measure(
    args: argparse.Namespace, variants: list[tuple[str, dict[str, str]]], work_dir: Path, results: list[dict[str, Any]]
) -> None:
    """Seeds `args.rows` pets and runs the rounds, each variant's figures appended to `results`."""
    with database(args.database, work_dir) as url:
        env = server_env(work_dir, url)
        ids_file = work_dir / "ids.txt"
        subprocess.run(
            [BIN / "python", BENCH / "seed.py", "--database-url", url, "--data-dir", str(work_dir),
             "--rows", str(args.rows), "--owner", OWNER, "--ids-file", str(ids_file), "--vaccinations", "0"],
            env=env, check=True,
        )  # fmt: skip
        token = subprocess.run(
            [BIN / "petrecords", "token", "--user", OWNER, "--ttl", "86400"],
            env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        wrk_env = {"TOKEN": token, "IDS_FILE": str(ids_file)}
        for round_index in range(args.rounds):
            order = variants if round_index % 2 == 0 else variants[::-1]
            for name, settings in order:
                port, log = free_port(), work_dir / f"serve-{name}.log"
                with process([str(BIN / "petrecords"), "serve", "--port", str(port)], {**env, **settings}, log):
                    base = f"http://127.0.0.1:{port}"
                    wait_until_answering(f"{base}/readyz")
                    run_wrk(base, "get_by_id", duration=2, connections=64, env=wrk_env)  # warm
                    pair = {
                        beside: phase(base, log, wrk_env, args.duration, beside=beside)
                        for beside in in_turn(round_index, False, True)
                    }
                alone, with_searches = pair[False], pair[True]
                ratio = with_searches["p99_ms"] / alone["p99_ms"]
                searched = with_searches["searches_ms"]
                results.append({"round": round_index + 1, "variant": name, "ratio": ratio, "alone": alone,
                                "beside": with_searches})  # fmt: skip
                print(f"round {round_index + 1} {name}: {ratio:.2f} ×; get by id p99 alone {alone['p99_ms']:.1f} ms "
                      f"(server {alone['server_p99_ms']:.1f}), beside {with_searches['p99_ms']:.1f} ms (server "
                      f"{with_searches['server_p99_ms']:.1f}, slowest {with_searches['server_max_ms']:.0f}); "
                      f"{alone['rps']:.0f} → {with_searches['rps']:.0f} req/s; {len(searched)} searches, "
                      f"{min(searched, default=0)}–{max(searched, default=0)} ms", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--variant", type=variant, action="append", help="name:PETRECORDS_NAME=VALUE,…")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    variants: list[tuple[str, dict[str, str]]] = args.variant or [("defaults", {})]
    work_dir = Path(tempfile.mkdtemp(prefix="petrecords-long-reads-"))
    results: list[dict[str, Any]] = []
    try:
        measure(args, variants, work_dir, results)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    for name, _ in variants:
        ratios = [result["ratio"] for result in results if result["variant"] == name]
        within = sum(ratio <= LONG_READS_P99_TARGET for ratio in ratios)
        print(f"{name}: median {statistics.median(ratios):.2f} ×, within {LONG_READS_P99_TARGET:g} × in {within} "
              f"of {len(ratios)} rounds: {', '.join(f'{ratio:.2f}' for ratio in ratios)}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
