"""Reminders (contract section 15): `--doses` doses whose due-soon moment comes in the same second, on a running
`petrecords serve`, and how long its reminders duty takes to write them all; get by id measured before the moment and
across it, in the same run.

The database (SQLite) is seeded with the owner's `--rows` pets (get by id reads them, as in bench/run.py), the
vaccine catalogue, and `--doses` pets of 1,000 other owners with one dose each, due `PETRECORDS_DUE_SOON_DAYS` days
after the moment: the due rows are derived from them as a load derives them (bench/due.py). The moment is set
`--lead` seconds after the seeding ends, so that the server has started and get by id has been measured alone
before it comes.

Then, with the server's defaults (2 workers × 2 threads, the reminders duty every 10 s in each worker): wrk reads
get by id for `--duration` s (before), sleeps until 2 s before the moment, and reads it again for `--across` s while
the reminders are written; the count of reminders in the change log is polled every 0.2 s meanwhile, and the time
from the moment to the last one is reported (the contract: within 60 s of it).

Usage: .venv/bin/python bench/reminders.py [--doses 20000] [--rows 2000] [--lead 40] [--duration 10] [--across 40]
       [--json reminders.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pysqlite3.dbapi2 as sqlite3

from due import derive_due
from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.pets import PETS
from petrecords.store.base import PageQuery, SortKey
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from run import BIN, OWNER, free_port, print_line, process, run_wrk, server_env, sqlite_url, wait_until_answering
from seed import BATCH, DOSE_FIELDS_UNSET, keep_created, pet_row, seed
from shares import token

DAY_MS = 86_400_000
OWNERS = 1_000
DUE_SOON_DAYS = 30
"""The default of PETRECORDS_DUE_SOON_DAYS, which the server keeps."""


async def seed_coming_due(settings: Settings, *, doses: int, moment: int) -> None:
    """`doses` pets of OWNERS owners, each with one dose whose due-soon moment is `moment` (within its second)."""
    store = open_store(settings)
    rng = random.Random(doses)
    try:
        async with store.transaction(write=False) as tx:
            every_vaccine = PageQuery(conditions=(), sort=(SortKey("id"),), limit=1000, offset=0)
            vaccines = list(await tx.list(VACCINES.collection, every_vaccine))
        by_type: dict[str, list[dict[str, Any]]] = {}
        for vaccine in vaccines:
            by_type.setdefault(vaccine["pet_type"], []).append(vaccine)
        created = moment - 400 * DAY_MS
        for start in range(0, doses, BATCH):
            pets = [
                pet_row(rng, index, created + index, f"owner{index % OWNERS}@example.com")
                for index in range(start, min(start + BATCH, doses))
            ]
            given = []
            for pet in pets:
                vaccine = rng.choice(by_type[pet["pet_type"]])
                due_at = moment + DUE_SOON_DAYS * DAY_MS + rng.randrange(1000)
                given.append(
                    {
                        **{key: pet[key] for key in ("created_at", "created_by", "modified_at", "modified_by")},
                        "id": pet_row(rng, 0, pet["created_at"] + 1, OWNER)["id"],
                        "owner_id": pet["owner_id"],
                        "pet_id": pet["id"],
                        "vaccine_id": vaccine["id"],
                        "applied_at": due_at - vaccine["duration"] * DAY_MS,
                        "due_at": due_at,
                        "notes": None,
                        "revision": 1,
                        **DOSE_FIELDS_UNSET,
                    }
                )
            async with store.transaction(write=True) as tx:
                await tx.insert_many(PETS.collection, pets)
                await keep_created(tx, PETS, pets)
                await tx.insert_many(PET_VACCINATIONS.collection, given)
                vaccines_by_id = {vaccine["id"]: vaccine for vaccine in vaccines}
                shown = [{**dose, "vaccine": vaccines_by_id[dose["vaccine_id"]]} for dose in given]
                await keep_created(tx, PET_VACCINATIONS, shown)
    finally:
        await store.close()


def reminders_written(database: Path) -> int:
    connection = sqlite3.connect(database, timeout=5)
    try:
        return int(connection.execute("SELECT count(*) FROM changes WHERE action = 'due-soon'").fetchone()[0])
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doses", type=int, default=20_000, help="doses whose due-soon moment comes at once")
    parser.add_argument("--rows", type=int, default=2_000, help="the owner's pets (get by id reads them)")
    parser.add_argument("--lead", type=int, default=40, help="seconds from the end of the seeding to the moment")
    parser.add_argument("--duration", type=int, default=10, help="seconds of get by id before the moment")
    parser.add_argument("--across", type=int, default=40, help="seconds of get by id from 2 s before the moment")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="petrecords-reminders-"))
    report: dict[str, Any] = {"database": "sqlite", "doses": args.doses, "load_average_before": os.getloadavg()[0]}
    try:
        url = sqlite_url(work)
        settings = Settings(database_url=url, data_dir=work)
        migrate(settings)
        seeded = asyncio.run(
            seed(settings, rows=args.rows, owner=OWNER, sample=args.rows, vaccinations=0, catalogue=True)
        )
        (work / "ids.txt").write_text("".join(seeded.pet_lines))
        moment = int(time.time() * 1000) + 3_600_000  # out of reach while seeding; set below
        asyncio.run(seed_coming_due(settings, doses=args.doses, moment=moment))
        # The moment, now that the seeding is done: every dose's dueAt moved by the same amount.
        moment_now = int(time.time() * 1000) + args.lead * 1000
        shift = moment_now - moment
        with sqlite3.connect(work / "pets.sqlite3") as connection:
            connection.execute(f"UPDATE pet_vaccinations SET due_at = due_at + {shift} WHERE owner_id != ?", (OWNER,))
        moment = moment_now
        report["due_rows"] = asyncio.run(derive_due(settings))
        env = server_env(work, url)
        wrk_env = {"TOKEN": token(env, OWNER), "IDS_FILE": str(work / "ids.txt")}
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        with process([str(BIN / "petrecords"), "serve", "--port", str(port)], env, work / "serve.log"):
            wait_until_answering(f"{base}/readyz")
            before = run_wrk(base, "get_by_id", duration=args.duration, connections=args.connections, env=wrk_env)
            print_line("get_by_id before", before)
            time.sleep(max(0.0, (moment - 2000) / 1000 - time.time()))
            across: dict[str, Any] = {}

            def measure() -> None:
                across.update(
                    run_wrk(base, "get_by_id", duration=args.across, connections=args.connections, env=wrk_env)
                )

            reading = threading.Thread(target=measure)
            reading.start()
            done_at = None
            while reading.is_alive() or done_at is None:
                if done_at is None and reminders_written(work / "pets.sqlite3") >= args.doses:
                    done_at = time.time()
                if time.time() * 1000 > moment + 120_000:
                    break
                time.sleep(0.2)
            reading.join()
            print_line("get_by_id across", across)
        written = reminders_written(work / "pets.sqlite3")
        report.update(
            before=before,
            across=across,
            reminders_written=written,
            all_written_seconds_after_the_moment=None if done_at is None else round(done_at - moment / 1000, 1),
            get_by_id_across_over_before=round(across["rps"] / before["rps"], 3),
            load_average_after=os.getloadavg()[0],
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({key: value for key, value in report.items() if key not in ("before", "across")}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
