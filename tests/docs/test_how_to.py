"""Every ```sh block of the how-to pages (docs/how-to), run as a reader runs them, in order, one shell per page,
in an empty directory (so the default SQLite database is ./data/petrecords.sqlite3). A ```sh serve block starts a
server, as a reader does in a second terminal: it must say it listens, and runs until the page's last block is
done. What a page leaves to the reader (the URL of a Whoof or PostgreSQL database) the test gives in the
variables the page names. A changed flag or message fails here."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from petrecords.portability import commands
from tests.portability.support import migrated, seed
from tests.portability.test_whoof import _build_whoof
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

PAGES = Path(__file__).parent.parent.parent / "docs" / "how-to"
_SH_BLOCK = re.compile(r"^( *)```sh( serve)?\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)
SERVE_LOCK = Path(tempfile.gettempdir()) / "petrecords-docs-serve.lock"
"""The examples' servers listen on the default port: one page that starts one runs at a time."""
LISTENING_SECONDS = 60


def shell_blocks(page: Path) -> list[tuple[str, bool]]:
    """The page's ```sh blocks, each without the indentation of its fence (blocks inside list items), and whether
    it starts a server."""
    return [
        ("\n".join(line.removeprefix(indent) for line in body.splitlines()), bool(serve))
        for indent, serve, body in _SH_BLOCK.findall(page.read_text())
    ]


@contextlib.contextmanager
def _variables(page: str, directory: Path) -> Iterator[dict[str, str]]:
    """What the page asks the reader to have: a Whoof database, PostgreSQL databases, records to move."""
    with contextlib.ExitStack() as stack:
        given: dict[str, str] = {}
        if page == "moving-in.md":
            given["WHOOF_URL"] = stack.enter_context(throwaway_postgres())
            asyncio.run(_build_whoof(given["WHOOF_URL"]))
        if page in ("moving-to-postgresql.md", "backup-and-restore.md"):
            settings = migrated(f"sqlite:///{directory / 'data' / 'petrecords.sqlite3'}", directory / "data")
            seed(settings)
            given["POSTGRESQL_URL"] = stack.enter_context(throwaway_postgres())
        if page == "backup-and-restore.md":
            records = directory / "records.jsonl"
            commands.export(settings, output=records)
            commands.import_file(migrated(given["POSTGRESQL_URL"], directory), records)
            records.unlink()
            given["NEW_POSTGRESQL_URL"] = stack.enter_context(throwaway_postgres())
        yield given


@contextlib.contextmanager
def _serving(block: str, directory: Path, env: dict[str, str]) -> Iterator[None]:
    """A server the block starts, once it says it listens; stopped on the way out."""
    log = directory / "server.log"
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
        deadline = time.monotonic() + LISTENING_SECONDS
        while "Listening at" not in log.read_text(errors="replace"):
            assert process.poll() is None, f"the server exited with {process.returncode}:\n{log.read_text()}"
            assert time.monotonic() < deadline, f"the server did not say it listens:\n{log.read_text()}"
            time.sleep(0.1)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)


@pytest.mark.parametrize("page", sorted(path.name for path in PAGES.glob("*.md")))
def test_every_shell_example_runs(page: str, tmp_path: Path) -> None:
    blocks = shell_blocks(PAGES / page)
    assert blocks, f"{page} has no ```sh example"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    with contextlib.ExitStack() as stack:
        if any(serve for _, serve in blocks):
            lock = stack.enter_context(SERVE_LOCK.open("a"))
            fcntl.flock(lock, fcntl.LOCK_EX)
        given = stack.enter_context(_variables(page, tmp_path))
        env.update(given)
        for number, (block, serve) in enumerate(blocks, start=1):
            if serve:
                stack.enter_context(_serving(block, tmp_path, env))
                continue
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", block],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == 0, f"{page}, example {number}:\n{block}\n{done.stdout}\n{done.stderr}"
