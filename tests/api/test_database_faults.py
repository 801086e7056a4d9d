"""Database faults (sections 6 and 8): a database that is unreachable, silent, slow, locked, unwritable or
full makes requests answer 503/986 with Retry-After within a bounded time, never 500 and never a hang;
/readyz follows; nothing acknowledged is lost or changed; the service recovers by itself when the
database is back, with no restart.

The timeouts are set small here (1 s), so that the bound is a few seconds. The bound is generous, for a
busy machine: it tells a bounded wait from a hang, it is not a benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest
import sqlalchemy as sa
from litestar.testing import AsyncTestClient

from petrecords.app import create_app, open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.errors import DatabaseUnavailable
from petrecords.store.faults import UNCONFIRMED
from petrecords.store.postgres import PostgresStore
from tests.api.test_changes_feed import read_all
from tests.api.test_ops import _samples
from tests.servers.tcp_proxy import TcpProxy, tcp_proxy
from tests.support import (
    ADMIN,
    PET_RECORDS,
    SECRET,
    assert_error,
    auth,
    create,
    fetch_sql,
    pet_body,
    pet_row,
    store_of,
    until,
)

Client = AsyncTestClient[Any]
MakeClient = Callable[[Settings], AsyncTestClient[Any]]

TIMEOUT_SECONDS = 1.0
# The connect or statement timeout (1 s), the client's grace after the server's statement timeout (0.5 s),
# and ample room for a loaded machine.
BOUND_SECONDS = 5.0

POSTGRES_ONLY = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


async def timed(request: Awaitable[httpx.Response]) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    response = await request
    return response, time.monotonic() - started


def assert_unavailable(response: httpx.Response, seconds: float) -> None:
    assert_error(response, 503, 986)
    assert int(response.headers["retry-after"]) >= 1
    assert seconds < BOUND_SECONDS, f"answered after {seconds:.1f} s"


def _requests(pet_id: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """One of each operation, reads and writes."""
    return [
        ("GET", f"/v1/pets/{pet_id}", None),
        ("GET", "/v1/pets", None),
        ("POST", "/v1/pets", pet_body("Lost")),
        ("PUT", f"/v1/pets/{pet_id}", pet_body("Changed", "Cat")),
        ("DELETE", f"/v1/pets/{pet_id}", None),
    ]


_WRITES = ("POST", "PUT", "DELETE")


async def _all_answer_503(client: Client, pet_id: str, *, methods: tuple[str, ...] = ("GET", *_WRITES)) -> None:
    for method, path, body in _requests(pet_id):
        if method in methods:
            response, seconds = await timed(client.request(method, path, json=body, headers=auth()))
            assert_unavailable(response, seconds)


async def _all_succeed(client: Client, pet_id: str, *, methods: tuple[str, ...] = ("GET",)) -> None:
    for method, path, body in _requests(pet_id):
        if method in methods:
            response = await client.request(method, path, json=body, headers=auth())
            assert response.status_code in (200, 201), (method, path, response.text)


async def _stored(client: Client) -> tuple[list[dict[str, Any]], list[str]]:
    """Every record (as the admin sees them) and their ETags: what must survive a failed write unchanged."""
    admin = auth(ADMIN, admin=True)
    page = await client.get("/v1/pets", params={"pageSize": 100, "sort": "id"}, headers=admin)
    assert page.status_code == 200, page.text
    items: list[dict[str, Any]] = page.json()["items"]
    etags = [(await client.get(f"/v1/pets/{item['id']}", headers=admin)).headers["etag"] for item in items]
    return items, etags


async def _unavailable_counts(client: Client) -> dict[str, float]:
    text = (await client.get("/metrics")).text
    return {
        labels["cause"]: value for name, labels, value in _samples(text) if name == "petrecords_db_unavailable_total"
    }


# --- PostgreSQL, through a proxy the test can cut or silence ---------------------------------------------


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    url = sa.make_url(database_url)
    with tcp_proxy(url.host or "127.0.0.1", url.port or 5432, postgres=True) as running:
        yield running


@pytest.fixture
def proxied(make_settings: Callable[..., Settings], database_url: str, proxy: TcpProxy) -> Settings:
    url = sa.make_url(database_url).set(host="127.0.0.1", port=proxy.port)
    return make_settings(
        database_url=url.render_as_string(hide_password=False),
        db_connect_timeout_seconds=TIMEOUT_SECONDS,
        db_statement_timeout_seconds=TIMEOUT_SECONDS,
    )


@POSTGRES_ONLY
class TestPostgresUnreachable:
    async def test_cut_connections_answer_503_in_bounded_time(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy
    ) -> None:
        async with make_client(proxied) as client:
            pet = (await create(client)).json()
            proxy.cut()

            await _all_answer_503(client, pet["id"])
            ready, seconds = await timed(client.get("/readyz"))
            healthz = await client.get("/healthz")

            assert_unavailable(ready, seconds)
            assert healthz.status_code == 200
            assert (await _unavailable_counts(client)).get("connection", 0) >= 1

    async def test_recovers_when_the_database_is_back(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy
    ) -> None:
        async with make_client(proxied) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            proxy.cut()
            await _all_answer_503(client, pet["id"])
            proxy.restore()

            # The very first requests after the outage succeed: no dead pooled connection is handed out.
            ready = await client.get("/readyz")
            await _all_succeed(client, pet["id"])

            assert ready.status_code == 200
            assert await _stored(client) == before  # the failed writes changed nothing
            await _all_succeed(client, pet["id"], methods=_WRITES)

    async def test_first_request_after_a_quiet_outage_succeeds(self, proxied: Settings, proxy: TcpProxy) -> None:
        """Pooled connections that the outage closed while nobody used them are replaced on checkout."""
        app = create_app(proxied)
        async with AsyncTestClient(app=app) as client:  # type: ignore[arg-type]
            pet = (await create(client)).json()
            proxy.cut()
            store = store_of(app)
            await until(lambda: store.pool_figures()["idle"] == 0, what="the pooled connection to see its end")
            proxy.restore()

            response = await client.get(f"/v1/pets/{pet['id']}", headers=auth())

            assert response.status_code == 200, response.text

    async def test_silent_database_answers_503_in_bounded_time_then_recovers(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy
    ) -> None:
        """A black hole: connections stay open but nothing comes back, as when the network drops packets.
        Only the timeouts end the wait: the pooled connection's statement, then new connections' set-up."""
        async with make_client(proxied) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            proxy.black_hole()

            await _all_answer_503(client, pet["id"])
            ready, seconds = await timed(client.get("/readyz"))
            assert_unavailable(ready, seconds)
            assert (await _unavailable_counts(client)).get("timeout", 0) >= 1

            proxy.restore()
            first = await client.get(f"/v1/pets/{pet['id']}", headers=auth())
            ready = await client.get("/readyz")

            assert first.status_code == 200, first.text
            assert ready.status_code == 200
            assert await _stored(client) == before
            await _all_succeed(client, pet["id"], methods=("GET", *_WRITES))


async def _history_versions(client: Client, pet_id: str) -> list[int]:
    response = await client.get(f"/v1/pets/{pet_id}/history", headers=auth())
    assert response.status_code == 200, response.text
    return [item["version"] for item in response.json()["items"]]


async def _pets_named(database_url: str, name: str) -> int:
    return len(await fetch_sql(database_url, "SELECT id FROM pets WHERE name = $1", name))


@POSTGRES_ONLY
class TestPostgresCommitUnanswered:
    """A COMMIT whose answer is lost (the connection reset once the server has committed), or held in a black hole
    (on its connection alone), leaves the service not knowing whether the write happened: it asks the database, on
    a connection of its own, and answers what became of the write. A session that still holds the transaction is
    ended first, so that a COMMIT still on its way cannot land after the answer."""

    async def test_a_replace_whose_commit_answer_is_lost_answers_200(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy, database_url: str
    ) -> None:
        async with make_client(proxied) as client:
            created = await create(client)
            pet = created.json()
            proxy.lose_answer_to("COMMIT")
            headers = {**auth(), "If-Match": created.headers["etag"]}
            response = await client.put(f"/v1/pets/{pet['id']}", json=pet_body("Committed", "Cat"), headers=headers)

            assert response.status_code == 200, response.text
            assert response.json()["name"] == "Committed"
            stored = await client.get(f"/v1/pets/{pet['id']}", headers=auth())
            assert stored.json() == response.json()
            assert stored.headers["etag"] == response.headers["etag"]
            assert await _history_versions(client, pet["id"]) == [1, 2]

    async def test_a_create_with_a_key_whose_commit_answer_is_lost_answers_201_once(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy, database_url: str
    ) -> None:
        async with make_client(proxied) as client:
            proxy.lose_answer_to("COMMIT")
            headers = {**auth(), "Idempotency-Key": "lost-answer"}
            first = await client.post("/v1/pets", json=pet_body("Keyed"), headers=headers)
            again = await client.post("/v1/pets", json=pet_body("Keyed"), headers=headers)

            assert first.status_code == 201, first.text
            assert again.status_code == 201, again.text
            assert again.headers["idempotent-replayed"] == "true"
            assert again.json() == first.json()
            assert await _pets_named(database_url, "Keyed") == 1

    async def test_a_create_sent_on_its_own_whose_answer_is_lost_answers_201(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy, database_url: str
    ) -> None:
        """A create without a key is one statement, a transaction of its own: no COMMIT, and no transaction id the
        service knows. The session that sent it is ended, and the change it keeps says whether it committed."""
        async with make_client(proxied) as client:
            proxy.lose_answer_to("INSERT INTO pets")
            response = await client.post("/v1/pets", json=pet_body("Alone"), headers=auth())

            assert response.status_code == 201, response.text
            assert await _pets_named(database_url, "Alone") == 1
            assert await _history_versions(client, response.json()["id"]) == [1]

    async def test_a_commit_held_in_a_black_hole_is_ended_and_answered_503(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy, database_url: str
    ) -> None:
        async with make_client(proxied) as client:
            created = await create(client)
            pet = created.json()
            before = await _stored(client)
            proxy.hold("COMMIT")
            headers = {**auth(), "If-Match": created.headers["etag"]}
            response, seconds = await timed(
                client.put(f"/v1/pets/{pet['id']}", json=pet_body("Never", "Cat"), headers=headers)
            )
            proxy.restore()  # what was held is delivered now, as TCP would once the network is back
            await asyncio.sleep(0.5)

            assert_unavailable(response, seconds)
            assert response.json()["message"] == DatabaseUnavailable.default_message  # it changed nothing
            assert await _stored(client) == before
            assert await _pets_named(database_url, "Never") == 0

    async def test_a_commit_the_database_cannot_be_asked_about_is_not_said_to_have_changed_nothing(
        self, make_client: MakeClient, proxied: Settings, proxy: TcpProxy
    ) -> None:
        async with make_client(proxied) as client:
            created = await create(client)
            pet = created.json()
            proxy.hold("COMMIT")
            # Then nothing reaches the database. From a thread: the test client holds this one until it answers.
            silencing = threading.Thread(target=_black_hole_once_held, args=(proxy,))
            silencing.start()
            headers = {**auth(), "If-Match": created.headers["etag"]}
            response, seconds = await timed(
                client.put(f"/v1/pets/{pet['id']}", json=pet_body("Unknown", "Cat"), headers=headers)
            )
            silencing.join()
            proxy.restore()

            assert_error(response, 503, 986)
            assert response.json()["message"] == UNCONFIRMED
            # The statement timeout (1 s) and its grace (0.5 s), then as long again asking the database.
            assert seconds < 2 * BOUND_SECONDS, f"answered after {seconds:.1f} s"


@POSTGRES_ONLY
class TestPostgresSessionsBounded:
    """Every session of the service is bounded on the server: one whose client has gone mid-transaction (a host
    lost, a partition) ends within the idle-in-transaction bound, so that the change feed of every instance,
    which waits for its transaction, moves on within seconds."""

    async def test_the_bounds_of_a_session(self, make_settings: Callable[..., Settings]) -> None:
        store = open_store(make_settings(db_idle_in_transaction_timeout_seconds=3, db_tcp_timeout_seconds=12))
        try:
            async with store.transaction(write=True) as tx:
                shown = {
                    name: (await tx.fetch((sa.text(f"SHOW {name}"), {})))[0][0]
                    for name in ("idle_in_transaction_session_timeout", "tcp_user_timeout", "tcp_keepalives_idle")
                }
        finally:
            await store.close()

        assert shown == {
            "idle_in_transaction_session_timeout": "3s",
            "tcp_user_timeout": "12000",
            "tcp_keepalives_idle": "6",
        }

    async def test_a_transaction_whose_client_went_silent_holds_the_feed_back_for_seconds_at_most(
        self, make_client: MakeClient, make_settings: Callable[..., Settings], proxied: Settings, proxy: TcpProxy
    ) -> None:
        bound = 1.0
        store = open_store(
            make_settings(database_url=proxied.database_url, db_idle_in_transaction_timeout_seconds=bound)
        )
        abandoned = store.transaction(write=True)
        try:
            await abandoned.__aenter__()
            row = pet_row("Abandoned")
            await abandoned.insert(PET_RECORDS, row)
            assert await abandoned.get(PET_RECORDS, row["id"]) is not None  # written: it has a transaction id
            proxy.strand()  # its client's host lost: the server's end of the connection open, and silent

            async with make_client(make_settings()) as client:
                written = await create(client, name="After")
                started = time.monotonic()

                async def in_the_feed() -> bool:
                    return written.json()["id"] in {change["id"] for change in await read_all(client, limit=100)}

                await until(in_the_feed, what="the change in the feed", seconds=bound + 2 * BOUND_SECONDS)
                seconds = time.monotonic() - started
        finally:
            proxy.restore()
            with contextlib.suppress(DatabaseUnavailable):
                await abandoned.__aexit__(RuntimeError, RuntimeError("abandoned"), None)
            await store.close()

        assert seconds < bound + BOUND_SECONDS, f"the feed waited {seconds:.1f} s"


def _black_hole_once_held(proxy: TcpProxy) -> None:
    deadline = time.monotonic() + BOUND_SECONDS
    while not proxy.held:
        assert time.monotonic() < deadline, "no statement was held"
        time.sleep(0.005)
    proxy.black_hole()


@POSTGRES_ONLY
class TestPostgresPoolExhausted:
    async def test_no_free_connection_within_the_timeout_is_503(
        self, make_settings: Callable[..., Settings], database_url: str
    ) -> None:
        """Every pooled connection is busy (here: the pool has one, and a transaction holds it)."""
        store = PostgresStore(make_settings(db_pool_size=1, db_connect_timeout_seconds=TIMEOUT_SECONDS))
        try:
            async with store.transaction(write=False) as holding:
                await holding.count(PET_RECORDS, ())
                started = time.monotonic()
                with pytest.raises(DatabaseUnavailable) as raised:
                    async with store.transaction(write=False) as waiting:
                        await waiting.count(PET_RECORDS, ())
                seconds = time.monotonic() - started
            async with store.transaction(write=False) as later:
                await later.count(PET_RECORDS, ())
        finally:
            await store.close()

        assert raised.value.cause == "pool"
        assert TIMEOUT_SECONDS * 0.9 <= seconds < BOUND_SECONDS


@contextlib.asynccontextmanager
async def _postgres_holding(database_url: str, statement: str, *args: Any) -> Any:
    """Another client of the database that runs `statement` in a transaction it keeps open (a lock)."""
    holder = await asyncpg.connect(database_url, timeout=5)
    try:
        transaction = holder.transaction()
        await transaction.start()
        await holder.execute(statement, *args)
        try:
            yield
        finally:
            await transaction.rollback()
    finally:
        await holder.close()


@POSTGRES_ONLY
class TestPostgresSlowStatement:
    """The database works but a statement waits past the statement timeout: a lock held by someone else."""

    @pytest.fixture
    def slow_settings(self, make_settings: Callable[..., Settings]) -> Settings:
        return make_settings(db_statement_timeout_seconds=TIMEOUT_SECONDS)

    async def test_write_waiting_on_a_row_lock_is_503_and_changes_nothing(
        self, make_client: MakeClient, slow_settings: Settings, database_url: str
    ) -> None:
        async with make_client(slow_settings) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            lock = "SELECT 1 FROM pets WHERE id = $1 FOR UPDATE"
            async with _postgres_holding(database_url, lock, uuid.UUID(pet["id"])):
                await _all_answer_503(client, pet["id"], methods=("PUT", "DELETE"))
                await _all_succeed(client, pet["id"], methods=("GET",))  # readers do not wait for row locks
                counts = await _unavailable_counts(client)

            assert counts.get("timeout", 0) >= 2
            assert await _stored(client) == before
            await _all_succeed(client, pet["id"], methods=_WRITES)

    async def test_insert_waiting_on_a_table_lock_is_503(
        self, make_client: MakeClient, slow_settings: Settings, database_url: str
    ) -> None:
        async with make_client(slow_settings) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            async with _postgres_holding(database_url, "LOCK TABLE pets IN SHARE ROW EXCLUSIVE MODE"):
                await _all_answer_503(client, pet["id"], methods=("POST",))
                await _all_succeed(client, pet["id"], methods=("GET",))

            assert await _stored(client) == before
            await _all_succeed(client, pet["id"], methods=("POST",))


# --- SQLite: a database file of the test's own ----------------------------------------------------------


def _privileged_step_unavailable(what: str, detail: str) -> None:
    message = f"this test needs to {what}, which is not permitted here: {detail}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: the fault tests must run)")
    pytest.skip(message)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    (tmp_path / "db").mkdir()
    return f"sqlite:///{tmp_path / 'db' / 'pets.sqlite3'}"


def _sqlite_settings(url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": url,
        "data_dir": data_dir,
        "auth_secret": SECRET,
        "rate_limit": 0,
        "access_log": False,
        "sqlite_busy_timeout_ms": 500,
    }
    values.update(overrides)
    return Settings(**values)


def _sqlite_client(url: str, data_dir: Path) -> Client:
    migrate(_sqlite_settings(url, data_dir))
    return AsyncTestClient(app=create_app(_sqlite_settings(url, data_dir)))  # type: ignore[arg-type]


def _sqlite_file(url: str) -> Path:
    return Path(url.removeprefix("sqlite:///"))


def _integrity(path: Path) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(path)
    try:
        return list(connection.execute("PRAGMA integrity_check"))
    finally:
        connection.close()


class TestSqliteLocked:
    async def test_writes_answer_503_after_busy_timeout_reads_go_on_then_recover(
        self, sqlite_url: str, tmp_path: Path
    ) -> None:
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            holder = sqlite3.connect(_sqlite_file(sqlite_url), isolation_level=None)
            try:
                holder.execute("BEGIN EXCLUSIVE")  # another process writing, for longer than busy_timeout
                for method, path, body in _requests(pet["id"]):
                    if method in _WRITES:
                        response, seconds = await timed(client.request(method, path, json=body, headers=auth()))
                        assert_unavailable(response, seconds)
                        assert seconds >= 0.45, "it gave up before busy_timeout (500 ms)"
                await _all_succeed(client, pet["id"], methods=("GET",))  # WAL: readers go on
                ready = await client.get("/readyz")
                counts = await _unavailable_counts(client)
            finally:
                holder.close()

            assert ready.status_code == 200
            assert counts.get("locked", 0) >= 3
            assert await _stored(client) == before
            await _all_succeed(client, pet["id"], methods=_WRITES)


@contextlib.contextmanager
def _immutable(*paths: Path) -> Iterator[None]:
    """Files and directories that nobody may change, root included (root ignores permissions, not this)."""
    if shutil.which("chattr") is None:
        _privileged_step_unavailable("make files immutable", "chattr is not installed")
    names = [str(path) for path in paths]
    try:
        result = subprocess.run(["chattr", "+i", *names], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            _privileged_step_unavailable("make files immutable (chattr +i)", result.stderr.strip())
        yield
    finally:
        subprocess.run(["chattr", "-i", *names], capture_output=True, check=False)


class TestSqliteUnwritable:
    async def test_writes_answer_503_without_damage_then_recover(self, sqlite_url: str, tmp_path: Path) -> None:
        path = _sqlite_file(sqlite_url)
        async with _sqlite_client(sqlite_url, tmp_path) as client:
            pet = (await create(client)).json()
            before = await _stored(client)
            # The database, its write-ahead log and its directory (no new journal). Not the -shm index: that
            # is memory-mapped, and a write to a mapped page of an immutable file kills the process (SIGBUS).
            with _immutable(path, path.with_name(path.name + "-wal"), path.parent):
                await _all_answer_503(client, pet["id"], methods=_WRITES)
                await _all_succeed(client, pet["id"], methods=("GET",))
                counts = await _unavailable_counts(client)

            assert counts.get("storage", 0) >= 3
            assert await _stored(client) == before
            await _all_succeed(client, pet["id"], methods=_WRITES)
        assert _integrity(path) == [("ok",)]


@contextlib.contextmanager
def _small_file_system(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path`: a disk that can really fill up."""
    path.mkdir(parents=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "petrecords-test", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        _privileged_step_unavailable("mount a small tmpfs", result.stderr.strip())
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], capture_output=True, check=False)


def _fill(directory: Path) -> Path:
    """Write a ballast file until the file system is full; deleting it gives the space back."""
    ballast = directory / "ballast"
    descriptor = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\xff" * 65536
        while True:
            try:
                os.write(descriptor, block)
            except OSError:
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(descriptor)
    return ballast


class TestSqliteDiskFull:
    async def test_writes_answer_503_without_damage_then_recover(self, tmp_path: Path) -> None:
        with _small_file_system(tmp_path / "disk", "4m") as disk:
            url = f"sqlite:///{disk / 'pets.sqlite3'}"
            path = _sqlite_file(url)
            async with _sqlite_client(url, tmp_path) as client:
                pets = [(await create(client, name=f"Pet {number}")).json() for number in range(3)]
                before = await _stored(client)
                # An empty write-ahead log, so that the next write needs new space.
                checkpoint = sqlite3.connect(path)
                checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                checkpoint.close()
                ballast = _fill(disk)
                try:
                    await _all_answer_503(client, pets[0]["id"], methods=_WRITES)
                    await _all_succeed(client, pets[0]["id"], methods=("GET",))
                    counts = await _unavailable_counts(client)
                finally:
                    ballast.unlink()

                assert counts.get("storage", 0) >= 3
                assert await _stored(client) == before
                assert _integrity(path) == [("ok",)]
                await _all_succeed(client, pets[0]["id"], methods=_WRITES)
            assert _integrity(path) == [("ok",)]
