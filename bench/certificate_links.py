"""A certificate's public link against get by id, in one run: a real `petrecords serve` (its defaults; SQLite, or
PostgreSQL with `--database postgresql`)
holding one pet with `--doses` doses (of 5 groups) and a certificate of it; wrk (2 threads) asks in turn for the pet
by id with its owner's token, for the link's JSON and for its PDF, in `--rounds` rounds, and prints each figure and
the ratios of the median round. The public rate limit is on, at a budget the one address never reaches, so that
each request pays for its check as with the default.

    .venv/bin/python bench/certificate_links.py --doses 50 --duration 5 --rounds 3 --connections 16
    .venv/bin/python bench/certificate_links.py --database postgresql --doses 50 --duration 5 --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
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


def _seed(base: str, owner: dict[str, str], admin: dict[str, str], doses: int) -> tuple[str, str, str]:
    """A pet with `doses` doses and a certificate of it: (the pet's id, its ETag, the link)."""
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
    start = dt.datetime.now(dt.UTC) - dt.timedelta(days=doses * 30)
    for number in range(doses):
        applied = (start + dt.timedelta(days=number * 30)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "petId": pet_id,
            "vaccineId": vaccines[number % len(vaccines)],
            "appliedAt": applied,
            "lotNumber": f"LOT-{number:04d}",
            "veterinarian": "Dr Ana Núñez",
            "veterinarianLicence": "ES-28-4411",
            "clinic": "Clínica Veterinaria Retiro, Calle de Alcalá 98, 28009 Madrid",
        }
        response = httpx.post(f"{base}/v1/pet-vaccination", json=body, headers=owner)
        response.raise_for_status()
    link = httpx.post(f"{base}/v1/pet-certificates", json={"petId": pet_id}, headers=owner).json()["link"]
    return pet_id, pet.headers["etag"], link


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doses", type=int, default=50)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
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
            pet_id, etag, link = _seed(base, owner, admin, args.doses)
            ids = work_dir / "ids.txt"
            ids.write_text(f"{pet_id} {etag}\n")
            common = {"TOKEN": owner_token, "IDS_FILE": str(ids), "LINK": link}
            forms = {
                "get_by_id": ("get_by_id", {}),
                "certificate_json": ("certificate", {"ACCEPT": "application/json"}),
                "certificate_pdf": ("certificate", {"ACCEPT": "application/pdf"}),
            }
            load = os.getloadavg()[0]
            print(f"{args.database}, {args.doses} doses; load average {load:.2f} on {os.cpu_count()} cores")
            rounds: list[dict[str, dict[str, Any]]] = []
            for number in range(args.rounds):
                figures = {
                    name: run_wrk(
                        base,
                        script,
                        duration=args.duration,
                        connections=args.connections,
                        env={**common, **extra},
                    )
                    for name, (script, extra) in forms.items()
                }
                rounds.append(figures)
                line = "  ".join(
                    f"{name} {one['rps']:7.0f}/s p99 {one['p99_ms']:6.1f} ms (non-2xx {one['non_2xx']})"
                    for name, one in figures.items()
                )
                print(f"round {number + 1}: {line}")
    ratios = [one["certificate_json"]["rps"] / one["get_by_id"]["rps"] for one in rounds]
    median = statistics.median(ratios)
    pdf = statistics.median(one["certificate_pdf"]["rps"] for one in rounds)
    print(f"public JSON ÷ get by id: {median:.2f} (median of {len(ratios)}; target ≥ 0.5)")
    print(f"PDF: {pdf:.0f}/s (median; target ≥ 100/s)")


if __name__ == "__main__":
    main()
