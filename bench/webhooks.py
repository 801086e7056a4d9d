"""What webhooks cost and how fast they go, within one run of a real `petrecords serve` (SQLite, 2 workers, the
defaults otherwise):

- **throughput**: one webhook to a local receiver (tests/webhooks/receivers.py, a thread of its own) that answers
  at once. `--changes` pets are created while the webhook is disabled; it is then enabled, and the time until the
  receiver has every change is the delivery rate (changes/s, one at a time, in commit order).
- **hanging receivers**: creates per second by `--connections` concurrent clients for `--duration` s, without
  webhooks, then with 20 webhooks of the writer whose receivers never answer (each holds a connection for the
  timeout, tries again, and so on), alternated over `--rounds`; the ratio with ÷ without.

    .venv/bin/python bench/webhooks.py --changes 2000 --duration 5 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.servers import Server, running_server
from tests.webhooks.receivers import Receiver

USER = "bench@example.com"
SETTINGS = {"PETRECORDS_WEBHOOKS_ALLOW_PRIVATE": "true"}
"""The service's defaults (the access log on, as the other benches measure it), and a receiver on 127.0.0.1."""
HANGING = 20


def _headers(server: Server) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.tokens[USER]}"}


async def _create_pets(server: Server, count: int, connections: int) -> None:
    async with httpx.AsyncClient(base_url=server.url, headers=_headers(server), timeout=30) as http:
        queue = iter(range(count))

        async def one_client() -> None:
            for number in queue:
                answer = await http.post("/v1/pets", json={"name": f"pet {number}", "petType": "Dog"})
                answer.raise_for_status()

        await asyncio.gather(*(one_client() for _ in range(connections)))


async def _creates_per_second(server: Server, seconds: float, connections: int) -> float:
    done = 0
    async with httpx.AsyncClient(base_url=server.url, headers=_headers(server), timeout=30) as http:
        deadline = time.monotonic() + seconds

        async def one_client() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                answer = await http.post("/v1/pets", json={"name": "load", "petType": "Cat"})
                answer.raise_for_status()
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(one_client() for _ in range(connections)))
        return done / (time.monotonic() - started)


def throughput(server: Server, receiver: Receiver, changes: int, connections: int) -> float:
    mark = "throughput"
    url = f"http://127.0.0.1:{receiver.port}/ok?{mark}"
    headers = _headers(server)
    hook = httpx.post(
        f"{server.url}/v1/webhooks", json={"url": url, "events": ["pets.*"], "enabled": False}, headers=headers
    ).json()
    asyncio.run(_create_pets(server, changes, connections))
    started = time.monotonic()
    httpx.patch(f"{server.url}/v1/webhooks/{hook['id']}", json={"enabled": True}, headers=headers).raise_for_status()
    while len(receiver.requests_marked(mark)) < changes:
        time.sleep(0.05)
    rate = changes / (time.monotonic() - started)
    httpx.delete(f"{server.url}/v1/webhooks/{hook['id']}", headers=headers).raise_for_status()
    return rate


def hanging(server: Server, receiver: Receiver, seconds: float, connections: int, rounds: int) -> list[float]:
    headers = _headers(server)
    ratios = []
    for number in range(rounds):
        without = asyncio.run(_creates_per_second(server, seconds, connections))
        hooks = [
            httpx.post(
                f"{server.url}/v1/webhooks",
                json={"url": f"http://127.0.0.1:{receiver.port}/hang?{number}-{index}"},
                headers=headers,
            ).json()["id"]
            for index in range(HANGING)
        ]
        time.sleep(3)  # found by the deliverers (every 2 s), each now holding a connection
        with_hanging = asyncio.run(_creates_per_second(server, seconds, connections))
        for hook in hooks:
            httpx.delete(f"{server.url}/v1/webhooks/{hook}", headers=headers).raise_for_status()
        ratio = with_hanging / without
        ratios.append(ratio)
        held = len(receiver.requests_marked(f"{number}-0"))
        print(
            f"round {number + 1}: creates/s without {without:7.1f}, with {HANGING} hanging {with_hanging:7.1f}: "
            f"{ratio:.3f} (the first hanging receiver got {held} attempts)"
        )
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=2000)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as directory, Receiver().running() as receiver:
        settings = {**SETTINGS, "PETRECORDS_WEBHOOKS_TIMEOUT_SECONDS": "10"}
        with running_server(Path(directory) / "data", workers=2, users=[USER], settings=settings) as server:
            rate = throughput(server, receiver, args.changes, args.connections)
            print(f"one webhook to a local receiver: {rate:.0f} changes/s ({args.changes} changes)")
            ratios = hanging(server, receiver, args.duration, args.connections, args.rounds)
            print(f"creates with {HANGING} hanging receivers ÷ without: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
