"""Load benchmark: a real `petrecords serve` on loopback, driven by wrk.

Usage: .venv/bin/python bench/run.py [--workers 2] [--seed 10000] [--duration 10] [--connections 64]
       [--database-url postgresql://...]
Prints one line per scenario: requests/s, p50, p99 and non-2xx responses.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
SCENARIOS_DIR = Path(__file__).parent / "scenarios"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_ready(base: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit("the server did not become ready")


def seed(base: str, token: str, count: int) -> list[str]:
    """Create `count` pets through the API, a few connections at a time."""
    headers = {"Authorization": f"Bearer {token}"}
    pet_types = ["Dog", "Cat", "Capybara", "Other"]
    ids: list[str] = []
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        for index in range(count):
            body = {"name": f"pet {index} {random.choice('abcdefgh')}", "petType": random.choice(pet_types)}
            ids.append(client.post("/v1/pets", json=body).json()["id"])
    return ids


_LATENCY = re.compile(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)$", re.MULTILINE)
_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def run_wrk(base: str, script: Path, *, duration: int, connections: int, env: dict[str, str]) -> dict[str, float]:
    output = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(script), base],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        check=True,
    ).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1))  # type: ignore[union-attr]
    non_2xx_match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    latencies = {p: float(v) * _UNIT[u] for p, v, u in _LATENCY.findall(output)}
    return {
        "rps": rate,
        "p50_ms": latencies.get("50", float("nan")),
        "p99_ms": latencies.get("99", float("nan")),
        "non_2xx": int(non_2xx_match.group(1)) if non_2xx_match else 0,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2000)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")

    data_dir = Path(tempfile.mkdtemp(prefix="petrecords-bench-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PETRECORDS_DATA_DIR": str(data_dir),
        "PETRECORDS_ACCESS_LOG": "false",
        "PETRECORDS_RATE_LIMIT": "0",
    }
    if args.database_url:
        env["PETRECORDS_DATABASE_URL"] = args.database_url
    server = subprocess.Popen(
        [BIN / "petrecords", "serve", "--port", str(port), "--workers", str(args.workers)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_ready(base)
        token = subprocess.run(
            [BIN / "petrecords", "token", "--user", "bench@example.com", "--ttl", "86400"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        ids = seed(base, token, args.seed)
        ids_file = data_dir / "ids.txt"
        ids_file.write_text("\n".join(ids) + "\n")
        wrk_env = {"TOKEN": token, "IDS_FILE": str(ids_file)}
        results = {}
        for scenario in ("get_by_id", "list_page_1", "list_filtered", "create", "replace", "mixed"):
            results[scenario] = run_wrk(
                base,
                SCENARIOS_DIR / f"{scenario}.lua",
                duration=args.duration,
                connections=args.connections,
                env=wrk_env,
            )
            r = results[scenario]
            print(
                f"{scenario:<16} {r['rps']:>9.0f} req/s   p50 {r['p50_ms']:>7.2f} ms   "
                f"p99 {r['p99_ms']:>7.2f} ms   non-2xx {r['non_2xx']}"
            )
        print(json.dumps({"workers": args.workers, "seed": args.seed, "results": results}))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
