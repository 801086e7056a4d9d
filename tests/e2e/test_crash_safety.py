"""Crash safety: `kill -9` of a serving process group under concurrent writes loses no acknowledged write.

Each cycle starts `petrecords serve --workers 2` on the data the previous cycles left, checks that data
against everything the clients were told, then runs several client threads that create (with an
Idempotency-Key), replace (with If-Match) and delete (with If-Match) records, and SIGKILLs the whole
process group at a random moment while they do. A write answered with a 2xx must survive; a write whose
answer never came may or may not have happened, but only as a whole: its create is found exactly once by
repeating it with the same key, its replace is there completely or not at all.

The change log is checked against the same knowledge after every restart: a reader that resumes from the last
cursor it was handed before the crash receives every new change once, and then each record's changes are
exactly its writes, acknowledged or found to have happened, in order, versions 1, 2, … with the bodies the
clients were given, and nothing else; its history says the same, ending with the record as stored.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pysqlite3.dbapi2 as sqlite3
import pytest

from tests.e2e.servers import Server, running_server
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

CYCLES = [pytest.param(2, id="two kills"), pytest.param(8, id="eight kills", marks=pytest.mark.long)]
"""Kills under load, each followed by a restart on the data it left: a couple in `make test`, more in
`make test-long`."""
CLIENTS = 6
WORKERS = 2
USER = "alice@example.com"
PET_TYPES = ("Dog", "Cat", "Capybara", "Bird", "Fish")
# Acknowledged writes each cycle waits for before it picks its moment to kill (a count, not a time).
ACKNOWLEDGED_BEFORE_KILL = (30, 90)
PROGRESS_DEADLINE_SECONDS = 60.0


@dataclass
class Pending:
    """A write that was sent and never answered: it may or may not have happened."""

    kind: Literal["create", "replace", "delete"]
    body: dict[str, Any] | None = None


@dataclass
class Tracked:
    """What the clients know of one record: its last acknowledged state, and at most one unanswered write."""

    label: str
    idempotency_key: str
    version: int = 1
    record: dict[str, Any] | None = None
    """The record as the last acknowledged write returned it; None until its create is acknowledged."""
    etag: str | None = None
    deleted: bool = False
    pending: Pending | None = None
    writes: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """Every write of it known to have happened, in order: (action, the record as its change must show it)."""
    history_checked: int = 0
    """How many of `writes` its history was last seen to hold."""

    def request_body(self, version: int, pet_type: str) -> dict[str, Any]:
        return {"name": f"{self.label} v{version}", "petType": pet_type}


@dataclass
class Load:
    """The clients' shared view: the records of each client, the acknowledged count, what went wrong."""

    records: list[list[Tracked]]
    acknowledged: int = 0
    failures: list[str] = field(default_factory=list)
    unanswered: dict[str, int] = field(default_factory=dict)
    """How the unanswered writes turned out, e.g. "replace happened": 3."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    changes: list[dict[str, Any]] = field(default_factory=list)
    """The change log, as a reader that keeps its cursor across the crashes received it."""
    cursor: str | None = None

    def acknowledge(self) -> None:
        with self.lock:
            self.acknowledged += 1

    def fail(self, message: str) -> None:
        with self.lock:
            self.failures.append(message)


def _client(server: Server, token: str, load: Load, index: int, cycle: int, stop: threading.Event) -> None:
    """One client: writes until the server stops answering (it was killed) or the test says stop."""
    rng = random.Random()
    records = load.records[index]
    serial = 0
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0) as http:
        while not stop.is_set():
            settled = [tracked for tracked in records if tracked.record is not None and not tracked.deleted]
            draw = rng.random()
            if settled and draw < 0.3:
                tracked = rng.choice(settled)
                body = tracked.request_body(tracked.version + 1, rng.choice(PET_TYPES))
                tracked.pending = Pending("replace", body)
                request = http.build_request(
                    "PUT", f"/v1/pets/{tracked.record['id']}", json=body, headers={"If-Match": tracked.etag}
                )
            elif settled and draw < 0.4:
                tracked = rng.choice(settled)
                tracked.pending = Pending("delete")
                request = http.build_request(
                    "DELETE", f"/v1/pets/{tracked.record['id']}", headers={"If-Match": tracked.etag}
                )
            else:
                serial += 1
                tracked = Tracked(label=f"c{cycle}t{index}n{serial}", idempotency_key=f"crash-{cycle}-{index}-{serial}")
                body = tracked.request_body(1, rng.choice(PET_TYPES))
                tracked.pending = Pending("create", body)
                records.append(tracked)
                request = http.build_request(
                    "POST", "/v1/pets", json=body, headers={"Idempotency-Key": tracked.idempotency_key}
                )
            try:
                response = http.send(request)
            except httpx.ConnectError:
                # Refused: the request never reached a server, so it wrote nothing.
                if tracked.pending.kind == "create":
                    records.remove(tracked)
                tracked.pending = None
                return
            except httpx.TransportError:
                return  # sent, never answered: it stays pending
            if not response.is_success:
                load.fail(f"{request.method} {request.url.path}: {response.status_code} {response.text}")
                return
            _settle(tracked, response)
            load.acknowledge()


def _settle(tracked: Tracked, response: httpx.Response) -> None:
    """Record an acknowledged write of `tracked`: from now on it must survive any crash."""
    assert tracked.pending is not None
    if tracked.pending.kind == "delete":
        tracked.deleted = True
        tracked.writes.append(("deleted", response.json()))
    else:
        if tracked.pending.kind == "replace":
            tracked.version += 1
        tracked.record = response.json()
        tracked.etag = response.headers["ETag"]
        assert tracked.record is not None
        assert tracked.record["name"] == f"{tracked.label} v{tracked.version}"
        tracked.writes.append(("created" if tracked.pending.kind == "create" else "replaced", tracked.record))
    tracked.pending = None


def _list_all(http: httpx.Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page_index = 1
    while True:
        response = http.get("/v1/pets", params={"pageSize": 100, "pageIndex": page_index})
        assert response.status_code == 200, response.text
        page = response.json()
        items.extend(page["items"])
        if not page["hasNextPage"]:
            assert len(items) == page["totalCount"]
            return items
        page_index += 1


def _verify(server: Server, token: str, load: Load) -> int:
    """Everything acknowledged is there, exactly; the unanswered writes happened wholly or not at all.
    Afterwards every record is settled again. Returns how many records exist."""
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0) as http:
        stored = {item["id"]: item for item in _list_all(http)}
        by_label: dict[str, list[dict[str, Any]]] = {}
        for item in stored.values():
            by_label.setdefault(item["name"].split(" ")[0], []).append(item)
        duplicated = {label: items for label, items in by_label.items() if len(items) > 1}
        assert not duplicated, f"records created twice: {duplicated}"

        tracked_records = [tracked for records in load.records for tracked in records]
        for tracked in tracked_records:
            pending = tracked.pending
            found = by_label.get(tracked.label, [None])[0]
            if pending is not None:
                outcome = f"{pending.kind} {'happened' if _happened(tracked, found) else 'did not happen'}"
                load.unanswered[outcome] = load.unanswered.get(outcome, 0) + 1
            if tracked.record is None:
                # A create that was never answered: repeating it with its key must make exactly one record.
                assert pending is not None
                assert pending.kind == "create"
                _repeat_create(http, tracked, found)
                continue
            if tracked.deleted:
                assert found is None, f"an acknowledged delete came back: {found}"
                assert http.get(f"/v1/pets/{tracked.record['id']}").status_code == 404
                continue
            if pending is None:
                assert found == tracked.record, f"acknowledged {tracked.record}, found {found}"
            elif pending.kind == "delete":
                if found is None:
                    tracked.deleted = True
                    tracked.writes.append(("deleted", tracked.record))
                else:
                    assert found == tracked.record, f"acknowledged {tracked.record}, found {found}"
            else:
                assert pending.kind == "replace"
                assert pending.body is not None
                assert found is not None, f"a record vanished: {tracked.record}"
                if found != tracked.record:
                    # The replace happened, completely: the new values and a later modification.
                    assert found["name"] == pending.body["name"], found
                    assert found["petType"] == pending.body["petType"], found
                    unchanged = ("id", "createdAt", "createdBy", "ownerId", "modifiedBy")
                    assert {name: found[name] for name in unchanged} == {
                        name: tracked.record[name] for name in unchanged
                    }
                    assert found["modifiedAt"] >= tracked.record["modifiedAt"]
                    tracked.version += 1
                    tracked.record = found
                    tracked.etag = None
                    tracked.writes.append(("replaced", found))
            tracked.pending = None
            if not tracked.deleted:
                fetched = http.get(f"/v1/pets/{tracked.record['id']}")
                assert fetched.status_code == 200, fetched.text
                assert fetched.json() == tracked.record
                if tracked.etag is not None:
                    assert fetched.headers["ETag"] == tracked.etag, "the ETag of an acknowledged write changed"
                tracked.etag = fetched.headers["ETag"]

        expected = {tracked.record["id"] for tracked in tracked_records if tracked.record and not tracked.deleted}
        now_stored = {item["id"] for item in _list_all(http)}
        assert now_stored == expected, f"unexpected: {now_stored - expected}, missing: {expected - now_stored}"
        _verify_changes(http, load, tracked_records)
        return len(now_stored)


def _position(cursor: str) -> tuple[int, int]:
    """A cursor's place in the log (opaque to clients; the test knows its form to compare two)."""
    xid, _, serial = cursor.partition("-")
    return int(xid, 16), int(serial, 16)


def _read_new_changes(http: httpx.Client, load: Load) -> None:
    """Follow the feed from the last cursor handed out, before the crash too, to its end."""
    while True:
        params = {"limit": "1000", **({"after": load.cursor} if load.cursor else {})}
        response = http.get("/v1/changes", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        previous = _position(load.cursor) if load.cursor else (-1, -1)
        assert _position(page["nextCursor"]) >= previous
        for change in page["items"]:
            assert _position(change["cursor"]) > previous, "a change behind a cursor already handed out"
            previous = _position(change["cursor"])
        load.changes.extend(page["items"])
        load.cursor = page["nextCursor"]
        if not page["items"]:
            return


def _verify_changes(http: httpx.Client, load: Load, tracked_records: list[Tracked]) -> None:
    """Each record's changes are its writes that happened, each once, in order, with the bodies the clients
    were given (a deletion: the record as it was); no change for anything else. Every record written since the
    last restart has the same history, whose last change is the record as stored (or as it was, if deleted)."""
    _read_new_changes(http, load)
    by_record: dict[str, list[dict[str, Any]]] = {}
    for change in load.changes:
        by_record.setdefault(change["id"], []).append(change)
    written = {tracked.writes[0][1]["id"]: tracked for tracked in tracked_records if tracked.writes}
    assert set(by_record) == set(written), f"changes of records never written: {set(by_record) - set(written)}"
    for record_id, tracked in written.items():
        changes = by_record[record_id]
        assert [change["version"] for change in changes] == list(range(1, len(changes) + 1)), changes
        assert [(change["action"], change["record"]) for change in changes] == tracked.writes, tracked.label
        if tracked.history_checked == len(tracked.writes):
            continue
        response = http.get(f"/v1/pets/{record_id}/history", params={"pageSize": "100"})
        assert response.status_code == 200, response.text
        assert response.json()["items"] == changes
        last = changes[-1]["record"]
        assert last == tracked.record, "the last change is not the record as stored"
        tracked.history_checked = len(tracked.writes)


def _happened(tracked: Tracked, found: dict[str, Any] | None) -> bool:
    assert tracked.pending is not None
    if tracked.pending.kind == "create":
        return found is not None
    if tracked.pending.kind == "delete":
        return found is None
    return found != tracked.record


def _repeat_create(http: httpx.Client, tracked: Tracked, found: dict[str, Any] | None) -> None:
    pending = tracked.pending
    assert pending is not None
    assert pending.body is not None
    response = http.post("/v1/pets", json=pending.body, headers={"Idempotency-Key": tracked.idempotency_key})
    assert response.status_code == 201, response.text
    if response.headers.get("Idempotent-Replayed") == "true":
        # The first attempt was committed, key and record together.
        assert found is not None, f"the key of {tracked.label} was kept but its record is missing"
        assert response.json() == found
    else:
        assert found is None, f"the record {found} was kept but the key of its create was not"
    _settle(tracked, response)


def _integrity_check(data_dir: Path) -> None:
    connection = sqlite3.connect(str(data_dir / "petrecords.sqlite3"))
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        connection.close()


def _kill_under_load(server: Server, token: str, load: Load, cycle: int, rng: random.Random) -> None:
    stop = threading.Event()
    clients = [
        threading.Thread(target=_client, args=(server, token, load, index, cycle, stop), daemon=True)
        for index in range(CLIENTS)
    ]
    target = load.acknowledged + rng.randint(*ACKNOWLEDGED_BEFORE_KILL)
    for client in clients:
        client.start()
    try:
        deadline = time.monotonic() + PROGRESS_DEADLINE_SECONDS
        while load.acknowledged < target and not load.failures:
            assert any(client.is_alive() for client in clients), f"every client stopped:\n{server.output()}"
            assert time.monotonic() < deadline, f"no progress to {target} writes:\n{server.output()}"
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.25))
    finally:
        server.kill()
        stop.set()
        for client in clients:
            client.join(timeout=30)
    assert not any(client.is_alive() for client in clients)
    assert not load.failures, f"{load.failures}\n{server.output()}"


def _crash_cycles(data_dir: Path, database_url: str | None, cycles: int) -> None:
    seed = random.randrange(2**32)
    print(f"crash-cycle seed {seed}")
    rng = random.Random(seed)
    load = Load(records=[[] for _ in range(CLIENTS)])
    token = ""
    totals: list[int] = []
    for cycle in range(cycles + 1):
        users = [USER] if cycle == 0 else []
        with running_server(data_dir, database_url=database_url, workers=WORKERS, users=users) as server:
            token = token or server.tokens[USER]
            totals.append(_verify(server, token, load))
            if database_url is None:
                _integrity_check(data_dir)
            if cycle == cycles:
                assert server.stop() == 0, server.output()
                break
            before = load.acknowledged
            _kill_under_load(server, token, load, cycle, rng)
            assert load.acknowledged > before
    if database_url is None:
        _integrity_check(data_dir)
    # The data accumulates across the cycles.
    assert totals[0] == 0
    assert totals[-1] > 0
    print(
        f"acknowledged writes: {load.acknowledged}; changes: {len(load.changes)}; records after each restart: "
        f"{totals}; unanswered: {load.unanswered}"
    )


@pytest.mark.parametrize("cycles", CYCLES)
def test_sqlite_loses_no_acknowledged_write(tmp_path: Path, cycles: int) -> None:
    _crash_cycles(tmp_path / "data", None, cycles)


@pytest.mark.parametrize("cycles", CYCLES)
def test_postgresql_loses_no_acknowledged_write(tmp_path: Path, cycles: int) -> None:
    with throwaway_postgres(migrated=True) as database_url:
        _crash_cycles(tmp_path / "data", database_url, cycles)
