"""What is due (contract section 14): `GET /v1/due` page 1 with its exact count, as an admin and as a clinic's vet,
and a pet's vaccination status, each as a ratio to get by id measured in the same run.

The database of the chosen kind is seeded as bench/shares.py seeds its "with" database: the owner's `--rows` pets
(with the vaccine catalogue), and `--shared-pets` pets of other owners, each shared once (`--clinic`, a fifth, to
the clinic group `group:clinic-42`, as 50,000 of 250,000 pets) with about `--doses` doses each, those rows inserted
in bulk (without their changes: no scenario reads the history or the feed). Then what a load derives is derived as
it does (portability/databases.py): the due rows, the due rows by grantee, and every kept count, for the owners and
for the grantees of the shares. (Not moved into PostgreSQL by export and import, as bench/shares.py's --reuse does:
its seeded shares that expired did so before they were made, which an import refuses.)

Before the server starts, every due row is marked as reminded as a running service would have reminded it
(`remind_as_a_running_service`), so that the reminders duty writes nothing during the run: the creates are measured
alone, and each new dose is due a year after it was given, so its reminders do not fire either.

Then `petrecords serve` (its defaults: 2 workers × 2 threads, access log on) is measured with wrk (64 connections,
`--duration` s each) for `--rounds` rounds: `get_by_id` as the owner, `vaccination_status` (a random vaccinated
pet, as an admin), and `due_admin` and `due_vet` at each of `--page-sizes` (100, the default page, and 20). Each
figure is the best round's (most req/s).

Seeding 1,000,000 doses takes a while: `--keep DIR` keeps the seeded database (SQLite: in DIR; PostgreSQL: the
database DIR/postgresql.txt names) and `--reuse DIR` measures it again, after applying any pending migration, as
`serve` does.

Usage: .venv/bin/python bench/due.py [--database sqlite|postgresql] [--shared-pets 25000] [--doses 4]
       [--duration 5] [--rounds 2] [--only dose_create,...] [--json due.json] [--keep DIR | --reuse DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import sqlalchemy as sa

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import is_sqlite, migrate
from petrecords.due_rows import due_doses, due_grants
from petrecords.registry import RESOURCES
from petrecords.reminders import DAY_MS, DUE_SOON, OVERDUE
from petrecords.store.counts import kept_count_inserts as count_inserts
from petrecords.store.grants import grant_count_inserts
from petrecords.store.records import stored_uuid
from petrecords.store.sql import SqlTransaction
from petrecords.tables import grant_expiries, period_counts, record_counts
from petrecords.values import now_ms
from run import (
    BIN,
    OWNER,
    POSTGRES_ADMIN_URL,
    database,
    free_port,
    print_line,
    process,
    run_wrk,
    server_env,
    settle,
    sqlite_url,
    wait_until_answering,
)
from seed import seed, settle_postgresql
from shares import CLINIC_GROUP, VET, best, bulk_cache, seed_shared, token

DUE_SCENARIOS = ("due_admin", "due_vet")
"""Each at each of `--page-sizes`: the default page (100, as clients of this API expect) and the 20 that the other
lists' benchmarks ask for."""
STATUS_PETS = 1000
"""The vaccinated pets whose status the status scenario asks for."""


async def count_as_a_load(settings: Settings) -> int:
    """What a load derives from its rows (portability/databases.py), for the rows seeded in bulk: the due rows and
    the due rows by grantee, every kept count (the owners' and everyone's, and the grantees' of the shares) and the
    listing of the shares that expire later; how many due rows. In one transaction."""
    store = open_store(settings)
    try:
        await bulk_cache(store, settings)
        async with store.transaction(write=True) as tx:
            assert isinstance(tx, SqlTransaction)
            for table in (period_counts, record_counts, grant_expiries, due_grants, due_doses):
                await tx.execute(sa.delete(table), {})
            statements: list[sa.Insert] = []
            for kept in RESOURCES.kept:
                statements += [*kept.fill(), *count_inserts(kept.collection)]
            for resource in RESOURCES.resources:
                statements += count_inserts(resource.collection)
                if resource.grants is not None:
                    statements += grant_count_inserts(resource.collection, now=now_ms())
            for statement in statements:
                await tx.execute(statement, {})
            rows = await tx.fetch((sa.select(sa.func.count()).select_from(due_doses), {}))
            return int(rows[0][0])
    finally:
        await store.close()


async def remind_as_a_running_service(settings: Settings) -> int:
    """Mark every due row as reminded as a service that has been running reminds (petrecords.reminders.owed): overdue
    from its dueAt on, due-soon within the due-soon days before it. Else the server's reminders duty writes one
    reminder for each row past due as soon as it starts (485,000 at 1M doses), beside the measured requests: on
    SQLite the creates waited for its write lock and failed with 503. How many rows were marked anew."""
    now, soon_ms = now_ms(), settings.due_soon_days * DAY_MS
    state = sa.case(
        (due_doses.c.due_at <= now, sa.literal(OVERDUE)),
        (due_doses.c.due_at - soon_ms <= now, sa.literal(DUE_SOON)),
        else_=due_doses.c.reminded,
    )
    store = open_store(settings)
    try:
        async with store.transaction(write=True) as tx:
            assert isinstance(tx, SqlTransaction)
            counted = sa.select(sa.func.count()).select_from(due_doses).where(due_doses.c.reminded != state)
            marked = int((await tx.fetch((counted, {})))[0][0])
            await tx.execute(sa.update(due_doses).where(due_doses.c.reminded != state).values(reminded=state), {})
            return marked
    finally:
        await store.close()


async def vaccinated_pets(settings: Settings, most: int) -> list[str]:
    store = open_store(settings)
    try:
        async with store.transaction(write=False) as tx:
            assert isinstance(tx, SqlTransaction)
            select = sa.select(due_doses.c.pet_id).distinct().order_by(due_doses.c.pet_id).limit(most)
            return [str(stored_uuid(row[0])) for row in await tx.fetch((select, {}))]
    finally:
        await store.close()


def seed_database(url: str, work_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    # A seeding transaction writes 10,000 records, and builds the next batch's between its statements: longer than
    # a request's bounds.
    settings = Settings(
        database_url=url,
        data_dir=work_dir,
        db_statement_timeout_seconds=300,
        db_idle_in_transaction_timeout_seconds=600,
    )
    migrate(settings)
    started = time.perf_counter()
    seeded = asyncio.run(seed(settings, rows=args.rows, owner=OWNER, sample=args.rows, vaccinations=0, catalogue=True))
    (work_dir / "ids.txt").write_text("".join(seeded.pet_lines))
    shared = asyncio.run(
        seed_shared(
            settings,
            pets=args.shared_pets,
            owners=args.owners,
            users=args.users,
            clinic=args.clinic,
            vaccinations=args.doses,
            bulk=True,
        )
    )
    rows = asyncio.run(count_as_a_load(settings))
    figures = {
        "owner_pets": args.rows,
        "shared_pets": shared.pets,
        "vaccinations": shared.vaccinations,
        "shares_to_the_clinic_granting": shared.to_clinic_granting,
        "due_rows": rows,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(f"seeded: {figures}", flush=True)
    return figures


MANY_DOSES = 200
"""The doses of the pet whose status `vaccination_status_200` asks for."""
SPARE = ',"lotNumber":null,"lotExpiresOn":null,"doseType":null,"veterinarian":null,"veterinarianLicence":null'
FULL = (
    ',"lotNumber":"LOT-%d","lotExpiresOn":"2099-12-31","doseType":"booster","veterinarian":"Dr Ana Vet",'
    '"veterinarianLicence":"LIC-2026-0042","clinic":"Northside Clinic, 1 Main Street","rabiesTag":"R-%d",'
    '"status":"completed","statusReason":null'
)
"""Every field a clinic's record of a dose added (contract v4 section 10.2), and none of them."""


def dose_scenarios(base: str, token: str, work_dir: Path) -> list[tuple[str, str, dict[str, str]]]:
    """The owner's dogs, a dog vaccine, a dog with MANY_DOSES doses, and a dose with every new field and one without:
    the scenarios of a pet's status at MANY_DOSES doses, and of a vaccination's create and get by id with and
    without the new fields (each create of a random dog of its own half, so that no pet's doses pile up)."""
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as client:
        dogs = [pet["id"] for pet in client.get("/v1/pets", params={"petType": "Dog", "pageSize": 100}).json()["items"]]
        vaccine = client.get("/v1/vaccines", params={"petType": "Dog", "pageSize": 1}).json()["items"][0]["id"]
        applied = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=MANY_DOSES + 1)
        for day in range(MANY_DOSES):
            at = (applied + datetime.timedelta(days=day)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            body = {"petId": dogs[0], "vaccineId": vaccine, "appliedAt": at}
            client.post("/v1/pet-vaccination", json=body).raise_for_status()
        yesterday = (applied + datetime.timedelta(days=MANY_DOSES)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        # Due in a year, beyond the due-soon days: no reminder of a created dose comes during the run.
        in_a_year = (applied + datetime.timedelta(days=MANY_DOSES + 365)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        plain = f'{{"petId":"%p","vaccineId":"{vaccine}","appliedAt":"{yesterday}","dueAt":"{in_a_year}"'
        ids = {}
        for name, more in (("plain", SPARE), ("full", FULL)):
            unique = f"{name.upper()}-{time.time_ns()}"
            body = json.loads((plain + more + "}").replace("%p", dogs[1]).replace("%d", unique))
            created = client.post("/v1/pet-vaccination", json=body)
            created.raise_for_status()
            ids[name] = created.json()["id"]
    (work_dir / "many-doses.txt").write_text(f"{dogs[0]}\n")
    # Each create's write reads its pet's doses again: the two creates write to dogs of their own, so that the second
    # does not find the first's doses on its pets.
    for offset, name in enumerate(("plain", "full")):
        (work_dir / f"dogs-{name}.txt").write_text("".join(f"{dog}\n" for dog in dogs[2 + offset :: 2]))
    many = {"VACCINATED_FILE": str(work_dir / "many-doses.txt")}
    runs = [(f"vaccination_status_{MANY_DOSES}", "vaccination_status", many)]
    for name, more in (("plain", SPARE), ("full", FULL)):
        body = {"DOSE_BODY": plain + more + "}", "DOSE_PETS_FILE": str(work_dir / f"dogs-{name}.txt")}
        runs.append((f"dose_create_{name}", "dose_create", body))
    runs += [(f"dose_get_{name}", "dose_get", {"DOSE_ID": ids[name]}) for name in ("plain", "full")]
    return runs


@contextlib.contextmanager
def kept_database(kind: str, kept: Path, *, reuse: bool) -> Iterator[str]:
    """The database a --keep run seeds, or a --reuse run measures again: never dropped."""
    if kind == "sqlite":
        yield sqlite_url(kept)
        return
    named = kept / "postgresql.txt"
    if not reuse:
        name = f"petrecords_bench_due_{os.getpid()}"

        async def create() -> None:
            connection = await asyncpg.connect(POSTGRES_ADMIN_URL)
            try:
                await connection.execute(f'CREATE DATABASE "{name}"')
            finally:
                await connection.close()

        asyncio.run(create())
        named.write_text(name)
    yield f"{POSTGRES_ADMIN_URL.rsplit('/', 1)[0]}/{named.read_text().strip()}"


def measure(args: argparse.Namespace, url: str, work_dir: Path, results: dict[str, list[dict[str, Any]]]) -> None:
    env = server_env(work_dir, url)
    settings = Settings(database_url=url, data_dir=work_dir)
    # One statement over every due row (485,000 at 1M doses): longer than a request's bound.
    marking = settings.model_copy(update={"db_statement_timeout_seconds": 300})
    print(f"due rows marked as reminded: {asyncio.run(remind_as_a_running_service(marking))}", flush=True)
    if not is_sqlite(url):
        # The due rows, their rows by grantee and the kept counts were written after the seed settled (and a --reuse
        # may have migrated them since): without their statistics, PostgreSQL planned the vet's count for an empty
        # due_doses, and chose to plan it again on every request (2-3 ms) rather than keep a plan for any value.
        asyncio.run(settle_postgresql(url))
    vaccinated = work_dir / "vaccinated.txt"
    vaccinated.write_text("".join(f"{pet}\n" for pet in asyncio.run(vaccinated_pets(settings, STATUS_PETS))))
    wrk_env = {
        "TOKEN": token(env, OWNER),
        "ADMIN_TOKEN": token(env, "admin@example.com", "--admin"),
        "VET_TOKEN": token(env, VET, "--group", CLINIC_GROUP),
        "IDS_FILE": str(work_dir / "ids.txt"),
        "VACCINATED_FILE": str(vaccinated),
    }
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = [str(BIN / "petrecords"), "serve", "--port", str(port)]
    with process(serve, env, work_dir / "serve.log"):
        wait_until_answering(f"{base}/readyz")
        time.sleep(1)
        doses = dose_scenarios(base, wrk_env["TOKEN"], work_dir)
        for round_ in range(1, args.rounds + 1):
            print(f"round {round_}", flush=True)
            runs = [("get_by_id", "get_by_id", {}), ("vaccination_status", "vaccination_status", {}), *doses]
            for size in args.page_sizes:
                runs += [(f"{name} page {size}", name, {"DUE_PAGE_SIZE": str(size)}) for name in DUE_SCENARIOS]
            if args.only:
                runs = [run for run in runs if run[0] == "get_by_id" or run[0].startswith(tuple(args.only))]
            for label, script, extra in runs:
                figures: dict[str, Any] = run_wrk(
                    base, script, duration=args.duration, connections=args.connections, env={**wrk_env, **extra}
                )
                results.setdefault(label, []).append(figures)
                print_line(label, figures)
                settle(args, figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--rows", type=int, default=2_000, help="the owner's pets (get by id reads them)")
    parser.add_argument("--shared-pets", type=int, default=25_000, help="other owners' pets, each shared once")
    parser.add_argument("--owners", type=int, default=5_000, help="the other owners")
    parser.add_argument("--users", type=int, default=2_500, help="the users that shares not to the clinic name")
    parser.add_argument(
        "--clinic", type=float, default=0.2, help="the share of shares to group:clinic-42 (50,000 of 250,000: 0.2)"
    )
    parser.add_argument("--doses", type=float, default=4.0, help="vaccinations per shared pet, on average")
    parser.add_argument("--page-sizes", type=lambda text: [int(size) for size in text.split(",")], default=[100, 20])
    parser.add_argument("--duration", type=int, default=5, help="seconds of each measurement")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=30, help="seconds before wrk gives up on a response")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--only",
        type=lambda text: text.split(","),
        default=[],
        help="the scenarios whose names begin so (dose_create,dose_get), each round beside get_by_id; default: all",
    )
    kept = parser.add_mutually_exclusive_group()
    kept.add_argument("--keep", type=Path, help="seed into this (new) directory and keep the database")
    kept.add_argument("--reuse", type=Path, help="measure the database a --keep run seeded there")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    report: dict[str, Any] = {"database": args.database, "load_average_before": os.getloadavg()[0]}
    results: dict[str, list[dict[str, Any]]] = {}
    if args.keep is not None or args.reuse is not None:
        work = args.keep or args.reuse
        if args.keep is not None:
            work.mkdir(parents=True)
        with kept_database(args.database, work, reuse=args.reuse is not None) as url:
            if args.keep is not None:
                report["seeded"] = seed_database(url, work, args)
                (work / "seeded.json").write_text(json.dumps(report["seeded"]))
            else:
                migrate(Settings(database_url=url, data_dir=work))
                report["seeded"] = json.loads((work / "seeded.json").read_text())
            measure(args, url, work, results)
    else:
        work = Path(tempfile.mkdtemp(prefix="petrecords-due-"))
        try:
            with database(args.database, work) as url:
                report["seeded"] = seed_database(url, work, args)
                measure(args, url, work, results)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    if not results:
        return  # --rounds 0: seeded (and kept) only
    chosen = {name: best(rounds) for name, rounds in results.items()}
    anchor = chosen["get_by_id"]["rps"]
    ratios = {f"{name} ÷ get_by_id": round(figures["rps"] / anchor, 3) for name, figures in chosen.items()}
    for what in ("create", "get"):
        if f"dose_{what}_full" in chosen:
            ratio = chosen[f"dose_{what}_full"]["rps"] / chosen[f"dose_{what}_plain"]["rps"]
            ratios[f"dose_{what}_full ÷ dose_{what}_plain"] = round(ratio, 3)
    print("\nbest of the rounds:")
    for name, figures in chosen.items():
        print_line(name, figures)
    for what, value in ratios.items():
        print(f"  {what:<34} {value:>6.2f}")
    report.update(runs=results, best=chosen, ratios=ratios, load_average_after=os.getloadavg()[0])
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
