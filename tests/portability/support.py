"""What the data command tests share: databases, the command line, and a service's records as its API shows them."""

from __future__ import annotations

import asyncio
import datetime
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from litestar.testing import TestClient

from petrecords.app import create_app, open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.registry import RESOURCES
from petrecords.reminders import Reminders
from tests.support import ADMIN, ALICE, BOB, SECRET, auth, token

PETRECORDS = Path(sys.executable).parent / "petrecords"
USERS = (ALICE, BOB)
VET = "vet@clinic.example"
CLINIC = "clinic-42"


def as_vet() -> dict[str, str]:
    return {"Authorization": f"Bearer {token(VET, groups=[CLINIC])}"}


def settings_for(url: str, data_dir: Path) -> Settings:
    return Settings(database_url=url, data_dir=data_dir, auth_secret=SECRET, rate_limit=0, access_log=False)


def migrated(url: str, data_dir: Path) -> Settings:
    settings = settings_for(url, data_dir)
    migrate(settings)
    return settings


def command(url: str, data_dir: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`petrecords ARGS` against the database at `url`, as an operator runs it (output not a terminal)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    env.update(PETRECORDS_DATABASE_URL=url, PETRECORDS_DATA_DIR=str(data_dir))
    return subprocess.run(
        [str(PETRECORDS), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def lines_after_first(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()[1:]


def _headers(user: str, admin: bool) -> dict[str, str]:
    return as_vet() if user == VET else auth(user, admin=admin)


def _pages(client: TestClient[Any], path: str, user: str, admin: bool) -> Iterator[dict[str, Any]]:
    page = 1
    while True:
        response = client.get(path, params={"pageIndex": page, "pageSize": 100}, headers=_headers(user, admin))
        assert response.status_code == 200, response.text
        body = response.json()
        yield from body["items"]
        if not body["hasNextPage"]:
            return
        page += 1


def feed(client: TestClient[Any], user: str, *, admin: bool = False) -> list[dict[str, Any]]:
    """Every change `user` may see, in the feed's order, without the cursors (which differ between databases)."""
    items: list[dict[str, Any]] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if after is not None:
            params["after"] = after
        response = client.get("/v1/changes", params=params, headers=_headers(user, admin))
        assert response.status_code == 200, response.text
        body = response.json()
        if not body["items"]:
            return items
        items.extend({k: v for k, v in item.items() if k != "cursor"} for item in body["items"])
        after = body["nextCursor"]


def view(settings: Settings) -> dict[str, Any]:
    """Everything the API shows of a database: each record with its ETag, each record's history (deleted ones
    too), and the feed of the administrator, of each user, and of a vet whom shares let see some."""
    with TestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]
        shown: dict[str, Any] = {"feed": feed(client, ADMIN, admin=True)}
        for user in (*USERS, VET):
            shown[f"feed of {user}"] = feed(client, user)
        # What the search indexes find (SQLite's FTS5 tables, PostgreSQL's trigram indexes), and the kept counts.
        searches = ("/v1/pets?search=ïcod", "/v1/vaccines?search=leuk")
        totals = tuple(f"{resource.path}?pageSize=1" for resource in RESOURCES.resources)
        # The overdue lists' totals, from the counts kept by due day (as a load writes them, or writes kept them).
        due = (
            "/v1/pet-vaccination?dueTo=2026-06-01T00:00:00Z&pageSize=1",
            "/v1/pet-vaccination?dueFrom=2026-02-01T00:00:00Z&pageSize=1",
        )
        # What is due, from the kept due rows and their counts (as a load derives them, or writes kept them).
        due_lists = ("/v1/due?before=2100-01-01T00:00:00Z", "/v1/due?before=2100-01-01T00:00:00Z&pageSize=1")
        for path in (*searches, *totals, *due, *due_lists, "/v1/pets?petType=Dog&pageSize=1"):
            for user, admin in ((ADMIN, True), *((user, False) for user in (*USERS, VET))):
                response = client.get(path, headers=_headers(user, admin))
                assert response.status_code == 200
                shown[f"{path} for {user}"] = response.json()
        ever = {(change["resource"], change["id"]) for change in shown["feed"]}
        for resource in RESOURCES.resources:
            for record in _pages(client, resource.path, ADMIN, True):
                response = client.get(f"{resource.path}/{record['id']}", headers=auth(ADMIN, admin=True))
                assert response.status_code == 200
                shown[f"{resource.name} {record['id']}"] = (response.json(), response.headers["etag"])
        for pet in _pages(client, "/v1/pets", ADMIN, True):
            response = client.get(f"/v1/pets/{pet['id']}/vaccination-status", headers=auth(ADMIN, admin=True))
            assert response.status_code == 200
            shown[f"status of {pet['id']}"] = {k: v for k, v in response.json().items() if k != "asOf"}
        for name, record_id in sorted(ever):
            path = f"/v1/{name}/{record_id}/history"
            history = _pages(client, path, ADMIN, True)
            shown[f"history {name} {record_id}"] = [
                {k: v for k, v in item.items() if k != "cursor"} for item in history
            ]
        return shown


async def _remind(settings: Settings, *, at: datetime.datetime) -> int:
    store = open_store(settings)
    try:
        return await Reminders(settings, lambda: store).remind(now=int(at.timestamp() * 1000))
    finally:
        await store.close()


def seed(settings: Settings) -> None:
    """Records of every resource, written as clients write them: creates, a rename, a transfer (the pet's
    vaccinations follow it, its shares go), a change of a vaccine (its vaccinations' ETags change), shares given,
    changed and taken back (the vet sees what they granted while they did), deletions, and a pet a group (the vet's
    clinic) owns."""
    admin = auth(ADMIN, admin=True)
    with TestClient(app=create_app(settings)) as client:  # type: ignore[arg-type]

        def post(path: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
            response = client.post(path, json=body, headers=headers)
            assert response.status_code == 201, response.text
            created: dict[str, Any] = response.json()
            return created

        rabies = post(
            "/v1/vaccines",
            {"name": "Rabies", "petType": "Dog", "duration": 365, "group": "Rabies", "manufacturer": "Zoetis"},
            admin,
        )
        felv = post(
            "/v1/vaccines", {"name": "FeLV", "description": "Feline\tleukemia", "petType": "Cat", "duration": 30}, admin
        )
        pets = []
        for index, (owner, pet_type) in enumerate([(ALICE, "Dog"), (ALICE, "Cat"), (BOB, "Dog"), (ALICE, "Dog")]):
            clinic = {"birthDate": "2020-02-29", "sex": "Female", "neutered": True, "breed": "Beagle"}
            body = {"name": f"Pet Ünïcode {index}", "petType": pet_type, **(clinic if index % 2 else {})}
            if index == 1:
                body["microchip"] = "982 000 123 456 789"
            if index == 2:
                body.update(microchip="0a1b-2c3d-4e", color="Tricolour", deceasedAt="2026-06-01")
            pets.append(post("/v1/pets", body, auth(owner)))
        shots = []
        for pet in pets:
            vaccine = rabies if pet["petType"] == "Dog" else felv
            body = {
                "petId": pet["id"],
                "vaccineId": vaccine["id"],
                "appliedAt": "2026-01-02T03:04:05.678Z",
                "notes": "ok",
            }
            if vaccine is rabies:
                certificate = {"lotNumber": "A1 b/2", "lotExpiresOn": "2026-12-31", "doseType": "primary"}
                body.update(
                    certificate, veterinarian="Dr. Ruiz", clinic="Riverside\nSpringfield", rabiesTag=f"r-{len(shots)}"
                )
            shots.append(post("/v1/pet-vaccination", body, auth(pet["ownerId"])))
        # A correction: the dose stays, marked in error, which frees its tag for the next.
        in_error = {"status": "entered-in-error", "statusReason": "Another dog's."}
        assert (
            client.patch(f"/v1/pet-vaccination/{shots[0]['id']}", json=in_error, headers=auth(ALICE)).status_code == 200
        )
        # Reminders (contract section 15), on the day the last dog's dose comes due-soon: the change log holds them.
        assert asyncio.run(_remind(settings, at=datetime.datetime(2026, 12, 3, 12, tzinfo=datetime.UTC))) == 1
        care = post(
            "/v1/pet-shares", {"petId": pets[1]["id"], "grantee": f"group:{CLINIC}", "access": "care"}, auth(ALICE)
        )
        read = {"petId": pets[0]["id"], "grantee": VET, "access": "read", "expiresAt": "2999-01-01T00:00:00.000Z"}
        post("/v1/pet-shares", read, auth(ALICE))
        given = {"petId": pets[1]["id"], "vaccineId": felv["id"], "appliedAt": "2026-03-04T05:06:07.890Z"}
        assert client.post("/v1/pet-vaccination", json=given, headers=as_vet()).status_code == 201
        lowered = {"petId": pets[1]["id"], "grantee": f"group:{CLINIC}", "access": "read"}
        assert client.put(f"/v1/pet-shares/{care['id']}", json=lowered, headers=auth(ALICE)).status_code == 200
        assert client.delete(f"/v1/pet-shares/{care['id']}", headers=auth(ALICE)).status_code == 200
        # After the share went: the vet's feed holds what they did under it, not this rename.
        named = {"name": "Whiskers", "petType": "Cat", "birthDate": "2020-02-29"}
        assert client.put(f"/v1/pets/{pets[1]['id']}", json=named, headers=auth(ALICE)).status_code == 200
        renamed = {"name": "Rex", "petType": "Dog"}
        assert client.put(f"/v1/pets/{pets[0]['id']}", json=renamed, headers=auth(ALICE)).status_code == 200
        moved = {"name": "Rex", "petType": "Dog", "ownerId": BOB}
        assert client.put(f"/v1/pets/{pets[0]['id']}", json=moved, headers=admin).status_code == 200
        longer = {"name": "Rabies", "petType": "Dog", "duration": 730}
        assert client.put(f"/v1/vaccines/{rabies['id']}", json=longer, headers=admin).status_code == 200
        assert client.delete(f"/v1/pet-vaccination/{shots[1]['id']}", headers=auth(ALICE)).status_code == 200
        assert client.delete(f"/v1/pets/{pets[3]['id']}", headers=auth(ALICE)).status_code == 200
        # A clinic's own patient: the vet registers it as the clinic's, records a dose, and shares it with Bob.
        patient = post("/v1/pets", {"name": "Bella", "petType": "Cat", "ownerId": f"group:{CLINIC}"}, as_vet())
        dose = {"petId": patient["id"], "vaccineId": felv["id"], "appliedAt": "2026-04-05T06:07:08.901Z"}
        post("/v1/pet-vaccination", dose, as_vet())
        post("/v1/pet-shares", {"petId": patient["id"], "grantee": BOB, "access": "read"}, as_vet())


def _synthetic_pet(index: int) -> dict[str, Any]:
    created = "2026-01-01T00:00:00.000Z"
    return {
        "id": f"01900000-0000-7000-8000-{index:012x}",
        "createdAt": created,
        "createdBy": ALICE,
        "modifiedAt": created,
        "modifiedBy": ALICE,
        "ownerId": f"owner{index % 1000}@example.com",
        "name": f"Pet {index}",
        "petType": "Dog" if index % 3 else "Cat",
        "birthDate": f"20{index % 25:02d}-0{index % 9 + 1}-1{index % 10}" if index % 4 else None,
        "sex": ("female", "male", "unknown", None)[index % 4],
        "neutered": (True, False, None)[index % 3],
        "breed": f"Breed {index % 50}" if index % 5 else None,
        "microchip": f"982{index:012d}" if index % 2 else None,
        "color": f"Color {index % 7}" if index % 7 else None,
        "deceasedAt": "2026-01-01" if index % 11 == 0 else None,
    }


def synthetic_export(path: Path, pets: int) -> None:
    """An export of `pets` pets, each with its one change, written fast (for loads that take a while)."""
    encode = msgspec.json.Encoder().encode
    with path.open("wb", buffering=1 << 20) as out:
        out.write(b'{"format":"petrecords-export","version":1,"exportedAt":"2026-01-01T00:00:00.000Z"}\n')
        for index in range(pets):
            out.write(encode({"resource": "pets", "record": {**_synthetic_pet(index), "version": 1}}) + b"\n")
        for index in range(pets):
            record = _synthetic_pet(index)
            change = {
                "resource": "pets",
                "id": record["id"],
                "action": "created",
                "version": 1,
                "at": record["createdAt"],
                "by": ALICE,
                "record": record,
            }
            out.write(encode({"change": change}) + b"\n")
