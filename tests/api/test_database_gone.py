"""A database that is not, or no longer, where the configuration says (sections 6 and 8): the SQLite file
deleted or replaced under the running service, the PostgreSQL database dropped or renamed, or refusing the
service's connections (not accepting any, a role that may no longer log in). Every request answers
503/986 with Retry-After in bounded time, never 500; /readyz says not ready; no write is acknowledged that
the database at the configured path does not keep; each outage is one warning line without a traceback
and is counted by cause; the service serves again, with no restart, once a database is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import Settings
from petrecords.db import migrate
from tests.api.test_database_faults import (
    _WRITES,
    TIMEOUT_SECONDS,
    Client,
    _all_answer_503,
    _all_succeed,
    _integrity,
    _sqlite_client,
    _sqlite_file,
    _stored,
    _unavailable_counts,
    assert_unavailable,
    timed,
)
from tests.api.test_ops import assert_not_ready
from tests.support import POSTGRES_ADMIN_URL, SECRET, auth, create, pet_body, postgres_unavailable, store_of, until

# The five requests of _all_answer_503: two reads and three writes.
REQUESTS = 5


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def _outage_causes(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The cause of each outage the service logged, once it is sure that each was one warning line without a
    traceback and that nothing was logged as a crash."""
    records = [record for record in caplog.records if record.name == "petrecords.errors"]
    crashes = [record for record in records if record.levelno >= logging.ERROR or record.exc_info]
    assert not crashes, [record.getMessage() for record in crashes]
    assert all(record.levelno == logging.WARNING for record in records)
    return [record.__dict__["fields"]["cause"] for record in records]


async def _ready(client: Client) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready"}


# --- SQLite: the file of a running service deleted or replaced ------------------------------------------


def _database_files(path: Path) -> list[Path]:
    """The database file, its write-ahead log and its shared-memory index."""
    return [path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")]


def _delete(path: Path) -> None:
    for file in _database_files(path):
        file.unlink(missing_ok=True)


def _copy(path: Path, to: Path) -> Path:
    """A consistent copy of a live database, as a backup tool makes it (SQLite's backup API)."""
    source, copy = sqlite3.connect(path), sqlite3.connect(to)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    return to


def _restore(copy: Path, path: Path) -> None:
    """Put a copy in the place of the database, as an operator restores one: the old file set goes."""
    _delete(path)
    os.replace(copy, path)


async def _names(client: Client) -> set[str]:
    items, _ = await _stored(client)
    return {item["name"] for item in items}


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    (tmp_path / "db").mkdir()
    return f"sqlite:///{tmp_path / 'db' / 'pets.sqlite3'}"


class TestSqliteFileDeleted:
    async def test_every_request_answers_503_and_no_database_is_made_in_its_place(
        self, sqlite_url: str, tmp_path: Path, logged: pytest.LogCaptureFixture
    ) -> None:
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client)).json()
            _delete(path)

            # The first write finds the file gone before its COMMIT; from then on nothing is served.
            first, seconds = await timed(client.post("/v1/pets", json=pet_body("Lost"), headers=auth()))
            assert_unavailable(first, seconds)
            await _all_answer_503(client, pet["id"])
            ready = await client.get("/readyz")
            healthz = await client.get("/healthz")
            counts = await _unavailable_counts(client)

        assert_not_ready(ready)
        assert healthz.json() == {"status": "ok"}
        assert counts == {"vanished": 1 + REQUESTS}
        assert _outage_causes(logged) == ["vanished"] * (1 + REQUESTS)
        assert [file for file in _database_files(path) if file.exists()] == []

    async def test_a_restored_file_is_served_without_a_restart_and_no_refused_write_is_in_it(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client, name="Kept")).json()
            backup = _copy(path, tmp_path / "backup.sqlite3")
            _delete(path)
            await _all_answer_503(client, pet["id"], methods=_WRITES)
            assert_not_ready(await client.get("/readyz"))

            _restore(backup, path)

            await _ready(client)
            await _all_succeed(client, pet["id"])
            assert (await create(client, name="Tom")).status_code == 201

        async with _sqlite_client(sqlite_url, tmp_path) as restarted:
            assert await _names(restarted) == {"Kept", "Tom"}
        assert _integrity(path) == [("ok",)]


class TestSqliteFileReplaced:
    async def test_by_an_empty_file_every_request_answers_503_and_the_file_stays_empty(
        self, sqlite_url: str, tmp_path: Path, logged: pytest.LogCaptureFixture
    ) -> None:
        """An empty file is an empty database to SQLite: served, it would take writes into a database that
        migrations never made. It is left exactly as it is."""
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client)).json()
            _delete(path)
            path.touch()

            await _all_answer_503(client, pet["id"], methods=_WRITES)
            await _all_answer_503(client, pet["id"])
            ready = await client.get("/readyz")
            counts = await _unavailable_counts(client)

        assert_not_ready(ready)
        assert counts == {"vanished": 3 + REQUESTS}
        assert _outage_causes(logged) == ["vanished"] * (3 + REQUESTS)
        assert path.stat().st_size == 0
        assert [file for file in _database_files(path) if file.exists()] == [path]

    async def test_by_a_file_that_is_not_a_database_every_request_answers_503(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client)).json()
            _delete(path)
            path.write_bytes(b"not a database\n" * 1000)

            await _all_answer_503(client, pet["id"], methods=_WRITES)
            await _all_answer_503(client, pet["id"])
            assert_not_ready(await client.get("/readyz"))
            counts = await _unavailable_counts(client)

        assert counts == {"vanished": 3 + REQUESTS}
        assert path.read_bytes() == b"not a database\n" * 1000

    async def test_by_an_older_copy_readiness_finds_it_then_the_copy_is_served(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """Restoring a backup under the running service: what the backup lacks is the restore's doing; every
        write acknowledged afterwards is in the file at the path."""
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            await create(client, name="Kept")
            backup = _copy(path, tmp_path / "backup.sqlite3")
            await create(client, name="Later")

            _restore(backup, path)

            assert_not_ready(await client.get("/readyz"))  # the check that finds the file replaced
            await _ready(client)  # the next one opens the file now at the path
            assert await _names(client) == {"Kept"}
            await create(client, name="Tom")

        async with _sqlite_client(sqlite_url, tmp_path) as restarted:
            assert await _names(restarted) == {"Kept", "Tom"}
        assert _integrity(path) == [("ok",)]

    async def test_by_an_older_copy_the_write_that_finds_it_is_503_and_kept_nowhere(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            await create(client, name="Kept")
            backup = _copy(path, tmp_path / "backup.sqlite3")
            _restore(backup, path)

            refused, seconds = await timed(client.post("/v1/pets", json=pet_body("Lost"), headers=auth()))
            accepted = await client.post("/v1/pets", json=pet_body("Tom"), headers=auth())

            assert_unavailable(refused, seconds)
            assert accepted.status_code == 201, accepted.text

        async with _sqlite_client(sqlite_url, tmp_path) as restarted:
            assert await _names(restarted) == {"Kept", "Tom"}


class TestSqliteWriteAheadLogDeleted:
    async def test_the_next_write_is_503_and_every_acknowledged_write_survives_a_restart(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        """The log alone deleted: commits would go on into a file that no longer has a name. The store
        stops, closes its connections (SQLite copies what the log held into the database file as the last
        one closes) and opens the database again."""
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            for name in ("A", "B", "C"):
                await create(client, name=name)
            _database_files(path)[1].unlink()

            refused, seconds = await timed(client.post("/v1/pets", json=pet_body("Lost"), headers=auth()))
            accepted = await client.post("/v1/pets", json=pet_body("D"), headers=auth())

            assert_unavailable(refused, seconds)
            assert accepted.status_code == 201, accepted.text

        async with _sqlite_client(sqlite_url, tmp_path) as restarted:
            assert await _names(restarted) == {"A", "B", "C", "D"}
        assert _integrity(path) == [("ok",)]


# --- PostgreSQL: the service's own database and role, made to disappear or to refuse it ------------------


@dataclass(frozen=True)
class OwnDatabase:
    """A throw-away database and the role the service logs in as, which owns it."""

    name: str
    role: str
    url: str


async def _admin(*statements: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


@pytest.fixture
def own_database(tmp_path: Path) -> Iterator[OwnDatabase]:
    suffix = uuid.uuid4().hex[:12]
    name, role = f"petrecords_gone_{suffix}", f"petrecords_role_{suffix}"
    try:
        asyncio.run(_admin(f"CREATE ROLE {role} LOGIN", f"CREATE DATABASE {name} OWNER {role}"))
    except (OSError, asyncpg.PostgresError) as exc:
        postgres_unavailable(str(exc))
    url = sa.make_url(POSTGRES_ADMIN_URL).set(username=role, password=None, database=name)
    own = OwnDatabase(name=name, role=role, url=url.render_as_string(hide_password=False))
    try:
        migrate(Settings(database_url=own.url, data_dir=tmp_path))
        yield own
    finally:
        asyncio.run(
            _admin(
                f"DROP DATABASE IF EXISTS {name} WITH (FORCE)",
                f"DROP DATABASE IF EXISTS {name}_moved WITH (FORCE)",
                f"DROP ROLE IF EXISTS {role}",
                f"DROP ROLE IF EXISTS {role}_old",
            )
        )


_TERMINATE = (
    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '{db}' AND pid <> pg_backend_pid()"
)


@dataclass(frozen=True)
class Fault:
    inject: tuple[str, ...]
    restore: tuple[str, ...]
    cause: str
    keeps_data: bool = True


FAULTS = {
    "database dropped": Fault(
        inject=("DROP DATABASE {db} WITH (FORCE)",),
        restore=("CREATE DATABASE {db} OWNER {role}",),
        cause="vanished",
        keeps_data=False,
    ),
    "database renamed": Fault(
        inject=(_TERMINATE, "ALTER DATABASE {db} RENAME TO {db}_moved"),
        restore=("ALTER DATABASE {db}_moved RENAME TO {db}",),
        cause="vanished",
    ),
    "database not accepting connections": Fault(
        inject=("ALTER DATABASE {db} ALLOW_CONNECTIONS false", _TERMINATE),
        restore=("ALTER DATABASE {db} ALLOW_CONNECTIONS true",),
        cause="connection",
    ),
    "role may not log in": Fault(
        inject=("ALTER ROLE {role} NOLOGIN", _TERMINATE),
        restore=("ALTER ROLE {role} LOGIN",),
        cause="connection",
    ),
    "role renamed by a credentials rotation": Fault(
        inject=("ALTER ROLE {role} RENAME TO {role}_old", _TERMINATE),
        restore=("ALTER ROLE {role}_old RENAME TO {role}",),
        cause="connection",
    ),
    "role out of connections": Fault(
        inject=("ALTER ROLE {role} CONNECTION LIMIT 0", _TERMINATE),
        restore=("ALTER ROLE {role} CONNECTION LIMIT -1",),
        cause="connection",
    ),
}


def _own_settings(url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "data_dir": data_dir,
        "auth_secret": SECRET,
        "rate_limit": 0,
        "access_log": False,
        "db_pool_size": 2,
        "db_connect_timeout_seconds": TIMEOUT_SECONDS,
    }
    values.update(overrides)
    return Settings(**values)


class TestPostgresDatabaseGoneOrRefusing:
    @pytest.mark.parametrize("fault", list(FAULTS.values()), ids=list(FAULTS))
    async def test_every_request_answers_503_then_the_service_recovers(
        self, own_database: OwnDatabase, fault: Fault, tmp_path: Path, logged: pytest.LogCaptureFixture
    ) -> None:
        settings = _own_settings(own_database.url, tmp_path)
        app = create_app(settings)
        async with AsyncTestClient(app=app) as client:  # type: ignore[arg-type]
            pet = (await create(client)).json()
            before = await _stored(client)
            names = {"db": own_database.name, "role": own_database.role}
            await _admin(*(statement.format(**names) for statement in fault.inject))
            store = store_of(app)
            await until(lambda: store.pool_figures()["idle"] == 0, what="the pooled connections to see their end")

            await _all_answer_503(client, pet["id"])
            ready, seconds = await timed(client.get("/readyz"))
            healthz = await client.get("/healthz")
            counts = await _unavailable_counts(client)

            assert_unavailable(ready, seconds)
            assert_not_ready(ready)
            assert healthz.json() == {"status": "ok"}
            assert counts == {fault.cause: REQUESTS}
            assert _outage_causes(logged) == [fault.cause] * REQUESTS

            await _admin(*(statement.format(**names) for statement in fault.restore))
            if not fault.keeps_data:
                await asyncio.to_thread(migrate, settings)

            await _ready(client)
            if fault.keeps_data:
                assert await _stored(client) == before
                await _all_succeed(client, pet["id"], methods=("GET", *_WRITES))
            else:
                assert (await create(client)).status_code == 201


# A server's refusals that the shared test server cannot be made to give: it trusts local clients, so no
# password is ever wrong, and it cannot be restarted under the other tests. A listener of the test's own
# answers each connection with the very message a server sends (the protocol's ErrorResponse), which the
# real driver reads as it would read the server's.
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104


def _receive(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client went away")
        data += chunk
    return data


def _refuse(connection: socket.socket, sqlstate: str, message: str) -> None:
    length, code = struct.unpack("!ii", _receive(connection, 8))
    while code in (_SSL_REQUEST, _GSSENC_REQUEST):
        connection.sendall(b"N")  # no encryption offered: the startup message follows in the clear
        length, code = struct.unpack("!ii", _receive(connection, 8))
    _receive(connection, length - 8)
    fields = b"SFATAL\0VFATAL\0C" + sqlstate.encode() + b"\0M" + message.encode() + b"\0\0"
    connection.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)


@contextlib.contextmanager
def _refusing_server(sqlstate: str, message: str) -> Iterator[int]:
    """A port on which every PostgreSQL connection is refused with `sqlstate` and `message`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return  # the listener is shut
            with connection, contextlib.suppress(OSError):
                _refuse(connection, sqlstate, message)

    thread = threading.Thread(target=serve, name="refusing-postgres", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=10)


REFUSALS = {
    "wrong password": ("28P01", 'password authentication failed for user "petrecords"'),
    "server starting up": ("57P03", "the database system is starting up"),
    "server shutting down": ("57P01", "terminating connection due to administrator command"),
    "server out of connections": ("53300", "sorry, too many clients already"),
}


class TestPostgresRefusals:
    @pytest.mark.parametrize(("sqlstate", "message"), list(REFUSALS.values()), ids=list(REFUSALS))
    async def test_every_request_answers_503(
        self, sqlstate: str, message: str, tmp_path: Path, logged: pytest.LogCaptureFixture
    ) -> None:
        with _refusing_server(sqlstate, message) as port:
            settings = _own_settings(f"postgresql://petrecords:secret@127.0.0.1:{port}/petrecords", tmp_path)
            async with AsyncTestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
                await _all_answer_503(client, str(uuid.uuid4()))
                ready, seconds = await timed(client.get("/readyz"))
                counts = await _unavailable_counts(client)

        assert_unavailable(ready, seconds)
        assert counts == {"connection": REQUESTS}
        assert _outage_causes(logged) == ["connection"] * REQUESTS
