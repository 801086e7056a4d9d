"""Every ```sh block of the tutorial (docs/tutorial.md), of the how-to pages (docs/how-to) and of the README's
walk-through, run as a reader runs them: in order, in one shell per page (what a block sets, the next one has), in
an empty directory (so the default SQLite database is ./data/petrecords.sqlite3). A ```sh serve block starts a
server, as a reader does in a second terminal: it must say it is ready, and runs until the page's last block is
done. What a page leaves to the reader (the URL of a Whoof or PostgreSQL database, the hosts of a deployment) the
test gives in the variables the page names. A changed flag or answer fails here.

- The README's walk-through starts after `make run`: the test starts the server `make run` starts, in a directory
  whose `.venv` is the repository's, where the walk-through's `.venv/bin/petrecords` is found.
- The install page (docs/how-to/install.md) runs in a checkout of the repository (tests/e2e/checkout.py): it builds
  the wheel there and installs it, with the pinned requirements, into a new virtual environment outside it.
- The deploy page (docs/how-to/deploy.md) runs as root, as on a server, on Debian's PgBouncer and HAProxy
  (installed when missing; under CI=true a missing one fails the test), a private PostgreSQL primary with a
  streaming replica that authenticate as Debian's own cluster does (the postgres user on the local socket, a
  password over TCP), and the Redis of 127.0.0.1:6379, in a directory that links to the repository's deploy/. The
  page makes the service's role itself, and the test then finds it no superuser, owning the migrated tables. Its
  systemd steps are ```text blocks: the test machines do not run systemd.
- Pages that start servers hold a lock while they run, one page at a time: their servers listen on fixed ports.
  `make test` gives them all to one worker (marked `one_at_a_time`), where none waits for another.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import queue
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from petrecords.portability import commands
from tests.e2e.checkout import checkout
from tests.e2e.debian import as_postgres, let_through, program, unavailable
from tests.e2e.replicas import streaming_replica
from tests.portability.support import migrated, seed
from tests.portability.test_whoof import _build_whoof
from tests.servers.jwks_server import auth0_of_the_how_to, entra_of_the_how_to, keycloak_of_the_how_to
from tests.support import redis_is_up, throwaway_postgres

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAGES = {
    "tutorial.md": ROOT / "docs" / "tutorial.md",
    **{f"how-to/{path.name}": path for path in sorted((ROOT / "docs" / "how-to").glob("*.md"))},
    "README.md": ROOT / "README.md",
}
LONG_PAGES = {"how-to/install.md"}
"""Pages whose examples `make test-long` runs, not `make test`: the install page fills a new virtual environment
with every pinned requirement (half a minute of a processor). `make test` still checks what it installs (the
wheel's dependencies and the pins, tests/e2e/test_container.py) and that the page installs those two files
(tests/docs/test_site.py)."""
README_WALK_THROUGH = "## Five minutes with curl"
"""The README's section whose blocks run; the ones before it (make install, make run) are the server's."""
MAKE_RUN = ".venv/bin/petrecords serve --host 127.0.0.1 --port 8000"
"""What `make run` runs once installed (Makefile)."""
REDIS_URL = "redis://127.0.0.1:6379/0"
PROVIDERS = {
    "how-to/keycloak.md": keycloak_of_the_how_to,
    "how-to/auth0.md": auth0_of_the_how_to,
    "how-to/entra-id.md": entra_of_the_how_to,
}
"""The identity providers' pages, and the provider each runs against: its address and its users' passwords."""
_SH_BLOCK = re.compile(r"^( *)```sh( serve)?\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)
SERVE_LOCK = Path(tempfile.gettempdir()) / "petrecords-docs-serve.lock"
"""The examples' servers listen on the default port: one page that starts one runs at a time."""
READY_SECONDS = 60
BLOCK_SECONDS = 300
READY_LINES = {"petrecords": "Listening at", "pgbouncer": "LOG process up"}
"""What each program a ```sh serve block starts says once it accepts connections."""
_LISTEN_ADDRESS = re.compile(r"PETRECORDS_LB_BIND=127\.0\.0\.1:(\d+)")
"""HAProxy says nothing once it listens: the address it binds is waited for instead."""


def shell_blocks(text: str) -> list[tuple[str, bool]]:
    """The ```sh blocks of a page, each without the indentation of its fence (blocks inside list items), and
    whether it starts a server."""
    return [
        ("\n".join(line.removeprefix(indent) for line in body.splitlines()), bool(serve))
        for indent, serve, body in _SH_BLOCK.findall(text)
    ]


def page_blocks(page: str) -> list[tuple[str, bool]]:
    text = PAGES[page].read_text()
    if page != "README.md":
        return shell_blocks(text)
    start = text.index(README_WALK_THROUGH)
    end = text.find("\n## ", start + len(README_WALK_THROUGH))
    return [(MAKE_RUN, True), *shell_blocks(text[start : end if end >= 0 else len(text)])]


@contextlib.contextmanager
def _variables(page: str, directory: Path) -> Iterator[dict[str, str]]:
    """What the page asks the reader to have: a Whoof database, PostgreSQL databases, records to move, the
    hosts of a deployment."""
    with contextlib.ExitStack() as stack:
        given: dict[str, str] = {}
        if page == "how-to/moving-in.md":
            given["WHOOF_URL"] = stack.enter_context(throwaway_postgres())
            asyncio.run(_build_whoof(given["WHOOF_URL"]))
        if page in ("how-to/moving-to-postgresql.md", "how-to/backup-and-restore.md"):
            settings = migrated(f"sqlite:///{directory / 'data' / 'petrecords.sqlite3'}", directory / "data")
            seed(settings)
            given["POSTGRESQL_URL"] = stack.enter_context(throwaway_postgres())
        if page == "how-to/backup-and-restore.md":
            records = directory / "records.jsonl"
            commands.export(settings, output=records)
            commands.import_file(migrated(given["POSTGRESQL_URL"], directory), records)
            records.unlink()
            given["NEW_POSTGRESQL_URL"] = stack.enter_context(throwaway_postgres())
        if page == "README.md":
            (directory / ".venv").symlink_to(ROOT / ".venv")
        if page == "how-to/install.md":
            checkout(directory)
            given["APP_DIR"] = str(directory.parent / "opt" / "petrecords")
        if page == "how-to/deploy.md":
            given.update(stack.enter_context(_deployment(directory)))
        if page in PROVIDERS:
            # An identity provider of the tests' own, issuing tokens shaped as the page's provider does.
            given.update(stack.enter_context(PROVIDERS[page]()))
        yield given


@contextlib.contextmanager
def _deployment(directory: Path) -> Iterator[dict[str, str]]:
    """The deploy page's programs and hosts: PgBouncer, HAProxy and OpenSSL on PATH, a primary with its replica,
    Redis; the name and password of the role the page makes."""
    if os.geteuid() != 0:
        unavailable("the deploy page's commands are root's, as on a server (runuser, pgbouncer -u postgres)")
    programs = directory.parent / "programs"
    programs.mkdir()
    for name in ("pgbouncer", "haproxy", "openssl"):
        (programs / name).symlink_to(program(name, package=name))
    if not redis_is_up():
        unavailable(f"Redis at {REDIS_URL} is required by the deploy page")
    (directory / "deploy").symlink_to(ROOT / "deploy")
    let_through(directory)  # the postgres user reads PgBouncer's files there
    role, password = "petrecords", secrets.token_urlsafe(18)
    with streaming_replica(debian=True) as clusters:
        yield {
            "PATH": f"{programs}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "PRIMARY_HOST": "127.0.0.1",
            "PRIMARY_PORT": str(clusters.primary_port),
            "DB_USER": role,
            "DB_PASSWORD": password,
            "REPLICA_URL": f"postgresql://{role}:{password}@127.0.0.1:{clusters.replica_port}/petrecords",
            "REDIS_URL": REDIS_URL,
        }
        found = subprocess.run(
            [*as_postgres(), "psql", "-p", str(clusters.primary_port), "-d", "petrecords", "-Atc", _ROLE_AND_TABLES],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
        assert found == ["f|f|f|petrecords"], f"the role and the owner of the pets table: {found}"


_ROLE_AND_TABLES = (
    "SELECT rolsuper, rolcreatedb, rolcreaterole, tableowner FROM pg_roles, pg_tables"
    " WHERE rolname = 'petrecords' AND tablename = 'pets'"
)


def _ready(block: str, output: Path) -> bool:
    address = _LISTEN_ADDRESS.search(block)
    if address:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", int(address.group(1))), timeout=0.5):
            return True
        return False
    for name, line in READY_LINES.items():
        if re.search(rf"(^|[\s/]){name}\b", block):
            return line in output.read_text(errors="replace")
    raise AssertionError(f"a ```sh serve block that starts nothing the test knows how to wait for:\n{block}")


@contextlib.contextmanager
def _serving(number: int, block: str, directory: Path, env: dict[str, str]) -> Iterator[None]:
    """A server the block starts, once it is ready; stopped on the way out."""
    log = directory.parent / f"server-{number}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=directory,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while not _ready(block, log):
            assert process.poll() is None, f"the server exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the server was not ready:\n{block}\n{log.read_text()}"
            time.sleep(0.1)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


class _Shell:
    """One bash for a page, as a reader's terminal: what a block sets (variables, functions, exported settings)
    the next block has. Each block is sourced from a file with `set -euo pipefail`, its output kept apart; a
    failing command ends the shell, as it would end a reader's copy of the page."""

    def __init__(self, directory: Path, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=directory,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, number: int, block: str) -> tuple[bool, str]:
        """Whether the block ran to its end, and what it wrote."""
        script, output = self.scratch / f"block-{number}.sh", self.scratch / f"block-{number}.out"
        script.write_text(f"{block}\n")
        done = f"block {number} done"
        assert self.process.stdin is not None
        self.process.stdin.write(f"set -euo pipefail; source {script} > {output} 2>&1 < /dev/null; echo '{done}'\n")
        self.process.stdin.flush()
        deadline = time.monotonic() + BLOCK_SECONDS
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False, f"still running after {BLOCK_SECONDS} s:\n{output.read_text(errors='replace')}"
            if line is None:
                code = self.process.wait()
                return False, f"exit status {code}:\n{output.read_text(errors='replace')}"
            if line.strip() == done:
                return True, output.read_text(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # what its blocks left running in the background
        self.process.wait(timeout=10)
        self.reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


def _marks(page: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.long] if page in LONG_PAGES else []
    if any(serve for _, serve in page_blocks(page)):
        # In one worker's share of `make test`: spread over the workers, the pages sat waiting for each other's
        # servers, 135 s of the workers' time for 62 s of pages run one after another.
        marks.append(pytest.mark.one_at_a_time(SERVE_LOCK.name))
    return marks


@pytest.mark.parametrize("page", [pytest.param(page, marks=_marks(page)) for page in PAGES])
def test_every_shell_example_runs(page: str, tmp_path: Path) -> None:
    blocks = page_blocks(page)
    assert blocks, f"{page} has no ```sh example"
    directory = tmp_path / "page"
    directory.mkdir()
    scratch = tmp_path / "blocks"
    scratch.mkdir()
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    with contextlib.ExitStack() as stack:
        if any(serve for _, serve in blocks):
            lock = stack.enter_context(SERVE_LOCK.open("a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        given = stack.enter_context(_variables(page, directory))
        if "PATH" in given:
            given["PATH"] = f"{Path(sys.executable).parent}:{given['PATH']}"
        env.update(given)
        shell = _Shell(directory, env, scratch)
        stack.callback(shell.close)
        for number, (block, serve) in enumerate(blocks, start=1):
            if serve:
                stack.enter_context(_serving(number, block, directory, env))
                continue
            ran, output = shell.run(number, block)
            assert ran, f"{page}, example {number}:\n{block}\n{output}"
