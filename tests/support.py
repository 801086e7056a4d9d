"""Helpers shared by the tests: tokens, throw-away databases, common requests."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import datetime
import importlib.util
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import jwt
import pysqlite3.dbapi2 as sqlite3
import pytest
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.duties import Duties
from petrecords.http import ASGIApp
from petrecords.pets import PETS
from petrecords.registry import SCHEMA
from petrecords.resources.declaration import Resource
from petrecords.store.base import Condition, Operator, Row, Store
from petrecords.store.postgres import PostgresStore
from petrecords.text import match_key
from petrecords.values import new_record_id, now_ms

SECRET = "test-secret-for-pet-records-0123456789abcdef"
ALICE = "alice@example.com"
BOB = "bob@example.com"
ADMIN = "admin@example.com"
# The server the tests create their databases on; the default is the local PostgreSQL every machine runs.
POSTGRES_ADMIN_URL = os.environ.get("PETRECORDS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def bench_module(name: str) -> Any:
    """A module of bench/, loaded from its file: bench/ is no package."""
    return module_from_file(Path(__file__).resolve().parents[1] / "bench" / f"{name}.py", f"bench_{name}")


def module_from_file(path: Path, name: str) -> Any:
    """The module of the file at `path`, loaded as `name`: for the scripts of directories that are no package."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def token(user: str = ALICE, *, admin: bool = False, secret: str = SECRET, ttl: int = 600, **claims: Any) -> str:
    now = int(time.time())
    payload: dict[str, Any] = {"sub": user, "roles": ["admin"] if admin else [], "iat": now, "exp": now + ttl}
    payload.update(claims)
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, secret, algorithm="HS256")


def auth(user: str = ALICE, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, admin=admin)}"}


def pet_body(name: str = "Rex", pet_type: str = "Dog", **extra: Any) -> dict[str, Any]:
    return {"name": name, "petType": pet_type, **extra}


def postgres_unavailable(reason: str) -> None:
    message = f"PostgreSQL is required for this test: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: the PostgreSQL suite must run)")
    pytest.skip(message)


async def _admin_execute(statement: str) -> None:
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        await connection.execute(statement)
    finally:
        await connection.close()


@contextlib.contextmanager
def throwaway_postgres(*, migrated: bool = False) -> Iterator[str]:
    """A new PostgreSQL database for the duration of the block, dropped afterwards: empty, or with `migrated` a copy
    of one this process migrated once, the database's own settings that the migrations made included (a copy takes
    a fifth of a second; migrating a new database, one and a half)."""
    name = f"petrecords_test_{uuid.uuid4().hex[:12]}"
    try:
        if migrated:
            asyncio.run(_copy_database(_MIGRATED_TEMPLATE.name(), name))
        else:
            asyncio.run(_admin_execute(f'CREATE DATABASE "{name}"'))
    except (OSError, asyncpg.PostgresError) as exc:
        postgres_unavailable(str(exc))
    url = _database_url(name)
    try:
        yield url
    finally:
        _KEPT.forget(url)
        asyncio.run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _database_url(name: str) -> str:
    return f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


async def _copy_database(template: str, name: str) -> None:
    """CREATE DATABASE … TEMPLATE, then the template's database-level settings (ALTER DATABASE … SET), which a copy
    does not take with it."""
    connection = await asyncpg.connect(POSTGRES_ADMIN_URL, timeout=5)
    try:
        await connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        settings = await connection.fetchval(
            "SELECT setconfig FROM pg_db_role_setting WHERE setrole = 0 "
            "AND setdatabase = (SELECT oid FROM pg_database WHERE datname = $1)",
            template,
        )
        for assignment in settings or ():
            setting, value = assignment.split("=", 1)
            await connection.execute(f'ALTER DATABASE "{name}" SET "{setting}" = {_quoted(value)}')
    finally:
        await connection.close()


def _quoted(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


class _MigratedTemplate:
    """A database migrated once per test process, that `throwaway_postgres(migrated=True)` copies; dropped when the
    process ends."""

    def __init__(self) -> None:
        self._name: str | None = None
        self._making = threading.Lock()

    def name(self) -> str:
        with self._making:
            if self._name is None:
                name = f"petrecords_template_{uuid.uuid4().hex[:12]}"
                asyncio.run(_admin_execute(f'CREATE DATABASE "{name}"'))
                atexit.register(self._drop, name)
                with tempfile.TemporaryDirectory() as data_dir:
                    migrate(Settings(database_url=_database_url(name), data_dir=Path(data_dir)))
                self._name = name
            return self._name

    @staticmethod
    def _drop(name: str) -> None:
        with contextlib.suppress(OSError, asyncpg.PostgresError):
            asyncio.run(_admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


_MIGRATED_TEMPLATE = _MigratedTemplate()


@contextlib.contextmanager
def seeded_database(kind: str, data_dir: Path, seed: Callable[[str, Path], Awaitable[None]]) -> Iterator[str]:
    """A database of its own of `kind` ("sqlite", in `data_dir`, or "postgresql", thrown away after), migrated and
    seeded by `seed(database_url, data_dir)`: for a module whose statistics or sizes must be no other test's."""
    with contextlib.ExitStack() as stack:
        if kind == "sqlite":
            database_url = f"sqlite:///{data_dir / 'pets.sqlite3'}"
        else:
            database_url = stack.enter_context(throwaway_postgres(migrated=True))
        migrate(Settings(database_url=database_url, data_dir=data_dir))
        asyncio.run(seed(database_url, data_dir))
        yield database_url


_VERSION_ROW = (
    "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) VALUES ('', '', '', 0, 0, {});"
)
# The tables that refer to others first; the schema's own names.
_EMPTY_EVERY_TABLE = "".join(f'DELETE FROM "{table.name}";' for table in reversed(SCHEMA.sorted_tables))  # noqa: S608


async def wipe(database_url: str) -> None:
    """Empty every table, keeping the schema, in one round trip. On PostgreSQL by DELETE, not TRUNCATE: TRUNCATE
    takes a quarter of a second here, DELETE of a test's few rows two milliseconds. An app that outlives the wipe
    (one per test module) must not take the emptied data for a state it has seen: the data's version (the sum of
    the kept counts' `writes`) starts again from a random number, never from 0 (SQLite's moves by itself: it is
    the file's commit counter)."""
    if database_url.startswith("sqlite"):
        # A connection of its own each time, not a kept one: a test may replace the file, and a connection to the
        # replaced one would checkpoint into it and delete the new one's write-ahead log on closing. Without a sync
        # to the disk (a test's data need not survive a power cut), opening one costs less than a millisecond.
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            connection.execute("PRAGMA synchronous = OFF")
            connection.executescript(f"BEGIN;{_EMPTY_EVERY_TABLE}COMMIT;")
        finally:
            connection.close()
        return
    version = _VERSION_ROW.format(secrets.randbits(48))
    await _KEPT.execute(database_url, f"BEGIN;{_EMPTY_EVERY_TABLE}{version}COMMIT;")


class _KeptConnections:
    """One PostgreSQL connection per database, kept for the life of the test process, which sends scripts there (a
    simple query: several statements, one round trip). The wipe before each API test took 19 ms on a connection of
    its own, a statement a round trip, and takes half a millisecond here. The connections live on an event loop of
    their own, in a thread, since their callers' loops come and go (a module's, or the one `asyncio.run` makes)."""

    APPLICATION_NAME = "petrecords-tests"
    """How the kept connections name themselves to the server (pg_stat_activity), apart from the service's."""
    # What a connection that broke since its last use raises: the server ended it, or the socket went.
    _BROKEN = (OSError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError)

    def __init__(self) -> None:
        self._connections: dict[str, asyncpg.Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting = threading.Lock()

    async def execute(self, database_url: str, script: str) -> None:
        """Run `script` on the kept connection to `database_url`, made (again) when there is none or it broke."""
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._execute(database_url, script), self._run()))

    def forget(self, database_url: str) -> None:
        """Close the connection kept to `database_url`, if any: before its database is dropped."""
        if self._loop is not None and database_url in self._connections:
            asyncio.run_coroutine_threadsafe(self._close(database_url), self._loop).result(timeout=10)

    def _run(self) -> asyncio.AbstractEventLoop:
        with self._starting:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, name="kept-connections", daemon=True).start()
            return self._loop

    async def _execute(self, database_url: str, script: str) -> None:
        connection = self._connections.get(database_url)
        if connection is not None:
            try:
                await connection.execute(script)
                return
            except self._BROKEN:
                # The script's transaction died with the connection, if it had begun: it runs again, whole.
                connection.terminate()
        connection = await asyncpg.connect(
            database_url, timeout=5, server_settings={"application_name": self.APPLICATION_NAME}
        )
        self._connections[database_url] = connection
        await connection.execute(script)

    async def _close(self, database_url: str) -> None:
        connection = self._connections.pop(database_url)
        try:
            await connection.close(timeout=5)
        except self._BROKEN:
            connection.terminate()


_KEPT = _KeptConnections()
KEPT_CONNECTIONS_NAME = _KeptConnections.APPLICATION_NAME


async def fetch_sql(database_url: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    """The rows of one query run directly on a PostgreSQL database, bypassing the service."""
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        return list(await connection.fetch(statement, *args))
    finally:
        await connection.close()


def redis_is_up() -> bool:
    """Whether the local Redis answers on its port."""
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


async def run_sql(database_url: str, statement: str) -> None:
    """Run one statement directly on the database, bypassing the service (to set up odd states)."""
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        with connection:
            connection.execute(statement)
        connection.close()
        return
    pg = await asyncpg.connect(database_url, timeout=5)
    try:
        await pg.execute(statement)
    finally:
        await pg.close()


async def scalar_sql(database_url: str, statement: str) -> Any:
    """The single value of one query run directly on the database, bypassing the service."""
    if database_url.startswith("sqlite"):
        connection = sqlite3.connect(database_url.removeprefix("sqlite:///"))
        try:
            return connection.execute(statement).fetchone()[0]
        finally:
            connection.close()
    pg = await asyncpg.connect(database_url, timeout=5)
    try:
        return await pg.fetchval(statement)
    finally:
        await pg.close()


FIELDS = {
    "id",
    "createdAt",
    "createdBy",
    "modifiedAt",
    "modifiedBy",
    "ownerId",
    "name",
    "petType",
    "birthDate",
    "sex",
    "neutered",
    "breed",
    "microchip",
    "color",
    "deceasedAt",
}
LONG_SQLITE_READ = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000) SELECT count(*) FROM n"
)
"""A read of a few hundred milliseconds of SQLite's work (counting to two million)."""
MISSING_ID = "01890a5d-ac96-774b-bcce-b302099a8057"


def assert_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    """A ServiceError body: exactly `code` and `message`, plus `errors` only for 994."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    allowed = {"code", "message", "errors"} if code == 994 else {"code", "message"}
    assert {"code", "message"} <= set(body) <= allowed, body
    assert body["code"] == code
    assert isinstance(body["message"], str)
    assert body["message"]
    if "errors" in body:
        errors = body["errors"]
        assert isinstance(errors, dict)
        assert errors
        assert all(isinstance(messages, list) and messages for messages in errors.values())
    return body


async def create(client: AsyncTestClient[Any], user: str = ALICE, **body: Any) -> httpx.Response:
    """Create a pet as `user` and insist that it worked."""
    response = await client.post("/v1/pets", json=pet_body(**body), headers=auth(user))
    assert response.status_code == 201, response.text
    return response


def vaccine_body(name: str = "Rabies", pet_type: str = "Dog", duration: Any = 365, **extra: Any) -> dict[str, Any]:
    return {"name": name, "petType": pet_type, "duration": duration, **extra}


def admin() -> dict[str, str]:
    return auth(ADMIN, admin=True)


async def create_vaccine(client: AsyncTestClient[Any], **body: Any) -> httpx.Response:
    """Add a vaccine to the catalogue as an administrator and insist that it worked."""
    response = await client.post("/v1/vaccines", json=vaccine_body(**body), headers=admin())
    assert response.status_code == 201, response.text
    return response


ANOTHER = {
    "pets": {"microchip": "982000123456780"},
    "pet-shares": {"grantee": "vet@clinic.example"},
    "pet-vaccination": {"rabiesTag": "R-2026-0043"},
}
"""A second record of a resource must differ from the first in the values that are unique among its records."""


def as_read(resource: Resource, created: dict[str, Any]) -> dict[str, Any]:
    """A create's answer as a read shows the record: without what only the create reveals (a webhook's secret, a
    certificate's link)."""
    revealed = resource.revealed.schemas if resource.revealed is not None else {}
    return {name: value for name, value in created.items() if name not in revealed}


class Examples:
    """Records of the registered resources, made by an administrator from their declared examples: a record of
    each resource it refers to is made first (a dose's pet and vaccine, a share's pet), and the references name
    them."""

    def __init__(self, client: AsyncTestClient[Any]) -> None:
        self.client = client
        self.made: dict[str, dict[str, Any]] = {}

    def body(self, resource: Resource, *, another: bool = False) -> dict[str, Any]:
        """A valid body; `another` makes it a second record of the resource beside the first."""
        body = dict(resource.examples) | (ANOTHER.get(resource.name, {}) if another else {})
        for reference in resource.references:
            body[reference.field] = self.made[reference.target.name]["id"]
        return body

    async def prepare(self, resource: Resource) -> None:
        """A record of each resource that this one's records refer to (and so on), once."""
        for reference in resource.references:
            target = reference.target
            if target.name not in self.made:
                await self.prepare(target)
                self.made[target.name] = (await self._post(target, another=False)).json()

    async def create(self, resource: Resource, *, another: bool = False) -> httpx.Response:
        await self.prepare(resource)
        response = await self._post(resource, another=another or resource.name in self.made)
        self.made.setdefault(resource.name, response.json())
        return response

    async def assert_unchanged(self, resource: Resource, written: httpx.Response) -> None:
        """The record is still exactly as that create or replace response showed it."""
        current = await self.client.get(f"{resource.path}/{written.json()['id']}", headers=admin())
        assert current.status_code == 200, current.text
        assert current.json() == as_read(resource, written.json())
        assert current.headers["etag"] == written.headers["etag"]

    async def count(self, resource: Resource) -> int:
        """How many records of the resource there are, as an administrator's list counts them."""
        response = await self.client.get(resource.path, headers=admin())
        assert response.status_code == 200, response.text
        total: int = response.json()["totalCount"]
        return total

    async def _post(self, resource: Resource, *, another: bool) -> httpx.Response:
        response = await self.client.post(resource.path, json=self.body(resource, another=another), headers=admin())
        assert response.status_code == 201, response.text
        return response


DOSES = "/v1/pet-vaccination"
STARTED = datetime.datetime.now(datetime.UTC).replace(microsecond=0)


def at(days: float) -> str:
    """An instant `days` from when the tests started, as the service writes it."""
    return (STARTED + datetime.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%S.000Z")


async def dose(
    client: AsyncTestClient[Any],
    pet: dict[str, Any],
    vaccine: dict[str, Any],
    applied: float,
    due: float,
    user: str = ALICE,
) -> dict[str, Any]:
    """Record a dose of `vaccine` given to `pet` `applied` days from the start, due `due` days from it."""
    body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": at(applied), "dueAt": at(due)}
    response = await client.post(DOSES, json=body, headers=auth(user))
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def new_record_audit(at: int, by: str) -> Row:
    """A new record's id and audit columns: written at `at` by `by`, not since."""
    return {"id": new_record_id(), "created_at": at, "created_by": by, "modified_at": at, "modified_by": by}


def pet_row(name: str = "Rex", *, owner: str = ALICE, pet_type: str = "Dog", at_ms: int | None = None) -> Row:
    """A pet as the store keeps it, for tests that write through the store directly."""
    at = now_ms() if at_ms is None else at_ms
    return {
        **new_record_audit(at, owner),
        "owner_id": owner,
        "name": name,
        "name_key": match_key(name),
        "pet_type": pet_type,
        "revision": 1,
        "birth_date": None,
        "sex": None,
        "neutered": None,
        "breed": None,
        "breed_key": None,
        "microchip": None,
        "color": None,
        "deceased_at": None,
    }


NOW = 1_795_000_000_000
"""A fixed instant of 2026-11-17, for records written through the store."""


VACCINATION_CLINIC_FIELDS_UNSET: Row = {
    **dict.fromkeys(
        ("lot_number", "lot_expires_on", "dose_type", "veterinarian", "veterinarian_licence", "clinic", "rabies_tag")
    ),
    "status": "completed",
    "status_reason": None,
}
"""What a clinic records of a dose beyond the vaccine and the dates, left unset, as most doses have it."""


def vaccination_row(pet: Row, vaccine: Row, due_at: int) -> Row:
    """A vaccination as the store keeps it, given a day before it is due."""
    return {
        **new_record_audit(NOW, ADMIN),
        "owner_id": pet["owner_id"],
        "pet_id": pet["id"],
        "vaccine_id": vaccine["id"],
        "applied_at": due_at - 86_400_000,
        "due_at": due_at,
        "notes": None,
        "revision": 1,
        **VACCINATION_CLINIC_FIELDS_UNSET,
    }


def share_row(pet: Row, grantee: str, expires_at: int | None) -> Row:
    """A share of the pet (to read it) as the store keeps it, made by its owner now."""
    return {
        **new_record_audit(now_ms(), pet["owner_id"]),
        "owner_id": pet["owner_id"],
        "pet_id": pet["id"],
        "grantee": grantee,
        "access": "read",
        "expires_at": expires_at,
        "revision": 1,
    }


def vaccine_row() -> Row:
    """A vaccine as the store keeps it."""
    return {
        **new_record_audit(NOW, ADMIN),
        "name": "Rabies",
        "name_key": "rabies",
        "pet_type": "Dog",
        "duration": 365,
        "description": None,
        "revision": 1,
        "group_name": None,
        "group_key": None,
        "manufacturer": None,
    }


def owned_by(owner: str) -> tuple[Condition, ...]:
    return (Condition(("owner_id",), Operator.EQUAL, (owner,)),)


def of_types(*pet_types: str) -> tuple[Condition, ...]:
    return (Condition(("pet_type",), Operator.IN, pet_types),)


PET_RECORDS = PETS.collection


async def store_pets(database_url: str, data_dir: Path, *owned: tuple[str, Sequence[str]]) -> None:
    """Pets stored through the store directly, with their kept counts: for each (owner, names), one of each name."""
    store = open_store(Settings(database_url=database_url, data_dir=data_dir, auth_secret=SECRET))
    try:
        async with store.transaction(write=True) as tx:
            for owner, names in owned:
                await tx.insert_many(PET_RECORDS, [pet_row(name, owner=owner) for name in names])
    finally:
        await store.close()


# How often a wait for a condition looks again, and how long it may take on a loaded machine.
POLL_SECONDS = 0.01
WAIT_SECONDS = 10.0


async def until(
    condition: Callable[[], Awaitable[bool] | bool],
    *,
    what: str,
    seconds: float = WAIT_SECONDS,
    seen: Callable[[], object] | None = None,
) -> None:
    """Return once `condition` holds, looking again every POLL_SECONDS (the event loop runs meanwhile);
    fail, naming `what` was awaited (and what `seen` shows then), when it does not hold within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        outcome = condition()
        if outcome if isinstance(outcome, bool) else await outcome:
            return
        if time.monotonic() > deadline:
            shown = "" if seen is None else f"; what was there: {seen()!r}"
            pytest.fail(f"waited {seconds:g} s in vain for {what}{shown}")
        await asyncio.sleep(POLL_SECONDS)


def store_of(app: ASGIApp) -> Store:
    """The store of an app that `create_app` made (open while a client of the app runs)."""
    inner: Any = app
    while not isinstance(inner, Litestar):
        inner = inner.app  # the layers in front of the framework
    store: Store = inner.state.services.store
    return store


def record_statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statements PostgreSQL stores send from now on, in order, but for their background duties'."""
    sent: list[str] = []
    acquire = PostgresStore.acquire

    def record(query: Any) -> None:
        sent.append(query.query)

    async def acquire_logged(self: PostgresStore) -> Any:
        connection = await acquire(self)
        task = asyncio.current_task()
        connection.remove_query_logger(record)
        if task is None or not task.get_name().startswith(Duties.TASK_NAME):
            connection.add_query_logger(record)
        return connection

    monkeypatch.setattr(PostgresStore, "acquire", acquire_logged)
    return sent


@st.composite
def parts_of_names_from(draw: st.DrawFn, names: tuple[str, ...], *, kept: int) -> str:
    """A `search` pattern from part of one of `names`: its characters kept (`kept` times as likely as each
    other choice), re-cased, or turned into wildcards; `%_\\` escaped."""
    name = draw(st.sampled_from(names))
    start = draw(st.integers(0, len(name)))
    end = draw(st.integers(start, len(name)))
    out = [draw(st.sampled_from(["", "%", "_"]))]
    for char in name[start:end]:
        how = draw(st.sampled_from(["keep"] * kept + ["upper", "lower", "any", "one"]))
        if char in "%_\\":
            out.append("\\" + char)
        elif how in ("any", "one"):
            out.append("%" if how == "any" else "_")
        else:
            out.append(char.upper() if how == "upper" else char.lower() if how == "lower" else char)
    out.append(draw(st.sampled_from(["", "%", "_"])))
    return "".join(out)


def _forbidden_in_a_name(char: str) -> bool:
    """A control character, a lone surrogate, or a bidirectional embedding, override or isolate."""
    code = ord(char)
    return (
        code <= 0x1F
        or 0x7F <= code <= 0x9F
        or 0xD800 <= code <= 0xDFFF
        or 0x202A <= code <= 0x202E
        or (0x2066 <= code <= 0x2069)
    )


_INVISIBLE = (
    (0xAD, 0xAD), (0x34F, 0x34F), (0x61C, 0x61C), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
    (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x206F), (0x2800, 0x2800), (0x3164, 0x3164), (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF),
)  # fmt: skip
"""Characters that show nothing: format characters, fillers, variation selectors, tags."""


def _visible(char: str) -> bool:
    code = ord(char)
    return not (char.isspace() or _forbidden_in_a_name(char) or any(low <= code <= high for low, high in _INVISIBLE))


def is_a_valid_name(trimmed: str, max_length: int = 100) -> bool:
    """The rule of a name, once trimmed, written apart from the service's: 1 to `max_length` code points, nothing
    forbidden in a name, and one visible character."""
    return (
        1 <= len(trimmed) <= max_length
        and not any(_forbidden_in_a_name(char) for char in trimmed)
        and any(_visible(char) for char in trimmed)
    )


@contextlib.asynccontextmanager
async def overlapping_client(app: ASGIApp) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose requests really overlap: the app runs on this event loop (Litestar's AsyncTestClient
    answers one request at a time through a portal), with its lifespan driven by hand."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outgoing: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, incoming.get, outgoing.put))
    await incoming.put({"type": "lifespan.startup"})
    assert (await outgoing.get())["type"] == "lifespan.startup.complete"
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver") as client:
            yield client
    finally:
        await incoming.put({"type": "lifespan.shutdown"})
        assert (await outgoing.get())["type"] == "lifespan.shutdown.complete"
        await lifespan
