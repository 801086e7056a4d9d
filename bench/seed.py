"""Bulk-load pets, a vaccine catalogue and pet vaccinations through the storage layer: the store's own inserts
and kept counts, in large batches, each record with the change that created it in the change log (so that its
history and the change feed hold what a service that had taken these writes one by one would hold).

Usage: .venv/bin/python bench/seed.py --database-url URL --rows 1000000 --owner bench@example.com --ids-file F
       [--vaccinations 1000000 --vaccinated-ids-file G] [--catalogue] [--vaccine-ids-file H]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import is_sqlite, migrate
from petrecords.pets import PETS
from petrecords.resources.declaration import Resource
from petrecords.resources.fields import DAY_MS
from petrecords.resources.service import etag_of
from petrecords.resources.wire import show
from petrecords.store.base import NewChange, Row
from petrecords.store.sql import SqlTransaction
from petrecords.tables import SHARED
from petrecords.text import match_key
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES

PET_TYPES = ("Dog", "Cat", "Capybara", "Other")
CLINIC_FIELDS_UNSET = dict.fromkeys(
    ("birth_date", "sex", "neutered", "breed", "breed_key", "microchip", "color", "deceased_at")
)
"""The columns of a pet record that a clinic fills in, left empty as most owners leave them."""
CATALOGUE_FIELDS_UNSET = dict.fromkeys(("group_name", "group_key", "manufacturer"))
"""The columns of a vaccine that the seeded catalogue leaves empty."""
DOSE_FIELDS_UNSET: Row = {
    **dict.fromkeys(
        ("lot_number", "lot_expires_on", "dose_type", "veterinarian", "veterinarian_licence", "clinic", "rabies_tag")
    ),
    "status": "completed",
    "status_reason": None,
}
"""What a clinic records of a dose beyond the vaccine and the dates, left empty as an owner's app leaves it."""
BATCH = 10_000
WORDS = ("rex", "tom", "bella", "max", "luna", "coco", "milo", "daisy", "oscar", "ruby")
CATALOGUE_ADMIN = "vet-admin@example.com"
# (pet type, vaccine, days of protection): the catalogue covers every default pet type that is vaccinated,
# not only the four the seeded pets have, as a real one would.
CATALOGUE = (
    ("Dog", "Rabies", 365),
    ("Dog", "Rabies (3-year)", 1095),
    ("Dog", "DHPP", 1095),
    ("Dog", "Leptospirosis", 365),
    ("Dog", "Bordetella", 180),
    ("Dog", "Canine influenza", 365),
    ("Dog", "Lyme disease", 365),
    ("Cat", "Rabies", 365),
    ("Cat", "FVRCP", 1095),
    ("Cat", "Feline leukemia", 365),
    ("Cat", "Chlamydophila", 365),
    ("Cat", "Bordetella", 365),
    ("Capybara", "Rabies", 365),
    ("Capybara", "Leptospirosis", 365),
    ("Capybara", "Tetanus", 1095),
    ("Other", "Rabies", 365),
    ("Other", "Tetanus", 1095),
    ("Other", "Clostridium", 365),
    ("Bird", "Polyomavirus", 365),
    ("Bird", "Pacheco's disease", 365),
    ("Fish", "Koi herpesvirus", 365),
    ("Rabbit", "Myxomatosis", 365),
    ("Rabbit", "RHDV1", 365),
    ("Rabbit", "RHDV2", 365),
    ("GuineaPig", "Bordetella", 365),
    ("Ferret", "Rabies", 365),
    ("Ferret", "Canine distemper", 365),
    ("Horse", "Tetanus", 365),
    ("Horse", "Eastern/Western encephalomyelitis", 365),
    ("Horse", "West Nile virus", 365),
    ("Horse", "Rabies", 365),
    ("Horse", "Equine influenza", 180),
    ("Horse", "Rhinopneumonitis", 180),
)
MAX_DOSES_PER_PET = 7
"""A vaccinated pet has 1 to this many doses (4 on average), of 1 to 3 of its type's vaccines."""


def _uuid7(milliseconds: int) -> uuid.UUID:
    value = (milliseconds & ((1 << 48) - 1)) << 80 | 0x7 << 76 | random.getrandbits(12) << 64
    value |= 0b10 << 62 | random.getrandbits(62)
    return uuid.UUID(int=value)


def pet_row(rng: random.Random, index: int, created: int, owner: str) -> Row:
    """The `index`th seeded pet, created at `created` (epoch ms) by its owner."""
    name = f"{rng.choice(WORDS)} {index} {rng.choice('abcdefgh')}"
    return {
        "id": _uuid7(created),
        "created_at": created,
        "created_by": owner,
        "modified_at": created,
        "modified_by": owner,
        "owner_id": owner,
        "name": name,
        "name_key": match_key(name),
        "pet_type": rng.choice(PET_TYPES),
        **CLINIC_FIELDS_UNSET,
        "revision": 1,
    }


def _catalogue(now: int) -> list[Row]:
    vaccines = []
    for index, (pet_type, name, duration) in enumerate(CATALOGUE):
        created = now - 10 * 365 * DAY_MS + index
        description = f"{name} for {pet_type.lower()}s: {duration} days of protection."
        vaccines.append(
            {
                "id": _uuid7(created),
                "created_at": created,
                "created_by": CATALOGUE_ADMIN,
                "modified_at": created,
                "modified_by": CATALOGUE_ADMIN,
                "name": name,
                "name_key": match_key(name),
                "description": description,
                "description_key": match_key(description),
                "pet_type": pet_type,
                "duration": duration,
                "revision": 1,
                **CATALOGUE_FIELDS_UNSET,
            }
        )
    return vaccines


def _doses(rng: random.Random, pet: Row, count: int, vaccines: list[Row], now: int) -> list[Row]:
    """`count` doses for `pet`: chains of repeated doses of 1 to 3 of its type's vaccines, each dose given about
    when the one before fell due (early by up to two weeks, late by up to two months), the last one of each chain
    at most half again its protection ago, so that some pets are up to date and some have lapsed. Every dose but
    the last of a chain is overdue by the contract's measure (dueAt < now), as a real history is."""
    chosen = rng.sample(vaccines, min(len(vaccines), rng.randint(1, 3), count))
    lengths = [1] * len(chosen)
    for _ in range(count - len(chosen)):
        lengths[rng.randrange(len(chosen))] += 1
    doses = []
    for vaccine, length in zip(chosen, lengths, strict=True):
        protection = vaccine["duration"] * DAY_MS
        applied = now - rng.randrange(protection * 3 // 2)
        for _ in range(length):
            doses.append((vaccine, applied))
            applied -= protection + rng.randrange(-14 * DAY_MS, 60 * DAY_MS)
    rows = []
    for order, (vaccine, applied) in enumerate(doses):
        # Written just after the pet, as when a pet's history is entered on registration.
        created = pet["created_at"] + order
        rows.append(
            {
                "id": _uuid7(created),
                "created_at": created,
                "created_by": pet["owner_id"],
                "modified_at": created,
                "modified_by": pet["owner_id"],
                "owner_id": pet["owner_id"],
                "pet_id": pet["id"],
                "vaccine_id": vaccine["id"],
                "applied_at": applied,
                "due_at": applied + vaccine["duration"] * DAY_MS,
                "notes": None,
                "revision": 1,
                **DOSE_FIELDS_UNSET,
            }
        )
    return rows


def created_changes(resource: Resource, rows: list[Row]) -> list[dict[str, Any]]:
    """The "created" change of each row, as the service keeps it in the write's transaction (version 1, the record
    as shown after the write, filed under its owner and the record others see it through): the parameters of the
    change log's insert."""
    owner_column = resource.ownership.column
    key_column, grantee_column = resource.shared_through
    return [
        msgspec.structs.asdict(
            NewChange(
                resource=resource.name,
                record_id=row["id"],
                action="created",
                version=1,
                at=row["created_at"],
                by=row["created_by"],
                owner_before=None,
                owner_after=SHARED if owner_column is None else row[owner_column],
                record=msgspec.json.encode(show(resource, row)),
                shared_key=None if key_column is None else row[key_column],
                grantee=None if grantee_column is None else row[grantee_column],
            )
        )
        for row in rows
    ]


async def keep_created(tx: SqlTransaction, resource: Resource, rows: list[Row]) -> None:
    """The "created" change of each row, kept in `tx` (see created_changes)."""
    await tx.execute(tx.change_insert, created_changes(resource, rows))


class Seeded:
    def __init__(self) -> None:
        self.pet_lines: list[str] = []
        self.vaccinated_pets: list[str] = []
        self.vaccine_ids: list[str] = []
        self.vaccinations = 0
        self.overdue = 0
        self.vaccination_seconds = 0.0


async def settle_postgresql(database_url: str) -> None:
    """What PostgreSQL's background work does after a bulk load or a burst of writes, done at once, between
    measurements rather than during one: autovacuum's planner statistics and visibility map (which lets counts read
    only the index), and the checkpoint that the writes' WAL sets off, which spreads its writes over the next half
    minute or more (one of 29 s ran through a run at 1M whose get by id's p99 beside long searches came out 16 ×
    its p99 alone). Autovacuum wakes once a minute: after a scenario's writes, it would do its part during the next
    scenario's measurement, at a moment of its own."""
    connection = await asyncpg.connect(database_url.replace("+asyncpg", ""))
    try:
        await connection.execute("VACUUM ANALYZE")
        try:
            await connection.execute("CHECKPOINT")
        except asyncpg.InsufficientPrivilegeError:
            print("not a superuser: no CHECKPOINT after the writes, whose pages may be written during a measurement")
    finally:
        await connection.close()


async def seed(settings: Settings, *, rows: int, owner: str, sample: int, vaccinations: int, catalogue: bool) -> Seeded:
    """`rows` pets of `owner`, created one millisecond apart and ending now, and `vaccinations` doses spread over
    a random subset of them (about one pet in four per million doses over a million pets). Returns `sample` of the
    pets' ids and ETags, one "id etag" per line, shuffled, for the load scripts, and as many ids of vaccinated
    pets. The vaccine catalogue is seeded with any vaccinations, or alone when `catalogue` is set."""
    if vaccinations > rows * MAX_DOSES_PER_PET:
        raise SystemExit(f"at most {MAX_DOSES_PER_PET} vaccinations per pet: {rows * MAX_DOSES_PER_PET}")
    store = open_store(settings)
    rng = random.Random(rows)
    now = int(time.time() * 1000)
    first_ms = now - rows
    seeded = Seeded()
    kept: list[Row] = []
    vaccinated: list[uuid.UUID] = []
    by_type: dict[str, list[Row]] = {}
    vaccines: list[Row] = []
    remaining = vaccinations
    try:
        if vaccinations or catalogue:
            vaccines = _catalogue(now)
            for vaccine in vaccines:
                by_type.setdefault(vaccine["pet_type"], []).append(vaccine)
            async with store.transaction(write=True) as tx:
                await tx.insert_many(VACCINES.collection, vaccines)
                await keep_created(tx, VACCINES, vaccines)
            seeded.vaccine_ids = [f"{vaccine['id']}\n" for vaccine in vaccines]
        vaccines_by_id = {vaccine["id"]: vaccine for vaccine in vaccines}
        for start in range(0, rows, BATCH):
            batch = []
            for index in range(start, min(start + BATCH, rows)):
                created = first_ms + index
                batch.append(pet_row(rng, index, created, owner))
            started = time.perf_counter()
            doses: list[Row] = []
            for offset, pet in enumerate(batch):
                if remaining == 0:
                    break
                pets_left = rows - start - offset
                # The chance tracks what is left, so that the total comes out exact without a second pass.
                if pets_left > 1 and rng.random() >= remaining / (pets_left * (MAX_DOSES_PER_PET + 1) / 2):
                    continue
                count = remaining if pets_left == 1 else min(remaining, rng.randint(1, MAX_DOSES_PER_PET))
                doses.extend(_doses(rng, pet, count, by_type[pet["pet_type"]], now))
                remaining -= count
                vaccinated.append(pet["id"])
            seeded.vaccination_seconds += time.perf_counter() - started
            async with store.transaction(write=True) as tx:
                await tx.insert_many(PETS.collection, batch)
                await keep_created(tx, PETS, batch)
                if doses:
                    started = time.perf_counter()
                    await tx.insert_many(PET_VACCINATIONS.collection, doses)
                    shown = [{**dose, "vaccine": vaccines_by_id[dose["vaccine_id"]]} for dose in doses]
                    await keep_created(tx, PET_VACCINATIONS, shown)
                    seeded.vaccination_seconds += time.perf_counter() - started
            seeded.vaccinations += len(doses)
            seeded.overdue += sum(1 for dose in doses if dose["due_at"] < now)
            kept.extend(rng.sample(batch, min(len(batch), max(1, sample * len(batch) // rows))))
    finally:
        await store.close()
    if not is_sqlite(settings.resolved_database_url):
        await settle_postgresql(settings.resolved_database_url)
    rng.shuffle(kept)
    seeded.pet_lines = [f"{pet['id']} {etag_of(PETS, pet)}\n" for pet in kept]
    seeded.vaccinated_pets = [f"{pet_id}\n" for pet_id in rng.sample(vaccinated, min(sample, len(vaccinated)))]
    return seeded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--owner", default="bench@example.com")
    parser.add_argument("--ids-file", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=100_000)
    parser.add_argument("--vaccinations", type=int, default=0, help="doses over the pets (0: no catalogue either)")
    parser.add_argument("--vaccinated-ids-file", type=Path, help="ids of pets that have vaccinations, one a line")
    parser.add_argument("--catalogue", action="store_true", help="seed the vaccine catalogue even with no vaccinations")
    parser.add_argument("--vaccine-ids-file", type=Path, help="ids of the seeded vaccines, one a line")
    parser.add_argument("--report", type=Path, help="also write the seeding figures here, as JSON")
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url, data_dir=args.data_dir)
    started = time.perf_counter()
    migrate(settings)
    seeded = asyncio.run(
        seed(
            settings,
            rows=args.rows,
            owner=args.owner,
            sample=args.sample,
            vaccinations=args.vaccinations,
            catalogue=args.catalogue,
        )
    )
    elapsed = time.perf_counter() - started
    args.ids_file.write_text("".join(seeded.pet_lines))
    if args.vaccinated_ids_file is not None:
        args.vaccinated_ids_file.write_text("".join(seeded.vaccinated_pets))
    if args.vaccine_ids_file is not None:
        args.vaccine_ids_file.write_text("".join(seeded.vaccine_ids))
    figures: dict[str, Any] = {"seconds": round(elapsed, 1), "pets": args.rows}
    message = f"seeded {args.rows} pets in {elapsed:.1f} s"
    if seeded.vaccinations:
        figures.update(
            vaccinations=seeded.vaccinations,
            overdue=seeded.overdue,
            vaccination_seconds=round(seeded.vaccination_seconds, 1),
            vaccines=len(CATALOGUE),
        )
        message += (
            f" (of which {seeded.vaccination_seconds:.1f} s for {seeded.vaccinations} vaccinations of"
            f" {len(CATALOGUE)} vaccines, {seeded.overdue} overdue now)"
        )
    print(message, file=sys.stderr)
    if args.report is not None:
        args.report.write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
