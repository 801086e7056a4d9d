"""Reminders (contract section 15): `--doses` doses whose due-soon moment comes in the same second, on a running
`petrecords serve`, and how long its reminders duty takes to write them all; get by id and a create's latency measured
before the moment and across it, in the same run.

The database (`--database`, SQLite by default) is seeded with the owner's `--rows` pets (get by id reads them, as in
bench/run.py), the vaccine catalogue, and `--doses` pets of 1,000 other owners with one dose each, due
`PETRECORDS_DUE_SOON_DAYS` days after the moment: the due rows are derived from them as a load derives them
(bench/due.py). The moment is set `--lead` seconds after the seeding ends, so that the server has started and get by
id has been measured alone before it comes.

Then, with the server's defaults (2 workers × 2 threads, the reminders duty every 10 s in each worker), once both
workers answer (2 s, then 3 s of wrk thrown away): wrk reads get by id for `--duration` s (before), sleeps until 2 s
before the moment, and reads it again for `--across` s while the reminders are written; the count of doses reminded
is polled every 0.2 s meanwhile, and the time from the moment to the last one is reported (the contract: within 60 s
of it). Get by id's rate in each second is then counted from the server's access log: before the moment, during the
burst (from the moment to the last reminder) and after it; the ratio is during over the higher of before and after
(wrk's figure across the whole window mixes the burst with the quiet after it, and `before` alone was at times held
low by the machine). Beside each wrk run, one client creates a pet `--creates` times a second, one at a time, and
its latencies are reported: on SQLite, the API's writes wait for the one writer that the reminders' batches also
need.

Usage: .venv/bin/python bench/reminders.py [--database sqlite|postgresql] [--doses 20000] [--rows 2000] [--lead 40]
       [--duration 10] [--across 40] [--creates 20] [--json reminders.json]
"""

from __future__ import annotations

import argparse
import asyncio
import calendar
import http.client
import json
import math
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa

from due import count_as_a_load
from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.pets import PETS
from petrecords.store.base import PageQuery, SortKey
from petrecords.store.records import insert_statement, record_values
from petrecords.store.sqlite.statements import as_sqlite_runs_it
from petrecords.store.sqlite.transaction import SqliteTransaction
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from run import BIN, OWNER, database, free_port, print_line, process, run_wrk, server_env, wait_until_answering
from seed import BATCH, DOSE_FIELDS_UNSET, created_changes, keep_created, pet_row, seed, settle_postgresql
from shares import token

DAY_MS = 86_400_000
OWNERS = 1_000
DUE_SOON_DAYS = 30
"""The default of PETRECORDS_DUE_SOON_DAYS, which the server keeps."""
SQLITE_CACHE_KIB = 1 << 20
"""SQLite's page cache while seeding (1 GiB): the one transaction's pages stay in memory until its COMMIT."""


def load_on_sqlite(url: str, batches: list[tuple[sa.Insert, list[dict[str, Any]]]]) -> None:
    """Each batch's rows inserted with its statement, in one transaction of one plain connection. Not through the
    store: its writes run in a savepoint of their write group, and inside a savepoint SQLite makes each row's insert
    into the pets' trigram index (FTS5, kept by a trigger) a statement of its own, which writes out the index's pending
    terms as a new segment and merges: 40,000 pets took 118 s that way, 4 s this way. The kept counts are derived
    afterwards (count_as_a_load), as a load derives them."""
    connection = sqlite3.connect(url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
    try:
        connection.execute(f"PRAGMA cache_size = -{SQLITE_CACHE_KIB}")
        connection.execute("BEGIN IMMEDIATE")
        for statement, rows in batches:
            sql = as_sqlite_runs_it(statement)[0]
            connection.executemany(sql, [as_sqlite_runs_it(statement, row)[1] for row in rows])
        connection.execute("COMMIT")
    finally:
        connection.close()


async def seed_coming_due(settings: Settings, *, doses: int, moment: int) -> None:
    """`doses` pets of OWNERS owners, each with one dose whose due-soon moment is `moment` (within its second)."""
    store = open_store(settings)
    rng = random.Random(doses)
    try:
        async with store.transaction(write=False) as tx:
            every_vaccine = PageQuery(conditions=(), sort=(SortKey("id"),), limit=1000, offset=0)
            vaccines = list(await tx.list(VACCINES.collection, every_vaccine))
        vaccines_by_id = {vaccine["id"]: vaccine for vaccine in vaccines}
        by_type: dict[str, list[dict[str, Any]]] = {}
        for vaccine in vaccines:
            by_type.setdefault(vaccine["pet_type"], []).append(vaccine)
        created = moment - 400 * DAY_MS
        pets = [pet_row(rng, index, created + index, f"owner{index % OWNERS}@example.com") for index in range(doses)]
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
        shown = [{**dose, "vaccine": vaccines_by_id[dose["vaccine_id"]]} for dose in given]
        if store.dialect == "sqlite":
            changes = SqliteTransaction.change_insert
            load_on_sqlite(
                settings.resolved_database_url,
                [
                    (insert_statement(PETS.collection), [record_values(PETS.collection, pet) for pet in pets]),
                    (changes, created_changes(PETS, pets)),
                    (
                        insert_statement(PET_VACCINATIONS.collection),
                        [record_values(PET_VACCINATIONS.collection, dose) for dose in given],
                    ),
                    (changes, created_changes(PET_VACCINATIONS, shown)),
                ],
            )
            return
        for start in range(0, doses, BATCH):
            async with store.transaction(write=True) as tx:
                await tx.insert_many(PETS.collection, pets[start : start + BATCH])
                await keep_created(tx, PETS, pets[start : start + BATCH])
                await tx.insert_many(PET_VACCINATIONS.collection, given[start : start + BATCH])
                await keep_created(tx, PET_VACCINATIONS, shown[start : start + BATCH])
    finally:
        await store.close()


def one_value(url: str, statement: str, *arguments: Any) -> Any:
    """Run one statement on the database (`?` for SQLite's parameters, `$n` for PostgreSQL's); its first value."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///"), timeout=5) as connection:
            row = connection.execute(statement.replace("$1", "?"), arguments).fetchone()
        return None if row is None else row[0]

    async def on_postgresql() -> Any:
        connection = await asyncpg.connect(url)
        try:
            return await connection.fetchval(statement, *arguments)
        finally:
            await connection.close()

    return asyncio.run(on_postgresql())


def reminders_written(url: str) -> int:
    return int(one_value(url, "SELECT count(*) FROM changes WHERE action = 'due-soon'"))


def doses_reminded(url: str) -> int:
    """The due rows marked due-soon, which is the reminders written here: a batch marks its rows in the transaction
    that keeps their changes, and none of these doses' moments is skipped. A count over the index (reminded, due_at,
    id): counting the change log's reminders reads the whole log, and, polled every 0.2 s, took a fifth of a core
    of the machine the server shares from the moment to the last reminder, which nothing took before it
    (bench/results/2026-12-06-reminders-burst.md)."""
    return int(one_value(url, "SELECT count(*) FROM due_doses WHERE reminded = 'due-soon'"))


def paced_creates(base: str, token: str, *, rate: float, duration: float) -> dict[str, float]:
    """Create a pet `rate` times a second for `duration` s, one at a time on one connection: the latencies."""
    address = urlsplit(base)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=30)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies: list[float] = []
    failed = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < duration:
            time.sleep(max(0.0, started + len(latencies) / rate - time.monotonic()))
            body = json.dumps({"name": f"bench {len(latencies)}", "petType": "Dog"})
            sent = time.perf_counter()
            connection.request("POST", "/v1/pets", body=body, headers=headers)
            answer = connection.getresponse()
            answer.read()
            latencies.append((time.perf_counter() - sent) * 1000)
            failed += answer.status != 201
    finally:
        connection.close()
    latencies.sort()

    def percentile(share: float) -> float:
        return round(latencies[min(len(latencies) - 1, math.ceil(share * len(latencies)) - 1)], 1) if latencies else 0

    return {"creates": len(latencies), "failed": failed, "p50_ms": percentile(0.5), "p99_ms": percentile(0.99)}


def beside(work: threading.Thread, base: str, token: str, *, rate: float, duration: float) -> dict[str, float]:
    """Paced creates while `work` runs (started here), for `duration` s."""
    work.start()
    creates = paced_creates(base, token, rate=rate, duration=duration)
    work.join()
    return creates


GET_BY_ID_LINE = b'"method":"GET","route":"/v1/pets/{'


def gets_by_id_per_second(log: Path) -> dict[int, int]:
    """The server's answers to get by id in each second (epoch seconds), from its access log."""
    by_stamp: dict[bytes, int] = {}
    with log.open("rb") as lines:
        for line in lines:
            if GET_BY_ID_LINE in line and b'"status":200' in line:
                stamp = line[9:28]  # {"time":"2026-12-06T10:39:17
                by_stamp[stamp] = by_stamp.get(stamp, 0) + 1
    return {calendar.timegm(time.strptime(stamp.decode(), "%Y-%m-%dT%H:%M:%S")): n for stamp, n in by_stamp.items()}


def mean_rate(per_second: dict[int, int], start: float, end: float) -> float:
    """Get by id's mean rate over the whole seconds from `start` to `end` (epoch seconds); 0 if none."""
    seconds = range(math.ceil(start), math.floor(end))
    return round(sum(per_second.get(second, 0) for second in seconds) / len(seconds), 1) if seconds else 0.0


def measure(args: argparse.Namespace, url: str, work: Path, report: dict[str, Any]) -> None:
    settings = Settings(database_url=url, data_dir=work)
    migrate(settings)
    seeded = asyncio.run(seed(settings, rows=args.rows, owner=OWNER, sample=args.rows, vaccinations=0, catalogue=True))
    (work / "ids.txt").write_text("".join(seeded.pet_lines))
    moment = int(time.time() * 1000) + 3_600_000  # out of reach while seeding; set below
    asyncio.run(seed_coming_due(settings, doses=args.doses, moment=moment))
    # The moment, now that the seeding is done: every dose's dueAt moved by the same amount, then their due rows.
    moment_now = int(time.time() * 1000) + args.lead * 1000
    statement = f"UPDATE pet_vaccinations SET due_at = due_at + {moment_now - moment} WHERE owner_id != $1"
    one_value(url, statement, OWNER)
    moment = moment_now
    report["due_rows"] = asyncio.run(count_as_a_load(settings))
    if args.database == "postgresql":
        asyncio.run(settle_postgresql(url))
    else:
        # The seeding leaves a write-ahead log of about 430 MB, which the server's first COMMIT copied into the file
        # (its checkpoint): that worker served nothing meanwhile, and get by id before the moment measured the other.
        one_value(url, "PRAGMA wal_checkpoint(TRUNCATE)")
    # And the seeding's pages written out now, not by the kernel beside get by id before the moment (14,300 req/s
    # there, 18,000-21,000 once the burst had ended).
    os.sync()
    env = server_env(work, url)
    wrk_env = {"TOKEN": token(env, OWNER), "IDS_FILE": str(work / "ids.txt")}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with process([str(BIN / "petrecords"), "serve", "--port", str(port)], env, work / "serve.log"):
        wait_until_answering(f"{base}/readyz")
        # /readyz answers once one worker does. wrk's connections stay with the worker that took them: a worker
        # not yet serving when `before` began (starting, or copying a log such as the one checkpointed above) took
        # none, and `before` measured one worker (9,100-11,000 req/s where two give 16,400-19,600), which the ratio
        # then set against two. So the workers are given time, and wrk's first connections are thrown away.
        time.sleep(2)
        run_wrk(base, "get_by_id", duration=3, connections=args.connections, env=wrk_env)
        before: dict[str, Any] = {}
        window: dict[str, float] = {}
        """When wrk's runs began and ended (epoch seconds): before_start, before_end and across_end."""

        def measure_before() -> None:
            window["before_start"] = time.time()
            before.update(run_wrk(base, "get_by_id", duration=args.duration, connections=args.connections, env=wrk_env))
            window["before_end"] = time.time()

        creates_before = beside(
            threading.Thread(target=measure_before), base, wrk_env["TOKEN"], rate=args.creates, duration=args.duration
        )
        print_line("get_by_id before", before)
        print(f"  creates before: {creates_before}")
        time.sleep(max(0.0, (moment - 2000) / 1000 - time.time()))
        across: dict[str, Any] = {}

        def measure_across() -> None:
            across.update(run_wrk(base, "get_by_id", duration=args.across, connections=args.connections, env=wrk_env))
            window["across_end"] = time.time()

        creates_across: dict[str, float] = {}
        creating = threading.Thread(
            target=lambda: creates_across.update(
                beside(
                    threading.Thread(target=measure_across),
                    base,
                    wrk_env["TOKEN"],
                    rate=args.creates,
                    duration=args.across,
                )
            )
        )
        creating.start()
        done_at = None
        while creating.is_alive() or done_at is None:
            if done_at is None and doses_reminded(url) >= args.doses:
                done_at = time.time()
            if time.time() * 1000 > moment + 120_000:
                break
            time.sleep(0.2)
        creating.join()
        print_line("get_by_id across", across)
        print(f"  creates across: {creates_across}")
    per_second = gets_by_id_per_second(work / "serve.log")
    ended = done_at if done_at is not None else window["across_end"]
    rates = {
        "before": mean_rate(per_second, window["before_start"], window["before_end"]),
        "during": mean_rate(per_second, moment / 1000, ended),
        "after": mean_rate(per_second, ended, window["across_end"]),
    }
    ceiling = max(rates["before"], rates["after"])
    print(f"  get by id per second, from the access log: {rates}")
    report.update(
        before=before,
        across=across,
        creates_before=creates_before,
        creates_across=creates_across,
        reminders_written=reminders_written(url),
        all_written_seconds_after_the_moment=None if done_at is None else round(done_at - moment / 1000, 1),
        get_by_id_per_second=rates,
        get_by_id_during_over_ceiling=round(rates["during"] / ceiling, 3) if ceiling else None,
        create_p99_across_over_before=round(creates_across["p99_ms"] / max(creates_before["p99_ms"], 0.1), 2),
        load_average_after=os.getloadavg()[0],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--doses", type=int, default=20_000, help="doses whose due-soon moment comes at once")
    parser.add_argument("--rows", type=int, default=2_000, help="the owner's pets (get by id reads them)")
    parser.add_argument("--lead", type=int, default=40, help="seconds from the end of the seeding to the moment")
    parser.add_argument("--duration", type=int, default=10, help="seconds of get by id before the moment")
    parser.add_argument("--across", type=int, default=40, help="seconds of get by id from 2 s before the moment")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--creates", type=float, default=20, help="creates a second beside get by id")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="petrecords-reminders-"))
    report: dict[str, Any] = {
        "database": args.database,
        "doses": args.doses,
        "load_average_before": os.getloadavg()[0],
    }
    try:
        with database(args.database, work) as url:
            measure(args, url, work, report)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    shown = ("before", "across", "creates_before", "creates_across")
    print(json.dumps({key: value for key, value in report.items() if key not in shown}, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
