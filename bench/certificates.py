"""What a certificate's forms cost to make, without HTTP or a database: the facts of a pet with `--doses` doses
built from rows and encoded as JSON, signed as a JWS, rendered as a page and as a PDF, each timed alone in one
process (one core), after a first call that parses the fonts. Then what its public JSON costs to answer, without
HTTP, from an app's SQLite database holding the pet, a certificate of it and another pet: read anew (nothing
kept), kept and asked again after a write to the other pet (the link's vouch read), kept and asked again with
nothing written; beside the read of the pet by id that get by id makes.

    .venv/bin/python bench/certificates.py --doses 50 --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from litestar.testing import AsyncTestClient
from tests.certificates.support import facts_of, many_doses
from tests.support import SECRET, auth

from petrecords.app import create_app
from petrecords.certificates.document import render_pdf
from petrecords.certificates.facts import encode_facts
from petrecords.certificates.page import render_page
from petrecords.certificates.public import JSON, PublicCertificates
from petrecords.certificates.signing import load_signer
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.pets import PETS


def _rate(name: str, work: Callable[[], object], seconds: float) -> None:
    """Wall-clock rate, and the processor time each took: on a busy machine the second says what one core can do."""
    work()
    done, started, processor = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - started) < seconds:
        work()
        done += 1
    each_ms = (time.process_time() - processor) / done * 1000
    print(f"{name:<22} {done / elapsed:8.0f}/s  {elapsed / done * 1000:8.3f} ms each, {each_ms:8.3f} ms of processor")


async def _rate_async(name: str, work: Callable[[], Awaitable[object]], seconds: float) -> None:
    await work()
    done, started, processor = 0, time.perf_counter(), time.process_time()
    while (elapsed := time.perf_counter() - started) < seconds:
        await work()
        done += 1
    each_us = (time.process_time() - processor) / done * 1e6
    print(f"{name:<34} {done / elapsed:8.0f}/s  {elapsed / done * 1e6:8.1f} µs each, {each_us:8.1f} µs of processor")


async def _reads(doses: int, seconds: float, data: Path) -> None:
    settings = Settings(data_dir=data, auth_secret=SECRET, database_url=f"sqlite:///{data / 'pets.sqlite3'}")
    migrate(settings)
    app = create_app(settings)
    async with AsyncTestClient(app=app) as client:  # type: ignore[arg-type]
        owner = auth("bench@example.com")
        vaccine = (
            await client.post(
                "/v1/vaccines", json={"name": "V", "petType": "Dog", "duration": 365}, headers=auth(admin=True)
            )
        ).json()["id"]
        pet, other = [
            (await client.post("/v1/pets", json={"name": name, "petType": "Dog"}, headers=owner)).json()["id"]
            for name in ("Rex", "Fido")
        ]
        start = dt.datetime.now(dt.UTC) - dt.timedelta(days=doses * 30)

        async def vaccinate(pet_id: str, applied: dt.datetime) -> None:
            body = {"petId": pet_id, "vaccineId": vaccine, "appliedAt": applied.strftime("%Y-%m-%dT%H:%M:%SZ")}
            (await client.post("/v1/pet-vaccination", json=body, headers=owner)).raise_for_status()

        for number in range(doses):
            await vaccinate(pet, start + dt.timedelta(days=number * 30))
        link = (await client.post("/v1/pet-certificates", json={"petId": pet}, headers=owner)).json()["link"]
        token = link.rsplit("/", 1)[1]
        services: Any = app
        while not hasattr(services, "state"):  # the edge and the direct routes wrap the framework's app
            services = services.app
        services = services.state.services
        public = PublicCertificates(services, None)
        store, pet_id = services.store, uuid.UUID(pet)

        async def by_id() -> None:
            await store.read(PETS.collection, pet_id, None)

        async def anew() -> None:
            public._recent = type(public._recent)()
            await public._answer(token, JSON)

        async def after_a_write() -> None:
            # The write's own cost kept out: a database's version moved, as a commit of another process moves it.
            public._recent._confirmed.clear()
            await public._answer(token, JSON)

        async def kept() -> None:
            await public._answer(token, JSON)

        print(f"the public JSON from SQLite, {doses} doses, without HTTP; load average {os.getloadavg()[0]:.2f}")
        await _rate_async("get by id's read of the pet", by_id, seconds)
        await _rate_async("link's JSON, read anew", anew, seconds)
        await vaccinate(other, dt.datetime.now(dt.UTC) - dt.timedelta(days=1))
        await _rate_async("link's JSON, vouch read again", after_a_write, seconds)
        await _rate_async("link's JSON, nothing written", kept, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--doses", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    doses = many_doses(args.doses)
    facts = facts_of(doses=doses)
    payload = encode_facts(facts)
    with tempfile.TemporaryDirectory() as data:
        signer = load_signer(Settings(data_dir=Path(data), _env_file=None))  # type: ignore[call-arg]
    print(f"{args.doses} doses; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    _rate("facts built + JSON", lambda: encode_facts(facts_of(doses=doses)), args.seconds)
    _rate("JWS of the JSON", lambda: signer.sign(payload), args.seconds)
    _rate("HTML page", lambda: render_page(facts), args.seconds)
    _rate("PDF", lambda: render_pdf(facts), args.seconds)
    with tempfile.TemporaryDirectory() as data:
        asyncio.run(_reads(args.doses, args.seconds, Path(data)))


if __name__ == "__main__":
    main()
