"""The long searches' own reads, by a process of their own: what a get by id beside them would cost on this machine
if the service were not in the way.

`scenarios/long_search.lua` asks the service for the caller's pets whose name holds an "e", 20 to a page with
their count. This reads the same: the count, then page 1, in one read transaction, as the SQLite store compiles
them (tests/bench/test_bench_ceiling.py holds their answer to the service's on both databases), one search after another
on each of `--at-once` connections (the service runs as many at once as it has turns), until `--seconds` pass.
`bench/run.py` starts it in the session the server is in (the bench's; a session of its own with
`--own-sessions`), beside get by id: that p99 is the ceiling of
the service's get by id beside its own long searches. Never imported by the service, and imports nothing of it.

Usage: .venv/bin/python bench/neighbour.py --database-url URL --owner EMAIL --seconds 8 [--at-once 1]
Prints one JSON line: the searches done, and their p50 and p99 in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from typing import Any

import asyncpg
import msgspec
import pysqlite3.dbapi2 as sqlite3

PATTERN = "%e%"
COUNT = "SELECT count(*) FROM pets WHERE pets.name_key LIKE {pattern} ESCAPE '\\' AND pets.owner_id = {owner}"
PAGE = (
    "SELECT pets.id, pets.created_at, pets.created_by, pets.modified_at, pets.modified_by, pets.owner_id, pets.name, "
    "pets.name_key, pets.pet_type, pets.revision, pets.birth_date, pets.sex, pets.neutered, pets.breed, "
    "pets.breed_key, pets.microchip FROM pets WHERE pets.name_key LIKE {pattern} ESCAPE '\\' "
    "AND pets.owner_id = {owner} ORDER BY pets.created_at ASC, pets.id ASC LIMIT 20 OFFSET 0"
)


SQLITE_COUNT, SQLITE_PAGE = (sql.format(pattern=":pattern", owner=":owner") for sql in (COUNT, PAGE))
POSTGRESQL_COUNT, POSTGRESQL_PAGE = (sql.format(pattern="$1", owner="$2") for sql in (COUNT, PAGE))


def sqlite_connection(path: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)


def search_in_sqlite(connection: sqlite3.Connection, owner: str) -> tuple[int, list[Any]]:
    """One search: its count and its page's rows, in one read transaction."""
    values = {"pattern": PATTERN, "owner": owner}
    connection.execute("BEGIN")
    try:
        total = connection.execute(SQLITE_COUNT, values).fetchall()[0][0]
        return total, connection.execute(SQLITE_PAGE, values).fetchall()
    finally:
        connection.execute("COMMIT")


async def search_in_postgresql(connection: asyncpg.Connection, owner: str) -> tuple[int, list[Any]]:
    """One search: its count and its page's rows, in one read transaction."""
    async with connection.transaction(readonly=True):
        total = (await connection.fetch(POSTGRESQL_COUNT, PATTERN, owner))[0][0]
        return total, list(await connection.fetch(POSTGRESQL_PAGE, PATTERN, owner))


def search_sqlite(path: str, owner: str, until: float, took: list[float]) -> None:
    connection = sqlite_connection(path)
    while time.monotonic() < until:
        started = time.monotonic()
        search_in_sqlite(connection, owner)
        took.append(time.monotonic() - started)
    connection.close()


async def search_postgresql(url: str, owner: str, until: float, took: list[float]) -> None:
    connection = await asyncpg.connect(url)
    try:
        while time.monotonic() < until:
            started = time.monotonic()
            await search_in_postgresql(connection, owner)
            took.append(time.monotonic() - started)
    finally:
        await connection.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--at-once", type=int, default=1)
    args = parser.parse_args()
    until = time.monotonic() + args.seconds
    took: list[float] = []
    url: str = args.database_url
    if url.startswith("sqlite:///"):
        # Threads: SQLite lets go of Python's lock while a statement runs, as it does for the service's long reads.
        threads = [
            threading.Thread(target=search_sqlite, args=(url.removeprefix("sqlite:///"), args.owner, until, took))
            for _ in range(args.at_once)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        plain = url.replace("postgresql+asyncpg://", "postgresql://")

        async def all_at_once() -> None:
            await asyncio.gather(*(search_postgresql(plain, args.owner, until, took) for _ in range(args.at_once)))

        asyncio.run(all_at_once())
    centiles = statistics.quantiles([t * 1000 for t in took], n=100) if len(took) > 1 else [took[0] * 1000] * 99
    report: dict[str, Any] = {
        "searches": len(took),
        "rps": len(took) / args.seconds,
        "p50_ms": statistics.median(took) * 1000,
        "p99_ms": centiles[98],
    }
    print(msgspec.json.encode(report).decode(), flush=True)


if __name__ == "__main__":
    main()
