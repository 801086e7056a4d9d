"""A private PostgreSQL primary and a streaming replica of it, made on this machine for a test: initdb on a free
port (the shared server allows no replication connections), then pg_basebackup -X stream -R and a second
`postgres` on another port, whose replay may be held back by `recovery_min_apply_delay`. Either trusting every
local connection, or authenticating as Debian's own cluster does."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.debian import POSTGRES_BIN, as_postgres, hand_to_postgres, unavailable
from tests.e2e.servers import free_port


@dataclass
class Clusters:
    primary_url: str
    replica_url: str
    replica_dir: Path
    primary_port: int
    replica_port: int


def run(command: list[str], *, what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        pytest.fail(f"{what} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")


def pg_ctl(data: Path, *action: str) -> list[str]:
    return [*as_postgres(), str(POSTGRES_BIN / "pg_ctl"), "-D", str(data), "-l", str(data / "server.log"), *action]


def _stop(data: Path) -> None:
    if (data / "postmaster.pid").exists():
        subprocess.run(pg_ctl(data, "-m", "immediate", "-w", "stop"), capture_output=True, timeout=60, check=False)


DEBIAN_HBA = """\
local   all             postgres                                peer
local   all             all                                     peer
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     peer
host    replication     all             127.0.0.1/32            scram-sha-256
"""
"""The pg_hba.conf of a cluster that Debian's postgresql package makes: the operating system's user on the local
socket, a password over TCP."""
DEBIAN_SOCKETS = Path("/var/run/postgresql")


@contextlib.contextmanager
def streaming_replica(*, apply_delay_seconds: float = 0, debian: bool = False) -> Iterator[Clusters]:
    """A primary and its replica, trusting local connections as `postgres`; both stopped and removed after.

    With `debian`, they authenticate as Debian's own cluster does (DEBIAN_HBA), with their sockets where Debian
    keeps them (each port has a socket of its own there): `runuser -u postgres -- psql -p PORT` reaches the
    primary as its superuser, and any other role must give its password."""
    if not (POSTGRES_BIN / "initdb").exists():
        unavailable(f"PostgreSQL's programs are not in {POSTGRES_BIN}")
    if debian and not DEBIAN_SOCKETS.is_dir():
        unavailable(f"{DEBIAN_SOCKETS}, where Debian's PostgreSQL keeps its sockets, is missing")
    # Not under pytest's own temporary directories: those of other runs by the same user are cleaned up by
    # each new run, and the postgres user must be able to reach this one.
    base = Path(tempfile.mkdtemp(prefix="petrecords-clusters-"))
    primary, replica = base / "primary", base / "replica"
    hand_to_postgres(base)
    primary_port, replica_port = free_port(), free_port()
    try:
        initdb = [str(POSTGRES_BIN / "initdb"), "-D", str(primary), "-U", "postgres", "--auth=trust", "--no-sync"]
        run([*as_postgres(), *initdb, "-E", "UTF8"], what="initdb")
        # initdb's pg_hba.conf with --auth=trust lets local replication connections in already.
        sockets = DEBIAN_SOCKETS if debian else base
        if debian:
            (primary / "pg_hba.conf").write_text(DEBIAN_HBA)
        with (primary / "postgresql.conf").open("a") as config:
            config.write(
                f"port = {primary_port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{sockets}'\n"
                "wal_level = replica\nmax_wal_senders = 4\nwal_keep_size = '256MB'\nmax_connections = 40\n"
                "shared_buffers = '32MB'\nfsync = off\n"
            )
        run(pg_ctl(primary, "-w", "-t", "60", "start"), what="starting the primary")
        # Over the socket with Debian's authentication: postgres has no password to give over TCP.
        source = ["-h", str(DEBIAN_SOCKETS) if debian else "127.0.0.1", "-p", str(primary_port), "-U", "postgres"]
        copy = ["-D", str(replica), "-X", "stream", "-R", "-c", "fast", "--no-sync"]
        run([*as_postgres(), str(POSTGRES_BIN / "pg_basebackup"), *source, *copy], what="pg_basebackup")
        with (replica / "postgresql.conf").open("a") as config:
            config.write(
                f"port = {replica_port}\nrecovery_min_apply_delay = '{apply_delay_seconds:g}s'\nhot_standby = on\n"
            )
        run(pg_ctl(replica, "-w", "-t", "60", "start"), what="starting the replica")
        yield Clusters(
            primary_url=f"postgresql://postgres@127.0.0.1:{primary_port}/postgres",
            replica_url=f"postgresql://postgres@127.0.0.1:{replica_port}/postgres",
            replica_dir=replica,
            primary_port=primary_port,
            replica_port=replica_port,
        )
    finally:
        _stop(replica)
        _stop(primary)
        shutil.rmtree(base, ignore_errors=True)
