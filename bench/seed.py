"""Bulk-load pets through the storage layer: the store's own inserts and counts, in large batches.

Usage: .venv/bin/python bench/seed.py --database-url URL --rows 1000000 --owner bench@example.com --ids-file F
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
import uuid
from pathlib import Path

import asyncpg

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import is_sqlite, migrate
from petrecords.pets import PETS
from petrecords.resources.service import etag_of
from petrecords.store.base import Row
from petrecords.text import match_key

PET_TYPES = ("Dog", "Cat", "Capybara", "Other")
BATCH = 10_000
WORDS = ("rex", "tom", "bella", "max", "luna", "coco", "milo", "daisy", "oscar", "ruby")


def _uuid7(milliseconds: int) -> uuid.UUID:
    value = (milliseconds & ((1 << 48) - 1)) << 80 | 0x7 << 76 | random.getrandbits(12) << 64
    value |= 0b10 << 62 | random.getrandbits(62)
    return uuid.UUID(int=value)


async def seed(settings: Settings, *, rows: int, owner: str, sample: int) -> str:
    """`rows` pets of `owner`, created one millisecond apart and ending now. Returns `sample` of their
    ids and ETags, one "id etag" per line, shuffled, for the load scripts."""
    store = open_store(settings)
    rng = random.Random(rows)
    first_ms = int(time.time() * 1000) - rows
    kept: list[Row] = []
    try:
        for start in range(0, rows, BATCH):
            batch = []
            for index in range(start, min(start + BATCH, rows)):
                created = first_ms + index
                name = f"{rng.choice(WORDS)} {index} {rng.choice('abcdefgh')}"
                pet = {
                    "id": _uuid7(created),
                    "created_at": created,
                    "created_by": owner,
                    "modified_at": created,
                    "modified_by": owner,
                    "owner_id": owner,
                    "name": name,
                    "name_key": match_key(name),
                    "pet_type": rng.choice(PET_TYPES),
                    "revision": 1,
                }
                batch.append(pet)
            async with store.transaction(write=True) as tx:
                await tx.insert_many(PETS.collection, batch)
            kept.extend(rng.sample(batch, min(len(batch), max(1, sample * len(batch) // rows))))
    finally:
        await store.close()
    if not is_sqlite(settings.resolved_database_url):
        # What autovacuum would do after a bulk load: planner statistics and the visibility map, which lets
        # counts read only the index.
        connection = await asyncpg.connect(settings.resolved_database_url.replace("+asyncpg", ""))
        try:
            await connection.execute("VACUUM ANALYZE pets, record_counts")
        finally:
            await connection.close()
    rng.shuffle(kept)
    return "".join(f"{pet['id']} {etag_of(PETS, pet)}\n" for pet in kept)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--owner", default="bench@example.com")
    parser.add_argument("--ids-file", type=Path, required=True)
    parser.add_argument("--sample", type=int, default=100_000)
    args = parser.parse_args()
    settings = Settings(database_url=args.database_url, data_dir=args.data_dir)
    started = time.perf_counter()
    migrate(settings)
    args.ids_file.write_text(asyncio.run(seed(settings, rows=args.rows, owner=args.owner, sample=args.sample)))
    print(f"seeded {args.rows} pets in {time.perf_counter() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
