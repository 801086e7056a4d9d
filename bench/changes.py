"""What history and the change feed cost: two measurements, each within one run.

`writes`: create, replace (with If-Match) and delete on this checkout and on the service as it was before
the change log (commit ba97188, checked out in its own worktree with its own virtual environment), each on
its own freshly seeded database of the same size, both servers up at once on loopback, the scenarios run
on one and then the other (A B A B …) so that the machine's noise hits both; ratio current ÷ before.

`subscribers`: get by id, create and the mixed load on this checkout, without and with live subscribers
(`Accept: text/event-stream` on `/v1/changes`, held by a separate process that only reads), without first in the
odd rounds and with first in the even ones, with each worker's resident memory and CPU; then how long a change
takes from its create's 201 to a subscriber. `--subscribers 0` runs both phases of each round without: their
ratios are the noise of the comparison.

Usage: .venv/bin/python bench/changes.py [--mode writes,subscribers] [--database sqlite|postgresql]
       [--rows 100000] [--rounds 2] [--duration 5] [--connections 64] [--before-commit ba97188]
       [--before /tmp/pr-ba97188] [--scenarios create,replace,delete]
       [--subscribers 1000] [--subscribers-as other|owner] [--subscriber-scenarios get_by_id,create,...]
       [--probe-writes 300] [--json results.json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from run import (
    OWNER,
    SERVICE_SCENARIOS,
    cut_to_thousandths,
    database,
    free_port,
    in_turn,
    print_line,
    process,
    run_wrk,
    server_env,
    server_settings,
    settle_postgresql,
    wait_until_answering,
    worker_rss_mb,
)

HERE = Path(__file__).resolve().parent.parent
BEFORE_COMMIT = "ba97188"
"""The last commit without the change log (its successor, 8b0e318, keeps every write as a change)."""
WATCHER = "watcher@example.com"
"""Owns nothing: subscribed as this user, a stream receives none of the load's changes, only keep-alives."""
HELD = ("streams", "connections")
"""What the subscribers' phase holds open: live streams, or connections left idle after one request."""
WRITE_SCENARIOS = ("create", "replace", "delete")
# Replace and delete last, each phase on its own slice of the seeded records (delete uses them up).
READ_WRITE_SCENARIOS = ("get_by_id", "create", "mixed_80_20", "replace", "delete")
SLICED_SCENARIOS = ("replace", "delete")
MOST_DELETES_PER_SECOND = 5_000
"""Twice the deletes a second of a phase of the idle subscribers' rounds on this machine (about 2,500 on SQLite): each
phase's slice of the seeded records holds its `duration` seconds of deletes at this rate, so that delete never runs
out of records rather than measuring 404s."""
ROWS = 100_000
"""Pets seeded by default: in the subscribers' mode, more when its rounds delete more (rows_for_subscriber_rounds)."""
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Checkout:
    """A checkout of the service with its own virtual environment: its code, its seeder, its server."""

    name: str
    root: Path

    @property
    def bin(self) -> Path:
        return self.root / ".venv" / "bin"


@dataclass
class Served:
    """A seeded database and a running `petrecords serve` on it."""

    checkout: Checkout
    base: str
    pid: int
    ids: list[str]
    wrk_env: dict[str, str]
    work_dir: Path
    env: dict[str, str]
    results: dict[str, list[dict[str, float]]] = field(default_factory=dict)


def prepare_before(path: Path, commit: str = BEFORE_COMMIT) -> Checkout:
    if not (path / ".venv" / "bin" / "petrecords").exists():
        if not path.exists():
            add = ["git", "-C", str(HERE), "worktree", "add", "--detach", str(path), commit]
            subprocess.run(add, check=True)
        subprocess.run(["make", "-C", str(path), "install"], check=True)
    head = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return Checkout(f"before ({head.stdout.strip()})", path)


def worker_pids(parent: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == parent:
                    pids.append(int(entry.name))
    return sorted(pids)


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def sockets_of(pid: int) -> int:
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd).startswith("socket:")
    return count


class WorkerCpu:
    """The share of a core each worker of a server used between start() and stop()."""

    def __init__(self, parent: int) -> None:
        self.pids = worker_pids(parent)
        self._started: dict[int, float] = {}
        self._at = 0.0

    def start(self) -> None:
        self._at = time.monotonic()
        self._started = {pid: cpu_seconds(pid) for pid in self.pids}

    def stop(self) -> list[float]:
        elapsed = time.monotonic() - self._at
        return [round((cpu_seconds(pid) - self._started[pid]) / elapsed, 3) for pid in self.pids]


@contextlib.contextmanager
def serve(
    args: argparse.Namespace, checkout: Checkout, rows: int, settings: dict[str, str] | None = None
) -> Iterator[Served]:
    """A fresh database of `rows` pets seeded by the checkout's own seeder, and its server on it (with `settings`
    besides the bench's)."""
    work_dir = Path(tempfile.mkdtemp(prefix=f"petrecords-changes-{checkout.root.name}-"))
    try:
        with database(args.database, work_dir) as url:
            env = server_env(work_dir, url)
            env.pop("PYTHONPATH", None)  # each checkout runs its own sources
            env["PETRECORDS_ACCESS_LOG"] = "false" if args.no_access_log else "true"
            env.update(settings or {})
            ids_file = work_dir / "ids.txt"
            subprocess.run(
                [checkout.bin / "python", checkout.root / "bench" / "seed.py", "--database-url", url,
                 "--data-dir", str(work_dir), "--rows", str(rows), "--owner", OWNER, "--ids-file", str(ids_file),
                 "--sample", str(rows)],
                env=env, check=True, cwd=checkout.root,
            )  # fmt: skip
            tokens = {
                user: subprocess.run(
                    [checkout.bin / "petrecords", "token", "--user", user, "--ttl", "86400"],
                    env=env, capture_output=True, text=True, check=True, cwd=checkout.root,
                ).stdout.strip()
                for user in (OWNER, WATCHER)
            }  # fmt: skip
            port = free_port()
            command = [str(checkout.bin / "petrecords"), "serve", "--port", str(port), "--workers", str(args.workers)]
            command += ["--threads", str(args.threads)]
            with process(command, env, work_dir / "serve.log") as server:
                base = f"http://127.0.0.1:{port}"
                wait_until_answering(f"{base}/readyz")
                time.sleep(1)
                wrk_env = {"TOKEN": tokens[OWNER], "WATCHER_TOKEN": tokens[WATCHER], "IDS_FILE": str(ids_file)}
                yield Served(checkout, base, server.pid, ids_file.read_text().splitlines(), wrk_env, work_dir, env)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def ids_for_round(served: Served, round_index: int, rounds: int) -> dict[str, str]:
    """The wrk environment with the round's own slice of the seeded ids: replace needs the ETags the seeder
    wrote (an earlier round changed those of its slice), and delete ids that are still there."""
    size = len(served.ids) // rounds
    path = served.work_dir / f"ids-{round_index}.txt"
    path.write_text("\n".join(served.ids[round_index * size : (round_index + 1) * size]) + "\n")
    return {**served.wrk_env, "IDS_FILE": str(path)}


def rows_for_subscriber_rounds(rounds: int, duration: int, scenarios: tuple[str, ...] = READ_WRITE_SCENARIOS) -> int:
    """The fewest pets the subscribers' mode seeds for `rounds` of `scenarios`: when they delete, a slice for each of a
    round's two phases that holds `duration` seconds of deletes at MOST_DELETES_PER_SECOND (the reads share the last
    phase's slice); else none (replace wraps around its slice, keeping the ETags it is given)."""
    return 2 * rounds * MOST_DELETES_PER_SECOND * duration if "delete" in scenarios else 0


def too_few_rows(
    rows: int, rounds: int, duration: int, scenarios: tuple[str, ...] = READ_WRITE_SCENARIOS
) -> str | None:
    """Why `rows` seeded pets cannot serve the subscribers' rounds, if they cannot: said before anything is seeded."""
    fewest = rows_for_subscriber_rounds(rounds, duration, scenarios)
    if rows >= fewest:
        return None
    return f"{rounds} rounds of {duration} s delete up to {fewest:,} pets; {rows:,} are too few"


def summary(figures: list[dict[str, float]]) -> dict[str, float]:
    return {
        "cpu_ms_per_request": statistics.fmean(f["cpu_ms_per_request"] for f in figures),
        "rps": statistics.fmean(f["rps"] for f in figures),
        "p50_ms": statistics.fmean(f["p50_ms"] for f in figures),
        "p99_ms": statistics.fmean(f["p99_ms"] for f in figures),
        "non_2xx": sum(f["non_2xx"] for f in figures),
        "socket_errors": sum(f["socket_errors"] for f in figures),
    }


def measure_writes(args: argparse.Namespace) -> dict[str, Any]:
    current = Checkout("current", HERE)
    before = prepare_before(args.before, args.before_commit)
    print(
        f"writes: {args.database}, {args.rows:,} pets each, {args.rounds} rounds of {args.duration} s, "
        f"{args.connections} connections; {current.name} = {HERE}, {before.name} = {before.root}",
        flush=True,
    )
    report: dict[str, Any] = {"rounds": [], "summary": {}}
    with serve(args, current, args.rows) as now, serve(args, before, args.rows) as then:
        workers = {id(served): WorkerCpu(served.pid) for served in (now, then)}
        for round_index in range(args.rounds):
            envs = {id(s): ids_for_round(s, round_index, args.rounds) for s in (now, then)}
            print(f" round {round_index + 1} (load average {os.getloadavg()[0]:.2f})", flush=True)
            for name in args.scenarios:
                for served in (now, then):
                    cpu = workers[id(served)]
                    cpu.start()
                    figures = run_wrk(
                        served.base,
                        SERVICE_SCENARIOS[name],
                        duration=args.duration,
                        connections=args.connections,
                        env=envs[id(served)],
                    )
                    # The workers' CPU per write: its cost, whatever share of the cores the other jobs left them.
                    figures["cpu_ms_per_request"] = sum(cpu.stop()) * 1000 / figures["rps"]
                    served.results.setdefault(name, []).append(figures)
                    print_line(f"{name} {served.checkout.name}", figures, f"{figures['cpu_ms_per_request']:.2f} ms CPU")
                ratio = now.results[name][-1]["rps"] / then.results[name][-1]["rps"]
                print(f"    {name}: current ÷ before {ratio:.2f}", flush=True)
        report["rss_mb"] = {"current": worker_rss_mb(now.pid), "before": worker_rss_mb(then.pid)}
        report["load_average"] = os.getloadavg()
        print(" current ÷ before, over the rounds (mean req/s, mean p50, mean p99):")
        for name in args.scenarios:
            a, b = summary(now.results[name]), summary(then.results[name])
            per_round = [x["rps"] / y["rps"] for x, y in zip(now.results[name], then.results[name], strict=True)]
            cpu_ratio = a["cpu_ms_per_request"] / b["cpu_ms_per_request"]
            report["summary"][name] = {
                "current": a,
                "before": b,
                "ratio": a["rps"] / b["rps"],
                "per_round": per_round,
                "cpu_per_request_ratio": cpu_ratio,
            }
            print(
                f"  {name:<8} current {a['rps']:>6.0f} req/s p50 {a['p50_ms']:6.1f} ms p99 {a['p99_ms']:7.1f} ms | "
                f"before {b['rps']:>6.0f} req/s p50 {b['p50_ms']:6.1f} ms p99 {b['p99_ms']:7.1f} ms | "
                f"ratio {a['rps'] / b['rps']:.2f} (rounds: {', '.join(f'{r:.2f}' for r in per_round)}); "
                f"non-2xx {a['non_2xx']}/{b['non_2xx']}; worker CPU per write {a['cpu_ms_per_request']:.2f} ms ÷ "
                f"{b['cpu_ms_per_request']:.2f} ms = {cpu_ratio:.2f}",
                flush=True,
            )
        report["results"] = {"current": now.results, "before": then.results}
    return report


# --- live subscribers ------------------------------------------------------------------------------------


async def _subscribe(
    host: str,
    port: int,
    token: str,
    counts: list[int],
    ready: asyncio.Event,
    arrivals: dict[str, float] | None,
    *,
    stream: bool = True,
) -> None:
    """A live stream, read until it ends; not `stream`: a connection left idle after one liveness check (what the
    HTTP server alone pays for an open connection, with nothing of the service's held for it)."""
    reader, writer = await asyncio.open_connection(host, port)
    path = "/v1/changes?resource=pets" if stream else "/healthz"
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise SystemExit(f"subscription refused: {head[:200]!r}")
    if not stream:
        length = next((line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")), None)
        if length is None:
            raise SystemExit(f"no Content-Length in the answer to {path}: {head[:200]!r}")
        await reader.readexactly(int(length.split(b":")[1]))
    counts[1] += 1
    if counts[1] == counts[2]:
        ready.set()
    pending = b""
    while chunk := await reader.read(65536):
        counts[0] += chunk.count(b"\ndata: ")
        if arrivals is None:
            continue
        # The probe: when each created pet's change arrived (chunked framing aside, a data line is whole JSON).
        pending += chunk
        *lines, pending = pending.split(b"\n")
        now = time.time()
        for line in lines:
            if line.startswith(b"data: "):
                change = json.loads(line[6:])
                if change["action"] == "created":
                    arrivals[change["id"]] = now
    counts[3] += 1  # closed by the server


async def _hold_subscribers(args: argparse.Namespace) -> None:
    """Open the subscriptions, say so on standard output, read until SIGTERM, then write what arrived."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.count + 256)), hard))
    host, port = args.url.split("//", 1)[1].split(":")
    # Data lines received, streams opened, streams wanted, streams the server closed.
    counts = [0, 0, args.count + bool(args.probe_token), 0]
    ready = asyncio.Event()
    arrivals: dict[str, float] = {}
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    tasks = []
    if args.probe_token:
        tasks.append(asyncio.create_task(_subscribe(host, int(port), args.probe_token, counts, ready, arrivals)))
    for _ in range(args.count):
        subscription = _subscribe(host, int(port), args.token, counts, ready, None, stream=args.held == "streams")
        tasks.append(asyncio.create_task(subscription))
        await asyncio.sleep(0.002)  # within the kernel's accept queue
    await asyncio.wait_for(ready.wait(), 60)
    print("ready", flush=True)
    await stop.wait()
    failed = [task for task in tasks if task.done() and task.exception() is not None]
    for task in tasks:
        task.cancel()
    args.report.write_text(json.dumps({"events": counts[0], "open": counts[1], "closed": counts[3],
                                       "failed": len(failed), "arrivals": arrivals}))  # fmt: skip


@contextlib.contextmanager
def subscribers(
    served: Served, count: int, token: str, report: Path, *, probe: bool = False, held: str = "streams"
) -> Iterator[subprocess.Popen[bytes]]:
    """`count` live streams as the owner of `token` (`held` "connections": idle connections instead), and with
    `probe` one more stream as the writer, which notes when each created pet's change arrives."""
    command = [sys.executable, __file__, "hold-subscribers", "--url", served.base, "--count", str(count)]
    command += ["--token", token, "--report", str(report), "--held", held]
    command += ["--probe-token", served.wrk_env["TOKEN"]] if probe else []
    child = subprocess.Popen(command, stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != b"ready":
            raise SystemExit("the subscribers could not connect")
        yield child
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)
        child.wait(timeout=60)


def probe_latency(served: Served, writes: int, report: Path, holder: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Creates one after another, a few a second; from each 201 to its change at the probe subscriber."""
    answered: dict[str, float] = {}
    headers = {"Authorization": f"Bearer {served.wrk_env['TOKEN']}"}
    with httpx.Client(base_url=served.base, headers=headers, timeout=30) as client:
        for index in range(writes):
            response = client.post("/v1/pets", json={"name": f"probe {index}", "petType": "Dog"})
            answered[response.json()["id"]] = time.time()
            time.sleep(0.03)
    time.sleep(2)
    os.kill(holder.pid, signal.SIGTERM)
    holder.wait(timeout=60)
    arrivals = json.loads(report.read_text())["arrivals"]
    delays = sorted((arrivals[pet] - at) * 1000 for pet, at in answered.items() if pet in arrivals)
    missing = sum(pet not in arrivals for pet in answered)

    def percentile(q: float) -> float:
        return delays[min(len(delays) - 1, math.ceil(q * len(delays)) - 1)] if delays else math.nan

    return {"writes": writes, "missing": missing, "p50_ms": percentile(0.5), "p99_ms": percentile(0.99),
            "max_ms": delays[-1] if delays else math.nan}  # fmt: skip


def phase_order(round_index: int, subscribers: int) -> tuple[tuple[bool, int], ...]:
    """A round's two phases, each as (whether it is the one measured with the streams, how many streams it has):
    without then with in the odd rounds, with then without in the even ones (`in_turn`). With no subscribers both
    phases are without: their ratios are the noise of the comparison."""
    return in_turn(round_index, (False, 0), (True, subscribers))


def measured_pairs(phases: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each round's phase with the streams and its phase without, in the order of the rounds."""
    by_round: dict[int, dict[bool, dict[str, Any]]] = {}
    for phase in phases:
        by_round.setdefault(phase["round"], {})[phase["measured"]] = phase
    return [(pair[True], pair[False]) for _, pair in sorted(by_round.items())]


def pooled_ratio(pairs: list[tuple[dict[str, Any], dict[str, Any]]], name: str) -> float:
    """A scenario's req/s with the streams ÷ without, over all the rounds: their requests summed on each side
    (every phase lasts as long), not a mean of each round's ratio, so that a round's drift cancels out against
    the next one's."""
    without = sum(phase[name]["rps"] for _, phase in pairs)
    return sum(phase[name]["rps"] for phase, _ in pairs) / without if without else math.nan


def measure_subscribers(args: argparse.Namespace) -> dict[str, Any]:
    current = Checkout("current", HERE)
    report: dict[str, Any] = {"phases": []}
    # The streams are one caller's: the limit of streams per caller (10 by default) would refuse all but ten.
    streams = {"PETRECORDS_EVENTS_MAX_STREAMS_PER_CALLER": str(args.subscribers + 1)}
    if args.held == "connections":
        # Idle connections are closed after 5 s by default: the control would hold none while it measures.
        streams["PETRECORDS_IDLE_TIMEOUT_SECONDS"] = "3600"
    with serve(args, current, args.rows, {**server_settings(args), **streams}) as served:
        token = served.wrk_env["WATCHER_TOKEN" if args.subscribers_as == "other" else "TOKEN"]
        print(f"subscribers: {args.database}, {args.rows:,} pets, {args.subscribers:,} {args.held} as "
              f"{args.subscribers_as}, {args.rounds} rounds of {args.duration} s", flush=True)  # fmt: skip
        holder_report = served.work_dir / "subscribers.json"
        for round_index in range(args.rounds):
            for measured, attached in phase_order(round_index, args.subscribers):
                phase: dict[str, Any] = {"round": round_index + 1, "subscribers": attached, "measured": measured}
                if report["phases"] and args.database == "postgresql":
                    # The last phase's writes vacuumed and checkpointed now, not during this phase's reads.
                    settle_postgresql(served.env["PETRECORDS_DATABASE_URL"])
                with contextlib.ExitStack() as stack:
                    if attached:
                        stack.enter_context(subscribers(served, attached, token, holder_report, held=args.held))
                        time.sleep(1)
                    cpu = WorkerCpu(served.pid)
                    phase["sockets"] = [sockets_of(pid) for pid in cpu.pids]
                    cpu.start()
                    time.sleep(args.duration)
                    phase["idle_cpu"] = cpu.stop()
                    side = "measured" if measured else "baseline"
                    print(f" round {round_index + 1}, {attached} subscribers, {side} (load average "
                          f"{os.getloadavg()[0]:.2f}); sockets per worker {phase['sockets']}; "
                          f"worker CPU, no requests: {phase['idle_cpu']}", flush=True)  # fmt: skip
                    # Reads go to the last slice, which no delete reaches before the last phase's reads are done.
                    phases = 2 * args.rounds
                    sliced = ids_for_round(served, len(report["phases"]), phases)
                    kept = ids_for_round(served, phases - 1, phases)
                    for name in args.subscriber_scenarios:
                        cpu.start()
                        figures = run_wrk(
                            served.base,
                            SERVICE_SCENARIOS[name],
                            duration=args.duration,
                            connections=args.connections,
                            env=sliced if name in SLICED_SCENARIOS else kept,
                        )
                        shares = cpu.stop()
                        figures["worker_cpu"] = shares  # type: ignore[assignment]
                        # CPU per request: what the subscribers add to each, whatever share of the cores the
                        # workers got from the other jobs on the machine meanwhile.
                        # No answer in the whole phase (the server stalled) is a figure too, not a crash of the bench.
                        rps = figures["rps"]
                        figures["cpu_ms_per_request"] = sum(shares) * 1000 / rps if rps else float("inf")
                        phase[name] = figures
                        line = f"worker CPU {shares}, {figures['cpu_ms_per_request']:.2f} ms per request"
                        print_line(name, figures, line)
                    phase["rss_mb"] = worker_rss_mb(served.pid)
                    print(f"  worker resident memory: {phase['rss_mb']} MB", flush=True)
                if attached:
                    phase["received"] = {
                        k: v for k, v in json.loads(holder_report.read_text()).items() if k != "arrivals"
                    }
                    print(f"  subscribers: {phase['received']}", flush=True)
                report["phases"].append(phase)
        print(" with ÷ without subscribers (req/s): all rounds together, then each round")
        pairs = measured_pairs(report["phases"])
        report["ratios"], report["pooled"] = {}, {}
        for name in args.subscriber_scenarios:
            rounds = [w[name]["rps"] / o[name]["rps"] if o[name]["rps"] else math.nan for w, o in pairs]
            report["ratios"][name] = rounds
            pooled = report["pooled"][name] = pooled_ratio(pairs, name)
            p99 = [f"{o[name]['p99_ms']:.1f}→{w[name]['p99_ms']:.1f}" for w, o in pairs]
            cpu_ms = [f"{o[name]['cpu_ms_per_request']:.2f}→{w[name]['cpu_ms_per_request']:.2f}" for w, o in pairs]
            # A phase whose slice of seeded records ran out (deletes of records already deleted) measured 404s.
            failed = sum(p[name]["non_2xx"] for pair in pairs for p in pair)
            warning = f"   NOT COMPARABLE: {failed} non-2xx answers (more --rows)" if failed else ""
            print(
                f"  {name:<12} {cut_to_thousandths(pooled):.3f} ({', '.join(f'{r:.2f}' for r in rounds)})   "
                f"p99 ms {', '.join(p99)}   "
                f"worker CPU ms per request {', '.join(cpu_ms)}{warning}",
                flush=True,
            )
        with subscribers(served, args.subscribers, token, holder_report, probe=True) as holder:
            time.sleep(1)
            report["latency"] = probe_latency(served, args.probe_writes, holder_report, holder)
        latency = report["latency"]
        print(f" from a create's 201 to its change at a subscriber ({args.subscribers:,} others attached, "
              f"{latency['writes']} creates): p50 {latency['p50_ms']:.0f} ms, p99 {latency['p99_ms']:.0f} ms, "
              f"max {latency['max_ms']:.0f} ms, missing {latency['missing']}", flush=True)  # fmt: skip
    return report


def arguments() -> argparse.ArgumentParser:
    """The command line's options (bench/run.py builds the subscribers' from them too)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="writes,subscribers", help="writes, subscribers, or both")
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument(
        "--rows",
        type=int,
        help=f"pets seeded for each server; default {ROWS:,}, or in the subscribers' mode enough for its rounds' "
        f"deletes if that is more (2 × rounds × {MOST_DELETES_PER_SECOND:,} × duration)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=2,
        help="A B pairs (writes), without/with pairs, in turn with/without (subscribers)",
    )
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--before-commit", default=BEFORE_COMMIT, help="writes: the commit measured against")
    parser.add_argument("--before", type=Path, help="writes: its checkout (made, with its venv, if missing)")
    parser.add_argument(
        "--scenarios", type=lambda names: tuple(names.split(",")), default=WRITE_SCENARIOS, help="writes: which ones"
    )
    parser.add_argument("--subscribers", type=int, default=1000)
    parser.add_argument(
        "--subscriber-scenarios",
        type=lambda names: tuple(names.split(",")),
        default=READ_WRITE_SCENARIOS,
        help="subscribers: which ones, in each phase (always run in the order of this default)",
    )
    parser.add_argument(
        "--subscribers-as",
        choices=["other", "owner"],
        default="other",
        help="other: a user who owns nothing (their streams get keep-alives only); owner: the writer (every change)",
    )
    parser.add_argument(
        "--held",
        choices=HELD,
        default="streams",
        help="subscribers: live streams, or as many connections left idle after one request (the HTTP server's "
        "own cost of an open connection, the control)",
    )
    parser.add_argument("--probe-writes", type=int, default=300)
    parser.add_argument("--no-access-log", action="store_true", help="PETRECORDS_ACCESS_LOG=false on both servers")
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        metavar="PETRECORDS_NAME=VALUE",
        help="subscribers: a setting of the measured server",
    )
    parser.add_argument("--json", type=Path)
    return parser


def main() -> None:
    if sys.argv[1:2] == ["hold-subscribers"]:
        holder = argparse.ArgumentParser()
        holder.add_argument("command")
        holder.add_argument("--url", required=True)
        holder.add_argument("--count", type=int, required=True)
        holder.add_argument("--token", required=True)
        holder.add_argument("--probe-token")
        holder.add_argument("--report", type=Path, required=True)
        holder.add_argument("--held", choices=HELD, default="streams")
        asyncio.run(_hold_subscribers(holder.parse_args()))
        return
    parser = arguments()
    args = parser.parse_args()
    if unknown := set(args.subscriber_scenarios) - set(READ_WRITE_SCENARIOS):
        parser.error(f"--subscriber-scenarios: {', '.join(sorted(unknown))}; expected some of {READ_WRITE_SCENARIOS}")
    # In their fixed order, each once: deletes come after the reads of the ids they would remove.
    args.subscriber_scenarios = tuple(name for name in READ_WRITE_SCENARIOS if name in args.subscriber_scenarios)
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    modes = args.mode.split(",")
    subscribed = "subscribers" in modes
    if args.rows is None:
        fewest = rows_for_subscriber_rounds(args.rounds, args.duration, args.subscriber_scenarios) if subscribed else 0
        args.rows = max(ROWS, fewest)
    elif subscribed and (refusal := too_few_rows(args.rows, args.rounds, args.duration, args.subscriber_scenarios)):
        parser.error(f"--rows: {refusal}")
    if args.before is None:
        args.before = Path(tempfile.gettempdir()) / f"pr-{args.before_commit}"
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    report: dict[str, Any] = {"database": args.database, "rows": args.rows, "duration": args.duration}
    if "writes" in modes:
        report["writes"] = measure_writes(args)
    if "subscribers" in modes:
        report["subscribers"] = measure_subscribers(args)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
