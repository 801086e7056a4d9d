"""What each layer of `GET /v1/pets/{id}` costs, in process: µs per request on SQLite, no HTTP server.

Seeds `--rows` pets into a fresh SQLite database (bench/seed.py), builds the service's ASGI app as
`petrecords serve` does (access log on, written to a file as to a redirected stdout; the rate limiter on, at a
budget the one caller never reaches, as bench/run.py runs it) and the ceiling's bare lookup app
(bench/ceiling.py, the same JSON) on the same file, and times, over the same random ids:

- the whole request through each app (ASGI call, `send` a no-op): their ratio is the part of the bench's
  ratio that is this process's own work (the HTTP server's share is the same for both, but for the size of
  the answer and its headers);
- each layer on its own, called as the request calls it: the edge (request id, security headers, metrics,
  around an app that answers at once), the access log line, the metrics tally, the token check (a verified
  token, as every request but a caller's first), the rate limit, the read transaction with
  the lookup, the same lookup as a bare statement (the ceiling's), and what makes the answer (the id
  parsed, the ETag, the record shown as JSON).

Every figure is the CPU time of the thread, the best of `--repeat` passes over `--requests` requests: the
least disturbed by whatever else the machine runs, and what the code costs rather than what the machine lets
it have.

Usage: .venv/bin/python bench/layers.py [--rows 20000] [--requests 20000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import uvloop

BENCH = Path(__file__).resolve().parent
OWNER = "bench@example.com"
TURN = 64
"""Requests per turn of the event loop: wrk's 64 connections, each with one request in flight."""

Message = dict[str, Any]


async def _nothing(message: Message) -> None:
    return None


async def _no_body() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


def _scope(path: str, token: str) -> dict[str, Any]:
    """A request as Granian hands it to the app."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": "GET",
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1:8000"),
            (b"authorization", f"Bearer {token}".encode()),
        ],
        "state": {},
    }


async def best_of(repeat: int, count: int, one: Callable[[int], Awaitable[Any]]) -> float:
    """CPU µs of this thread per call of `one(i)` for i in range(count): the best of `repeat` passes. CPU
    time, not elapsed time: on a shared machine the process is not always running. The event loop turns
    after every TURN calls, as a server's does between batches of requests (the access log writes then)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.thread_time()
        for index in range(count):
            await one(index)
            if index % TURN == TURN - 1:
                await asyncio.sleep(0)
        best = min(best, (time.thread_time() - started) / count * 1e6)
    return best


async def lifespan_started(app: Any) -> asyncio.Queue[Message]:
    """Start the app's lifespan; put a message in the returned queue to shut it down."""
    incoming: asyncio.Queue[Message] = asyncio.Queue()
    started: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    await incoming.put({"type": "lifespan.startup"})

    async def send(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set_result(None)
        elif message["type"] == "lifespan.startup.failed":
            started.set_exception(RuntimeError(message.get("message")))

    asyncio.get_running_loop().create_task(app({"type": "lifespan", "state": {}}, incoming.get, send))
    await started
    return incoming


async def measure(args: argparse.Namespace, work_dir: Path) -> list[tuple[str, float]]:
    sys.path.insert(0, str(BENCH))
    from run import UNREACHED_RATE_LIMIT

    database_url = f"sqlite:///{work_dir / 'pets.sqlite3'}"
    os.environ.update(
        {
            "PETRECORDS_DATA_DIR": str(work_dir),
            "PETRECORDS_DATABASE_URL": database_url,
            "PETRECORDS_AUTH_SECRET": secrets.token_urlsafe(48),
            "PETRECORDS_RATE_LIMIT": str(UNREACHED_RATE_LIMIT),
            "CEILING_DATABASE_URL": database_url,
        }
    )
    import ceiling
    import seed
    from petrecords.app import create_app
    from petrecords.auth import Caller, issue_local_token, load_or_create_secret
    from petrecords.config import Settings
    from petrecords.db import migrate
    from petrecords.http import ServiceEdge, admit
    from petrecords.logs import AccessLog, configure_logging
    from petrecords.metrics import Metrics
    from petrecords.pets import PETS
    from petrecords.ratelimit import LocalRateLimiter
    from petrecords.resources.service import etag_of
    from petrecords.resources.wire import show
    from petrecords.values import parse_record_id

    settings = Settings()
    migrate(settings)
    seeded = await seed.seed(
        settings, rows=args.rows, owner=OWNER, sample=args.requests, vaccinations=0, catalogue=False
    )
    ids = [line.split()[0] for line in seeded.pet_lines]
    rng = random.Random(0)
    ids = [rng.choice(ids) for _ in range(args.requests)]
    token = issue_local_token(
        load_or_create_secret(settings), user=OWNER, admin=False, ttl_seconds=3600, settings=settings
    )

    # Access lines go where `petrecords serve` sends them: standard output, here a file.
    log_file = (work_dir / "access.log").open("w")
    stdout, sys.stdout = sys.stdout, log_file
    try:
        configure_logging("INFO")
    finally:
        sys.stdout = stdout
    app = create_app(settings)
    shutdown = await lifespan_started(app)
    bare = ceiling.create_app()
    service_scopes = [_scope(f"/v1/pets/{record_id}", token) for record_id in ids]
    bare_scopes = [_scope(f"/pets/{record_id}", token) for record_id in ids]
    statuses: dict[int, int] = {}

    async def counting_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] = statuses.get(message["status"], 0) + 1

    def fresh(scope: dict[str, Any]) -> dict[str, Any]:
        return {**scope, "state": {}}

    count, repeat = args.requests, args.repeat
    figures: list[tuple[str, float]] = []

    async def whole(index: int) -> None:
        await app(fresh(service_scopes[index]), _no_body, counting_send)

    async def whole_bare(index: int) -> None:
        await bare(bare_scopes[index], _no_body, _nothing)

    figures.append(("whole request, service", await best_of(repeat, count, whole)))
    if args.profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        await best_of(1, count, whole)
        profiler.disable()
        pstats.Stats(profiler, stream=sys.stderr).sort_stats(args.profile).print_stats(40)
    if set(statuses) != {200}:
        raise SystemExit(f"the service answered {statuses}")
    figures.append(("whole request, bare lookup (ceiling app)", await best_of(repeat, count, whole_bare)))

    answer_start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    answer_body = {"type": "http.response.body", "body": b"{}"}

    async def canned(scope: Any, receive: Any, send: Any) -> None:
        await send(dict(answer_start))
        await send(answer_body)

    metrics = Metrics()
    edge = ServiceEdge(canned, metrics=metrics, store=lambda: None, log_requests=False)

    async def edge_only(index: int) -> None:
        await edge(fresh(service_scopes[index]), _no_body, _nothing)

    async def canned_only(index: int) -> None:
        await canned(service_scopes[index], _no_body, _nothing)

    edge_cost = await best_of(repeat, count, edge_only) - await best_of(repeat, count, canned_only)
    figures.append(("edge: request id, headers, metrics (no access log)", edge_cost))

    access_log = AccessLog()
    path = service_scopes[0]["path"]

    async def log_line(index: int) -> None:
        access_log.write(
            request_id="0123456789abcdef0000000000000001",
            method="GET",
            route="/v1/pets/{petId}",
            path=path,
            status=200,
            seconds=0.000123,
            caller=OWNER,
            database_unavailable=None,
        )

    figures.append(("access log line", await best_of(repeat, count, log_line)))

    async def tally(index: int) -> None:
        metrics.observe(method="GET", route="/v1/pets/{petId}", status=200, seconds=0.001)

    figures.append(("metrics tally", await best_of(repeat, count, tally)))

    services = app.app.app.state.services  # ServiceEdge -> DirectRoutes -> Litestar
    verifier = services.verifier

    async def token_check(index: int) -> None:
        await admit(service_scopes[index], verifier=verifier, limiter=None)

    figures.append(("token check (verified token cached)", await best_of(repeat, count, token_check)))
    limiter = LocalRateLimiter(per_minute=1_000_000_000)

    async def rate(index: int) -> None:
        await limiter.hit(OWNER)

    figures.append(("rate limit", await best_of(repeat, count, rate)))

    store = services.store
    parsed_ids = [uuid.UUID(record_id) for record_id in ids]
    owner = Caller(email=OWNER, is_admin=False)

    async def transaction(index: int) -> None:
        async with store.transaction(write=False, single=True, caller=owner) as tx:
            await tx.get(PETS.collection, parsed_ids[index])

    figures.append(("read transaction + lookup (store)", await best_of(repeat, count, transaction)))
    if hasattr(store, "read"):

        async def read(index: int) -> None:
            await store.read(PETS.collection, parsed_ids[index], owner)

        figures.append(("  or the same lookup by Store.read", await best_of(repeat, count, read)))
    connection = ceiling.SqliteBackend(str(work_dir / "pets.sqlite3")).connection
    columns = ceiling.SHOWN_PET_COLUMNS
    hex_ids = [parsed.hex for parsed in parsed_ids]

    async def bare_statement(index: int) -> None:
        connection.execute(f"SELECT {columns} FROM pets WHERE id = ?", (hex_ids[index],)).fetchone()

    figures.append(("  of which the bare statement", await best_of(repeat, count, bare_statement)))
    rows: list[Any] = []
    async with store.transaction(write=False) as tx:
        for parsed in parsed_ids:
            rows.append(await tx.get(PETS.collection, parsed))

    async def answer(index: int) -> None:
        parse_record_id(ids[index])
        etag_of(PETS, rows[index])
        msgspec.json.encode(show(PETS, rows[index]))

    figures.append(("answer: id parsed, ETag, record as JSON", await best_of(repeat, count, answer)))
    await shutdown.put({"type": "lifespan.shutdown"})
    await asyncio.sleep(0.1)
    log_file.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--profile", choices=("tottime", "cumulative"), help="also print a cProfile of the whole request, so sorted"
    )
    args = parser.parse_args()
    work_dir = Path(tempfile.mkdtemp(prefix="petrecords-layers-"))
    try:
        figures = uvloop.run(measure(args, work_dir))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    whole, bare = figures[0][1], figures[1][1]
    print(f"GET /v1/pets/{{id}} on SQLite, {args.rows:,} pets, µs per request (best of {args.repeat}):")
    for name, value in figures:
        print(f"  {name:<52} {value:7.1f}")
    print(f"  {'bare lookup ÷ service, in process':<52} {bare / whole:7.2f}")


if __name__ == "__main__":
    main()
