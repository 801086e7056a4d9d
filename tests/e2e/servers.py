"""Real `petrecords serve` processes for end-to-end tests: started, waited for, always killed."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

PETRECORDS = Path(sys.executable).parent / "petrecords"
STARTUP_SECONDS = 20.0
STOP_SECONDS = 10.0
# What a server stopped by SIGTERM exits with: a clean, graceful shutdown.
CLEAN_EXIT_CODES = (0,)


@dataclass
class Server:
    url: str
    env: dict[str, str]
    data_dir: Path
    process: subprocess.Popen[bytes]
    log: Path
    tokens: dict[str, str]

    def output(self, *, full: bool = False) -> str:
        text = self.log.read_text(errors="replace")
        return text if full else text[-4000:]

    def issue_token(self, user: str = "alice@example.com", *extra: str) -> str:
        return _finish_token(_start_token(self.env, user, *extra))

    def stop(self) -> int | None:
        """SIGTERM, then the exit code, or None when it did not exit within STOP_SECONDS."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start_token(env: dict[str, str], user: str, *extra: str) -> subprocess.Popen[str]:
    """`petrecords token` in the server's environment (it takes a while to start: run it beside other work)."""
    return subprocess.Popen(
        [str(PETRECORDS), "token", "--user", user, *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish_token(process: subprocess.Popen[str]) -> str:
    try:
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    return stdout.strip()


def _environment(data_dir: Path, database_url: str | None, settings: Mapping[str, str]) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PETRECORDS_DATA_DIR"] = str(data_dir)
    if database_url is not None:
        env["PETRECORDS_DATABASE_URL"] = database_url
    env.update(settings)
    return env


@contextlib.contextmanager
def running_server(
    data_dir: Path,
    *,
    database_url: str | None = None,
    workers: int = 1,
    users: Sequence[str] = (),
    settings: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """A `petrecords serve` process, up and answering /healthz; always killed on the way out.

    `settings` are more PETRECORDS_* variables for the server (and the token commands).

    Tokens for `users` (an e-mail, optionally followed by " --admin") are issued by `petrecords token`
    started at the same moment as the server, both finding no secret yet: they must agree on one.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = _environment(data_dir, database_url, settings or {})
    log = data_dir.parent / f"{data_dir.name}-server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(PETRECORDS), "serve", "--port", str(port), "--workers", str(workers)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    issuing = {user: _start_token(env, *user.split()) for user in users}
    server = Server(url=f"http://127.0.0.1:{port}", env=env, data_dir=data_dir, process=process, log=log, tokens={})
    try:
        for user, issuer in issuing.items():
            server.tokens[user] = _finish_token(issuer)
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited with {process.returncode} before serving:\n{server.output()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{server.url}/healthz", timeout=1.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /healthz within {STARTUP_SECONDS} s:\n{server.output()}")
            time.sleep(0.05)
        # /healthz answers as soon as one worker runs. Granian ignores a SIGTERM that reaches a worker still
        # starting (it is killed after --graceful-timeout), so wait until every worker says it started.
        while not all(f"Started worker-{number}" in server.output(full=True) for number in range(1, workers + 1)):
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"not every worker started within {STARTUP_SECONDS} s:\n{server.output()}")
            time.sleep(0.05)
        yield server
    finally:
        for issuer in issuing.values():
            if issuer.poll() is None:
                issuer.kill()
                issuer.wait()
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        else:
            # Workers of a stopped server must not outlive it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
