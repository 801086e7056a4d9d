"""The ceiling: a bare ASGI app on the same HTTP server and database driver as the service.

No framework, no auth, no validation: `GET /pets/{id}` is one primary-key lookup returned as JSON.
With `--litestar`, the lookup is a bare Litestar route instead: the framework's own floor.

`POST /pets` does a create's whole database work as the service's store does it, with the same durability
settings: the pet, its change in the change log (the record's JSON) and the two kept counts (every owner's and
the owner's, by pet type). On SQLite, in the request's own savepoint inside a transaction that the write requests
ready at the same moment share, with one COMMIT for all of them, answered only once that COMMIT has returned; a
write lock held by the other worker is waited for without blocking the event loop, as the service waits for it.
On PostgreSQL, as one statement (each write a part of its WITH) committed on its own, the counts in one of the
service's eight slots.

The vaccination lists run the service's own two statements for the same request (the count, from the counts kept
by due period for the overdue lists, then page 1 of 20 with the embedded vaccine joined in), written out here as
the store compiles them, in the same
kind of read transaction, and return the rows as they come with the count:
`GET /vaccinations/pet/{petId}` is the owner's `?petId=…&sort=appliedAt&order=desc` (the owner is
`--owner`, as a token would name it), `GET /vaccinations/overdue/{epoch ms}` and
`GET /vaccinations/overdue-by-due/{epoch ms}` the admin's `?dueTo=…` and `?dueTo=…&sort=dueAt`.
`GET /vaccines/{id}` is the same primary-key lookup in the vaccine catalogue, and `GET /history/{petId}` a pet's
history as the service reads it for its owner: the pet (whose owner decides who may read it), the count of its
changes and their first page, in one read transaction.
Never imported by the service, and imports nothing of it; `bench/run.py` starts it beside it, on the
same database.

Usage: .venv/bin/python bench/ceiling.py --database-url URL --port 8001 [--workers 2] [--owner EMAIL]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
from litestar import Litestar, Response, get

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
COLUMNS = "id, created_at, created_by, modified_at, modified_by, owner_id, name, pet_type, revision"
FIELDS = COLUMNS.split(", ")
VACCINATION_FIELDS = ("id", "created_at", "created_by", "modified_at", "modified_by", "owner_id", "pet_id",
                      "vaccine_id", "applied_at", "due_at", "notes", "revision")  # fmt: skip
VACCINE_FIELDS = ("id", "created_at", "created_by", "modified_at", "modified_by", "name", "name_key", "description",
                  "description_key", "pet_type", "duration", "revision")  # fmt: skip
VACCINE_COLUMNS = ", ".join(VACCINE_FIELDS)
SHOWN_PET_COLUMNS = (
    "id, created_at, created_by, modified_at, modified_by, owner_id, name, pet_type, birth_date, sex, neutered, breed, "
    "microchip, color, deceased_at"
)
SHOWN_VACCINE_COLUMNS = (
    "id, created_at, created_by, modified_at, modified_by, name, description, pet_type, duration, group_name, "
    "manufacturer"
)
# Naive on purpose: its isoformat() has no offset, and the "Z" after it says UTC.
EPOCH = datetime.datetime(1970, 1, 1)  # noqa: DTZ001
EPOCH_DAY = EPOCH.date()
CHANGE_FIELDS = ("xid", "position", "resource", "record_id", "action", "version", "at", "by", "owner_before",
                 "owner_after", "record")  # fmt: skip
PAGE_SIZE = 20
encode = msgspec.json.encode


def _timestamp(epoch_ms: int) -> str:
    """A stored instant as the contract writes it: RFC 3339, UTC, milliseconds."""
    return (EPOCH + datetime.timedelta(milliseconds=epoch_ms)).isoformat(timespec="milliseconds") + "Z"


def _uuid(value: Any) -> str:
    """A stored id as text: asyncpg's UUID, or SQLite's 32 hex digits."""
    if not isinstance(value, str):
        return str(value)
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


# shown_pet and shown_vaccine each write their record out as one dictionary, as a bare app would: a shared helper
# for their first five fields (a call, and an update of the dictionary) made a pet's answer 0.7 µs slower to build,
# a bound that the service's figure would then be stated against.
def shown_pet(row: Any) -> dict[str, Any]:
    """A pet's row (SHOWN_PET_COLUMNS) as the service's JSON shows it: the same names, ids, instants, dates."""
    birth_date, neutered, deceased_at = row[8], row[10], row[14]
    return {
        "id": _uuid(row[0]),
        "createdAt": _timestamp(row[1]),
        "createdBy": row[2],
        "modifiedAt": _timestamp(row[3]),
        "modifiedBy": row[4],
        "ownerId": row[5],
        "name": row[6],
        "petType": row[7],
        "birthDate": None if birth_date is None else (EPOCH_DAY + datetime.timedelta(days=birth_date)).isoformat(),
        "sex": row[9],
        "neutered": None if neutered is None else bool(neutered),
        "breed": row[11],
        "microchip": row[12],
        "color": row[13],
        "deceasedAt": None if deceased_at is None else (EPOCH_DAY + datetime.timedelta(days=deceased_at)).isoformat(),
    }


def shown_vaccine(row: Any) -> dict[str, Any]:
    """A vaccine's row (SHOWN_VACCINE_COLUMNS) as the service's JSON shows it."""
    return {
        "id": _uuid(row[0]),
        "createdAt": _timestamp(row[1]),
        "createdBy": row[2],
        "modifiedAt": _timestamp(row[3]),
        "modifiedBy": row[4],
        "name": row[5],
        "description": row[6],
        "petType": row[7],
        "duration": row[8],
        "group": row[9],
        "manufacturer": row[10],
    }


def _history_sql(placeholders: tuple[str, str]) -> tuple[str, str, str]:
    """(the pet, the count of its changes, their first page), as the store sends them for a pet's history."""
    of_record = f"changes.resource = 'pets' AND changes.record_id = {placeholders[1]}"
    columns = ", ".join(f'changes."{column}"' for column in CHANGE_FIELDS)
    return (
        f"SELECT {COLUMNS}, name_key FROM pets WHERE id = {placeholders[0]}",
        f"SELECT count(*) AS count_1 FROM changes WHERE {of_record}",
        f"SELECT {columns} FROM changes WHERE {of_record} ORDER BY changes.version LIMIT {PAGE_SIZE} OFFSET 0",
    )


def _vaccination_sql(name: str, placeholders: list[str]) -> tuple[str, str]:
    """(count, page) of a vaccination list, as the store sends them, column for column; the last two
    placeholders are the page's limit and offset."""
    where, order_by = VACCINATION_LISTS[name]
    where = where.format(*placeholders[:-2])
    columns = ", ".join(
        [f"pet_vaccinations.{column}" for column in VACCINATION_FIELDS]
        + [f"vaccines.{column}" for column in VACCINE_FIELDS]
    )
    count = f"SELECT count(*) AS count_1 FROM pet_vaccinations WHERE {where}"
    page = (
        f"SELECT {columns} FROM pet_vaccinations JOIN vaccines ON vaccines.id = pet_vaccinations.vaccine_id "
        f"WHERE {where} ORDER BY {order_by} LIMIT {placeholders[-2]} OFFSET {placeholders[-1]}"
    )
    return count, page


# List name -> (the condition, the order). The owner's list of a pet carries the owner condition the service
# adds for a caller who is not an admin.
VACCINATION_LISTS = {
    "pet": (
        "pet_vaccinations.pet_id IN ({0}) AND pet_vaccinations.owner_id = {1}",
        "pet_vaccinations.applied_at DESC, pet_vaccinations.id ASC",
    ),
    "overdue": ("pet_vaccinations.due_at < {0}", "pet_vaccinations.created_at ASC, pet_vaccinations.id ASC"),
    "overdue-by-due": ("pet_vaccinations.due_at < {0}", "pet_vaccinations.due_at ASC, pet_vaccinations.id ASC"),
}


PERIOD_UNIT_MS, PERIOD_SPAN, PERIOD_SIZES = 3_600_000, 32, 4
DUE_COUNT_VALUES = 2 * PERIOD_SIZES + 1
"""How many values `_due_count_values` gives."""


def _due_count_sql(placeholders: list[str]) -> str:
    """The overdue lists' count as the store sends it: the kept counts by due period (the service's
    tables.period_counts) before the instant's hour, from the largest period down, and that hour's records before
    the instant. Placeholders: as `_due_count_values` gives them."""
    kept = (
        "(SELECT coalesce(sum(count), 0) FROM period_counts WHERE resource = 'pet-vaccination' AND scope = '' "
        "AND size = {size}{first} AND period < {last})"
    )
    *bounds, unit_start, instant = placeholders
    parts = [kept.format(size=PERIOD_SIZES - 1, last=bounds[0], first="")]
    for index, size in enumerate(reversed(range(PERIOD_SIZES - 1))):
        first, last = bounds[1 + 2 * index : 3 + 2 * index]
        parts.append(kept.format(size=size, last=last, first=f" AND period >= {first}"))
    parts.append(f"(SELECT count(*) FROM pet_vaccinations WHERE due_at >= {unit_start} AND due_at < {instant})")
    return f"SELECT {' + '.join(parts)}"


def _due_count_values(instant: int) -> tuple[int, ...]:
    """The largest size's period; each smaller size's first period (in the instant's period of the next size up)
    and its own; the start of the instant's hour; the instant."""
    unit = instant // PERIOD_UNIT_MS
    periods = [unit // PERIOD_SPAN**size for size in range(PERIOD_SIZES)]
    values = [periods[-1]]
    for size in reversed(range(PERIOD_SIZES - 1)):
        values += [periods[size + 1] * PERIOD_SPAN, periods[size]]
    return (*values, unit * PERIOD_UNIT_MS, instant)


def _vaccination_item(row: Any) -> dict[str, Any]:
    width = len(VACCINATION_FIELDS)
    item = {name: row[index] for index, name in enumerate(VACCINATION_FIELDS)}
    item["vaccine"] = {name: row[width + index] for index, name in enumerate(VACCINE_FIELDS)}
    return item


# A create's statements after the pet's insert, as the service's SQLite store sends them: its change, then the
# kept counts of every owner and of the owner, by pet type, in slot 0.
CHANGE_INSERT = (
    'INSERT INTO changes (xid, resource, record_id, action, version, at, "by", owner_before, owner_after, record) '
    "VALUES (0, 'pets', ?, 'created', 1, ?, ?, NULL, ?, ?)"
)
COUNT_UPSERT = (
    "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) VALUES ('pets', ?, ?, 0, 1, ?) "
    "ON CONFLICT (resource, scope, partition, slot) DO UPDATE SET count = (record_counts.count + excluded.count), "
    "writes = (record_counts.writes + excluded.writes)"
)
FIRST_BUSY_PAUSE_SECONDS, LAST_BUSY_PAUSE_SECONDS = 0.001, 0.002  # as the store waits
# The same create as the PostgreSQL store sends it: one statement, its parts in the store's order ($1-$9 the pet's
# COLUMNS, $10 its name key, $11 the record's JSON, $12 the counts' slot).
_TEXT = 'VARCHAR COLLATE "C"'
_EVERY_OWNER, _OWNER = "''", f"$6::{_TEXT}"
_POSTGRES_COUNT = (
    "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) "
    f"VALUES ('pets', {{scope}}, $8::{_TEXT}, $12::SMALLINT, 1, {{writes}}) "
    "ON CONFLICT (resource, scope, partition, slot) DO UPDATE SET count = (record_counts.count + excluded.count), "
    "writes = (record_counts.writes + excluded.writes)"
)
POSTGRES_CREATE = (
    f"WITH w0 AS ({_POSTGRES_COUNT.format(scope=_OWNER, writes=0)}), "
    f"w1 AS ({_POSTGRES_COUNT.format(scope=_EVERY_OWNER, writes=1)}), "
    "w2 AS (INSERT INTO changes (xid, resource, record_id, action, version, at, by, owner_before, owner_after, "
    "record) VALUES (CAST(CAST(pg_current_xact_id() AS TEXT) AS BIGINT), 'pets', $1::UUID, 'created', 1, "
    f"$2::BIGINT, $3::{_TEXT}, NULL, $6::{_TEXT}, $11::BYTEA) RETURNING changes.position), "
    f"w3 AS (INSERT INTO pets ({COLUMNS}, name_key) VALUES ($1::UUID, $2::BIGINT, $3::{_TEXT}, $4::BIGINT, "
    f"$5::{_TEXT}, $6::{_TEXT}, $7::{_TEXT}, $8::{_TEXT}, $9::INTEGER, $10::{_TEXT})) SELECT 1"
)
POSTGRES_COUNT_SLOTS = 8


NOT_FOUND = {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}


class SqliteBackend:
    def __init__(self, path: str) -> None:
        import pysqlite3.dbapi2 as sqlite3

        self.errors = sqlite3.OperationalError
        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 5000", "foreign_keys = ON"):
            self.connection.execute(f"PRAGMA {pragma}")
        # The group's writer never lets SQLite sleep inline for the write lock: insert_grouped waits for it.
        self.writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 0", "foreign_keys = ON"):
            self.writer.execute(f"PRAGMA {pragma}")
        self.group: asyncio.Future[None] | None = None

    async def lookup(self, pet_id: uuid.UUID) -> dict[str, Any] | None:
        row = self.connection.execute(f"SELECT {SHOWN_PET_COLUMNS} FROM pets WHERE id = ?", (pet_id.hex,)).fetchone()
        return None if row is None else shown_pet(row)

    async def lookup_vaccine(self, vaccine_id: uuid.UUID) -> dict[str, Any] | None:
        row = self.connection.execute(
            f"SELECT {SHOWN_VACCINE_COLUMNS} FROM vaccines WHERE id = ?", (vaccine_id.hex,)
        ).fetchone()
        return None if row is None else shown_vaccine(row)

    async def history(self, pet_id: uuid.UUID) -> tuple[int, list[Any]]:
        pet, count, page = _history_sql(("?", "?"))
        self.connection.execute("BEGIN")
        try:
            if self.connection.execute(pet, (pet_id.hex,)).fetchone() is None:
                return 0, []
            total = self.connection.execute(count, (pet_id.hex,)).fetchone()[0]
            rows = self.connection.execute(page, (pet_id.hex,)).fetchall()
        finally:
            self.connection.execute("COMMIT")
        return total, rows

    async def create(self, values: tuple[Any, ...], record: bytes) -> None:
        pet_id, created_at, created_by, *_, owner, name, pet_type, _revision = values
        group, leads = (self.group, False) if self.group is not None else await self._begin_group()
        self.writer.execute("SAVEPOINT request")
        self.writer.execute(
            f"INSERT INTO pets ({COLUMNS}, name_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (pet_id.hex, *values[1:], name.lower()),
        )
        self.writer.execute(CHANGE_INSERT, (pet_id.hex, created_at, created_by, owner, record))
        self.writer.execute(COUNT_UPSERT, ("", pet_type, 1))
        self.writer.execute(COUNT_UPSERT, (owner, pet_type, 0))
        self.writer.execute("RELEASE request")
        if not leads:
            await group
            return
        # The leader: the requests already read by the event loop join before the COMMIT.
        await asyncio.sleep(0)
        self.group = None
        try:
            self.writer.execute("COMMIT")
        except self.errors as exc:
            self.writer.execute("ROLLBACK")
            group.set_exception(exc)
        else:
            group.set_result(None)
        await group

    async def _begin_group(self) -> tuple[asyncio.Future[None], bool]:
        """The open group, or a new one that the caller leads, once the other worker's write lock is free."""
        pause = FIRST_BUSY_PAUSE_SECONDS
        while self.group is None:
            try:
                self.writer.execute("BEGIN IMMEDIATE")
            except self.errors:
                await asyncio.sleep(pause)
                pause = min(pause * 2, LAST_BUSY_PAUSE_SECONDS)
                continue
            self.group = asyncio.get_running_loop().create_future()
            return self.group, True
        return self.group, False

    async def vaccinations(self, name: str, values: tuple[Any, ...]) -> tuple[int, list[Any]]:
        count, page = _vaccination_sql(name, ["?"] * (len(values) + 2))
        parameters = tuple(value.hex if isinstance(value, uuid.UUID) else value for value in values)
        counted = parameters
        if name != "pet":
            count, counted = _due_count_sql(["?"] * DUE_COUNT_VALUES), _due_count_values(values[0])
        # One read transaction, as the service's: the count and the page see the same data.
        self.connection.execute("BEGIN")
        try:
            total = self.connection.execute(count, counted).fetchone()[0]
            rows = self.connection.execute(page, (*parameters, PAGE_SIZE, 0)).fetchall() if total else []
        finally:
            self.connection.execute("COMMIT")
        return total, rows


class PostgresBackend:
    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: Any = None
        self.creating: asyncio.Lock | None = None

    async def _pool(self) -> Any:
        if self.pool is None:
            import asyncpg

            self.creating = self.creating or asyncio.Lock()
            async with self.creating:
                if self.pool is None:
                    self.pool = await asyncpg.create_pool(self.url, min_size=10, max_size=10)
        return self.pool

    async def lookup(self, pet_id: uuid.UUID) -> dict[str, Any] | None:
        row = await (await self._pool()).fetchrow(f"SELECT {SHOWN_PET_COLUMNS} FROM pets WHERE id = $1", pet_id)
        return None if row is None else shown_pet(row)

    async def lookup_vaccine(self, vaccine_id: uuid.UUID) -> dict[str, Any] | None:
        row = await (await self._pool()).fetchrow(
            f"SELECT {SHOWN_VACCINE_COLUMNS} FROM vaccines WHERE id = $1", vaccine_id
        )
        return None if row is None else shown_vaccine(row)

    async def history(self, pet_id: uuid.UUID) -> tuple[int, list[Any]]:
        pet, count, page = _history_sql(("$1", "$1"))
        async with (await self._pool()).acquire() as connection:
            if await connection.fetchrow(pet, pet_id) is None:
                return 0, []
            total = await connection.fetchval(count, pet_id)
            rows = await connection.fetch(page, pet_id)
        return total, rows

    async def insert(self, values: tuple[Any, ...]) -> None:
        """One row into `pets` alone, committed on its own: the floor that a create's target is stated against."""
        await (await self._pool()).execute(
            f"INSERT INTO pets ({COLUMNS}, name_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            *values,
            values[6].lower(),
        )

    async def create(self, values: tuple[Any, ...], record: bytes) -> None:
        slot = random.randrange(POSTGRES_COUNT_SLOTS)
        await (await self._pool()).execute(POSTGRES_CREATE, *values, values[6].lower(), record, slot)

    async def vaccinations(self, name: str, values: tuple[Any, ...]) -> tuple[int, list[Any]]:
        # The casts the store's statements carry, so that the planner is given the same types.
        casts = ["$1::UUID", '$2::VARCHAR COLLATE "C"'] if name == "pet" else ["$1::BIGINT"]
        count, page = _vaccination_sql(name, [*casts, f"${len(casts) + 1}", f"${len(casts) + 2}"])
        counted = values
        if name != "pet":
            # Unseen by the planner, as the store sends them (its counts.Unseen): the count's plan is then kept.
            placeholders = [f"(SELECT ${n}::BIGINT)" for n in range(1, DUE_COUNT_VALUES + 1)]
            count, counted = _due_count_sql(placeholders), _due_count_values(values[0])
        # Both statements on one pooled connection and no explicit transaction, as the service's reads.
        async with (await self._pool()).acquire() as connection:
            total = await connection.fetchval(count, *counted)
            rows = await connection.fetch(page, *values, PAGE_SIZE, 0) if total else []
        return total, rows


def _backend() -> SqliteBackend | PostgresBackend:
    url = os.environ["CEILING_DATABASE_URL"]
    if url.startswith("sqlite"):
        return SqliteBackend(url.removeprefix("sqlite:///"))
    return PostgresBackend(url.replace("postgresql+asyncpg://", "postgresql://"))


def create_litestar_app() -> Litestar:
    """The same lookup as a plain Litestar route (no auth, no middleware): what the framework alone costs."""
    backend = _backend()

    @get("/pets/{pet_id:str}", sync_to_thread=False)
    async def lookup(pet_id: str) -> Response[bytes]:
        row = await backend.lookup(uuid.UUID(pet_id))
        return Response(content=encode(row), status_code=404 if row is None else 200, media_type="application/json")

    return Litestar(route_handlers=[lookup], openapi_config=None, logging_config=None)


async def look_up(backend: SqliteBackend | PostgresBackend, path: str) -> dict[str, Any] | None:
    """The record `/pets/{id}` or `/vaccines/{id}` names, or None."""
    _, collection, value = path.split("/")
    lookup = backend.lookup_vaccine if collection == "vaccines" else backend.lookup
    return await lookup(uuid.UUID(value))


class RsgiLookup:
    """The lookup by id on Granian's own interface (RSGI) instead of ASGI: no message dicts, one call answers."""

    def __init__(self) -> None:
        self.backend = _backend()

    async def __rsgi__(self, scope: Any, protocol: Any) -> None:
        row = await look_up(self.backend, scope.path)
        protocol.response_bytes(404 if row is None else 200, [("content-type", "application/json")], encode(row))


def create_rsgi_app() -> RsgiLookup:
    return RsgiLookup()


def create_app() -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    backend = _backend()

    async def respond(send: Send, status: int, body: bytes) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    owner = os.environ.get("CEILING_OWNER", "bench@example.com")
    # A create's whole work, for an owner of its own: the caller's records stay the ones seeded, which the
    # scenarios after the ceilings read (the 20,000 to 45,000 pets the ceilings created as the caller made a search
    # of 10,000 read three to five and a half times as many).
    writer = f"ceiling-writer.{owner}"

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET" and scope["path"].startswith("/vaccinations/"):
            _, _, name, value = scope["path"].split("/")
            values = (uuid.UUID(value), owner) if name == "pet" else (int(value),)
            total, rows = await backend.vaccinations(name, values)
            body = {"items": [_vaccination_item(row) for row in rows], "totalCount": total}
            await respond(send, 200, encode(body))
            return
        if scope["method"] == "GET" and scope["path"].startswith("/history/"):
            total, rows = await backend.history(uuid.UUID(scope["path"].rsplit("/", 1)[1]))
            items = [dict(zip(CHANGE_FIELDS, row, strict=True)) for row in rows]
            for item in items:
                item["record"] = msgspec.Raw(item["record"])
            await respond(send, 200 if total else 404, encode({"items": items, "totalCount": total}))
            return
        if scope["method"] == "GET":
            row = await look_up(backend, scope["path"])
            await respond(send, 404 if row is None else 200, encode(row))
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        data = msgspec.json.decode(body)
        now = int(time.time() * 1000)
        pet_id = uuid.uuid4()
        values = (pet_id, now, writer, now, writer, writer, data["name"], data["petType"], 1)
        created = encode(dict(zip(FIELDS, values, strict=True)))
        if scope["path"] == "/pets/insert" and isinstance(backend, PostgresBackend):
            await backend.insert(values)
        else:
            await backend.create(values, created)
        await respond(send, 201, created)

    return app


def main() -> None:
    from granian.constants import HTTPModes, Interfaces, Loops
    from granian.server import Server

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="Granian's runtime threads, as `petrecords serve`")
    parser.add_argument("--litestar", action="store_true", help="serve the lookup through a bare Litestar route")
    parser.add_argument("--rsgi", action="store_true", help="serve the lookup on Granian's RSGI interface")
    parser.add_argument("--owner", default="bench@example.com", help="the caller of the owner's vaccination list")
    args = parser.parse_args()
    os.environ["CEILING_DATABASE_URL"] = args.database_url
    os.environ["CEILING_OWNER"] = args.owner
    target = "ceiling:create_litestar_app" if args.litestar else "ceiling:create_app"
    Server(
        "ceiling:create_rsgi_app" if args.rsgi else target,
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.RSGI if args.rsgi else Interfaces.ASGI,
        workers=args.workers,
        runtime_threads=args.threads,
        loop=Loops.uvloop,
        http=HTTPModes.http1,
        factory=True,
        log_access=False,
        working_dir=Path(__file__).resolve().parent,
    ).serve()


if __name__ == "__main__":
    main()
