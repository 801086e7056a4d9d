"""Several `petrecords serve` instances on one PostgreSQL database, and a graceful stop under load.

Three instances start at the same moment on an empty database: one migrates, the others wait for it and
find nothing to do. Then writes race through different instances: conditional replaces (one wins, the
rest are 412) and creates with one Idempotency-Key (one record; the others 409 or the replayed answer).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.db import head_revision
from petrecords.registry import SCHEMA
from tests.e2e.servers import Server, running_server, running_servers
from tests.support import fetch_sql, throwaway_postgres

pytestmark = pytest.mark.slow

INSTANCES = 3
RACERS_PER_INSTANCE = 2
ROUNDS = 5
USER = "alice@example.com"
GRACEFUL_TIMEOUT = 10


class Cluster:
    def __init__(self, servers: list[Server], database_url: str) -> None:
        self.servers = servers
        self.database_url = database_url
        self.headers = {"Authorization": f"Bearer {servers[0].tokens[USER]}"}

    def client(self, server: Server) -> httpx.Client:
        return httpx.Client(base_url=server.url, headers=self.headers, timeout=30.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("instances") / "data"
    with (
        throwaway_postgres() as database_url,  # empty: the instances migrate it as they start, all at once
        running_servers(INSTANCES, data_dir, database_url=database_url, users=[USER]) as servers,
    ):
        yield Cluster(servers, database_url)


def _query(database_url: str, statement: str, *args: Any) -> list[asyncpg.Record]:
    return asyncio.run(fetch_sql(database_url, statement, *args))


def _race(cluster: Cluster, send: Callable[[httpx.Client], httpx.Response]) -> list[httpx.Response]:
    """`send` through every instance, several times each, all released at the same moment."""
    clients = [cluster.client(server) for server in cluster.servers for _ in range(RACERS_PER_INSTANCE)]
    barrier = threading.Barrier(len(clients))
    responses: list[httpx.Response | BaseException] = [RuntimeError("not run")] * len(clients)

    def racer(index: int) -> None:
        try:
            barrier.wait(timeout=30)
            responses[index] = send(clients[index])
        except BaseException as exc:  # reported below, in the test's thread
            responses[index] = exc

    try:
        for client in clients:
            assert client.get("/healthz").status_code == 200  # connected before the start
        threads = [threading.Thread(target=racer, args=(index,)) for index in range(len(clients))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        for client in clients:
            client.close()
    answered = [response for response in responses if isinstance(response, httpx.Response)]
    assert len(answered) == len(clients), responses
    return answered


class TestSimultaneousStart:
    def test_every_instance_serves_and_is_ready(self, cluster: Cluster) -> None:
        for server in cluster.servers:
            assert server.process.poll() is None
            assert httpx.get(f"{server.url}/readyz", timeout=10.0).status_code == 200

    def test_the_schema_is_at_head_once(self, cluster: Cluster) -> None:
        versions = _query(cluster.database_url, "SELECT version_num FROM alembic_version")
        assert [row["version_num"] for row in versions] == [head_revision()]
        tables = _query(
            cluster.database_url,
            "SELECT table_schema, table_name FROM information_schema.tables"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'",
        )
        expected = sorted(("public", name) for name in [*SCHEMA.tables, "alembic_version"])
        assert sorted((row["table_schema"], row["table_name"]) for row in tables) == expected

    def test_one_instance_migrated_and_the_others_found_nothing_to_do(self, cluster: Cluster) -> None:
        head = head_revision()
        logs = [server.output(full=True) for server in cluster.servers]
        migrated = [log for log in logs if f"schema migrated from base to {head}" in log]
        waited = [log for log in logs if f"schema at {head}: nothing to migrate" in log]
        assert (len(migrated), len(waited)) == (1, INSTANCES - 1), "\n\n".join(logs)
        for log in logs:
            assert "Traceback" not in log, log
            assert '"level":"error"' not in log, log
            assert "[ERROR]" not in log, log


class TestRacesAcrossInstances:
    def test_one_conditional_replace_wins_the_rest_are_412(self, cluster: Cluster) -> None:
        with cluster.client(cluster.servers[0]) as http:
            created = http.post("/v1/pets", json={"name": "Contested", "petType": "Dog"})
        assert created.status_code == 201, created.text
        pet_id, etag = created.json()["id"], created.headers["ETag"]
        for round_number in range(ROUNDS):
            name = f"Round {round_number}"

            def replace(http: httpx.Client, name: str = name, etag: str = etag) -> httpx.Response:
                return http.put(f"/v1/pets/{pet_id}", json={"name": name, "petType": "Cat"}, headers={"If-Match": etag})

            responses = _race(cluster, replace)
            statuses = sorted(response.status_code for response in responses)
            assert statuses == [200] + [412] * (len(responses) - 1), [r.text for r in responses]
            for response in responses:
                if response.status_code == 412:
                    assert response.json()["code"] == 992
            (winner,) = (response for response in responses if response.status_code == 200)
            assert (winner.json()["name"], winner.json()["petType"]) == (name, "Cat")
            assert winner.headers["ETag"] != etag
            etag = winner.headers["ETag"]
            for server in cluster.servers:  # every instance sees the winner's write
                with cluster.client(server) as http:
                    fetched = http.get(f"/v1/pets/{pet_id}")
                assert fetched.json() == winner.json()
                assert fetched.headers["ETag"] == etag

    def test_one_conditional_delete_wins(self, cluster: Cluster) -> None:
        for _ in range(ROUNDS):
            with cluster.client(cluster.servers[0]) as http:
                created = http.post("/v1/pets", json={"name": "Doomed", "petType": "Fish"})
            assert created.status_code == 201, created.text
            pet_id, etag = created.json()["id"], created.headers["ETag"]

            def delete(http: httpx.Client, pet_id: str = pet_id, etag: str = etag) -> httpx.Response:
                return http.delete(f"/v1/pets/{pet_id}", headers={"If-Match": etag})

            responses = _race(cluster, delete)
            statuses = [response.status_code for response in responses]
            assert statuses.count(200) == 1, [r.text for r in responses]
            # The losers find the record gone (404) or, had it been changed, a different ETag (412).
            assert set(statuses) <= {200, 404, 412}, statuses

    def test_one_idempotency_key_makes_one_record(self, cluster: Cluster) -> None:
        for round_number in range(ROUNDS):
            key = f"race-{round_number}-{uuid.uuid4()}"
            body = {"name": f"Once {key}", "petType": "Capybara"}

            def create(http: httpx.Client, body: dict[str, str] = body, key: str = key) -> httpx.Response:
                return http.post("/v1/pets", json=body, headers={"Idempotency-Key": key})

            responses = _race(cluster, create)

            created = [response for response in responses if response.status_code == 201]
            assert {response.status_code for response in responses} <= {201, 409}, [r.text for r in responses]
            assert created, [r.text for r in responses]
            originals = [response for response in created if "Idempotent-Replayed" not in response.headers]
            assert len(originals) == 1, [dict(response.headers) for response in created]
            for response in created:
                assert response.json() == originals[0].json()
                assert response.headers["Location"] == originals[0].headers["Location"]
                assert response.headers["ETag"] == originals[0].headers["ETag"]
                if response is not originals[0]:
                    assert response.headers["Idempotent-Replayed"] == "true"
            for response in responses:
                if response.status_code == 409:
                    assert response.json()["code"] == 991

            rows = _query(cluster.database_url, "SELECT id FROM pets WHERE name = $1", body["name"])
            assert [str(row["id"]) for row in rows] == [originals[0].json()["id"]]
            with cluster.client(cluster.servers[-1]) as http:
                repeated = http.post("/v1/pets", json=body, headers={"Idempotency-Key": key})
            assert repeated.status_code == 201
            assert repeated.headers["Idempotent-Replayed"] == "true"
            assert repeated.json() == originals[0].json()


def test_sigterm_drains_in_flight_requests_and_exits_cleanly(tmp_path: Path) -> None:
    """A request blocked in the database when SIGTERM arrives still completes; then the server exits 0."""
    with (
        throwaway_postgres(migrated=True) as database_url,
        running_server(
            tmp_path / "data",
            database_url=database_url,
            workers=2,
            users=[USER],
            serve_args=["--graceful-timeout", str(GRACEFUL_TIMEOUT)],
        ) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {server.tokens[USER]}"}) as http,
        asyncio.Runner() as runner,
    ):
        created = http.post("/v1/pets", json={"name": "Before", "petType": "Dog"})
        assert created.status_code == 201, created.text
        pet_id = uuid.UUID(created.json()["id"])

        # Hold the record's row lock from outside, so that a PUT of it is in flight and waits.
        blocker = runner.run(asyncpg.connect(database_url, timeout=5))
        runner.run(blocker.execute("BEGIN"))
        runner.run(blocker.execute("SELECT 1 FROM pets WHERE id = $1 FOR UPDATE", pet_id))
        in_flight: list[httpx.Response | BaseException] = []

        def replace() -> None:
            try:
                in_flight.append(
                    http.put(
                        f"/v1/pets/{pet_id}",
                        json={"name": "After", "petType": "Cat"},
                        headers={"If-Match": created.headers["ETag"]},
                        timeout=GRACEFUL_TIMEOUT + 20,
                    )
                )
            except BaseException as exc:  # reported below, in the test's thread
                in_flight.append(exc)

        waiting = (
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'petrecords' AND wait_event_type = 'Lock'"
        )
        request = threading.Thread(target=replace)
        request.start()
        try:
            deadline = time.monotonic() + 20
            while not runner.run(blocker.fetchval(waiting)):
                assert time.monotonic() < deadline, f"the PUT never reached the lock:\n{server.output()}"
                time.sleep(0.02)

            server.terminate()
            # While it drains, new connections are refused or answered, never with a server error.
            for _ in range(10):
                with contextlib.suppress(httpx.TransportError):
                    probe = httpx.get(f"{server.url}/v1/pets/{pet_id}", headers=http.headers, timeout=5.0)
                    assert probe.status_code < 500, probe.text
                time.sleep(0.05)
        finally:
            runner.run(blocker.execute("ROLLBACK"))
            runner.run(blocker.close())
            request.join(timeout=GRACEFUL_TIMEOUT + 30)

        assert len(in_flight) == 1
        (answer,) = in_flight
        assert isinstance(answer, httpx.Response), f"{answer!r}\n{server.output()}"
        assert answer.status_code == 200, answer.text
        assert answer.json()["name"] == "After"
        code = server.wait(GRACEFUL_TIMEOUT + 5)
        assert code == 0, f"exit code {code}:\n{server.output()}"
        assert "Traceback" not in server.output(full=True)
        rows = runner.run(fetch_sql(database_url, "SELECT name, revision FROM pets WHERE id = $1", pet_id))
        assert [(row["name"], row["revision"]) for row in rows] == [("After", 2)]


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_sigterm_under_write_load_answers_what_it_took_and_keeps_it(database: str, tmp_path: Path) -> None:
    """Clients keep writing while the server is told to stop: no server errors, an exit code of 0, and every
    acknowledged create in the database."""
    data_dir = tmp_path / "data"
    with contextlib.ExitStack() as stack:
        database_url = stack.enter_context(throwaway_postgres(migrated=True)) if database == "postgresql" else None
        server = stack.enter_context(running_server(data_dir, database_url=database_url, workers=2, users=[USER]))
        headers = {"Authorization": f"Bearer {server.tokens[USER]}"}
        acknowledged: list[str] = []
        failures: list[str] = []
        started = threading.Event()

        def client() -> None:
            with httpx.Client(base_url=server.url, headers=headers, timeout=GRACEFUL_TIMEOUT + 20) as http:
                while True:
                    try:
                        response = http.post("/v1/pets", json={"name": "Busy", "petType": "Bird"})
                    except httpx.ConnectError:
                        return  # refused: the server no longer takes connections
                    except httpx.TransportError:
                        continue  # a kept-alive connection closed as the request went out: not acknowledged
                    if response.status_code != 201:
                        failures.append(f"{response.status_code} {response.text}")
                        return
                    acknowledged.append(response.json()["id"])
                    started.set()

        clients = [threading.Thread(target=client) for _ in range(6)]
        for thread in clients:
            thread.start()
        try:
            assert started.wait(timeout=30), server.output()
            while len(acknowledged) < 50 and not failures and any(thread.is_alive() for thread in clients):
                time.sleep(0.01)
            server.terminate()
            code = server.wait(GRACEFUL_TIMEOUT + 5)
        finally:
            for thread in clients:
                thread.join(timeout=GRACEFUL_TIMEOUT + 30)
        assert not failures, f"{failures}\n{server.output()}"
        assert code == 0, f"exit code {code}:\n{server.output()}"
        assert "Traceback" not in server.output(full=True)

        statement = "SELECT id FROM pets"
        if database_url is None:
            connection = sqlite3.connect(str(data_dir / "petrecords.sqlite3"))
            try:
                stored = {str(uuid.UUID(row[0])) for row in connection.execute(statement)}
            finally:
                connection.close()
        else:
            stored = {str(row["id"]) for row in _query(database_url, statement)}
        assert set(acknowledged) <= stored
