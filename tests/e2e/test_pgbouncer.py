"""The service behind a real PgBouncer (Debian's), in transaction and in session pooling.

Two `petrecords serve` instances reach a throw-away database through one PgBouncer that gives them fewer
server connections than they have client connections, so that their transactions keep changing server
connections. Concurrent creates (some with an Idempotency-Key), conditional gets and replaces across the
instances, and lists must all be answered as the contract says, with no 5xx; the change feed read through
the pooler must hold every write exactly once; and a statement blocked behind a lock must still be ended by
the statement timeout, on the server too, whether it reads or writes. A long read's count, which moves over its
records through a cursor in a transaction of its own, is exact through the pooler too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import sqlalchemy as sa

from petrecords.config import Settings
from petrecords.store.postgres import LONG_READ_SLICE, PostgresStore
from petrecords.text import match_key
from tests.e2e.debian import background, hand_to_postgres, program, wait_for_port
from tests.e2e.servers import Server, free_port, running_servers
from tests.support import POSTGRES_ADMIN_URL, fetch_sql, store_pets, throwaway_postgres

pytestmark = pytest.mark.slow

USER = "alice@example.com"
INSTANCES = 2
CLIENT_POOL = {"transaction": 8, "session": 4}
"""Each instance's pool (PETRECORDS_DB_POOL_SIZE)."""
SERVER_CONNECTIONS = {"transaction": 3, "session": INSTANCES * CLIENT_POOL["session"]}
"""PgBouncer's server connections for the database. In transaction pooling, fewer than the instances' client
connections, which take turns on them. In session pooling each client connection holds one for as long as it
is open: fewer would leave the others waiting until they give up."""
PETS = 60
STATEMENT_TIMEOUT_SECONDS = 2.0


@contextlib.contextmanager
def pgbouncer(directory: Path, *, mode: str) -> Iterator[int]:
    """PgBouncer in `mode` in front of the tests' PostgreSQL server, for every database on it; its port."""
    binary = program("pgbouncer", package="pgbouncer")
    target = urllib.parse.urlsplit(POSTGRES_ADMIN_URL)
    directory.mkdir(parents=True)
    port = free_port()
    users = directory / "users.txt"
    users.write_text(f'"{target.username or "postgres"}" ""\n')
    config = directory / "pgbouncer.ini"
    config.write_text(
        f"""[databases]
* = host={target.hostname} port={target.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {users}
pool_mode = {mode}
default_pool_size = {SERVER_CONNECTIONS[mode]}
max_client_conn = 200
"""
    )
    hand_to_postgres(directory)
    # PgBouncer refuses to run as root; -u names the user it becomes.
    user = ["-u", "postgres"] if os.geteuid() == 0 else []
    log = directory / "pgbouncer.log"
    with background([binary, *user, str(config)], log=log) as process:
        wait_for_port(port, process, what="PgBouncer", log=log)
        yield port


def _through(database_url: str, port: int) -> str:
    parsed = urllib.parse.urlsplit(database_url)
    return parsed._replace(netloc=f"{parsed.username}@127.0.0.1:{port}").geturl()


def _headers(server: Server, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.tokens[USER]}", **more}


async def _workload(servers: list[Server]) -> dict[str, Any]:
    """Creates, then conditional gets, conditional replaces and lists at once, across the instances."""
    limits = httpx.Limits(max_connections=100)
    clients = [httpx.AsyncClient(base_url=server.url, timeout=30, limits=limits) for server in servers]
    try:

        async def create(index: int) -> httpx.Response:
            server_index = index % len(servers)
            headers = _headers(servers[server_index])
            if index % 3 == 0:
                headers["Idempotency-Key"] = f"pet-{index}"
            return await clients[server_index].post(
                "/v1/pets", json={"name": f"Pooled {index}", "petType": "Dog"}, headers=headers
            )

        created = await asyncio.gather(*(create(index) for index in range(PETS)))
        unexpected = [f"create {r.status_code} {r.text}" for r in created if r.status_code != 201]
        records = [(r.json()["id"], r.headers["ETag"]) for r in created if r.status_code == 201]

        async def conditional_get(index: int, pet_id: str, etag: str) -> tuple[str, httpx.Response]:
            # Through the other instance than the one that created it.
            server_index = (index + 1) % len(servers)
            headers = _headers(servers[server_index], **{"If-None-Match": etag})
            return "get", await clients[server_index].get(f"/v1/pets/{pet_id}", headers=headers)

        async def replace(index: int, pet_id: str, etag: str) -> tuple[str, httpx.Response]:
            server_index = (index + 1) % len(servers)
            headers = _headers(servers[server_index], **{"If-Match": etag})
            body = {"name": f"Replaced {index}", "petType": "Cat"}
            return "replace", await clients[server_index].put(f"/v1/pets/{pet_id}", json=body, headers=headers)

        async def listing(index: int) -> tuple[str, httpx.Response]:
            server_index = index % len(servers)
            query = "?pageSize=5&sort=-name" if index % 2 else "?petType=Dog,Cat&search=Pooled"
            return "list", await clients[server_index].get(f"/v1/pets{query}", headers=_headers(servers[server_index]))

        mixed = await asyncio.gather(
            *(conditional_get(index, pet_id, etag) for index, (pet_id, etag) in enumerate(records)),
            *(replace(index, pet_id, etag) for index, (pet_id, etag) in enumerate(records)),
            *(listing(index) for index in range(PETS)),
        )
        # A get that comes after the replace of its record finds it changed: 200 instead of 304.
        expected = {"get": {200, 304}, "replace": {200}, "list": {200}}
        unexpected += [f"{what} {r.status_code} {r.text}" for what, r in mixed if r.status_code not in expected[what]]

        # Read until every write has come. An empty page may come first: the feed stops short of any transaction
        # still in flight on the server, and the tests' server is shared with other runs.
        changes: list[dict[str, Any]] = []
        after = ""
        deadline = time.monotonic() + 30
        while len(changes) < 2 * len(records) and time.monotonic() < deadline:
            page = await clients[1].get(f"/v1/changes?limit=7{after}", headers=_headers(servers[1]))
            assert page.status_code == 200, page.text
            changes.extend(page.json()["items"])
            after = f"&after={page.json()['nextCursor']}"
            if not page.json()["items"]:
                await asyncio.sleep(0.05)
        return {"records": records, "unexpected": unexpected, "requests": len(created) + len(mixed), "changes": changes}
    finally:
        for client in clients:
            await client.aclose()


async def _blocked_statements_end(servers: list[Server], database_url: str, pet_id: str) -> None:
    """With the pets table locked from outside, a get and a replace each answer 503 in about the statement
    timeout, and the server is left running neither."""
    holder = await asyncpg.connect(database_url, timeout=5)
    try:
        await holder.execute("BEGIN")
        await holder.execute("LOCK TABLE pets IN ACCESS EXCLUSIVE MODE")
        async with httpx.AsyncClient(timeout=30) as client:
            started = time.monotonic()
            got, replaced = await asyncio.gather(
                client.get(f"{servers[0].url}/v1/pets/{pet_id}", headers=_headers(servers[0])),
                client.put(
                    f"{servers[1].url}/v1/pets/{pet_id}",
                    json={"name": "Blocked", "petType": "Dog"},
                    headers=_headers(servers[1]),
                ),
            )
            took = time.monotonic() - started
        for response in (got, replaced):
            assert response.status_code == 503, response.text
            assert response.json()["code"] == 986
        assert took < STATEMENT_TIMEOUT_SECONDS + 2, took
        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        deadline = time.monotonic() + 5
        while await holder.fetchval(waiting):
            assert time.monotonic() < deadline, "a statement still waits on the server after its timeout"
            await asyncio.sleep(0.02)
    finally:
        await holder.close()


async def _long_search_is_exact(servers: list[Server], database_url: str, data_dir: Path) -> None:
    """LONG_READ_SLICE + 1 more pets of the user's, stored directly, whose names hold a "g" as no other does: a
    one-letter search for it through each instance is a long read, whose count runs in slices (of the table's
    blocks, or of its matches through a cursor) with rests between them, in one transaction through the pooler,
    and counts them exactly."""
    names = [f"Long {number}" for number in range(LONG_READ_SLICE + 1)]
    await store_pets(database_url, data_dir, (USER, names))
    stored = [row["name"] for row in await fetch_sql(database_url, "SELECT name FROM pets")]
    expected = sum("g" in match_key(name) for name in stored)
    assert expected > LONG_READ_SLICE
    async with httpx.AsyncClient(timeout=30) as client:
        for server in servers:
            found = await client.get(f"{server.url}/v1/pets?search=g&pageSize=5", headers=_headers(server))
            assert found.status_code == 200, found.text
            assert found.json()["totalCount"] == expected


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_concurrent_requests_through_pgbouncer(mode: str, tmp_path: Path) -> None:
    with (
        throwaway_postgres(migrated=True) as database_url,
        pgbouncer(tmp_path / "pgbouncer", mode=mode) as port,
        running_servers(
            INSTANCES,
            tmp_path / "data",
            database_url=_through(database_url, port),
            users=[USER],
            settings={
                "PETRECORDS_DB_POOLER": mode,
                "PETRECORDS_DB_POOL_SIZE": str(CLIENT_POOL[mode]),
                "PETRECORDS_DB_STATEMENT_TIMEOUT_SECONDS": str(STATEMENT_TIMEOUT_SECONDS),
            },
        ) as servers,
    ):
        for server in servers:
            assert httpx.get(f"{server.url}/readyz", timeout=10).status_code == 200

        outcome = asyncio.run(_workload(servers))

        logs = "\n".join(server.output() for server in servers)
        assert not outcome["unexpected"], f"{len(outcome['unexpected'])} of {outcome['requests']}: " + "\n".join(
            outcome["unexpected"][:10]
        )
        assert "Traceback" not in logs, logs
        records = outcome["records"]
        assert len(records) == PETS
        stored = asyncio.run(fetch_sql(database_url, "SELECT id, name, revision FROM pets"))
        assert {str(row["id"]): (row["name"], row["revision"]) for row in stored} == {
            pet_id: (f"Replaced {index}", 2) for index, (pet_id, _etag) in enumerate(records)
        }
        # The feed, read through the pooler page by page, holds each write once, each record's in order, and no more.
        seen = [(change["id"], change["version"]) for change in outcome["changes"]]
        assert len(seen) == len(set(seen)) == 2 * PETS
        for pet_id, _etag in records:
            assert [version for record_id, version in seen if record_id == pet_id] == [1, 2]

        asyncio.run(_long_search_is_exact(servers, database_url, tmp_path))
        asyncio.run(_blocked_statements_end(servers, database_url, records[0][0]))
        after = httpx.get(f"{servers[0].url}/v1/pets/{records[0][0]}", headers=_headers(servers[0]), timeout=10)
        assert after.status_code == 200, after.text
        assert "Traceback" not in "\n".join(server.output(full=True) for server in servers)
        # The ids are the service's own (UUIDv7), whatever server connection wrote them.
        assert all(uuid.UUID(pet_id).version == 7 for pet_id, _etag in records)


async def _idle_in_transaction_bound(settings: Settings) -> str:
    store = PostgresStore(settings)
    try:
        async with store.transaction(write=True) as tx:
            shown: str = (await tx.fetch((sa.text("SHOW idle_in_transaction_session_timeout"), {})))[0][0]
            return shown
    finally:
        await store.close()


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_a_session_is_bounded_through_pgbouncer(mode: str, tmp_path: Path) -> None:
    """PgBouncer refuses startup parameters it does not know: through it, the bound on a session idle inside a
    transaction is set by a statement (for each session, or in each transaction's BEGIN)."""
    with throwaway_postgres(migrated=True) as database_url, pgbouncer(tmp_path / "pgbouncer", mode=mode) as port:
        settings = Settings(
            database_url=_through(database_url, port),
            data_dir=tmp_path / "data",
            db_pooler=mode,
            db_idle_in_transaction_timeout_seconds=3,
        )
        assert asyncio.run(_idle_in_transaction_bound(settings)) == "3s"
