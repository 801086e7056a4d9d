"""A NATS server with JetStream of the test's own, on a free port with a store directory of its own, started
and stopped by the test (never the shared one). The binary is installed on every machine: under CI=true a
missing one fails the test instead of skipping it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.servers import free_port

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
START_SECONDS = 10.0


def _nats_missing() -> None:
    message = f"the NATS server binary is required for this test and is not at {NATS_SERVER}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: it must run)")
    pytest.skip(message)


@dataclass
class NatsServer:
    """A `nats-server -js` of the test's own: its port and store directory stay the same across restarts."""

    port: int
    store: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        started = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [NATS_SERVER, "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)],
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_SECONDS
        while "Server is ready" not in self.log.read_bytes()[started:].decode(errors="replace"):
            assert self.process.poll() is None, self.log.read_text(errors="replace")
            assert time.monotonic() < deadline, f"NATS did not start:\n{self.log.read_text(errors='replace')}"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None


@contextlib.contextmanager
def nats_server(directory: Path) -> Iterator[NatsServer]:
    if not Path(NATS_SERVER).exists():
        _nats_missing()
    directory.mkdir(parents=True, exist_ok=True)
    server = NatsServer(port=free_port(), store=directory / "store", log=directory / "nats.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
