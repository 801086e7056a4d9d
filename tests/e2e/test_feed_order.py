"""The change feed under concurrent writers (contract section 11): a reader that resumes from its last cursor
sees every change exactly once, in commit order, whatever the number of instances and writers.

Two `petrecords serve` instances on one PostgreSQL database (and one instance of two workers on SQLite) take
writes from many concurrent clients: pets created, renamed with If-Match, given to another owner (which moves
their vaccinations) and deleted (which takes their vaccinations along); vaccinations given, revised and
deleted; vaccines of the shared catalogue created, revised and deleted; pets shared with a user and with a
clinic's group, for reading or for care (a vet of the clinic then vaccinates them), and the shares deleted by
the owner, left by the user, or taken along when their pet is deleted or given away. Meanwhile an
administrator, an owner, the user the pets are shared with and the vet poll GET /v1/changes?after=… through
both instances without pause. Once the writers stop, the
administrator's sequence must be the whole log, each change once, its cursors only ever moving forward; every
acknowledged write in it exactly once, with the body the client was given; every record's versions 1, 2, …
in order; and the log, replayed in that order, must never refer to a record that is not there or show a
vaccination with another owner than its pet's or another vaccine than the catalogue's, and must end in what
the database holds. The owner's sequence must be exactly the changes they may see, in the same order; each
grantee's exactly those of the log replayed with the windows in which a share granted them (from its creation
to its deletion, both included), in the same order; and a read from the start afterwards must give full pages
until the end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.servers import Server, running_servers
from tests.support import throwaway_postgres

pytestmark = pytest.mark.slow

ALICE, BOB, CAROL = "alice@example.com", "bob@example.com", "carol@example.com"
ADMIN = "admin@example.com --admin"
OWNERS = (ALICE, BOB, CAROL)
DAVE = "dave@example.com"
"""A user the owners share pets with, who leaves some of those shares."""
CLINIC = "group:clinic-42"
VET = "vet@clinic.example --group clinic-42"
"""A vet of the clinic: every share to the clinic's group grants them; with care, they vaccinate."""
GRANTEES = {DAVE: {DAVE}, VET: {"vet@clinic.example", CLINIC}}
"""Each grantee's token, and whom a share may name to grant them."""
PET_TYPES = ("Dog", "Cat")
WRITERS = 10
WRITE_SECONDS = [pytest.param(4.0, id="4 s of writes"), pytest.param(20.0, id="20 s of writes", marks=pytest.mark.long)]
"""How long the writers write: short in `make test`, longer in `make test-long`."""
MORE_WRITES_SECONDS = 30.0
"""How much longer they may write until every kind of write has happened, and MIN_WRITES writes (on a busy
machine, a few seconds may bring no vet's vaccination, or fewer writes)."""
MIN_WRITES = 200
LIVE_PETS = 50
"""Few enough that writers often meet on one pet."""
READ_LIMITS = (1, 2, 5, 20, 100, 1000)
SETTINGS = {"PETRECORDS_RATE_LIMIT": "0", "PETRECORDS_REMINDERS_INTERVAL_SECONDS": "1"}
"""Reminders written while the writers write, so that the log interleaves them (the doses given fall due from 30 days
after APPLIED on: within the due-soon days, or past)."""
APPLIED = "2026-11-20T10:00:00.000Z"
REMINDERS = ("due-soon", "overdue")
REMINDERS_SETTLE_SECONDS = 4.0
"""Four of the reminders' passes (PETRECORDS_REMINDERS_INTERVAL_SECONDS above): the last doses' reminders written."""
RESOURCES = ("pets", "vaccines", "pet-vaccination", "pet-shares")
PATHS = {
    "pets": "/v1/pets",
    "vaccines": "/v1/vaccines",
    "pet-vaccination": "/v1/pet-vaccination",
    "pet-shares": "/v1/pet-shares",
}
CATCH_UP_SECONDS = 30.0


def position(cursor: str) -> tuple[int, int]:
    """A cursor's place in the log. Cursors are opaque to clients; the test knows their form to compare them."""
    xid, _, serial = cursor.partition("-")
    return int(xid, 16), int(serial, 16)


def canonical(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)


@dataclass
class Writes:
    """What the writers were told, and the records they know of (to pick what to write next)."""

    servers: list[Server]
    pets: dict[str, dict[str, Any]] = field(default_factory=dict)
    vaccinations: dict[str, dict[str, Any]] = field(default_factory=dict)
    vaccines: dict[str, dict[str, Any]] = field(default_factory=dict)
    shares: dict[str, dict[str, Any]] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    acknowledged: list[tuple[str, str, str, dict[str, Any]]] = field(default_factory=list)
    """(resource, action, id, the body of the 2xx)."""
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    unexpected: list[str] = field(default_factory=list)
    serial: int = 0

    def every_kind_written(self) -> bool:
        """Whether each kind of write that the test looks for has been acknowledged at least once, and
        MIN_WRITES writes in all."""
        done = {(resource, action) for resource, action, _, _ in self.acknowledged}
        return (
            len(self.acknowledged) > MIN_WRITES
            and {action for _, action in done} >= {"created", "replaced", "deleted"}
            and {("pet-shares", "created"), ("pet-shares", "deleted")} <= done
            and self.statuses["vet vaccinates 201"] > 0
        )

    def name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}{self.serial}"

    def headers(self, user: str, etag: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.servers[0].tokens[user]}"}
        if etag is not None:
            headers["If-Match"] = etag
        return headers


async def _send(
    writes: Writes,
    http: httpx.AsyncClient,
    operation: str,
    method: str,
    path: str,
    user: str,
    *,
    allowed: tuple[int, ...],
    body: dict[str, Any] | None = None,
    etag: str | None = None,
) -> dict[str, Any] | None:
    """Send one write; the record it answered with when it succeeded, None when it lost a race."""
    response = await http.request(method, path, json=body, headers=writes.headers(user, etag))
    writes.statuses[f"{operation} {response.status_code}"] += 1
    if response.status_code not in allowed:
        writes.unexpected.append(f"{operation}: {method} {path} {response.status_code} {response.text}")
        return None
    if not response.is_success:
        return None
    record: dict[str, Any] = response.json()
    resource = next(name for name, prefix in PATHS.items() if path.startswith(prefix))
    action = {"POST": "created", "PUT": "replaced", "DELETE": "deleted"}[method]
    writes.acknowledged.append((resource, action, record["id"], record))
    if "ETag" in response.headers:
        writes.etags[record["id"]] = response.headers["ETag"]
    return record


async def _write_once(writes: Writes, http: httpx.AsyncClient, rng: random.Random) -> None:
    draw = rng.random()
    pets = list(writes.pets.values())
    vaccinations = list(writes.vaccinations.values())
    if not pets or (draw < 0.2 and len(pets) < LIVE_PETS):
        owner = rng.choice(OWNERS)
        by_admin = rng.random() < 0.3
        body = {
            "name": writes.name("pet "),
            "petType": rng.choice(PET_TYPES),
            **({"ownerId": owner} if by_admin else {}),
        }
        pet = await _send(
            writes, http, "create pet", "POST", "/v1/pets", ADMIN if by_admin else owner, allowed=(201,), body=body
        )
        if pet is not None:
            writes.pets[pet["id"]] = pet
        return
    pet = rng.choice(pets)
    path = f"/v1/pets/{pet['id']}"
    if draw < 0.35:
        body = {"name": writes.name("pet "), "petType": pet["petType"]}
        user = rng.choice((pet["ownerId"], ADMIN))
        replaced = await _send(
            writes,
            http,
            "rename pet",
            "PUT",
            path,
            user,
            allowed=(200, 404, 412),
            body=body,
            etag=writes.etags.get(pet["id"]),
        )
        if replaced is not None:
            writes.pets[pet["id"]] = replaced
    elif draw < 0.45:
        owner = rng.choice([one for one in OWNERS if one != pet["ownerId"]])
        body = {"name": writes.name("pet "), "petType": pet["petType"], "ownerId": owner}
        moved = await _send(
            writes,
            http,
            "transfer pet",
            "PUT",
            path,
            ADMIN,
            allowed=(200, 404, 412),
            body=body,
            etag=writes.etags.get(pet["id"]),
        )
        if moved is not None:
            writes.pets[pet["id"]] = moved
    elif draw < 0.5:
        gone = await _send(
            writes,
            http,
            "delete pet",
            "DELETE",
            path,
            rng.choice((pet["ownerId"], ADMIN)),
            allowed=(200, 404, 412),
            etag=writes.etags.get(pet["id"]),
        )
        if gone is not None:
            writes.pets.pop(pet["id"], None)
    elif draw < 0.72:
        vaccines = [one for one in writes.vaccines.values() if one["petType"] == pet["petType"]]
        if not vaccines:
            return
        body = {
            "petId": pet["id"],
            "vaccineId": rng.choice(vaccines)["id"],
            "appliedAt": APPLIED,
            "notes": writes.name("dose "),
        }
        # The pet may have moved or gone meanwhile (400 naming petId), or its vaccine gone (400 naming vaccineId).
        given = await _send(
            writes,
            http,
            "vaccinate",
            "POST",
            "/v1/pet-vaccination",
            rng.choice((pet["ownerId"], ADMIN)),
            allowed=(201, 400),
            body=body,
        )
        if given is not None:
            writes.vaccinations[given["id"]] = given
    elif draw < 0.82 and vaccinations:
        vaccination = rng.choice(vaccinations)
        body = {
            "petId": vaccination["petId"],
            "vaccineId": vaccination["vaccineId"],
            "appliedAt": APPLIED,
            "notes": writes.name("dose "),
        }
        revised = await _send(
            writes,
            http,
            "revise vaccination",
            "PUT",
            f"/v1/pet-vaccination/{vaccination['id']}",
            ADMIN,
            allowed=(200, 400, 404, 412),
            body=body,
            etag=writes.etags.get(vaccination["id"]),
        )
        if revised is not None:
            writes.vaccinations[vaccination["id"]] = revised
    elif draw < 0.88 and vaccinations:
        vaccination = rng.choice(vaccinations)
        gone = await _send(
            writes,
            http,
            "delete vaccination",
            "DELETE",
            f"/v1/pet-vaccination/{vaccination['id']}",
            rng.choice((vaccination["ownerId"], ADMIN)),
            allowed=(200, 404, 412),
            etag=writes.etags.get(vaccination["id"]),
        )
        if gone is not None:
            writes.vaccinations.pop(vaccination["id"], None)
    elif draw < 0.94:
        await _write_share(writes, http, rng, pet)
    else:
        await _write_catalogue(writes, http, rng)


async def _write_share(writes: Writes, http: httpx.AsyncClient, rng: random.Random, pet: dict[str, Any]) -> None:
    """Share a pet, leave or delete a share, or (the vet) vaccinate a pet shared with the clinic for care."""
    draw = rng.random()
    shares = list(writes.shares.values())
    if draw < 0.45 or not shares:
        body = {"petId": pet["id"], "grantee": rng.choice((DAVE, CLINIC)), "access": rng.choice(("read", "care"))}
        # 400 naming petId when the pet has gone or moved meanwhile; 409 when it is shared so already.
        made = await _send(
            writes,
            http,
            "share pet",
            "POST",
            "/v1/pet-shares",
            rng.choice((pet["ownerId"], ADMIN)),
            allowed=(201, 400, 409),
            body=body,
        )
        if made is not None:
            writes.shares[made["id"]] = made
    elif draw < 0.75:
        share = rng.choice(shares)
        leaver = DAVE if share["grantee"] == DAVE and rng.random() < 0.5 else rng.choice((share["ownerId"], ADMIN))
        gone = await _send(
            writes,
            http,
            "delete share",
            "DELETE",
            f"/v1/pet-shares/{share['id']}",
            leaver,
            allowed=(200, 404, 412),
            etag=writes.etags.get(share["id"]),
        )
        if gone is not None:
            writes.shares.pop(share["id"], None)
    else:
        cared_for = [one for one in shares if one["grantee"] == CLINIC and one["access"] == "care"]
        share = rng.choice(cared_for or shares)
        shared_pet = writes.pets.get(share["petId"], pet)
        vaccines = [one for one in writes.vaccines.values() if one["petType"] == shared_pet["petType"]]
        if not vaccines:
            return
        body = {"petId": share["petId"], "vaccineId": rng.choice(vaccines)["id"], "appliedAt": APPLIED}
        # 400 naming petId unless a share to the clinic grants the vet the pet now, 403 when it grants reading
        # only; 400 naming vaccineId when the vaccine is not one for the pet's type (or has gone).
        given = await _send(
            writes, http, "vet vaccinates", "POST", "/v1/pet-vaccination", VET, allowed=(201, 400, 403), body=body
        )
        if given is not None:
            writes.vaccinations[given["id"]] = given


async def _write_catalogue(writes: Writes, http: httpx.AsyncClient, rng: random.Random) -> None:
    draw = rng.random()
    vaccines = list(writes.vaccines.values())
    if draw < 0.3 or len(vaccines) < 4:
        body = {"name": writes.name("vaccine "), "petType": rng.choice(PET_TYPES), "duration": rng.randint(30, 730)}
        made = await _send(writes, http, "create vaccine", "POST", "/v1/vaccines", ADMIN, allowed=(201,), body=body)
        if made is not None:
            writes.vaccines[made["id"]] = made
        return
    vaccine = rng.choice(vaccines)
    path = f"/v1/vaccines/{vaccine['id']}"
    if draw < 0.8:
        body = {"name": writes.name("vaccine "), "petType": vaccine["petType"], "duration": rng.randint(30, 730)}
        revised = await _send(
            writes,
            http,
            "revise vaccine",
            "PUT",
            path,
            ADMIN,
            allowed=(200, 404, 412),
            body=body,
            etag=writes.etags.get(vaccine["id"]),
        )
        if revised is not None:
            writes.vaccines[vaccine["id"]] = revised
    else:
        # Refused (409) while a vaccination uses it.
        gone = await _send(
            writes,
            http,
            "delete vaccine",
            "DELETE",
            path,
            ADMIN,
            allowed=(200, 404, 409, 412),
            etag=writes.etags.get(vaccine["id"]),
        )
        if gone is not None:
            writes.vaccines.pop(vaccine["id"], None)


async def _writer(writes: Writes, clients: list[httpx.AsyncClient], seed: int, until: float) -> None:
    rng = random.Random(seed)
    while not writes.unexpected and (
        time.monotonic() < until or (not writes.every_kind_written() and time.monotonic() < until + MORE_WRITES_SECONDS)
    ):
        await _write_once(writes, rng.choice(clients), rng)


@dataclass
class Reading:
    """What one polling reader received, page after page."""

    user: str
    changes: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0
    short_pages: int = 0
    """Pages with fewer changes than asked for, while the writers wrote: the feed never serves a change before
    every write that may precede it has ended."""


async def _read(
    reading: Reading, clients: list[httpx.AsyncClient], token: str, writers_done: asyncio.Event, seed: int
) -> None:
    """Poll the feed without pause from the oldest change on, through any instance, until a page asked for after
    the writers stopped is empty."""
    rng = random.Random(seed)
    cursor: str | None = None
    while True:
        finishing = writers_done.is_set()
        limit = rng.choice(READ_LIMITS)
        params = {"limit": str(limit), **({"after": cursor} if cursor is not None else {})}
        response = await rng.choice(clients).get(
            "/v1/changes", params=params, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200, response.text
        page = response.json()
        items, next_cursor = page["items"], page["nextCursor"]
        reading.pages += 1
        reading.short_pages += len(items) < limit
        assert len(items) <= limit
        previous = position(cursor) if cursor is not None else (-1, -1)
        assert position(next_cursor) >= previous, f"the cursor went back from {cursor} to {next_cursor}"
        for item in items:
            assert position(item["cursor"]) > previous, f"{item['cursor']} came after {previous}"
            previous = position(item["cursor"])
        if items:
            assert next_cursor == items[-1]["cursor"]
        reading.changes.extend(items)
        cursor = next_cursor
        if finishing and not items:
            return


async def _list_everything(http: httpx.AsyncClient, token: str, resource: str) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    page_index = 1
    while True:
        response = await http.get(
            PATHS[resource],
            params={"pageSize": "100", "pageIndex": str(page_index)},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 200, response.text
        page = response.json()
        records.update((record["id"], record) for record in page["items"])
        if not page["hasNextPage"]:
            return records
        page_index += 1


async def _read_from_the_start(http: httpx.AsyncClient, token: str, limit: int) -> list[dict[str, Any]]:
    """Every change the caller may see, `limit` at a time: every page full but the last, then an empty one."""
    changes: list[dict[str, Any]] = []
    cursor: str | None = None
    sizes: list[int] = []
    while True:
        params = {"limit": str(limit), **({"after": cursor} if cursor is not None else {})}
        response = await http.get("/v1/changes", params=params, headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        page = response.json()
        sizes.append(len(page["items"]))
        if not page["items"]:
            assert page["nextCursor"] == (cursor or page["nextCursor"])
            break
        changes.extend(page["items"])
        cursor = page["nextCursor"]
    # A page holds `limit` changes whenever at least that many visible changes follow its cursor.
    assert all(size == limit for size in sizes[:-2]), sizes
    return changes


def _replay(log: list[dict[str, Any]]) -> tuple[dict[str, dict[str, dict[str, Any]]], list[dict[str, Any] | None]]:
    """The records the log ends with, each change checked against the records before it in commit order; and,
    for each change, the record as it was before it."""
    records: dict[str, dict[str, dict[str, Any]]] = {resource: {} for resource in RESOURCES}
    versions: dict[tuple[str, str], int] = {}
    before: list[dict[str, Any] | None] = []
    # A pet's deletion shows it to those it was shared with: its shares go after it, in its transaction.
    pets_gone: list[dict[str, Any]] = []
    for index, change in enumerate(log):
        resource, record_id, action, record = change["resource"], change["id"], change["action"], change["record"]
        key = (resource, record_id)
        previous = records[resource].get(record_id)
        if action in REMINDERS:
            # A reminder (contract section 15; its doses fall due within the due-soon days) writes nothing: it
            # shows the dose as it is, at its version.
            assert resource == "pet-vaccination", f"a reminder of no dose: {change}"
            assert previous is not None, f"a reminder of a dose not there: {change}"
            assert change["version"] == versions[key], f"a reminder at another version: {change}"
            assert record == _as_now(records, resource, previous), f"a reminder shows another record: {change}"
            before.append(previous)
            continue
        assert change["version"] == versions.get(key, 0) + 1, f"version out of order or missing before {change}"
        versions[key] = change["version"]
        before.append(previous)
        assert (previous is None) == (action == "created"), change
        assert record["id"] == record_id
        if action == "deleted":
            assert previous is not None
            assert record == _as_now(records, resource, previous), f"a deletion shows another record: {change}"
            del records[resource][record_id]
        else:
            records[resource][record_id] = record
        if resource == "pet-vaccination" and action != "deleted":
            pet = records["pets"].get(record["petId"])
            assert pet is not None, f"a vaccination of a pet not there (yet, or any more): {change}"
            assert record["ownerId"] == pet["ownerId"], f"a vaccination with another owner than its pet's: {change}"
            assert record["vaccine"] == records["vaccines"].get(record["vaccineId"]), f"a stale vaccine: {change}"
        if resource == "pet-shares" and action != "deleted":
            pet = records["pets"].get(record["petId"])
            assert pet is not None, f"a share of a pet not there (yet, or any more): {change}"
            assert record["ownerId"] == pet["ownerId"], f"a share with another owner than its pet's: {change}"
        if action == "deleted" and resource in ("pets", "vaccines"):
            column = "petId" if resource == "pets" else "vaccineId"
            left = [one for one in records["pet-vaccination"].values() if one[column] == record_id]
            assert not left, f"{resource} deleted while vaccinations refer to it: {change}, {left}"
            if resource == "pets":
                pets_gone.append(change)
        transaction_ends = index + 1 == len(log) or _transaction(log[index + 1]) != _transaction(change)
        while transaction_ends and pets_gone:
            gone = pets_gone.pop()
            left = [one for one in records["pet-shares"].values() if one["petId"] == gone["id"]]
            assert not left, f"a pet deleted while shares refer to it: {gone}, {left}"
        if resource == "pets" and previous is not None and previous["ownerId"] != record["ownerId"]:
            kept_shares = [one for one in records["pet-shares"].values() if one["petId"] == record_id]
            assert not kept_shares, f"a pet given away with its shares: {change}, {kept_shares}"
    return records, before


def _reminder(change: dict[str, Any]) -> str:
    """A reminder's action (contract section 15), or '' for a write."""
    action = str(change["action"])
    return action if action in REMINDERS else ""


def _transaction(change: dict[str, Any]) -> str:
    """The transaction that made a change: the first part of its cursor (the test knows their form)."""
    return str(change["cursor"]).partition("-")[0]


def _as_now(records: dict[str, dict[str, dict[str, Any]]], resource: str, record: dict[str, Any]) -> dict[str, Any]:
    """A record as its last change shows it, with the records it embeds as they are now: a vaccine's replace
    is a change of the vaccine alone, and a vaccination shows its vaccine as it is when it is read."""
    if resource != "pet-vaccination":
        return record
    return {**record, "vaccine": records["vaccines"].get(record["vaccineId"])}


def _sees(user: str, change: dict[str, Any], before: dict[str, Any] | None) -> bool:
    """What an owner may see of a change: one of the catalogue, or of a record they owned before or after it."""
    if change["resource"] == "vaccines":
        return True
    return change["record"]["ownerId"] == user or (before is not None and before["ownerId"] == user)


@dataclass
class Window:
    """Where in the log a share granted: from its creation to its deletion, both included."""

    pet: str
    grantee: str
    opened: int
    closed: float = math.inf


def _windows(log: list[dict[str, Any]]) -> list[Window]:
    windows: dict[str, Window] = {}
    for index, change in enumerate(log):
        if change["resource"] == "pet-shares" and change["action"] == "created":
            windows[change["id"]] = Window(change["record"]["petId"], change["record"]["grantee"], index)
        elif change["resource"] == "pet-shares" and change["action"] == "deleted":
            windows[change["id"]].closed = index
    return list(windows.values())


def _granted(grantees: set[str], windows: list[Window], index: int, change: dict[str, Any]) -> bool:
    """What a grantee (who owns nothing) may see of a change: one of the catalogue, or of a pet shared with
    them, its vaccinations and the shares that name them, committed while such a share granted."""
    if change["resource"] == "vaccines":
        return True
    pet = change["id"] if change["resource"] == "pets" else change["record"]["petId"]
    named = change["record"]["grantee"] if change["resource"] == "pet-shares" else None
    return any(
        window.pet == pet
        and window.grantee in grantees
        and window.opened <= index <= window.closed
        and named in (None, window.grantee)
        for window in windows
    )


@contextlib.contextmanager
def _cluster(database: str, tmp_path: Path) -> Iterator[list[Server]]:
    users = [*OWNERS, ADMIN, *GRANTEES]
    with contextlib.ExitStack() as stack:
        if database == "postgresql":
            url = stack.enter_context(throwaway_postgres(migrated=True))
            servers = stack.enter_context(
                running_servers(2, tmp_path / "data", database_url=url, workers=1, users=users, settings=SETTINGS)
            )
        else:
            servers = stack.enter_context(
                running_servers(1, tmp_path / "data", workers=2, users=users, settings=SETTINGS)
            )
        yield servers


@dataclass
class Run:
    """What the clients did and saw."""

    writes: Writes
    admin: Reading
    bob: Reading
    grantees: dict[str, Reading]
    log: list[dict[str, Any]]
    bobs_log: list[dict[str, Any]]
    grantees_logs: dict[str, list[dict[str, Any]]]
    stored: dict[str, dict[str, dict[str, Any]]]
    histories: dict[tuple[str, str], dict[str, Any]]


async def _exercise(servers: list[Server], rng: random.Random, write_seconds: float) -> Run:
    """Write through every instance while two readers poll; then read everything afresh."""
    writes = Writes(servers)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(httpx.AsyncClient(base_url=server.url, timeout=30.0)) for server in servers
        ]
        admin_token, bob_token = servers[0].tokens[ADMIN], servers[0].tokens[BOB]
        writers_done = asyncio.Event()
        admin, bob = Reading(ADMIN), Reading(BOB)
        grantees = {grantee: Reading(grantee) for grantee in GRANTEES}
        readers = [
            asyncio.create_task(_read(reading, clients, servers[0].tokens[reading.user], writers_done, seed))
            for reading, seed in ((one, rng.randrange(2**32)) for one in (admin, bob, *grantees.values()))
        ]
        until = time.monotonic() + write_seconds
        await asyncio.gather(
            *(_writer(writes, clients, rng.randrange(2**32), until) for _ in range(WRITERS)),
        )
        # The doses given last are reminded at the duty's next pass, after the writers: the readers finish once those
        # are written too, or the log read below would end in reminders they never saw.
        await asyncio.sleep(REMINDERS_SETTLE_SECONDS)
        writers_done.set()
        await asyncio.wait_for(asyncio.gather(*readers), CATCH_UP_SECONDS)
        assert not writes.unexpected, writes.unexpected[:5]

        log = await _read_from_the_start(clients[0], admin_token, limit=7)
        bobs_log = await _read_from_the_start(clients[-1], bob_token, limit=5)
        grantees_logs = {
            grantee: await _read_from_the_start(clients[-1], servers[0].tokens[grantee], limit=3)
            for grantee in GRANTEES
        }
        stored = {resource: await _list_everything(clients[-1], admin_token, resource) for resource in RESOURCES}
        history_sample = rng.sample(log, min(30, len(log)))
        histories = {
            (change["resource"], change["id"]): (
                await clients[0].get(
                    f"{PATHS[change['resource']]}/{change['id']}/history",
                    params={"pageSize": "100"},
                    headers={"Authorization": f"Bearer {admin_token}"},
                )
            ).json()
            for change in history_sample
        }
    return Run(writes, admin, bob, grantees, log, bobs_log, grantees_logs, stored, histories)


@pytest.mark.parametrize("write_seconds", WRITE_SECONDS)
@pytest.mark.parametrize("database", ["postgresql", "sqlite"])
def test_a_polling_reader_sees_every_change_once_in_commit_order(
    database: str, tmp_path: Path, write_seconds: float
) -> None:
    seed = random.randrange(2**32)
    print(f"feed-order seed {seed}")
    started = time.monotonic()
    with _cluster(database, tmp_path) as servers:
        run = asyncio.run(_exercise(servers, random.Random(seed), write_seconds))
    writes, admin, bob, log = run.writes, run.admin, run.bob, run.log

    # The reader that polled while the writers wrote has the whole log, each change once, in the same order.
    assert [change["cursor"] for change in admin.changes] == [change["cursor"] for change in log]
    assert admin.changes == log
    assert len({change["cursor"] for change in log}) == len(log)
    # A reminder shares its version with a write of the dose, and each reminder is there once.
    assert len({(change["resource"], change["id"], change["version"], _reminder(change)) for change in log}) == len(log)

    # Every acknowledged write is in it exactly once, as the client was told.
    kept = collections.Counter(
        (change["resource"], change["action"], change["id"], canonical(change["record"])) for change in log
    )
    for resource, action, record_id, body in writes.acknowledged:
        # Twice only when two writes left the record alike, a vaccination given back to the owner it had (its
        # pet went to someone else and back): each has a version of its own, and no version is there twice.
        assert kept[(resource, action, record_id, canonical(body))] == 1 or action == "replaced", (action, body)
        assert kept[(resource, action, record_id, canonical(body))] >= 1, (resource, action, body)

    # Replayed in its order, the log is consistent at every step and ends in what the database holds.
    records, before = _replay(log)
    assert {
        resource: {record_id: _as_now(records, resource, record) for record_id, record in kept.items()}
        for resource, kept in records.items()
    } == run.stored

    # The non-admin saw exactly the changes they may see, in the same order, while polling and afterwards.
    visible = [change for change, previous in zip(log, before, strict=True) if _sees(BOB, change, previous)]
    assert bob.changes == visible
    assert run.bobs_log == visible

    # Each grantee saw exactly what a share let them see while it granted, in the same order.
    windows = _windows(log)
    granted = {}
    for grantee, names in GRANTEES.items():
        granted[grantee] = [change for index, change in enumerate(log) if _granted(names, windows, index, change)]
        assert run.grantees[grantee].changes == granted[grantee], grantee
        assert run.grantees_logs[grantee] == granted[grantee], grantee

    # A record's history is its changes, oldest first.
    for (resource, record_id), history in run.histories.items():
        assert history["items"] == [one for one in log if (one["resource"], one["id"]) == (resource, record_id)]

    acknowledged = collections.Counter(f"{resource} {action}" for resource, action, _, _ in writes.acknowledged)
    print(
        f"{database}: {len(log)} changes ({len(writes.acknowledged)} acknowledged writes: {dict(acknowledged)}); "
        f"bob sees {len(visible)}, {', '.join(f'{one.split()[0]} {len(seen)}' for one, seen in granted.items())}; "
        f"{len(windows)} shares; admin polled {admin.pages} pages ({admin.short_pages} short), bob {bob.pages}; "
        f"statuses {dict(writes.statuses)}; {time.monotonic() - started:.1f} s"
    )
    assert len(log) > MIN_WRITES
    assert {action for _, action, _, _ in writes.acknowledged} == {"created", "replaced", "deleted"}
    assert {("pet-shares", "created"), ("pet-shares", "deleted")} <= {
        (one, action) for one, action, _, _ in writes.acknowledged
    }
    assert writes.statuses["vet vaccinates 201"] > 0
    assert all(len(seen) > len([one for one in log if one["resource"] == "vaccines"]) for seen in granted.values())
