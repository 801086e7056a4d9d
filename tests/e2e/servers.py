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
# Workers import and build the app on start; on a machine busy with other jobs that has taken over 20 s.
STARTUP_SECONDS = 60.0
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
        self.terminate()
        return self.wait(STOP_SECONDS)

    def terminate(self) -> None:
        """SIGTERM to the server process alone, as a supervisor sends it; returns at once."""
        self.process.send_signal(signal.SIGTERM)

    def wait(self, seconds: float) -> int | None:
        """The exit code, or None when the server still runs after `seconds`."""
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL to the whole process group: the server and every worker die at once, mid-request."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _start_token(env: dict[str, str], user: str, *extra: str) -> subprocess.Popen[str]:
    """`petrecords token` in the server's environment, started beside other work."""
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
    # Several servers of two workers each share the local PostgreSQL's 100 connections with the rest of the run.
    env["PETRECORDS_DB_POOL_SIZE"] = "4"
    env.update(settings)
    # What a killed server leaves behind (its metrics directory) stays beside the test's data.
    temporary = data_dir.parent / "tmp"
    temporary.mkdir(exist_ok=True)
    env["TMPDIR"] = str(temporary)
    return env


def _new_log(data_dir: Path) -> Path:
    """A log file of its own for every start: `data-server.log`, then `data-server-2.log`, …"""
    log = data_dir.parent / f"{data_dir.name}-server.log"
    number = 1
    while log.exists():
        number += 1
        log = data_dir.parent / f"{data_dir.name}-server-{number}.log"
    log.touch()
    return log


def _spawn(data_dir: Path, env: dict[str, str], *, workers: int, serve_args: Sequence[str]) -> Server:
    port = free_port()
    log = _new_log(data_dir)
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [str(PETRECORDS), "serve", "--port", str(port), "--workers", str(workers), *serve_args],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Server(url=f"http://127.0.0.1:{port}", env=env, data_dir=data_dir, process=process, log=log, tokens={})


PORT_TAKEN = "cannot listen there: already in use"
"""What a server says when the free port it was given was taken before it could listen there (by another test
of a parallel run): it is started again on another."""
PORT_TRIES = 5


def _wait_until_serving(server: Server, *, deadline: float) -> bool:
    """True once the server serves; False if it could not listen on its port."""
    process = server.process
    while True:
        if process.poll() is not None:
            if PORT_TAKEN in server.output(full=True):
                return False
            pytest.fail(f"the server exited with {process.returncode} before serving:\n{server.output()}")
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(f"{server.url}/healthz", timeout=1.0).status_code == 200:
                break
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not answer /healthz within {STARTUP_SECONDS} s:\n{server.output()}")
        time.sleep(0.05)
    # /healthz answers as soon as one worker runs. Granian ignores a SIGTERM that reaches a worker still
    # starting (it is killed after --graceful-timeout), so wait until every worker has started: the server says
    # where it listens then, and /readyz answers 200 from then on.
    while "Listening at" not in server.output(full=True):
        if time.monotonic() > deadline or process.poll() is not None:
            pytest.fail(f"not every worker started within {STARTUP_SECONDS} s:\n{server.output()}")
        time.sleep(0.05)
    return True


def _discard(server: Server) -> None:
    process = server.process
    if process.poll() is None:
        server.kill()
    else:
        # Workers of a stopped server must not outlive it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def running_servers(
    count: int,
    data_dir: Path,
    *,
    database_url: str | None = None,
    workers: int = 1,
    users: Sequence[str] = (),
    serve_args: Sequence[str] = (),
    settings: Mapping[str, str] | None = None,
) -> Iterator[list[Server]]:
    """`count` `petrecords serve` processes started at the same moment, up and answering /healthz;
    always killed on the way out.

    They share `data_dir` (so one local signing secret, which the first of them to start creates) and, when
    given, `database_url`; each has its own port and log. Tokens for `users` (an e-mail, optionally followed
    by " --admin") are issued by `petrecords token` once the servers answer, in their environment; every
    server holds the same tokens. `data_dir` may hold an earlier server's data: a restart on it finds the
    database and the secret that server left. `settings` are more PETRECORDS_* variables for the servers
    (and for the tokens issued in their environment).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    env = _environment(data_dir, database_url, settings or {})
    servers: list[Server] = []
    issuing: dict[str, subprocess.Popen[str]] = {}
    try:
        for _ in range(count):
            servers.append(_spawn(data_dir, env, workers=workers, serve_args=serve_args))
        deadline = time.monotonic() + STARTUP_SECONDS
        for index in range(count):
            tries = 1
            while not _wait_until_serving(servers[index], deadline=deadline):
                if tries == PORT_TRIES:
                    pytest.fail(f"the server found its port taken {PORT_TRIES} times:\n{servers[index].output()}")
                tries += 1
                _discard(servers[index])
                servers[index] = _spawn(data_dir, env, workers=workers, serve_args=serve_args)
        issuing = {user: _start_token(env, *user.split()) for user in users}
        tokens = {user: _finish_token(issuer) for user, issuer in issuing.items()}
        for server in servers:
            server.tokens.update(tokens)
        yield servers
    finally:
        for issuer in issuing.values():
            if issuer.poll() is None:
                issuer.kill()
                issuer.wait()
        for server in servers:
            _discard(server)


@contextlib.contextmanager
def running_server(
    data_dir: Path,
    *,
    database_url: str | None = None,
    workers: int = 1,
    users: Sequence[str] = (),
    serve_args: Sequence[str] = (),
    settings: Mapping[str, str] | None = None,
) -> Iterator[Server]:
    """A `petrecords serve` process, up and answering /healthz; always killed on the way out.

    Tokens for `users` (an e-mail, optionally followed by " --admin") are issued by `petrecords token` in the
    server's environment once it answers.
    """
    with running_servers(
        1, data_dir, database_url=database_url, workers=workers, users=users, serve_args=serve_args, settings=settings
    ) as (server,):
        yield server
