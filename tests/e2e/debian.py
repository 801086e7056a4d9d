"""Programs from Debian's packages that end-to-end tests run (PgBouncer, HAProxy, PostgreSQL's own), found
or installed; and running them as the `postgres` user when the tests run as root, which PostgreSQL and
PgBouncer refuse to run as."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")
INSTALL_SECONDS = 600
INSTALL_LOCK = Path(tempfile.gettempdir()) / "petrecords-tests-apt.lock"


def unavailable(reason: str) -> None:
    """Skip the test, or under CI=true fail it: CI must run every end-to-end test."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: this test must run)")
    pytest.skip(reason)


def _apt_get(*args: str) -> bool:
    command = ["apt-get", *args]
    if os.geteuid() != 0:
        command = ["sudo", "-n", *command]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            timeout=INSTALL_SECONDS,
            check=False,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@contextlib.contextmanager
def _installing() -> Iterator[None]:
    """One install at a time on this machine: parallel test workers would otherwise meet apt's own lock and fail."""
    with INSTALL_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def program(name: str, *, package: str, directory: Path | None = None) -> str:
    """The path of program `name`, installing Debian's `package` when it is missing (with `apt-get update`
    first when the install fails as it is)."""
    found = shutil.which(name, path=None if directory is None else str(directory))
    if found is None:
        with _installing():
            found = shutil.which(name, path=None if directory is None else str(directory))
            installed = found is not None or _apt_get("install", "-y", package)
            if not installed and not (_apt_get("update") and _apt_get("install", "-y", package)):
                unavailable(f"{name} is not installed and `apt-get install {package}` failed")
        found = shutil.which(name, path=None if directory is None else str(directory))
    if found is None:
        unavailable(f"{name} is still missing after installing {package}")
    assert found is not None
    return found


def as_postgres() -> list[str]:
    """The prefix of a command that must not run as root: `runuser -u postgres --` when this is root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        unavailable("running as root, and there is no postgres user to run PostgreSQL's programs as")
    return ["runuser", "-u", "postgres", "--"]


def hand_to_postgres(path: Path) -> None:
    """Make `path` (a directory the test made) the postgres user's when this is root."""
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        for root, _dirs, files in os.walk(path):
            os.chown(root, entry.pw_uid, entry.pw_gid)
            for name in files:
                os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid)
        let_through(path)


def let_through(path: Path) -> None:
    """Let other users through the parents of `path` (pytest's temporary directories are their owner's alone)."""
    for parent in path.parents:
        if parent == Path("/"):
            break
        mode = parent.stat().st_mode
        if mode & 0o001 == 0:
            parent.chmod(mode | 0o001)


def wait_for_port(port: int, process: subprocess.Popen[bytes], *, what: str, log: Path, seconds: float = 20) -> None:
    """Return once something accepts connections on 127.0.0.1:`port`; fail if `process` exits first."""
    deadline = time.monotonic() + seconds
    while True:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not listen on {port} within {seconds:g} s:\n{log.read_text(errors='replace')}")
        time.sleep(0.02)


@contextlib.contextmanager
def background(
    command: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A process with its output in `log`, in a session of its own; SIGTERM and then SIGKILL on the way out."""
    with log.open("ab") as sink:
        process = subprocess.Popen(
            list(command),
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=None if env is None else dict(env),
        )
    try:
        yield process
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], *, seconds: float = 10) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        try:
            process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(timeout=seconds)
