"""Shared access (contract section 12, `/v1/pet-shares`): what 100,000 shares of other owners' pets cost the owner's
own paths, and what a grantee's lists cost, within one run.

Two databases of the chosen kind are seeded with the same owner's pets (bench/seed.py's `seed`, and its vaccine
catalogue): "without" holds nothing else; "with" also holds `--shared-pets` pets of other owners, each with one share
(to the clinic group `group:clinic-42`, or to a user), and vaccinations of them (some overdue), bulk-loaded through the
store as bench/seed.py loads, each record with the change the service would have kept for it (the share's window
too). Then, for each of `--rounds` rounds, `petrecords serve` (the defaults: 2 workers × 2 threads, access log on) is
started on "without" and then on "with", and wrk measures on each:

- `get_by_id` and `list_page_1` (bench/run.py's scenarios) as the owner;
- on "with" only: as a vet whose token carries the group clinic-42, the pets shared with them, page 1
  (`shared_pets`: GET /v1/pets?access=shared&pageSize=20), and the clinic's overdue list (`shared_overdue`:
  GET /v1/pet-vaccination?access=shared&dueTo=<now>&sort=dueAt&pageSize=20), and the same two lists without `access`
  (`clinic_pets`, `clinic_overdue`): the vet's own records with what is shared with them, as a vet's screen asks.

Each figure reported is that of the round with the most requests/s (the best of the rounds; every round is in the
JSON), with with ÷ without for the owner's paths (target ≥ 0.95), and the grantee's lists ÷ the owner's list page 1
on "with".

Seeding takes minutes (19 at 200,000 shared pets with 5 doses each on SQLite): `--keep DIR` keeps the SQLite
databases it seeds, and `--reuse DIR` measures them again (after applying any pending migration, as `serve` does).
With `--database postgresql`, `--reuse DIR` moves DIR's SQLite databases into throw-away PostgreSQL databases as an
operator would (`petrecords export`, then `petrecords import`, which loads with COPY): through the store, seeding
PostgreSQL reached 50,000 of 200,000 shared pets in 30 minutes.

Usage: .venv/bin/python bench/shares.py [--database sqlite|postgresql] [--rows 10000] [--shared-pets 100000]
       [--vaccinations 1.0] [--duration 10] [--rounds 2] [--json results.json] [--keep DIR | --reuse DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import msgspec
import sqlalchemy as sa

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import is_sqlite, migrate
from petrecords.pets import PETS
from petrecords.resources.fields import DAY_MS
from petrecords.shares import PET_SHARES
from petrecords.store.base import PageQuery, Row, SortKey
from petrecords.store.records import insert_statement, record_values
from petrecords.store.sql import SqlTransaction
from petrecords.tables import changes, share_windows
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.vaccines import VACCINES
from run import (
    BIN,
    OWNER,
    SERVICE_SCENARIOS,
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
from seed import BATCH, MAX_DOSES_PER_PET, Seeded, _doses, _uuid7, keep_created, pet_row, seed, settle_postgresql

VET = "vet@clinic.example"
CLINIC_GROUP = "clinic-42"
CLINIC = f"group:{CLINIC_GROUP}"
OWNER_SCENARIOS = ("get_by_id", "list_page_1")
GRANTEE_SCENARIOS = {name: name for name in ("shared_pets", "shared_overdue", "clinic_pets", "clinic_overdue")}
PHASES = ("without", "with")


def _open_windows() -> sa.Insert:
    """The window of every share whose change is kept and whose window is not: open from that change, as the
    service opens it when the share is created."""
    shares = PET_SHARES.table
    opened = (
        sa.select(
            changes.c.record_id,
            changes.c.xid,
            changes.c.position,
            changes.c.grantee,
            changes.c.shared_key,
            sa.null(),
            sa.null(),
            shares.c.expires_at,
        )
        .select_from(changes.join(shares, shares.c.id == changes.c.record_id))
        .where(
            changes.c.resource == PET_SHARES.name,
            ~sa.exists().where(share_windows.c.share_id == changes.c.record_id),
        )
    )
    columns = ["share_id", "from_xid", "from_position", "grantee", "shared_key", "until_xid", "until_position"]
    return sa.insert(share_windows).from_select([*columns, "expires_at"], opened)


class SharedSeed(msgspec.Struct, kw_only=True):
    pets: int = 0
    owners: int = 0
    shares: int = 0
    to_clinic: int = 0
    to_clinic_granting: int = 0
    """Shares to the clinic that grant now (not expired)."""
    vaccinations: int = 0
    overdue_seen_by_clinic: int = 0
    """Vaccinations due before the seeding's end, of pets the clinic's shares grant now."""
    seconds: float = 0.0


BULK_CACHE_KIB = 1_048_576
"""SQLite's page cache while rows are seeded in bulk: a million rows' indexes stay in it. With SQLite's default of
2,000 KiB, each insert into an index larger than that read its pages from the operating system's cache, and seeding
1,000,000 doses took 17 minutes of CPU."""


async def bulk_cache(store: Any, settings: Settings) -> None:
    """Give the store's SQLite writer BULK_CACHE_KIB of page cache, for as long as the store is open (as a load does,
    portability/databases.py); nothing on PostgreSQL."""
    if is_sqlite(settings.resolved_database_url):
        async with store.transaction(write=True) as tx:
            await tx.execute(sa.text(f"PRAGMA cache_size = -{BULK_CACHE_KIB}"), {})


BULK_TABLES = (PETS, PET_SHARES, PET_VACCINATIONS)
"""The tables a bulk seed writes most of its rows to."""


async def drop_indexes(store: Any, settings: Settings) -> list[str]:
    """On SQLite, drop the indexes of BULK_TABLES (but their primary keys') and return the statements that made them,
    as sqlite_master keeps them (the migrations' own): made again once the rows are in (make_indexes), each index is
    built by one sort of its rows, where a million inserts, each into every one of 19 indexes of pet_vaccinations,
    reached pages all over indexes larger than the page cache. Nothing on PostgreSQL."""
    if not is_sqlite(settings.resolved_database_url):
        return []
    names = ", ".join(f"'{resource.collection.table.name}'" for resource in BULK_TABLES)
    listed = sa.text(
        f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name IN ({names})"
    )
    async with store.transaction(write=True) as tx:
        assert isinstance(tx, SqlTransaction)
        indexes = [(str(name), str(sql)) for name, sql in await tx.fetch((listed, {}))]
        for name, _ in indexes:
            await tx.execute(sa.text(f'DROP INDEX "{name}"'), {})
    return [sql for _, sql in indexes]


async def make_indexes(store: Any, made: list[str]) -> None:
    """The indexes drop_indexes dropped, made again by the statements that made them, in one transaction."""
    if made:
        async with store.transaction(write=True) as tx:
            assert isinstance(tx, SqlTransaction)
            for sql in made:
                await tx.execute(sa.text(sql), {})


async def seed_shared(
    settings: Settings,
    *,
    pets: int,
    owners: int,
    users: int,
    clinic: float,
    vaccinations: float,
    bulk: bool = False,
) -> SharedSeed:
    """`pets` pets of `owners` other owners, each shared once: with probability `clinic` to the clinic group, else
    to one of `users` users; most shares never expire, some expire within a year, a few have expired. About
    `vaccinations` doses a pet (of the vaccine catalogue already seeded), as bench/seed.py gives them. `bulk`: the
    rows alone, without their changes, kept counts or share windows, for a caller that counts them as a load does
    (bench/due.py; several times faster)."""
    started = time.perf_counter()
    store = open_store(settings)
    rng = random.Random(pets)
    now = int(time.time() * 1000)
    first_ms = now - 2 * pets  # two milliseconds apart: the pet, then its share and vaccinations
    figures = SharedSeed(pets=pets, owners=owners)
    try:
        dropped: list[str] = []
        if bulk:
            await bulk_cache(store, settings)
            dropped = await drop_indexes(store, settings)
        async with store.transaction(write=False) as tx:
            query = PageQuery(conditions=(), sort=(SortKey("id"),), limit=1000, offset=0)
            vaccines = list(await tx.list(VACCINES.collection, query))
        if not vaccines:
            raise SystemExit("no vaccine catalogue: seed the owner's pets with catalogue=True first")
        by_type: dict[str, list[Row]] = {}
        for vaccine in vaccines:
            by_type.setdefault(vaccine["pet_type"], []).append(vaccine)
        vaccines_by_id = {vaccine["id"]: vaccine for vaccine in vaccines}
        for start in range(0, pets, BATCH):
            batch, shares, doses = [], [], []
            for index in range(start, min(start + BATCH, pets)):
                created = first_ms + 2 * index
                owner = f"owner-{index % owners}@example.com"
                pet = pet_row(rng, index, created, owner)
                batch.append(pet)
                to_clinic = rng.random() < clinic
                grantee = CLINIC if to_clinic else f"sitter-{rng.randrange(users)}@example.com"
                draw = rng.random()
                if draw < 0.8:
                    expires = None
                elif draw < 0.95:
                    expires = now + rng.randrange(1, 365) * DAY_MS
                else:
                    expires = now - rng.randrange(1, 30) * DAY_MS
                shares.append(
                    {
                        "id": _uuid7(created + 1),
                        "created_at": created + 1,
                        "created_by": owner,
                        "modified_at": created + 1,
                        "modified_by": owner,
                        "owner_id": owner,
                        "pet_id": pet["id"],
                        "grantee": grantee,
                        "access": rng.choice(("read", "care")),
                        "expires_at": expires,
                        "revision": 1,
                    }
                )
                granting = expires is None or expires > now
                figures.to_clinic += to_clinic
                figures.to_clinic_granting += to_clinic and granting
                count = sum(rng.random() < vaccinations / MAX_DOSES_PER_PET for _ in range(MAX_DOSES_PER_PET))
                if count:
                    given = _doses(rng, pet, count, by_type[pet["pet_type"]], now)
                    doses.extend(given)
                    if to_clinic and granting:
                        figures.overdue_seen_by_clinic += sum(1 for dose in given if dose["due_at"] < now)
            async with store.transaction(write=True) as tx:
                assert isinstance(tx, SqlTransaction)
                if bulk:
                    for resource, rows in ((PETS, batch), (PET_SHARES, shares), (PET_VACCINATIONS, doses)):
                        if rows:
                            values = [record_values(resource.collection, row) for row in rows]
                            await tx.execute(insert_statement(resource.collection), values)
                    figures.shares += len(shares)
                    figures.vaccinations += len(doses)
                    continue
                await tx.insert_many(PETS.collection, batch)
                await keep_created(tx, PETS, batch)
                await tx.insert_many(PET_SHARES.collection, shares)
                await keep_created(tx, PET_SHARES, shares)
                if doses:
                    await tx.insert_many(PET_VACCINATIONS.collection, doses)
                    shown = [{**dose, "vaccine": vaccines_by_id[dose["vaccine_id"]]} for dose in doses]
                    await keep_created(tx, PET_VACCINATIONS, shown)
            figures.shares += len(shares)
            figures.vaccinations += len(doses)
        if bulk:
            await make_indexes(store, dropped)
        else:
            async with store.transaction(write=True) as tx:
                assert isinstance(tx, SqlTransaction)
                await tx.execute(_open_windows(), {})
    finally:
        await store.close()
    if not is_sqlite(settings.resolved_database_url):
        await settle_postgresql(settings.resolved_database_url)
    figures.seconds = round(time.perf_counter() - started, 1)
    return figures


class Dataset(msgspec.Struct, kw_only=True):
    """A seeded database, the environment of its server, and the wrk environment of its load."""

    name: str
    url: str
    env: dict[str, str]
    wrk_env: dict[str, str]
    ids: list[str]
    """The owner's pets that get_by_id asks for."""


def token(env: dict[str, str], user: str, *options: str) -> str:
    command = [str(BIN / "petrecords"), "token", "--user", user, *options, "--ttl", "86400"]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout.strip()


def add_dataset_arguments(parser: argparse.ArgumentParser, *, rows: int, shared_pets: int, clinic: float) -> None:
    """The dataset's options, with this benchmark's defaults or another's (bench/due.py seeds as this one does):
    the other owners are a fifth of the shared pets, and the users shares name a tenth."""
    parser.add_argument("--rows", type=int, default=rows, help="the owner's pets")
    parser.add_argument("--shared-pets", type=int, default=shared_pets, help="other owners' pets, each shared once")
    parser.add_argument("--owners", type=int, default=shared_pets // 5, help="the other owners")
    parser.add_argument(
        "--users", type=int, default=shared_pets // 10, help="the users that shares not to the clinic name"
    )
    parser.add_argument("--clinic", type=float, default=clinic, help="the share of shares to group:clinic-42")


def seed_owner(settings: Settings, rows: int) -> Seeded:
    """The owner's `rows` pets and the vaccine catalogue; their ids, one a line, in the data directory's ids.txt."""
    seeded = asyncio.run(seed(settings, rows=rows, owner=OWNER, sample=rows, vaccinations=0, catalogue=True))
    (settings.data_dir / "ids.txt").write_text("".join(seeded.pet_lines))
    return seeded


def seed_others(settings: Settings, args: argparse.Namespace, *, vaccinations: float) -> SharedSeed:
    """Other owners' pets, each shared once, as add_dataset_arguments' options say."""
    return asyncio.run(
        seed_shared(
            settings,
            pets=args.shared_pets,
            owners=args.owners,
            users=args.users,
            clinic=args.clinic,
            vaccinations=vaccinations,
        )
    )


def prepare(name: str, url: str, work_dir: Path, args: argparse.Namespace, report: dict[str, Any]) -> Dataset:
    env = server_env(work_dir, url)
    settings = Settings(database_url=url, data_dir=work_dir)
    migrate(settings)
    ids_file = work_dir / "ids.txt"
    if args.reuse is not None:
        # Seeded by an earlier run with --keep (and migrated just now, as `serve` would).
        report[name] = {"reused": str(work_dir)}
        if not is_sqlite(url):
            started = time.perf_counter()
            move_in(work_dir, url)
            report[name]["moved_in_seconds"] = round(time.perf_counter() - started, 1)
        print(f"{name}: reusing {work_dir} ({report[name]})", flush=True)
        ids = [line.split()[0] for line in ids_file.read_text().splitlines()]
        return Dataset(name=name, url=url, env=env, wrk_env=_wrk_env(env, ids_file), ids=ids)
    started = time.perf_counter()
    seeded = seed_owner(settings, args.rows)
    report[name] = {"owner_pets": args.rows, "owner_seed_seconds": round(time.perf_counter() - started, 1)}
    line = f"{name}: {args.rows:,} pets of {OWNER} in {report[name]['owner_seed_seconds']} s"
    if name == "with":
        shared = seed_others(settings, args, vaccinations=args.vaccinations)
        report[name]["shared"] = msgspec.to_builtins(shared)
        line += (
            f"; {shared.pets:,} pets of {min(shared.owners, shared.pets):,} other owners, {shared.shares:,} shares "
            f"({shared.to_clinic:,} to {CLINIC}, {shared.to_clinic_granting:,} of them granting now), "
            f"{shared.vaccinations:,} vaccinations ({shared.overdue_seen_by_clinic:,} overdue that the clinic sees) "
            f"in {shared.seconds} s"
        )
    print(line, flush=True)
    ids = [line.split()[0] for line in seeded.pet_lines]
    return Dataset(name=name, url=url, env=env, wrk_env=_wrk_env(env, ids_file), ids=ids)


def move_in(kept: Path, url: str) -> None:
    """The SQLite database that --keep left in `kept`, exported and imported into the PostgreSQL database `url`."""
    exported = kept / "export.jsonl"
    petrecords = str(BIN / "petrecords")
    export = [petrecords, "export", "--output", str(exported)]
    subprocess.run(export, env=server_env(kept, sqlite_url(kept)), check=True)
    subprocess.run([petrecords, "import", str(exported)], env=server_env(kept, url), check=True)
    exported.unlink()


def _wrk_env(env: dict[str, str], ids_file: Path) -> dict[str, str]:
    return {
        "TOKEN": token(env, OWNER),
        "VET_TOKEN": token(env, VET, "--group", CLINIC_GROUP),
        "IDS_FILE": str(ids_file),
    }


def request_of(dataset: Dataset, name: str, rng: random.Random) -> tuple[str, dict[str, str]]:
    """A request of the scenario `name`, as its Lua script sends it: its path and headers."""
    owner = {"Authorization": f"Bearer {dataset.wrk_env['TOKEN']}"}
    vet = {"Authorization": f"Bearer {dataset.wrk_env['VET_TOKEN']}"}
    if name == "get_by_id":
        return f"/v1/pets/{rng.choice(dataset.ids)}", owner
    if name == "list_page_1":
        return "/v1/pets", owner
    if name == "shared_pets":
        return "/v1/pets?access=shared&pageSize=20", vet
    if name == "clinic_pets":
        return "/v1/pets?pageSize=20", vet
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())
    access = "access=shared&" if name == "shared_overdue" else ""
    return f"/v1/pet-vaccination?{access}sort=dueAt&pageSize=20&dueTo={now}", vet


def alone(base: str, dataset: Dataset, name: str, samples: int) -> tuple[float, int | None]:
    """The median time of one request of the scenario with no other load, after as many again unmeasured (which
    warm the server up without leaving requests in flight, as a short wrk run would), and the totalCount of the
    list it reads (None: not a list)."""
    rng = random.Random(name)
    took = []
    total = None
    with httpx.Client(base_url=base, timeout=60) as client:
        for sample in range(2 * samples):
            path, headers = request_of(dataset, name, rng)
            started = time.perf_counter()
            response = client.get(path, headers=headers)
            elapsed = (time.perf_counter() - started) * 1000
            response.raise_for_status()
            if sample >= samples:
                took.append(elapsed)
            total = response.json().get("totalCount")
    return statistics.median(took), total


def measure(args: argparse.Namespace, dataset: Dataset, work_dir: Path, results: dict[str, Any]) -> None:
    """Start the server on the dataset, run its scenarios once each (each first alone, which warms it up), stop it."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    serve = [str(BIN / "petrecords"), "serve", "--port", str(port), "--workers", str(args.workers)]
    serve += ["--threads", str(args.threads)]
    log = work_dir / f"serve-{dataset.name}.log"
    with process(serve, dataset.env, log):
        wait_until_answering(f"{base}/readyz")
        time.sleep(1)
        scripts = {name: SERVICE_SCENARIOS[name] for name in OWNER_SCENARIOS}
        if dataset.name == "with":
            scripts.update(GRANTEE_SCENARIOS)
        for name, script in scripts.items():
            alone_ms, total = alone(base, dataset, name, args.alone)
            figures: dict[str, Any] = run_wrk(base, script, duration=args.duration, connections=args.connections,
                                              env=dataset.wrk_env, timeout=args.timeout)  # fmt: skip
            figures.update(alone_p50_ms=round(alone_ms, 2), total_count=total)
            results.setdefault(name, []).append(figures)
            read = "" if total is None else f", of {total:,}"
            print_line(f"{dataset.name}: {name}", figures, f"alone {alone_ms:.1f} ms{read}")
            settle(args, figures)


def best(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the most requests/s."""
    return max(rounds, key=lambda figures: figures["rps"])


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    chosen = {phase: {name: best(rounds) for name, rounds in runs[phase].items()} for phase in PHASES}
    ratios: dict[str, float] = {}
    for name in OWNER_SCENARIOS:
        ratios[f"{name} req/s with ÷ without"] = chosen["with"][name]["rps"] / chosen["without"][name]["rps"]
        ratios[f"{name} p99 with ÷ without"] = chosen["with"][name]["p99_ms"] / chosen["without"][name]["p99_ms"]
    anchor = chosen["with"]["list_page_1"]["rps"]
    for name in GRANTEE_SCENARIOS:
        ratios[f"{name} req/s ÷ owner's list_page_1"] = chosen["with"][name]["rps"] / anchor
    return {"best": chosen, "ratios": {what: round(value, 3) for what, value in ratios.items()}}


def print_table(summary: dict[str, Any]) -> None:
    chosen = summary["best"]
    print("\nbest of the rounds (the round with the most req/s):")
    print(f"  {'scenario':<16} {'phase':<8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'non-2xx':>8} {'alone ms':>9}")
    for phase in PHASES:
        for name, figures in chosen[phase].items():
            print(
                f"  {name:<16} {phase:<8} {figures['rps']:>8.0f} {figures['p50_ms']:>8.2f} {figures['p99_ms']:>8.2f} "
                f"{figures['non_2xx']:>8} {figures['alone_p50_ms']:>9.2f}"
            )
    print("ratios:")
    for what, value in summary["ratios"].items():
        target = "   (target ≥ 0.95)" if "req/s with" in what else ""
        print(f"  {what:<44} {value:>6.2f}{target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    add_dataset_arguments(parser, rows=10_000, shared_pets=100_000, clinic=0.5)
    parser.add_argument("--vaccinations", type=float, default=1.0, help="vaccinations per shared pet, on average")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of without, with")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each measurement")
    parser.add_argument(
        "--alone", type=int, default=20, help="requests of each scenario timed one at a time (after as many to warm up)"
    )
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=30, help="seconds before wrk gives up on a response")
    parser.add_argument("--workers", type=int, default=2, help="serve --workers (its default)")
    parser.add_argument("--threads", type=int, default=2, help="serve --threads (its default)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", type=Path, help="SQLite: seed into this (new) directory and keep it")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="measure the SQLite databases a --keep run seeded there (moved into PostgreSQL by --database postgresql)",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench` installs it (apt-get install wrk)")
    kept = args.keep or args.reuse
    if args.keep is not None and args.database != "sqlite":
        raise SystemExit("--keep keeps SQLite databases only (--reuse moves them into PostgreSQL)")
    if args.keep is not None:
        args.keep.mkdir(parents=True)
    work = kept or Path(tempfile.mkdtemp(prefix="petrecords-shares-"))
    report: dict[str, Any] = {
        "database": args.database,
        "duration": args.duration,
        "rounds": args.rounds,
        "connections": args.connections,
        "workers": args.workers,
        "threads": args.threads,
        "chosen": "best of the rounds: the round with the most req/s, its p50 and p99",
        "load_average_before": os.getloadavg()[0],
    }
    seeded: dict[str, Any] = {}
    runs: dict[str, dict[str, Any]] = {phase: {} for phase in PHASES}
    try:
        dirs = {phase: work / phase for phase in PHASES}
        for directory in dirs.values():
            directory.mkdir(exist_ok=args.reuse is not None)
        with database(args.database, dirs["without"]) as url_without, database(args.database, dirs["with"]) as url_with:
            datasets = {
                "without": prepare("without", url_without, dirs["without"], args, seeded),
                "with": prepare("with", url_with, dirs["with"], args, seeded),
            }
            print(
                f"{args.database}: {args.workers} workers × {args.threads} threads, {args.connections} connections, "
                f"{args.duration} s each; load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            for round_ in range(1, args.rounds + 1):
                print(f"round {round_}", flush=True)
                for phase in PHASES:
                    measure(args, datasets[phase], dirs[phase], runs[phase])
    finally:
        if kept is None:
            shutil.rmtree(work, ignore_errors=True)
    summary = summarize(runs)
    print_table(summary)
    report.update(seeded=seeded, runs=runs, **summary, load_average_after=os.getloadavg()[0])
    print(f"load average {report['load_average_before']:.1f} before, {report['load_average_after']:.1f} after")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
