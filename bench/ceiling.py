"""The ceiling: a bare ASGI app on the same HTTP server and database driver as the service.

No framework, no auth, no validation: `GET /pets/{id}` is one primary-key lookup returned as JSON,
`POST /pets` one single-row insert, committed with the same durability settings as the service.
With `--litestar`, the lookup is a bare Litestar route instead: the framework's own floor.
Never imported by the service; `bench/run.py` starts it beside it, on the same database.

Usage: .venv/bin/python bench/ceiling.py --database-url URL --port 8001 [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
encode = msgspec.json.encode
NOT_FOUND = {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}


class SqliteBackend:
    def __init__(self, path: str) -> None:
        import pysqlite3.dbapi2 as sqlite3

        self.connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        for pragma in ("journal_mode = WAL", "synchronous = FULL", "busy_timeout = 5000", "foreign_keys = ON"):
            self.connection.execute(f"PRAGMA {pragma}")

    async def lookup(self, pet_id: uuid.UUID) -> dict[str, Any] | None:
        row = self.connection.execute(f"SELECT {COLUMNS} FROM pets WHERE id = ?", (pet_id.hex,)).fetchone()
        return None if row is None else dict(zip(FIELDS, row, strict=True))

    async def insert(self, values: tuple[Any, ...]) -> None:
        pet_id, *rest = values
        self.connection.execute(
            f"INSERT INTO pets ({COLUMNS}, name_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (pet_id.hex, *rest, rest[-3].lower()),
        )


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
        row = await (await self._pool()).fetchrow(f"SELECT {COLUMNS} FROM pets WHERE id = $1", pet_id)
        return None if row is None else {field: row[field] for field in FIELDS}

    async def insert(self, values: tuple[Any, ...]) -> None:
        await (await self._pool()).execute(
            f"INSERT INTO pets ({COLUMNS}, name_key) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            *values,
            values[-3].lower(),
        )


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


def create_app() -> Callable[[dict[str, Any], Receive, Send], Awaitable[None]]:
    backend = _backend()

    async def respond(send: Send, status: int, body: bytes) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] == "GET":
            row = await backend.lookup(uuid.UUID(scope["path"].rsplit("/", 1)[1]))
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
        values = (pet_id, now, "ceiling", now, "ceiling", "ceiling", data["name"], data["petType"], 1)
        await backend.insert(values)
        await respond(send, 201, encode(dict(zip(FIELDS, values, strict=True))))

    return app


def main() -> None:
    from granian.constants import Interfaces, Loops
    from granian.server import Server

    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--litestar", action="store_true", help="serve the lookup through a bare Litestar route")
    args = parser.parse_args()
    os.environ["CEILING_DATABASE_URL"] = args.database_url
    Server(
        "ceiling:create_litestar_app" if args.litestar else "ceiling:create_app",
        address="127.0.0.1",
        port=args.port,
        interface=Interfaces.ASGI,
        workers=args.workers,
        loop=Loops.uvloop,
        factory=True,
        log_access=False,
        working_dir=Path(__file__).resolve().parent,
    ).serve()


if __name__ == "__main__":
    main()
