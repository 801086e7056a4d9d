"""Slow and idle clients against a server on loopback, run as a process of its own by the end-to-end test
of contract section 7 (`python -m tests.e2e.slow_clients --port P --kind K --count N [--token T]`).

It holds `N` connections of one kind, and opens a new one whenever the server closes one:
- `body`: a POST with a valid token whose body arrives one byte every TRICKLE_SECONDS;
- `head`: a request head that never ends, one more byte every TRICKLE_SECONDS;
- `idle`: a keep-alive connection that sends nothing after its first request was answered.

It prints one JSON line when every connection has been opened (`holding`), and one when it has stopped
(`stopped`, with what the server did to the connections and how many sockets are still open). It stops when
its standard input closes, or after `--seconds` in any case, and closes every socket it opened.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable

TRICKLE_SECONDS = 2.0
KINDS = ("body", "head", "idle")
# Sockets are files; room for the process's own beside them.
OWN_FILES = 64


def _opening(kind: str, token: str) -> bytes:
    if kind == "body":
        return (
            "POST /v1/pets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {token}\r\nContent-Length: 4096\r\n\r\n{{"
        ).encode()
    if kind == "head":
        return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
    return b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


class Tally:
    def __init__(self, target: int, on_holding: Callable[[], None]) -> None:
        self.target = target
        self.open = 0
        self.max_open = 0
        self.first_connections = 0
        self.opened = 0
        self.cut_by_server = 0
        self.answered: Counter[str] = Counter()
        self.failed_connects = 0
        self._on_holding = on_holding

    def connected(self, first: bool) -> None:
        self.open += 1
        self.max_open = max(self.max_open, self.open)
        if first:
            self.first_connections += 1
            if self.first_connections == self.target:
                self._on_holding()


async def _hold(kind: str, port: int, source: str, token: str, tally: Tally) -> None:
    """One client of `kind`, for ever: reconnects whenever the server closes its connection."""
    first = True
    while True:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
        except OSError:
            tally.failed_connects += 1
            await asyncio.sleep(0.5)
            continue
        tally.connected(first)
        first = False
        tally.opened += 1
        try:
            writer.write(_opening(kind, token))
            while True:
                # Not wait_for: on Python 3.11 it can swallow the cancellation that stops this client.
                try:
                    async with asyncio.timeout(TRICKLE_SECONDS):
                        data = await reader.read(65536)
                except TimeoutError:
                    if kind != "idle":
                        writer.write(b" ")
                    continue
                if not data:
                    tally.cut_by_server += 1
                    break
                if data.startswith(b"HTTP/1.1 "):
                    tally.answered[data[9:12].decode()] += 1
        except OSError:
            tally.cut_by_server += 1
        finally:
            tally.open -= 1
            writer.close()
            # Also when cancelled: the socket is let go of only once the transport has seen it closed.
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def _raise_open_file_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        sys.exit(f"slow_clients: {needed} open files needed, the hard limit is {hard} (raise it: ulimit -Hn)")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


async def _main(port: int, kind: str, count: int, source: str, token: str, seconds: float) -> None:
    loop = asyncio.get_running_loop()
    files_before = _open_files()
    started = time.monotonic()
    stop = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stop.set)
    tally = Tally(count, lambda: _say(event="holding", seconds=round(time.monotonic() - started, 3)))
    clients = [asyncio.create_task(_hold(kind, port, source, token, tally)) for _ in range(count)]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    loop.remove_reader(sys.stdin.fileno())
    for client in clients:
        client.cancel()
    await asyncio.gather(*clients, return_exceptions=True)
    _say(
        event="stopped",
        kind=kind,
        max_open=tally.max_open,
        open=tally.open,
        sockets_left=_open_files() - files_before,
        opened=tally.opened,
        cut_by_server=tally.cut_by_server,
        answered=dict(tally.answered),
        failed_connects=tally.failed_connects,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--count", type=int, required=True)
    # Each source address has its own ports: tens of thousands of connections need more than one.
    parser.add_argument("--source", default="127.0.0.1", help="the loopback address to connect from")
    parser.add_argument("--token", default="", help="a valid bearer token (for the body kind)")
    parser.add_argument("--seconds", type=float, default=120.0, help="stop after this long in any case")
    args = parser.parse_args()
    _raise_open_file_limit(args.count + OWN_FILES)
    asyncio.run(_main(args.port, args.kind, args.count, args.source, args.token, args.seconds))


if __name__ == "__main__":
    main()
