"""A certificate's public link against get by id, in one run: a real `petrecords serve` (its defaults; SQLite, or
PostgreSQL with `--database postgresql`) holding one pet with `--doses` doses (of 5 groups) and `--links`
certificates of it, and `--other-pets` pets beside it. In each of `--rounds` rounds, wrk (2 threads) asks in turn for
the pet by id with its owner's token and for one link's JSON, first alone, then beside a steady stream of
`--writes` writes a second to the other pets (a new dose of one of them, from a thread of this script); then for the
one link's PDF (made once a minute, then kept) and for the PDFs of every link in turn (each a new document: a process
keeps fewer than the links). A link's first read: `--first-read-pets` more pets of `--doses` doses each, each with
100 certificates, and the JSON of all their links in turn, more than a process keeps (about 700 of 50 doses): each
read is as a kennel's, which finds nothing kept in the process. It prints each figure and the ratios of the median
round. The public rate limit is on,
at a budget the one address never reaches, so that each request pays for its check as with the default.

    .venv/bin/python bench/certificate_links.py --doses 50 --duration 5 --rounds 2 --connections 16
    .venv/bin/python bench/certificate_links.py --database postgresql --doses 50 --duration 5 --rounds 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import BIN, database, free_port, process, run_wrk, server_env, wait_until_answering

OWNER = "bench@example.com"
ADMIN = "bench-admin@example.com"
GROUPS = ("Rabies", "DHPP", "Leptospirosis", "Bordetella", "Lyme")


def _token(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "petrecords"), "token", *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _dose(pet_id: str, vaccine_id: str, applied: dt.datetime, number: int) -> dict[str, Any]:
    return {
        "petId": pet_id,
        "vaccineId": vaccine_id,
        "appliedAt": applied.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lotNumber": f"LOT-{number:04d}",
        "veterinarian": "Dr Ana Núñez",
        "veterinarianLicence": "ES-28-4411",
        "clinic": "Clínica Veterinaria Retiro, Calle de Alcalá 98, 28009 Madrid",
    }


def _seed(
    base: str, owner: dict[str, str], admin: dict[str, str], args: argparse.Namespace
) -> tuple[str, str, list[str], list[str], list[str]]:
    """A pet with `--doses` doses and `--links` certificates of it, and `--other-pets` pets: (the pet's id, its ETag,
    the links, the other pets' ids, the vaccines' ids)."""
    vaccines = [
        httpx.post(
            f"{base}/v1/vaccines",
            json={"name": f"{group} vaccine", "petType": "Dog", "duration": 365, "group": group},
            headers=admin,
        ).json()["id"]
        for group in GROUPS
    ]
    pet = httpx.post(
        f"{base}/v1/pets", json={"name": "Rex", "petType": "Dog", "microchip": "982000123456789"}, headers=owner
    )
    pet_id = pet.json()["id"]
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=args.doses * 30)
    for number in range(args.doses):
        body = _dose(pet_id, vaccines[number % len(vaccines)], start + dt.timedelta(days=number * 30), number)
        httpx.post(f"{base}/v1/pet-vaccination", json=body, headers=owner).raise_for_status()
    links = []
    for _ in range(args.links):
        created = httpx.post(f"{base}/v1/pet-certificates", json={"petId": pet_id}, headers=owner)
        created.raise_for_status()
        links.append(created.json()["link"])
    others = [
        httpx.post(f"{base}/v1/pets", json={"name": f"Other {number}", "petType": "Dog"}, headers=owner).json()["id"]
        for number in range(args.other_pets)
    ]
    return pet_id, pet.headers["etag"], links, others, vaccines


def _seed_first_reads(base: str, owner: dict[str, str], vaccines: list[str], args: argparse.Namespace) -> list[str]:
    """`--first-read-pets` pets of `--doses` doses each, with 100 certificates each: their links."""
    links = []
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=args.doses * 30)
    with httpx.Client(base_url=base, headers=owner, timeout=30) as client:
        for number in range(args.first_read_pets):
            pet = client.post("/v1/pets", json={"name": f"Kennel {number}", "petType": "Dog"})
            pet.raise_for_status()
            pet_id = pet.json()["id"]
            for dose in range(args.doses):
                applied = start + dt.timedelta(days=dose * 30)
                client.post(
                    "/v1/pet-vaccination", json=_dose(pet_id, vaccines[dose % len(vaccines)], applied, dose)
                ).raise_for_status()
            for _ in range(100):
                created = client.post("/v1/pet-certificates", json={"petId": pet_id})
                created.raise_for_status()
                links.append(created.json()["link"])
    return links


@contextmanager
def writes_beside(
    base: str, owner: dict[str, str], others: list[str], vaccines: list[str], per_second: float
) -> Iterator[list[int]]:
    """A new dose of one of `others` every 1/`per_second` s, from a thread, while the block runs; yields a list that
    holds, once the block ends, how many were written."""
    done = [0]
    stop = threading.Event()

    def write() -> None:
        with httpx.Client(base_url=base, headers=owner, timeout=30) as client:
            due = time.monotonic()
            while not stop.is_set():
                number = done[0]
                applied = dt.datetime.now(dt.UTC) - dt.timedelta(days=1, seconds=number)
                body = _dose(others[number % len(others)], vaccines[number % len(vaccines)], applied, number)
                client.post("/v1/pet-vaccination", json=body).raise_for_status()
                done[0] += 1
                due += 1 / per_second
                stop.wait(max(0.0, due - time.monotonic()))

    writer = threading.Thread(target=write, name="writes-beside")
    writer.start()
    try:
        yield done
    finally:
        stop.set()
        writer.join()


FORMS = {
    # name: (wrk script, its environment, whether writes run beside it)
    "get_by_id": ("get_by_id", {}, False),
    "certificate_json": ("certificate", {"ACCEPT": "application/json"}, False),
    "get_by_id_beside_writes": ("get_by_id", {}, True),
    "certificate_json_beside_writes": ("certificate", {"ACCEPT": "application/json"}, True),
    "certificate_json_first_read": ("certificates_in_turn", {"ACCEPT": "application/json", "LINKS_FILE": ""}, False),
    "certificate_pdf": ("certificate", {"ACCEPT": "application/pdf"}, False),
    "certificate_pdf_new": ("certificates_in_turn", {"ACCEPT": "application/pdf"}, False),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doses", type=int, default=50)
    parser.add_argument("--links", type=int, default=100, help="certificates of the pet (at most 100)")
    parser.add_argument("--other-pets", type=int, default=20)
    parser.add_argument("--first-read-pets", type=int, default=20, help="pets of 100 links each, read in turn")
    parser.add_argument("--writes", type=float, default=20.0, help="writes a second to the other pets, beside")
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="petrecords-bench-") as work, database(args.database, Path(work)) as url:
        work_dir = Path(work)
        env = {**server_env(work_dir, url), "PETRECORDS_PUBLIC_RATE_LIMIT": "1000000000"}
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = [str(BIN / "petrecords"), "serve", "--port", str(port)]
        with process(command, env, work_dir / "serve.log"):
            wait_until_answering(f"{base}/healthz")
            owner_token = _token(env, "--user", OWNER)
            owner = {"Authorization": f"Bearer {owner_token}"}
            admin = {"Authorization": f"Bearer {_token(env, '--user', ADMIN, '--admin')}"}
            pet_id, etag, links, others, vaccines = _seed(base, owner, admin, args)
            ids = work_dir / "ids.txt"
            ids.write_text(f"{pet_id} {etag}\n")
            links_file = work_dir / "links.txt"
            links_file.write_text("".join(f"{link}\n" for link in links))
            first_reads = work_dir / "first-reads.txt"
            first_reads.write_text("".join(f"{link}\n" for link in _seed_first_reads(base, owner, vaccines, args)))
            common = {"TOKEN": owner_token, "IDS_FILE": str(ids), "LINK": links[0], "LINKS_FILE": str(links_file)}
            load = os.getloadavg()[0]
            print(f"{args.database}, {args.doses} doses, {len(links)} links; load average {load:.2f}", end="")
            print(f" on {os.cpu_count()} cores")
            rounds: list[dict[str, dict[str, Any]]] = []
            for number in range(args.rounds):
                figures = {}
                for name, (script, extra, beside) in FORMS.items():
                    run = functools.partial(
                        run_wrk,
                        base,
                        script,
                        duration=args.duration,
                        connections=args.connections,
                        env={**common, **extra, **({"LINKS_FILE": str(first_reads)} if "LINKS_FILE" in extra else {})},
                    )
                    if beside:
                        with writes_beside(base, owner, others, vaccines, args.writes) as written:
                            figures[name] = run()
                        figures[name]["writes_per_second"] = written[0] / args.duration
                    else:
                        figures[name] = run()
                rounds.append(figures)
                print(f"round {number + 1} (load average {os.getloadavg()[0]:.2f}):")
                for name, one in figures.items():
                    beside_line = (
                        f", {one['writes_per_second']:.0f} writes/s beside" if "writes_per_second" in one else ""
                    )
                    print(
                        f"  {name:<31} {one['rps']:7.0f}/s p99 {one['p99_ms']:7.1f} ms "
                        f"(non-2xx {one['non_2xx']}, errors {one['socket_errors']}){beside_line}"
                    )
    for json_name, get_name, what in (
        ("certificate_json", "get_by_id", "alone"),
        ("certificate_json_first_read", "get_by_id", "a link's first read"),
        ("certificate_json_beside_writes", "get_by_id_beside_writes", f"beside {args.writes:g} writes/s to other pets"),
    ):
        ratios = [one[json_name]["rps"] / one[get_name]["rps"] for one in rounds]
        listed = ", ".join(f"{ratio:.2f}" for ratio in ratios)
        print(f"public JSON ÷ get by id, {what}: {statistics.median(ratios):.2f} (median of {listed}; target ≥ 0.5)")
    for name, what in (("certificate_pdf", "one link, kept"), ("certificate_pdf_new", "every link in turn, new")):
        rates = ", ".join(f"{one[name]['rps']:.0f}" for one in rounds)
        median = statistics.median(one[name]["rps"] for one in rounds)
        print(f"PDF, {what}: {median:.0f}/s (median of {rates}; target ≥ 100/s)")


if __name__ == "__main__":
    main()
