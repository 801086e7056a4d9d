"""The service while the network under it fails: two instances (`petrecords serve`) on one PostgreSQL and one NATS,
each through proxies of the test's own (tests/servers/tcp_proxy.py) to PostgreSQL, NATS and Redis, which reset
connections, add latency, turn into black holes, refuse connections, lose the answer to a COMMIT once PostgreSQL
has committed, and hold a COMMIT on its connection to deliver it later, at random, on every proxy at once.

Meanwhile careful writers create pets (with an Idempotency-Key), rename them (with If-Match) and delete them
(with If-Match), each on pets of its own, through either instance, and send each write again until it is
answered: an answer that says it changed nothing (a `503` with the usual message) must be true, which the next
attempt shows (a `412`, a `404` or a replayed create after such answers alone would mean the write had been made);
a `503` that says the write may have been made, or no answer, is taken as no answer. Admins poll the JSON feed
and hold a live stream through each instance, resuming from their last cursor after any failure.

Once the faults end: `/readyz` is back within seconds on both; no answer was a `500`, and no log line an error;
every feed reader's and every stream's sequence is the change log exactly, in commit order; JetStream holds the
log exactly; every record's history is its part of the log; the log holds exactly the writes that were made,
each once, with the bodies the writers were given; and the database holds what the writers were told.

`make test` runs a few seconds of faults with short timeouts; `make test-long` runs a couple of minutes, with the
timeouts at their defaults and black holes longer than them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.js.errors
import pytest
import sqlalchemy as sa

from petrecords.errors import DatabaseUnavailable
from petrecords.store.faults import UNCONFIRMED
from tests.e2e.servers import Server, running_server
from tests.servers.nats_server import nats_server
from tests.servers.tcp_proxy import TcpProxy, tcp_proxy
from tests.support import fetch_sql, redis_is_up, throwaway_postgres

pytestmark = pytest.mark.slow

ADMIN = "admin@example.com --admin"
USERS = ("writer-0@example.com", "writer-1@example.com", "writer-2@example.com", "writer-3@example.com")
STREAM = "PETRECORDS"
REDIS = ("127.0.0.1", 6379)


@dataclass(frozen=True)
class Run:
    """How hard the network fails, for how long."""

    fault_seconds: float
    pause: tuple[float, float]
    """How long a proxy works between two faults."""
    black_hole: tuple[float, float]
    latency: tuple[float, float]
    fault: tuple[float, float]
    """How long a refusal, a latency or a held COMMIT lasts."""
    writers: int
    workers: int
    settings: dict[str, str]
    """Settings of both instances beyond the addresses."""
    ready_seconds: float
    """The most /readyz may take to answer 200 again once the network is back."""


SHORT = Run(
    fault_seconds=6.0,
    pause=(0.5, 2.0),
    black_hole=(1.0, 3.0),
    latency=(0.05, 0.4),
    fault=(0.5, 2.0),
    writers=3,
    workers=1,
    settings={
        "PETRECORDS_DB_STATEMENT_TIMEOUT_SECONDS": "1.5",
        "PETRECORDS_DB_CONNECT_TIMEOUT_SECONDS": "1.5",
        "PETRECORDS_DB_IDLE_IN_TRANSACTION_TIMEOUT_SECONDS": "1.5",
    },
    ready_seconds=8.0,
)
LONG = Run(
    fault_seconds=150.0,
    pause=(3.0, 15.0),
    black_hole=(12.0, 18.0),
    latency=(0.2, 2.5),
    fault=(2.0, 8.0),
    writers=len(USERS),
    workers=2,
    settings={},
    ready_seconds=8.0,
)
RUNS = [pytest.param(SHORT, id="seconds of faults"), pytest.param(LONG, id="minutes of faults", marks=pytest.mark.long)]

CATCH_UP_SECONDS = 90.0
"""How long readers, streams and NATS may take to reach the end of the log once the network is back."""
CLIENT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
"""Longer than any answer the service may take (a COMMIT's timeout, then as long finding out what it did)."""


# --- what the writers did ---------------------------------------------------------------------------------


@dataclass
class Pet:
    id: str
    etag: str
    name: str
    writes: list[tuple[str, int, str]] = field(default_factory=list)
    """(action, version, name) of every write of it that was made, in order."""
    deleted: bool = False


@dataclass
class Outcomes:
    """What every client saw that it must not have seen, and what the writers know was made."""

    violations: list[str] = field(default_factory=list)
    pets: dict[str, Pet] = field(default_factory=dict)
    bodies: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    """The body a writer was given for each write of a pet acknowledged with one, by (id, version)."""
    statuses: dict[str, int] = field(default_factory=dict)

    def count(self, what: str) -> None:
        self.statuses[what] = self.statuses.get(what, 0) + 1


NO_ANSWER = "no answer"
UNCHANGED = "unchanged"
"""A `503` with the usual message: the write changed nothing."""
BUSY = "busy"
"""A `409`/`991`: an attempt with the same key is still in progress."""


class Writer:
    """Writes pets of its own, each write sent again until it is answered, through either instance."""

    def __init__(self, number: int, servers: list[Server], outcomes: Outcomes, seed: int) -> None:
        self.user = USERS[number]
        self.number = number
        self.servers = servers
        self.outcomes = outcomes
        self.rng = random.Random(seed)
        self.serial = 0
        self.mine: list[Pet] = []

    async def run(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        while not stop.is_set():
            live = [pet for pet in self.mine if not pet.deleted]
            draw = self.rng.random()
            if len(live) < 3 or draw < 0.3:
                await self._create(http)
            elif draw < 0.85:
                await self._rename(http, self.rng.choice(live))
            else:
                await self._delete(http, self.rng.choice(live))

    def _name(self) -> str:
        self.serial += 1
        return f"writer {self.number} name {self.serial}"

    async def _send(
        self, http: httpx.AsyncClient, method: str, path: str, body: Any = None, **headers: str
    ) -> tuple[str, httpx.Response | None]:
        """One attempt: what its answer says of the write, and the answer when it is one that settles it."""
        server = self.rng.choice(self.servers)
        try:
            response = await http.request(
                method, f"{server.url}{path}", json=body, headers={**_auth(server, self.user), **headers}
            )
        except httpx.TransportError:
            self.outcomes.count(f"{method} no answer")
            return NO_ANSWER, None
        self.outcomes.count(f"{method} {response.status_code}")
        if response.status_code == 503:
            message = _error(response, self.outcomes, 986)
            if message == UNCONFIRMED:
                return NO_ANSWER, None
            if message != DatabaseUnavailable.default_message:
                self.outcomes.violations.append(f"{method} {path}: 503 {message}")
            return UNCHANGED, None
        if response.status_code == 409 and response.json().get("code") == 991:
            return BUSY, None
        if response.status_code >= 500:
            self.outcomes.violations.append(f"{method} {path}: {response.status_code} {response.text}")
            return NO_ANSWER, None
        return "answered", response

    async def _again(self, seen: list[str]) -> None:
        await asyncio.sleep(min(2.0, 0.05 * 2 ** len(seen)))

    def _made_by_an_earlier_attempt(self, write: str, seen: list[str]) -> None:
        """An answer that shows an earlier attempt made the write: one of them must have been left unanswered."""
        if NO_ANSWER not in seen:
            self.outcomes.violations.append(f"{write}: made, though every earlier attempt was answered {seen}")

    async def _create(self, http: httpx.AsyncClient) -> None:
        name, key = self._name(), f"writer-{self.number}-{self.serial}"
        seen: list[str] = []
        while True:
            said, response = await self._send(
                http, "POST", "/v1/pets", {"name": name, "petType": "Dog"}, **{"Idempotency-Key": key}
            )
            if response is not None:
                break
            seen.append(said)
            await self._again(seen)
        if response.status_code != 201:
            self.outcomes.violations.append(f"POST {key}: {response.status_code} {response.text}")
            return
        if response.headers.get("idempotent-replayed") == "true":
            self._made_by_an_earlier_attempt(f"POST {key}", seen)
        body = response.json()
        pet = Pet(id=body["id"], etag=response.headers["etag"], name=name, writes=[("created", 1, name)])
        self.mine.append(pet)
        self.outcomes.pets[pet.id] = pet
        self.outcomes.bodies[(pet.id, 1)] = body

    async def _rename(self, http: httpx.AsyncClient, pet: Pet) -> None:
        name = self._name()
        version = pet.writes[-1][1] + 1
        seen: list[str] = []
        while True:
            said, response = await self._send(
                http, "PUT", f"/v1/pets/{pet.id}", {"name": name, "petType": "Dog"}, **{"If-Match": pet.etag}
            )
            if response is not None:
                break
            seen.append(said)
            await self._again(seen)
        if response.status_code == 200:
            pet.etag, pet.name = response.headers["etag"], name
            self.outcomes.bodies[(pet.id, version)] = response.json()
        elif response.status_code == 412:
            # Nobody else writes this pet: an earlier attempt made it. What it made is read back.
            self._made_by_an_earlier_attempt(f"PUT {pet.id} {name}", seen)
            stored = await self._read(http, pet)
            if stored.json()["name"] != name:
                self.outcomes.violations.append(f"PUT {pet.id}: 412, and the name is {stored.json()['name']}")
            pet.etag, pet.name = stored.headers["etag"], name
        else:
            self.outcomes.violations.append(f"PUT {pet.id}: {response.status_code} {response.text}")
            return
        pet.writes.append(("replaced", version, name))

    async def _delete(self, http: httpx.AsyncClient, pet: Pet) -> None:
        seen: list[str] = []
        while True:
            said, response = await self._send(http, "DELETE", f"/v1/pets/{pet.id}", **{"If-Match": pet.etag})
            if response is not None:
                break
            seen.append(said)
            await self._again(seen)
        if response.status_code == 404:
            self._made_by_an_earlier_attempt(f"DELETE {pet.id}", seen)
        elif response.status_code != 200:
            self.outcomes.violations.append(f"DELETE {pet.id}: {response.status_code} {response.text}")
            return
        pet.deleted = True
        pet.writes.append(("deleted", pet.writes[-1][1] + 1, pet.name))

    async def _read(self, http: httpx.AsyncClient, pet: Pet) -> httpx.Response:
        seen: list[str] = []
        while True:
            said, response = await self._send(http, "GET", f"/v1/pets/{pet.id}")
            if response is not None and response.status_code == 200:
                return response
            seen.append(said)
            await self._again(seen)


def _auth(server: Server, user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.tokens[user]}"}


def _error(response: httpx.Response, outcomes: Outcomes, code: int) -> str:
    body = response.json()
    if body.get("code") != code or "retry-after" not in response.headers:
        outcomes.violations.append(f"{response.status_code} without code {code} and Retry-After: {body}")
    message: str = body.get("message", "")
    return message


# --- what the readers saw ---------------------------------------------------------------------------------


async def _poll(server: Server, http: httpx.AsyncClient, seen: list[dict[str, Any]], outcomes: Outcomes) -> None:
    """Follow the JSON feed as an admin, for ever, from the start: on any failure, again from the last cursor."""
    cursor: str | None = None
    while True:
        params = {"limit": "200", **({"after": cursor} if cursor else {})}
        try:
            response = await http.get(f"{server.url}/v1/changes", params=params, headers=_auth(server, ADMIN))
        except httpx.TransportError:
            await asyncio.sleep(0.2)
            continue
        outcomes.count(f"feed {response.status_code}")
        if response.status_code != 200:
            if response.status_code != 503:
                outcomes.violations.append(f"feed: {response.status_code} {response.text}")
            else:
                _error(response, outcomes, 986)
            await asyncio.sleep(0.2)
            continue
        page = response.json()
        seen.extend(page["items"])
        cursor = page["nextCursor"]
        if not page["items"]:
            await asyncio.sleep(0.2)


async def _listen(server: Server, seen: list[dict[str, Any]], outcomes: Outcomes, opened: asyncio.Event) -> None:
    """Hold a live stream as an admin, for ever: after any failure, open it again after the last event's id."""
    last_id: str | None = None
    while True:
        headers = {**_auth(server, ADMIN), "Accept": "text/event-stream"}
        if last_id is not None:
            headers["Last-Event-ID"] = last_id
        try:
            async with (
                httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=60.0)) as http,
                http.stream("GET", f"{server.url}/v1/changes", headers=headers) as response,
            ):
                outcomes.count(f"stream {response.status_code}")
                if response.status_code != 200:
                    if response.status_code >= 500 and response.status_code != 503:
                        outcomes.violations.append(f"stream: {response.status_code} {await response.aread()!r}")
                    await asyncio.sleep(0.2)
                    continue
                opened.set()
                event: dict[str, str] = {}
                async for line in response.aiter_lines():
                    if line == "":
                        if "data" in event:
                            seen.append(json.loads(event["data"]))
                            last_id = event["id"]
                        event = {}
                    elif not line.startswith(":") and ":" in line:
                        name, _, value = line.partition(":")
                        event[name] = value.strip()
        except httpx.TransportError:
            outcomes.count("stream broken")
        await asyncio.sleep(0.2)


# --- the faults -------------------------------------------------------------------------------------------


FIRST_ON_POSTGRES = ("lost COMMIT answer", "held COMMIT")
"""The faults every PostgreSQL proxy begins with, whatever the draw: those that leave a write's fate unknown."""


async def _fail_now_and_then(name: str, proxy: TcpProxy, run: Run, rng: random.Random, until: float) -> list[str]:
    """Faults on one proxy, one at a time with pauses between them, until `until` (monotonic); what was done."""
    done: list[str] = []
    kinds = ["reset", "latency", "black hole", "refusal", "cut", "host lost"]
    first: list[str] = []
    if proxy.postgres:
        kinds += FIRST_ON_POSTGRES
        first += FIRST_ON_POSTGRES
    while (pause := rng.uniform(*run.pause)) < until - time.monotonic():
        await asyncio.sleep(pause)
        kind = first.pop(0) if first else rng.choice(kinds)
        # A COMMIT held as long as a black hole: longer than the service waits for its answer.
        lasting = rng.uniform(*(run.black_hole if kind in ("black hole", "held COMMIT") else run.fault))
        done.append(f"{name}: {kind}" + ("" if kind == "reset" else f" for {lasting:.1f} s"))
        if kind == "reset":
            await asyncio.to_thread(proxy.reset)
            continue
        start = {
            "latency": lambda: proxy.delay(rng.uniform(*run.latency)),
            "black hole": proxy.black_hole,
            "refusal": proxy.refuse,
            "cut": proxy.cut,
            "host lost": proxy.strand,
            "lost COMMIT answer": lambda: proxy.lose_answer_to("COMMIT"),
            "held COMMIT": lambda: proxy.hold("COMMIT"),
        }[kind]
        await asyncio.to_thread(start)
        await asyncio.sleep(lasting)
        await asyncio.to_thread(proxy.restore)
    return done


# --- the run ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _proxies(database_url: str, nats_url: str) -> Iterator[dict[str, TcpProxy]]:
    """PostgreSQL, NATS and (when it runs) Redis, each behind a proxy of its own."""
    database = sa.make_url(database_url)
    broker = sa.make_url(nats_url.replace("nats://", "http://"))
    targets = {
        "postgres": (database.host or "127.0.0.1", database.port or 5432),
        "nats": (broker.host or "127.0.0.1", broker.port or 4222),
    }
    if redis_is_up():
        targets["redis"] = REDIS
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(tcp_proxy(*target, postgres=name == "postgres"))
            for name, target in targets.items()
        }


def _settings(run: Run, database_url: str, proxies: dict[str, TcpProxy]) -> dict[str, str]:
    database = sa.make_url(database_url).set(host="127.0.0.1", port=proxies["postgres"].port)
    settings = {
        **run.settings,
        "PETRECORDS_DATABASE_URL": database.render_as_string(hide_password=False),
        "PETRECORDS_NATS_URL": f"nats://127.0.0.1:{proxies['nats'].port}",
        "PETRECORDS_RATE_LIMIT": "0",
    }
    if "redis" in proxies:
        # A limit nobody reaches, counted in Redis: every request goes through Redis (or its absence).
        settings["PETRECORDS_RATE_LIMIT"] = "1000000"
        settings["PETRECORDS_REDIS_URL"] = f"redis://127.0.0.1:{proxies['redis'].port}/0"
    return settings


@contextlib.contextmanager
def _two_instances(run: Run, tmp_path: Path) -> Iterator[tuple[str, str, list[Server], list[dict[str, TcpProxy]]]]:
    """A database, NATS, and two instances on them, each through proxies of its own."""
    data_dir = tmp_path / "data"
    with contextlib.ExitStack() as stack:
        database_url = stack.enter_context(throwaway_postgres(migrated=True))
        broker = stack.enter_context(nats_server(tmp_path / "nats"))
        proxies = [stack.enter_context(_proxies(database_url, broker.url)) for _ in range(2)]
        servers = []
        for number, proxied in enumerate(proxies):
            users = [ADMIN, *USERS] if number == 0 else []
            settings = _settings(run, database_url, proxied)
            servers.append(
                stack.enter_context(running_server(data_dir, workers=run.workers, users=users, settings=settings))
            )
        servers[1].tokens.update(servers[0].tokens)
        yield database_url, broker.url, servers, proxies


@contextlib.asynccontextmanager
async def _running(*jobs: Any) -> AsyncIterator[list[asyncio.Task[Any]]]:
    tasks = [asyncio.create_task(job) for job in jobs]
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _until(what: str, seconds: float, condition: Any) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        assert time.monotonic() < deadline, f"not within {seconds:g} s: {what}"
        await asyncio.sleep(0.2)


async def _ready_again(servers: list[Server], http: httpx.AsyncClient) -> float:
    """How long until every instance answers /readyz with 200."""
    started = time.monotonic()
    for server in servers:
        while True:
            with contextlib.suppress(httpx.TransportError):
                if (await http.get(f"{server.url}/readyz", timeout=5.0)).status_code == 200:
                    break
            await asyncio.sleep(0.05)
    return time.monotonic() - started


async def _the_log(database_url: str) -> list[dict[str, Any]]:
    rows = await fetch_sql(
        database_url, "SELECT resource, record_id, action, version FROM changes ORDER BY xid, position"
    )
    return [
        {"resource": row["resource"], "id": str(row["record_id"]), "action": row["action"], "version": row["version"]}
        for row in rows
    ]


def _keys(changes: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    return [(change["resource"], change["id"], change["action"], change["version"]) for change in changes]


async def _stream_messages(nats_url: str) -> list[Any]:
    connection = await nats.connect(nats_url, connect_timeout=2, allow_reconnect=False, max_reconnect_attempts=0)
    try:
        stream = connection.jetstream(timeout=5)
        try:
            info = await stream.stream_info(STREAM)
        except nats.js.errors.NotFoundError:
            return []
        return [
            await stream.get_msg(STREAM, seq=sequence)
            for sequence in range(info.state.first_seq, info.state.last_seq + 1)
        ]
    finally:
        await connection.close()


async def _history(server: Server, http: httpx.AsyncClient, record_id: str) -> list[dict[str, Any]]:
    response = await http.get(
        f"{server.url}/v1/pets/{record_id}/history", params={"pageSize": "1000"}, headers=_auth(server, ADMIN)
    )
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@pytest.mark.parametrize("run", RUNS)
def test_nothing_acknowledged_is_lost_and_no_503_hides_a_write_under_network_faults(run: Run, tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    with _two_instances(run, tmp_path) as (database_url, nats_url, servers, proxies):
        asyncio.run(_exercise(run, seed, database_url, nats_url, servers, proxies))
        logs = "".join(server.output(full=True) for server in servers)
    assert "Traceback" not in logs
    assert '"level":"error"' not in logs


async def _exercise(
    run: Run, seed: int, database_url: str, nats_url: str, servers: list[Server], proxies: list[dict[str, TcpProxy]]
) -> None:
    rng = random.Random(seed)
    outcomes = Outcomes()
    polled: list[list[dict[str, Any]]] = [[] for _ in servers]
    streamed: list[list[dict[str, Any]]] = [[] for _ in servers]
    opened = [asyncio.Event() for _ in servers]
    stop_writing = asyncio.Event()
    writers = [Writer(number, servers, outcomes, rng.randrange(2**32)) for number in range(run.writers)]
    async with httpx.AsyncClient(timeout=CLIENT_TIMEOUT) as http:
        readers = [
            *(_poll(server, http, seen, outcomes) for server, seen in zip(servers, polled, strict=True)),
            *(
                _listen(server, seen, outcomes, ready)
                for server, seen, ready in zip(servers, streamed, opened, strict=True)
            ),
        ]
        async with _running(*readers):
            await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in opened)), 30)
            async with _running(*(writer.run(http, stop_writing) for writer in writers)) as writing:
                until = time.monotonic() + run.fault_seconds
                faults = await asyncio.gather(
                    *(
                        _fail_now_and_then(f"instance {number} {name}", proxy, run, random.Random(rng.random()), until)
                        for number, proxied in enumerate(proxies)
                        for name, proxy in proxied.items()
                    )
                )
                for proxied in proxies:
                    for proxy in proxied.values():
                        await asyncio.to_thread(proxy.restore)
                ready_seconds = await _ready_again(servers, http)
                stop_writing.set()
                # Each writer ends with the write it is sending, answered.
                await asyncio.wait_for(asyncio.gather(*writing), CATCH_UP_SECONDS)
            log = await _the_log(database_url)

            async def caught_up() -> bool:
                return all(len(seen) >= len(log) for seen in (*polled, *streamed))

            await _until("every reader and stream at the end of the log", CATCH_UP_SECONDS, caught_up)

        async def published() -> bool:
            return len(await _stream_messages(nats_url)) >= len(log)

        await _until("every change published to NATS", CATCH_UP_SECONDS, published)
        messages = await _stream_messages(nats_url)
        histories = {
            record_id: await _history(servers[0], http, record_id) for record_id in {change["id"] for change in log}
        }
    stored = {str(row["id"]): row["name"] for row in await fetch_sql(database_url, "SELECT id, name FROM pets")}

    print(
        f"{len(log)} changes; {len([f for done in faults for f in done])} faults "
        f"({', '.join(f for done in faults for f in done)}); /readyz back in {ready_seconds:.2f} s; {outcomes.statuses}"
    )
    assert not outcomes.violations, outcomes.violations[:10]
    assert ready_seconds < run.ready_seconds, f"/readyz answered 200 again after {ready_seconds:.1f} s"
    # Every reader and every stream: the log exactly, in commit order, each change once.
    for seen in (*polled, *streamed):
        assert _keys(seen) == _keys(log)
    # JetStream: the log exactly, each change once, in order, with its body as the feed gives it.
    assert len(messages) == len(log)
    for message, change in zip(messages, polled[0], strict=True):
        assert message.headers["Nats-Msg-Id"] == f"{change['resource']}:{change['id']}:{change['version']}"
        assert json.loads(message.data) == change
    # The log holds exactly the writes that were made, each once, in their order, with the bodies given.
    made = {pet.id: [(action, version) for action, version, _ in pet.writes] for pet in outcomes.pets.values()}
    logged: dict[str, list[tuple[str, int]]] = {}
    for change in polled[0]:
        logged.setdefault(change["id"], []).append((change["action"], change["version"]))
        if (body := outcomes.bodies.get((change["id"], change["version"]))) is not None:
            assert change["record"] == body
    assert logged == made
    # Every history is its record's part of the log; the database holds what the writers were told.
    for record_id, history in histories.items():
        assert history == [change for change in polled[0] if change["id"] == record_id]
    assert stored == {pet.id: pet.name for pet in outcomes.pets.values() if not pet.deleted}
