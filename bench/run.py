"""Load benchmark: a real `petrecords serve` and the bare ceiling app on loopback, driven by wrk.

For each dataset size it seeds a fresh database in bulk (bench/seed.py: pets, and as many vaccinations
when a vaccination scenario runs, each record with its change in the change log), times the disk's own
fsync in the data directory, starts bench/ceiling.py (and bench/reference_fastapi.py) on it and measures
the ceilings of the chosen scenarios, then starts `petrecords serve --workers N` and runs the scenarios
with wrk (Lua scripts in scenarios/), some with other load alongside (ALONGSIDE); those held to get by id's p99
alone run in rounds with it. Then it measures 1,000 idle live subscribers against none (bench/changes.py). Every
figure is printed with its ratio to its ceiling, and the list figures with their ratios across sizes.

Usage: .venv/bin/python bench/run.py [--database sqlite|postgresql] [--rows 10000,1000000]
       [--scenarios get_by_id,…] [--vaccinations auto|N] [--duration 10] [--connections 64] [--workers 2]
       [--json results.json] [--setting PETRECORDS_NAME=VALUE …] [--serve-through-port PGBOUNCER_PORT]
       [--p99-rounds 3] [--subscriber-rounds 8 (every scenario), 0 (--scenarios)] [--subscriber-rows N]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import httpx

from petrecords.config import default_long_reads_at_once

T = TypeVar("T")
BIN = Path(sys.executable).parent
BENCH = Path(__file__).resolve().parent
SCENARIOS = BENCH / "scenarios"
POSTGRES_ADMIN_URL = os.environ.get("PETRECORDS_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
OWNER = "bench@example.com"
ADMIN = "bench-admin@example.com"
WRK_THREADS = 2
PAGE_SIZE = 20

# Scenario name -> Lua script; the order matters: delete consumes records, so it runs last.
SERVICE_SCENARIOS = {
    "get_by_id": "get_by_id",
    "get_by_id_beside_long_reads": "get_by_id",
    "get_by_id_beside_a_neighbour": "get_by_id",
    "list_page_1": "list_page_1",
    "list_filtered": "list_filtered",
    "list_search": "list_search",
    "list_middle": "list_middle",
    "pet_vaccinations": "pet_vaccinations",
    "overdue": "overdue",
    "overdue_by_due": "overdue_by_due",
    "vaccine_get": "vaccine_get",
    "vaccines_list": "vaccines_list",
    "history": "history",
    "changes": "changes",
    "create": "create",
    "vaccine_create": "vaccine_create",
    "replace": "replace",
    "mixed_80_20": "mixed",
    "delete": "delete",
}
VACCINATION_SCENARIOS = ("pet_vaccinations", "overdue", "overdue_by_due")
VACCINE_SCENARIOS = ("vaccine_get", "vaccines_list", "vaccine_create")
# Run at every size; the others (a slow filtered count, and those that use up or rewrite the seeded records) at the
# largest only.
SMALL_SCENARIOS: tuple[str, ...] = ("get_by_id", "get_by_id_beside_long_reads", "get_by_id_beside_a_neighbour")
SMALL_SCENARIOS += ("list_page_1", "list_middle")
SMALL_SCENARIOS += VACCINATION_SCENARIOS + VACCINE_SCENARIOS
SMALL_SCENARIOS += ("history", "changes", "create", "mixed_80_20")


@dataclass(frozen=True)
class Alongside:
    """Load that runs during a scenario, on its server, measured apart: `connections` more connections run
    `script` beside the scenario's own, and `subscribers` live change streams stay open throughout."""

    script: str
    connections: int
    subscribers: int = 0


ALONGSIDE = {
    # wrk's latencies do not tell reads from writes: the writes' own are those of a few more connections that
    # only create, beside the 80 % / 20 % load, going through the same write queue as its creates.
    "mixed_80_20": Alongside("create", connections=4),
    # The feed paged while records are created and 100 clients follow it live (Accept: text/event-stream).
    "changes": Alongside("create", connections=16, subscribers=100),
    # Two connections (wrk's fewest, one a thread) searching with one letter, every record of the caller's read for
    # each, beside the reads by id: their p99 against get_by_id's own, alone, in the same run.
    "get_by_id_beside_long_reads": Alongside("long_search", connections=2),
}
# The same searches' statements, run on the database by a process of their own (bench/neighbour.py), as many at
# once as the service has turns, beside the reads by id: what the machine leaves them with the service out of the way.
BESIDE_A_NEIGHBOUR = ("get_by_id_beside_a_neighbour",)
P99_BESIDE_GET_BY_ID = ("get_by_id_beside_long_reads", *BESIDE_A_NEIGHBOUR)
"""Held to get by id's p99 alone: each runs in rounds with it (`in_rounds_beside_get_by_id`)."""
LONG_READS_P99_TARGET = 2.0
UNREACHED_RATE_LIMIT = 10**12
"""Requests a minute per caller: the limiter runs, and never refuses."""
WRITE_P99_TARGET_MS = 100
WRITING = frozenset(
    {"ceiling_create", "ceiling_insert", "changes", "create", "vaccine_create", "replace", "mixed_80_20", "delete"}
)
"""Scenarios and ceilings that write: on PostgreSQL, the database is settled after them (seed.settle_postgresql)."""


class Ceiling:
    """A measurement of a bare app beside the service (bench/ceiling.py, or the FastAPI reference): what `bounds`
    costs with no service around it, or with a tutorial's."""

    def __init__(
        self,
        script: str,
        bounds: str,
        *,
        every_size: bool,
        app: str = "bare",
        databases: tuple[str, ...] = ("sqlite", "postgresql"),
    ) -> None:
        self.script = script
        self.bounds = bounds
        self.every_size = every_size
        """Measured at every dataset size that runs `bounds`, not only the largest, so that each size's ratio is to
        a ceiling measured at that size in the same run."""
        self.app = app
        """Which app serves it: one of APPS."""
        self.databases = databases


CEILINGS = {
    "ceiling_get": Ceiling("ceiling_get", "get_by_id", every_size=True),
    # A create's whole work, committed as the store commits it: with group commit on SQLite.
    "ceiling_create": Ceiling("ceiling_create", "create", every_size=True),
    # One row into the pets table alone, committed on its own: what the PostgreSQL create's target is stated against.
    "ceiling_insert": Ceiling("ceiling_insert", "create", every_size=True, databases=("postgresql",)),
    # The same lookup on Granian's own interface (RSGI): the fastest a Python app on this server answers it.
    "rsgi_get": Ceiling("ceiling_get", "get_by_id", every_size=True, app="rsgi"),
    # The same lookup through a bare Litestar route: how much of the ceiling the framework alone leaves.
    "litestar_get": Ceiling("ceiling_get", "get_by_id", every_size=True, app="litestar"),
    # The same lookup as a FastAPI tutorial writes it: an anchor, not a bound.
    "fastapi_get": Ceiling("ceiling_get", "get_by_id", every_size=True, app="fastapi", databases=("sqlite",)),
    "ceiling_pet_vaccinations": Ceiling("ceiling_pet_vaccinations", "pet_vaccinations", every_size=True),
    "ceiling_overdue": Ceiling("ceiling_overdue", "overdue", every_size=True),
    "ceiling_overdue_by_due": Ceiling("ceiling_overdue_by_due", "overdue_by_due", every_size=True),
    "ceiling_vaccine_get": Ceiling("ceiling_vaccine_get", "vaccine_get", every_size=True),
    "ceiling_history": Ceiling("ceiling_history", "history", every_size=True),
}
# App -> how it is started, after its --database-url and --port.
APPS = {
    "bare": [BENCH / "ceiling.py", "--owner", OWNER],
    "litestar": [BENCH / "ceiling.py", "--owner", OWNER, "--litestar"],
    "rsgi": [BENCH / "ceiling.py", "--owner", OWNER, "--rsgi"],
    "fastapi": [BENCH / "reference_fastapi.py"],
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(url, timeout=1)
            return
        time.sleep(0.2)
    raise SystemExit(f"{url} did not answer")


# wrk pads a one-letter unit ("1.32s "): without the trailing blanks, latencies of a second or more were lost.
_LATENCY = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", re.MULTILINE)
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def run_wrk(
    base: str, script: str, *, duration: int, connections: int, env: dict[str, str], timeout: int = 30
) -> dict[str, float]:
    output = subprocess.run(
        [
            "wrk",
            f"-t{WRK_THREADS}",
            f"-c{connections}",
            f"-d{duration}s",
            # wrk's own 2 s would drop the slowest requests from the latencies and count them as socket errors.
            f"--timeout={timeout}s",
            "--latency",
            "-s",
            str(SCENARIOS / f"{script}.lua"),
            base,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **env, "THREADS": str(WRK_THREADS)},
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    latencies = {p: float(v) * _UNIT[u] for p, v, u in _LATENCY.findall(output)}
    return {
        "rps": rate,
        "requests": requests,
        "p50_ms": latencies.get("50", math.nan),
        "p99_ms": latencies.get("99", math.nan),
        "non_2xx": int(non_2xx.group(1)) if non_2xx else 0,
        "socket_errors": sum(int(n) for n in errors.groups()) if errors else 0,
    }


def sqlite_url(work_dir: Path) -> str:
    return f"sqlite:///{work_dir / 'pets.sqlite3'}"


@contextlib.contextmanager
def database(kind: str, work_dir: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield sqlite_url(work_dir)
        return
    name = f"petrecords_bench_{uuid.uuid4().hex[:10]}"

    async def admin(statement: str) -> None:
        connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
        try:
            await connection.execute(statement)
        finally:
            await connection.close()

    asyncio.run(admin(f'CREATE DATABASE "{name}"'))
    try:
        yield f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        asyncio.run(admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def stoppable(own_session: bool) -> dict[str, Any]:
    """Popen's arguments for a child that is stopped with its children (its process group)."""
    return {"start_new_session": True} if own_session else {"process_group": 0}


@contextlib.contextmanager
def process(
    command: list[str], env: dict[str, str], log: Path, *, own_session: bool = False
) -> Iterator[subprocess.Popen[bytes]]:
    """`command`, stopped whole (its process group) at the end; in this session, beside wrk, unless `own_session`.
    Where the kernel groups tasks by session (`kernel.sched_autogroup_enabled`, on by default), it shares the cores
    between sessions first: a server in a session of its own has half of this 2-core machine under load and wrk the
    other half, whatever the threads of either need, a cap no server with a machine of its own has
    (results/2026-11-28-sessions.md)."""
    with log.open("wb") as sink:
        child = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, **stoppable(own_session))
    try:
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def worker_rss_mb(parent: int) -> list[float]:
    """Resident memory of the server's worker processes (its children), in MB."""
    sizes = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == parent:
                status = (entry / "status").read_text()
                rss_kb = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]
                sizes.append(rss_kb / 1024)
    return sorted(sizes)


def print_line(name: str, figures: dict[str, float], ratio: str = "") -> None:
    print(
        f"  {name:<24} {figures['rps']:>8.0f} req/s   p50 {figures['p50_ms']:>7.2f} ms   "
        f"p99 {figures['p99_ms']:>7.2f} ms   non-2xx {figures['non_2xx']:>5}"
        + (f"   socket errors {figures['socket_errors']}" if figures["socket_errors"] else "")
        + (f"   {ratio}" if ratio else ""),
        flush=True,
    )


def disk_fsync_ms(directory: Path, writes: int = 200) -> dict[str, float]:
    """p50 and p99 of appending 4 KiB to a file in `directory` and fsyncing it: what each commit of the SQLite
    store waits for at least (WAL, synchronous=FULL), on this disk, now."""
    took = []
    path = directory / "fsync-probe"
    block = b"\0" * 4096
    with path.open("ab", buffering=0) as probe:
        for _ in range(writes):
            started = time.perf_counter()
            probe.write(block)
            os.fsync(probe.fileno())
            took.append((time.perf_counter() - started) * 1000)
    path.unlink()
    centiles = statistics.quantiles(took, n=100)
    return {"p50_ms": statistics.median(took), "p99_ms": centiles[98]}


@contextlib.contextmanager
def subscribers(base: str, token: str, count: int) -> Iterator[list[int]]:
    """`count` live change streams (GET /v1/changes, Accept: text/event-stream) held open meanwhile, in a thread of
    their own; yields once all have their response headers, the events each has received so far."""
    received = [0] * count
    if not count:
        yield received
        return
    loop = asyncio.new_event_loop()
    attached = threading.Event()
    stop = asyncio.Event()
    failures: list[BaseException] = []

    async def follow(client: httpx.AsyncClient, index: int, ready: list[int]) -> None:
        headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
        async with client.stream("GET", f"{base}/v1/changes", headers=headers) as response:
            response.raise_for_status()
            ready.append(index)
            if len(ready) == count:
                attached.set()
            async for line in response.aiter_lines():
                if line.startswith("id:"):
                    received[index] += 1

    async def main() -> None:
        ready: list[int] = []
        limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None), limits=limits) as client:
            streams = [asyncio.create_task(follow(client, index, ready)) for index in range(count)]
            stopping = asyncio.create_task(stop.wait())
            done, _ = await asyncio.wait([stopping, *streams], return_when=asyncio.FIRST_COMPLETED)
            for stream in done - {stopping}:
                failures.append(stream.exception() or RuntimeError("a change stream ended"))
            attached.set()
            for task in [stopping, *streams]:
                task.cancel()
            await asyncio.gather(stopping, *streams, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        attached.wait(60)
        if failures or not attached.is_set():
            raise SystemExit(f"the change streams did not all open: {failures[:1]}")
        yield received
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
    if failures:
        raise SystemExit(f"a change stream failed: {failures[0]!r}")


def settle(args: argparse.Namespace, figures: dict[str, Any]) -> None:
    """Wait as long as the slowest requests of the run just measured took (its p99, at most wrk's timeout): wrk
    leaves requests in flight when it stops, and on SQLite their statements hold a worker's event loop, so that
    they would otherwise weigh on the next scenario's figures."""
    slowest = max(figures["p99_ms"], figures.get("alongside", {}).get("p99_ms", 0))
    if not math.isnan(slowest):
        time.sleep(min(slowest / 1000, args.timeout))


def settle_database(args: argparse.Namespace, url: str, measured: list[str]) -> None:
    """On PostgreSQL, after scenarios or ceilings that wrote, what its background work would do with their writes
    (seed.settle_postgresql), so that it does not land in the next measurement."""
    if args.database == "postgresql" and WRITING.intersection(measured):
        settle_postgresql(url)


def settle_postgresql(url: str) -> None:
    """seed.settle_postgresql on the database at `url`."""
    import seed  # it imports the service: loaded only when wanted, not at the top

    asyncio.run(seed.settle_postgresql(url))


def run_scenario(args: argparse.Namespace, base: str, name: str, wrk_env: dict[str, str], url: str) -> dict[str, Any]:
    """One scenario's figures; with load alongside, those of the scenario's own connections, with the other
    load's under "alongside" and the events the live streams received under "events_per_subscriber". A scenario
    held to get by id's p99 alone runs in rounds beside it (`in_rounds_beside_get_by_id`)."""
    if name in P99_BESIDE_GET_BY_ID:
        return in_rounds_beside_get_by_id(args, base, name, wrk_env, url)
    return run_once(args, base, name, wrk_env, url)


def p99_phase_order(round_index: int) -> tuple[bool, bool]:
    """Whether each of a round's two phases runs beside the other load: get by id alone first in the odd rounds,
    second in the even ones (`in_turn`)."""
    return in_turn(round_index, False, True)


def median_round(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose p99 beside ÷ p99 alone is the median of the rounds' (the lower middle one of an even
    number): one stall of the machine, which takes every request in flight at once, moves it by one round at most."""
    # A side with no answer at all has no p99: its round ranks last, as the worst.
    ranked = sorted(rounds, key=lambda pair: math.inf if math.isnan(pair["p99_ratio"]) else pair["p99_ratio"])
    return ranked[(len(ranked) - 1) // 2]


def in_rounds_beside_get_by_id(
    args: argparse.Namespace, base: str, name: str, wrk_env: dict[str, str], url: str
) -> dict[str, Any]:
    """`--p99-rounds` rounds, each of get by id alone and of the scenario, one right after the other: the figures
    of the scenario's median round (`median_round`), with every round's under "rounds"."""
    rounds = []
    for round_index in range(args.p99_rounds):
        pair: dict[bool, dict[str, Any]] = {}
        for beside in p99_phase_order(round_index):
            pair[beside] = run_once(args, base, name if beside else "get_by_id", wrk_env, url)
            settle(args, pair[beside])
        alone = pair[False]
        ratio = pair[True]["p99_ms"] / alone["p99_ms"] if alone["p99_ms"] else math.nan
        rounds.append({**pair[True], "alone": alone, "p99_ratio": ratio})
        print(f"    round {round_index + 1}: get by id alone {alone['rps']:.0f} req/s, p99 {alone['p99_ms']:.2f} ms; "
              f"beside {pair[True]['rps']:.0f} req/s, p99 {pair[True]['p99_ms']:.2f} ms: "
              f"{ratio:.2f} ×", flush=True)  # fmt: skip
    return {**median_round(rounds), "rounds": rounds}


def run_once(args: argparse.Namespace, base: str, name: str, wrk_env: dict[str, str], url: str) -> dict[str, Any]:
    if name in BESIDE_A_NEIGHBOUR:
        return beside_a_neighbour(args, base, name, wrk_env, url)
    extra = ALONGSIDE.get(name)
    if extra is None:
        return run_wrk(base, SERVICE_SCENARIOS[name], duration=args.duration, connections=args.connections,
                       env=wrk_env, timeout=args.timeout)  # fmt: skip
    with (
        subscribers(base, wrk_env["TOKEN"], extra.subscribers) as received,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        runs = [
            pool.submit(run_wrk, base, script, duration=args.duration, connections=connections, env=wrk_env,
                        timeout=args.timeout)
            for script, connections in ((SERVICE_SCENARIOS[name], args.connections), (extra.script, extra.connections))
        ]  # fmt: skip
        figures, alongside = (run.result() for run in runs)
        # How long after the writes stopped every stream had every change they made (at most 30 s).
        made = alongside["requests"] - alongside["non_2xx"]
        stopped = time.monotonic()
        while extra.subscribers and min(received) < made and time.monotonic() - stopped < 30:
            time.sleep(0.05)
        caught_up = time.monotonic() - stopped
    figures = {**figures, "alongside": alongside}
    if extra.subscribers:
        figures.update(subscribers=extra.subscribers, changes_made=made, catch_up_seconds=round(caught_up, 2))
        figures["events_per_subscriber"] = statistics.median(received)
        figures["fewest_events"] = min(received)
    return figures


def beside_a_neighbour(
    args: argparse.Namespace, base: str, name: str, wrk_env: dict[str, str], url: str
) -> dict[str, Any]:
    """The scenario's figures while bench/neighbour.py runs the long searches' statements, in the session the
    server is in (see `process`); its figures under "alongside"."""
    at_once = server_settings(args).get("PETRECORDS_LONG_READS_AT_ONCE", str(default_long_reads_at_once()))
    command = [BIN / "python", BENCH / "neighbour.py", "--database-url", url, "--owner", OWNER,
               "--seconds", str(args.duration), "--at-once", at_once]  # fmt: skip
    neighbour = subprocess.Popen(
        [str(part) for part in command], stdout=subprocess.PIPE, **stoppable(args.own_sessions)
    )
    try:
        figures = run_wrk(base, SERVICE_SCENARIOS[name], duration=args.duration, connections=args.connections,
                          env=wrk_env, timeout=args.timeout)  # fmt: skip
        output, _ = neighbour.communicate(timeout=args.timeout + args.duration)
    finally:
        if neighbour.poll() is None:
            neighbour.kill()
            neighbour.wait()
    if neighbour.returncode:
        raise SystemExit(f"bench/neighbour.py failed ({neighbour.returncode})")
    alongside = json.loads(output)
    return {**figures, "alongside": {**alongside, "non_2xx": 0, "socket_errors": 0}}


def vaccinations_for(args: argparse.Namespace, rows: int, scenarios: tuple[str, ...]) -> int:
    if args.vaccinations != "auto":
        return int(args.vaccinations)
    return rows if any(name in VACCINATION_SCENARIOS for name in scenarios) else 0


def run_ceilings(
    args: argparse.Namespace, names: list[str], url: str, env: dict[str, str], wrk_env: dict[str, str], log: Path
) -> dict[str, Any]:
    """The chosen ceilings, each app started once."""
    results: dict[str, Any] = {}
    for app, start in APPS.items():
        chosen = [name for name in names if CEILINGS[name].app == app]
        if not chosen:
            continue
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        ceiling = [BIN / "python", start[0], "--database-url", url, "--port", str(port)]
        ceiling += ["--workers", str(args.workers), "--threads", str(args.threads), *start[1:]]
        with process([str(part) for part in ceiling], env, log, own_session=args.own_sessions):
            wait_until_answering(f"{base}/pets/{uuid.UUID(int=0)}")
            for name in chosen:
                figures = run_wrk(
                    base,
                    CEILINGS[name].script,
                    duration=args.duration,
                    connections=args.connections,
                    env=wrk_env,
                    timeout=args.timeout,
                )
                results[name] = figures
                print_line(name, figures)
                settle(args, figures)
                settle_database(args, url, [name])
    return results


def server_settings(args: argparse.Namespace) -> dict[str, str]:
    """The measured server's own settings, from `--setting PETRECORDS_NAME=VALUE`."""
    return dict(setting.split("=", 1) for setting in args.setting)


def in_turn(round_index: int, first: T, second: T) -> tuple[T, T]:
    """A round's two phases in the order they run: as given in the odd rounds, swapped in the even ones, so that
    whatever drifts over a run (the database's files grow, the machine's other jobs come and go) weighs on both
    sides alike."""
    return (first, second) if round_index % 2 == 0 else (second, first)


def server_env(work_dir: Path, url: str) -> dict[str, str]:
    """The environment of a measured server (and of its seeder): this one's without its PETRECORDS_ settings,
    then the data directory, the database, one secret for the server and the tokens issued before it starts.
    The load is one caller: the rate limiter checks every request as with the default, at a budget no run
    reaches (the default, 6,000 a minute, would refuse it; 0 would leave the limiter out and flatter every
    figure), and its live streams alongside a scenario are all let open (the default, 10 streams per caller,
    refused the feed scenario's 100)."""
    streams = max(alongside.subscribers for alongside in ALONGSIDE.values())
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PETRECORDS_")},
        "PETRECORDS_DATA_DIR": str(work_dir),
        "PETRECORDS_DATABASE_URL": url,
        "PETRECORDS_AUTH_SECRET": secrets.token_urlsafe(48),
        "PETRECORDS_RATE_LIMIT": str(UNREACHED_RATE_LIMIT),
        "PETRECORDS_EVENTS_MAX_STREAMS_PER_CALLER": str(streams + 1),
    }


def bench_dataset(args: argparse.Namespace, rows: int, scenarios: tuple[str, ...], *, largest: bool) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="petrecords-bench-"))
    results: dict[str, Any] = {}
    try:
        with database(args.database, work_dir) as url:
            env = server_env(work_dir, url)
            ids_file, vaccinated_file = work_dir / "ids.txt", work_dir / "vaccinated.txt"
            vaccines_file = work_dir / "vaccines.txt"
            seed_report = work_dir / "seed.json"
            vaccinations = vaccinations_for(args, rows, scenarios)
            started = time.perf_counter()
            subprocess.run(
                [BIN / "python", BENCH / "seed.py", "--database-url", url, "--data-dir", str(work_dir),
                 "--rows", str(rows), "--owner", OWNER, "--ids-file", str(ids_file),
                 "--vaccinations", str(vaccinations), "--vaccinated-ids-file", str(vaccinated_file),
                 "--vaccine-ids-file", str(vaccines_file), "--report", str(seed_report),
                 *(["--catalogue"] if any(name in VACCINE_SCENARIOS for name in scenarios) else [])],
                env=env, check=True,
            )  # fmt: skip
            results["seed_seconds"] = round(time.perf_counter() - started, 1)
            results["seed"] = json.loads(seed_report.read_text())
            tokens = [
                subprocess.run(
                    [BIN / "petrecords", "token", "--user", user, *role, "--ttl", "86400"],
                    env=env, capture_output=True, text=True, check=True,
                ).stdout.strip()
                for user, role in ((OWNER, []), (ADMIN, ["--admin"]))
            ]  # fmt: skip
            wrk_env = {
                "TOKEN": tokens[0],
                "ADMIN_TOKEN": tokens[1],
                "IDS_FILE": str(ids_file),
                "VACCINATED_FILE": str(vaccinated_file),
                "VACCINES_FILE": str(vaccines_file),
                "MIDDLE_PAGE": str(max(1, rows // PAGE_SIZE // 2)),
            }
            seeded = f"seeded in {results['seed_seconds']} s"
            if vaccinations:
                seed = results["seed"]
                seeded += (
                    f"; {seed['vaccinations']:,} vaccinations of {seed['vaccines']} vaccines in "
                    f"{seed['vaccination_seconds']} s of it, {seed['overdue'] / seed['vaccinations']:.0%} overdue"
                )
            print(f"{args.database}, {rows:,} pets ({seeded}), {args.workers} workers × {args.threads} threads")
            results["fsync"] = disk_fsync_ms(work_dir)
            print(
                f"  disk: write 4 KiB + fsync in the data directory, p50 {results['fsync']['p50_ms']:.2f} ms, "
                f"p99 {results['fsync']['p99_ms']:.2f} ms; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            # The ceilings first: the delete scenario removes records their lookups would then miss.
            ceilings = [
                name
                for name, ceiling in CEILINGS.items()
                if args.ceilings
                and ceiling.bounds in scenarios
                and (largest or ceiling.every_size)
                and args.database in ceiling.databases
            ]
            results.update(run_ceilings(args, ceilings, url, env, wrk_env, work_dir / "ceiling.log"))
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            serve = [BIN / "petrecords", "serve", "--port", str(port), "--workers", str(args.workers)]
            serve += ["--threads", str(args.threads)]
            serve_env = {**env, **server_settings(args)}
            if args.serve_through_port:
                # The measured server reaches the same database through a pooler on that port (PgBouncer).
                parsed = urllib.parse.urlsplit(url)
                netloc = f"{parsed.username}@{parsed.hostname}:{args.serve_through_port}"
                serve_env["PETRECORDS_DATABASE_URL"] = parsed._replace(netloc=netloc).geturl()
            with process(
                [str(part) for part in serve], serve_env, work_dir / "serve.log", own_session=args.own_sessions
            ) as server:
                wait_until_answering(f"{base}/readyz")
                time.sleep(1)
                for name in scenarios:
                    figures = run_scenario(args, base, name, wrk_env, url)
                    results[name] = figures
                    print_line(name, figures)
                    settle(args, figures)
                    settle_database(args, url, [name])
                    if name in BESIDE_A_NEIGHBOUR:
                        print_line("  + bench/neighbour.py", figures["alongside"])
                    elif "alongside" in figures:
                        print_line(f"  + {ALONGSIDE[name].script} alongside", figures["alongside"])
                    if "events_per_subscriber" in figures:
                        caught_up = figures["catch_up_seconds"]
                        print(
                            f"    {figures['subscribers']} live change streams: at least {figures['fewest_events']} "
                            f"events each, of {figures['changes_made']} creates answered; "
                            + (f"every stream had them {caught_up} s after the writes stopped" if caught_up < 30
                               else "not all of them 30 s after the writes stopped"),
                            flush=True,
                        )  # fmt: skip
                results["worker_rss_mb"] = worker_rss_mb(server.pid)
                print(f"  worker resident memory: {', '.join(f'{size:.0f} MB' for size in results['worker_rss_mb'])}")
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return results


# (scenario, what, ceiling, what the ceiling is): each ratio of a scenario to the bare app beside it, at every size
# where both ran.
SAME_SIZE_RATIOS = (
    ("get_by_id", "get by id", "ceiling_get", "the bare lookup"),
    ("get_by_id", "get by id", "rsgi_get", "the bare RSGI lookup"),
    ("get_by_id", "get by id", "fastapi_get", "the FastAPI reference"),
    ("ceiling_get", "(bare ASGI lookup)", "rsgi_get", "the bare RSGI lookup"),
    ("litestar_get", "(bare Litestar lookup)", "ceiling_get", "the bare lookup"),
    ("fastapi_get", "(FastAPI reference)", "ceiling_get", "the bare lookup"),
    ("create", "create", "ceiling_create", "the bare create"),
    ("create", "create", "ceiling_insert", "a bare single-row insert"),
    ("pet_vaccinations", "a pet's vaccinations", "ceiling_pet_vaccinations", "its ceiling"),
    ("overdue", "overdue list", "ceiling_overdue", "its ceiling"),
    ("overdue_by_due", "overdue list by dueAt", "ceiling_overdue_by_due", "its ceiling"),
    ("vaccine_get", "vaccine by id", "ceiling_vaccine_get", "the bare lookup"),
    ("history", "a pet's history", "ceiling_history", "its ceiling"),
)
# Scenarios whose rate at the largest size is stated as a ratio to their rate at the smallest.
ACROSS_SIZES = (
    ("list_page_1", "list page 1"),
    ("pet_vaccinations", "a pet's vaccinations"),
    ("overdue", "overdue list"),
    ("overdue_by_due", "overdue list by dueAt"),
    ("vaccine_get", "vaccine by id"),
    ("vaccines_list", "vaccines list"),
    ("history", "a pet's history"),
    ("changes", "change feed pages"),
)


def ratios(by_rows: dict[int, dict[str, Any]]) -> list[tuple[str, float, str]]:
    """(what, ratio, against) for each target, from the figures of one run."""
    largest, smallest = max(by_rows), min(by_rows)
    big = by_rows[largest]
    found = []

    def add(
        what: str, numerator: dict[str, Any], name: str, denominator: dict[str, Any], against: str, base: str
    ) -> None:
        if name in numerator and base in denominator:
            found.append((what, numerator[name]["rps"] / denominator[base]["rps"], against))

    for rows, figures in sorted(by_rows.items()):
        for name, what, ceiling, against in SAME_SIZE_RATIOS:
            add(f"{what} at {rows:,}", figures, name, figures, against, ceiling)
    add(f"list middle page at {largest:,}", big, "list_middle", big, "list page 1", "list_page_1")
    if largest != smallest:
        for name, what in ACROSS_SIZES:
            add(f"{what} at {largest:,}", big, name, by_rows[smallest], f"at {smallest:,}", name)
    return found


# (scenario, what runs beside get by id in it, what its ratio to get by id alone is held to, that load, its unit)
BESIDE_GET_BY_ID: tuple[tuple[str, str, Callable[[dict[str, Any]], str], str, str], ...] = (
    (
        "get_by_id_beside_long_reads",
        "long searches",
        lambda alone: f"{alone['p99_ms']:.2f} ms; target ≤ {LONG_READS_P99_TARGET:.0f} ×",
        "the searches",
        "req/s",
    ),
    (
        "get_by_id_beside_a_neighbour",
        "the same searches in a process of their own",
        lambda alone: "the machine's own cost of such a neighbour",
        "the neighbour",
        "searches/s",
    ),
)


def write_latencies(by_rows: dict[int, dict[str, Any]]) -> list[str]:
    """The p99 of the creates under the mixed load beside the target, and the disk's own fsync in the same run; the
    p99 of reads by id beside long searches against their own alone."""
    lines = []
    for rows, figures in sorted(by_rows.items()):
        if "mixed_80_20" in figures:
            writes, disk = figures["mixed_80_20"]["alongside"], figures["fsync"]
            lines.append(
                f"  write p99 under the mixed load at {rows:,}: {writes['p99_ms']:.1f} ms "
                f"(target ≤ {WRITE_P99_TARGET_MS} ms); the disk's fsync p50 {disk['p50_ms']:.2f} ms, "
                f"p99 {disk['p99_ms']:.2f} ms"
            )
        for name, what, against, load, unit in BESIDE_GET_BY_ID:
            if name in figures:
                beside = figures[name]
                each = ", ".join(f"{pair['p99_ratio']:.2f}" for pair in beside["rounds"])
                lines.append(
                    f"  get by id p99 beside {what} at {rows:,}: {beside['p99_ms']:.2f} ms, "
                    f"{beside['p99_ratio']:.2f} × its p99 alone ({against(beside['alone'])}), the median of "
                    f"{len(beside['rounds'])} rounds ({each}); {load}: "
                    f"{beside['alongside']['rps']:.0f} {unit}, p99 {beside['alongside']['p99_ms']:.0f} ms"
                )
    return lines


IDLE_SUBSCRIBERS = 1000
SUBSCRIBER_ROUNDS = 8
"""On this machine a 5 s phase now and then answers 20-40 % fewer requests, each with a third to two thirds more CPU,
whichever side it falls on (results/2026-11-29-quiet-runs.md): in 4 rounds one such phase took about 0.1 off the
ratio."""
SUBSCRIBER_TARGETS = {"get_by_id": 0.95, "create": 0.9, "replace": 0.9, "delete": 0.9}
"""Each scenario's req/s with the idle streams ÷ without, at least (the mixed load is printed, held to none)."""
STREAM_P99_TARGET_MS = 250


def idle_subscribers(args: argparse.Namespace) -> dict[str, Any]:
    """bench/changes.py's subscribers mode on a fresh database of the run's kind: every scenario it runs without and
    with IDLE_SUBSCRIBERS streams of a caller who owns none of the writes, in `--subscriber-rounds` rounds."""
    import changes  # it imports this module: loaded only when wanted, not at the top

    # Its own command line's defaults, with this run's values over them: an option it gains is never missing here.
    options = changes.arguments().parse_args([])
    vars(options).update(
        mode="subscribers", database=args.database, rows=args.subscriber_rows, rounds=args.subscriber_rounds,
        duration=args.duration, connections=args.connections, workers=args.workers, threads=args.threads,
        subscribers=IDLE_SUBSCRIBERS, subscribers_as="other", subscriber_scenarios=changes.READ_WRITE_SCENARIOS,
        setting=args.setting,
    )  # fmt: skip
    return changes.measure_subscribers(options)  # type: ignore[no-any-return]


def cut_to_thousandths(ratio: float) -> float:
    """A ratio held to a target, as printed: cut to three places, not rounded, so that a miss never shows as its
    target (0.947 is not 0.95, as two places would print it, nor 0.9496 0.950)."""
    return math.floor(ratio * 1000) / 1000


def subscriber_lines(subscribed: dict[str, Any] | None) -> list[str]:
    """The idle subscribers' ratios, each against its target, and a change's way to a stream."""
    if subscribed is None:
        return []
    lines = []
    for name, ratio in subscribed["pooled"].items():
        target = SUBSCRIBER_TARGETS.get(name)
        held = "no target" if target is None else f"target ≥ {target}" + ("" if ratio >= target else ", missed")
        each = ", ".join(f"{value:.2f}" for value in subscribed["ratios"][name])
        lines.append(
            f"  {name} with {IDLE_SUBSCRIBERS:,} idle subscribers ÷ none: {cut_to_thousandths(ratio):.3f} × ({held}); "
            f"rounds {each}"
        )
    latency = subscribed["latency"]
    lines.append(
        f"  a create's change at a stream: p99 {latency['p99_ms']:.0f} ms (target ≤ {STREAM_P99_TARGET_MS} ms), "
        f"missing {latency['missing']}"
    )
    return lines


def compare_configurations(args: argparse.Namespace, rows: int, scenarios: tuple[str, ...]) -> None:
    """The same scenarios under each `serve` configuration, one after another, and a table of them."""
    table: dict[str, dict[str, Any]] = {}
    args.ceilings = False  # the configurations are compared with one another, not with the bare app
    for config in args.configs.split(","):
        workers, threads = (int(part) for part in config.split("x"))
        args.workers, args.threads = workers, threads
        table[config] = bench_dataset(args, rows, scenarios, largest=True)
    print("\nreq/s by configuration (workers x threads):")
    print(f"  {'':<16}" + "".join(f"{config:>10}" for config in table))
    for name in scenarios:
        print(f"  {name:<16}" + "".join(f"{table[config][name]['rps']:>10.0f}" for config in table))
    if args.json:
        args.json.write_text(json.dumps({"configs": table}, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--rows", default="10000,1000000", help="comma-separated dataset sizes")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="serve --threads")
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=30, help="seconds before wrk gives up on a response")
    parser.add_argument("--scenarios", default=",".join(SERVICE_SCENARIOS))
    parser.add_argument("--no-ceilings", dest="ceilings", action="store_false")
    parser.add_argument(
        "--vaccinations",
        default="auto",
        help="vaccinations seeded at every size; auto: as many as pets when a vaccination scenario runs, else none",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--serve-through-port",
        type=int,
        help="PostgreSQL: the measured server connects through this port on the same host (a PgBouncer for every "
        "database) instead of directly; seeding and the ceilings connect directly",
    )
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="PETRECORDS_NAME=VALUE",
        help="a setting of the measured server (not of the ceilings), e.g. PETRECORDS_DB_POOLER=transaction",
    )
    parser.add_argument(
        "--p99-rounds",
        type=int,
        default=3,
        help="rounds of get by id alone and beside long searches (and beside a neighbour), in turn first and second; "
        "the p99 ratio is their median",
    )
    parser.add_argument(
        "--subscriber-rounds",
        type=int,
        help="after the datasets, rounds of 1,000 idle live subscribers against none (bench/changes.py's subscribers "
        f"mode, with this run's database, duration, connections and settings, its server in this session); 0: none; "
        f"default {SUBSCRIBER_ROUNDS} when every scenario runs (no --scenarios) and no --serve-through-port, else 0",
    )
    parser.add_argument(
        "--subscriber-rows",
        type=int,
        help="pets seeded for the idle subscribers' rounds: replace and delete take a slice of them in each phase; "
        "default and least: enough for the rounds' deletes, 2 × rounds × 5,000 × --duration (800,000 for 8 rounds "
        "of 10 s, 400,000 of 5 s)",
    )
    parser.add_argument(
        "--configs",
        help="compare serve configurations instead, e.g. 1x1,2x1,2x2 (workers x threads), on the smallest --rows",
    )
    parser.add_argument(
        "--own-sessions",
        action="store_true",
        help="start the servers and bench/neighbour.py each in a session of its own, not in this one beside wrk "
        "(the kernel then shares the cores between sessions first: results/2026-11-28-sessions.md)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    if args.p99_rounds < 1:
        parser.error("--p99-rounds: at least 1")
    if args.subscriber_rounds is None:
        every_scenario = args.scenarios == parser.get_default("scenarios")
        args.subscriber_rounds = SUBSCRIBER_ROUNDS if every_scenario and not args.serve_through_port else 0
    if args.subscriber_rounds and args.serve_through_port:
        parser.error("--subscriber-rounds: their server connects directly, not through --serve-through-port")
    if args.subscriber_rounds < 0:
        parser.error("--subscriber-rounds: 0 or more")
    if args.subscriber_rounds:
        import changes  # it imports this module: loaded only when wanted, not at the top

        if args.subscriber_rows is None:
            args.subscriber_rows = changes.rows_for_subscriber_rounds(args.subscriber_rounds, args.duration)
        elif refusal := changes.too_few_rows(args.subscriber_rows, args.subscriber_rounds, args.duration):
            # Refused now, not after the datasets' hour.
            parser.error(f"--subscriber-rows: {refusal}")
    sizes = sorted(int(size) for size in args.rows.split(","))
    chosen = tuple(name for name in args.scenarios.split(",") if name)
    if args.configs:
        compare_configurations(args, sizes[0], chosen)
        return
    by_rows: dict[int, dict[str, Any]] = {}
    for rows in sizes:
        scenarios = chosen if rows == sizes[-1] else tuple(name for name in chosen if name in SMALL_SCENARIOS)
        by_rows[rows] = bench_dataset(args, rows, scenarios, largest=rows == sizes[-1])
    print("ratios (same run):")
    for what, value, against in ratios(by_rows):
        print(f"  {what:<40} {value:>5.2f} × {against}", flush=True)
    for line in write_latencies(by_rows):
        print(line, flush=True)
    found = [{"what": w, "ratio": round(v, 3), "against": a} for w, v, a in ratios(by_rows)]
    report = {"database": args.database, "workers": args.workers, "connections": args.connections,
              "duration": args.duration, "results": by_rows, "ratios": found, "subscribers": None}  # fmt: skip
    # Written before the subscribers' rounds as well, so that the datasets' figures outlive a failure of theirs.
    keep_report(args, report)
    if args.subscriber_rounds:
        report["subscribers"] = idle_subscribers(args)
        keep_report(args, report)
        print("idle subscribers (same run):")
        for line in subscriber_lines(report["subscribers"]):
            print(line)


def keep_report(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
