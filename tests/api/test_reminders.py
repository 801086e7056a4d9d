"""Reminders in the change feed (contract v4 section 15): `due-soon` and `overdue` changes of a group's latest dose,
written by the reminders duty when their moment comes, once, only while true, with the feed's visibility. On both
databases; the duty's clock is given to each pass, so that a test moves time instead of waiting for it."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from subprocess import PIPE
from typing import Any

import msgspec
import pysqlite3.dbapi2 as pysqlite3
import pytest
from litestar.testing import AsyncTestClient

from petrecords import reminders as reminders_module
from petrecords.app import open_store
from petrecords.changes.publisher import message_id
from petrecords.config import Settings
from petrecords.db import sqlite_path
from petrecords.reminders import BY, Due, Reminders
from petrecords.reminders_apart import ReminderReport
from petrecords.resources.kept import keep_notices
from petrecords.resources.wire import show
from petrecords.store.base import NewChange, Store, Transaction
from petrecords.store.records import Statement
from petrecords.store.sqlite import SqliteStore
from petrecords.vaccinations import PET_VACCINATIONS
from petrecords.values import format_timestamp, now_ms
from tests.api.test_changes_feed import read_all, settled
from tests.api.test_commit_order import waits_without_a_transaction_id
from tests.api.test_shares import CLINIC, as_vet, share
from tests.changes.test_publisher import STREAM, _jetstream, _message_ids, _publisher
from tests.servers.nats_server import NatsServer, nats_server
from tests.support import ADMIN, ALICE, BOB, DOSES, at, auth, create, create_vaccine, dose, until

Client = AsyncTestClient[Any]

DAY_MS = 86_400_000
REMINDERS = ("due-soon", "overdue")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[NatsServer]:
    with nats_server(tmp_path / "nats") as started:
        yield started


@pytest.fixture
async def store(client: Client, settings: Settings) -> AsyncIterator[Store]:
    """The database as another instance of the service has it (the client's is the first)."""
    opened = open_store(settings)
    yield opened
    await opened.close()


@pytest.fixture
def reminders(store: Store, settings: Settings) -> Reminders:
    """That instance's duty, run a pass at a time."""
    return Reminders(settings, lambda: store)


STARTS_A_PASS_AND_WAITS = """
import subprocess, sys, time
said = open(sys.argv[1], "wb")
apart = subprocess.Popen(
    [sys.executable, "-m", "petrecords.reminders_apart"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=said
)
apart.stdin.write(sys.stdin.buffer.read())
apart.stdin.close()
print(apart.pid, flush=True)
time.sleep(600)
"""


def process_ended(stat: Path) -> bool:
    """Whether the process of this /proc/PID/stat has ended: no one waits for an orphan but the process that takes
    it in, and it may linger as a zombie (Z) meanwhile."""
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:  # gone, or reaped as it was read
        return True


def later(days: float) -> int:
    """The duty's clock `days` from now."""
    return now_ms() + int(days * DAY_MS)


async def doses_a_day_apart(
    client: Client, rex: dict[str, Any], vaccine: dict[str, Any], pets: int
) -> list[dict[str, Any]]:
    """Rex and `pets` - 1 pets more, each given a dose of `vaccine` due a day after the one before (3 days from the
    start first): the ranges' order is theirs."""
    every_pet = [rex, *[(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(pets - 1)]]
    return [await dose(client, pet, vaccine, -300, 3 + n) for n, pet in enumerate(every_pet)]


async def doses_sooner_for_later_pets(
    client: Client, rex: dict[str, Any], vaccine: dict[str, Any], pets: int
) -> list[dict[str, Any]]:
    """Rex and `pets` - 1 pets more, made in turn (their ids rising), each given a dose of `vaccine` due a day before
    the one before: the ranges' order is the reverse of the pets'."""
    every_pet = [rex, *[(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(pets - 1)]]
    assert [pet["id"] for pet in every_pet] == sorted(pet["id"] for pet in every_pet)
    return [await dose(client, pet, vaccine, -300, 3 + pets - n) for n, pet in enumerate(every_pet)]


def in_batches_of_two(reminders: Reminders) -> None:
    """Every pass a burst (in a process of its own where `remind` starts it), in batches of two."""
    reminders.APART_AT = 1
    reminders.BATCH = reminders.LEAST_BATCH = 2


async def reminders_of(client: Client, user: str = ADMIN) -> list[tuple[str, str, int]]:
    """(dose id, action, version) of each reminder the caller sees in the feed, in its order."""
    feed = await read_all(client, user, limit=1000)
    return [(change["id"], change["action"], change["version"]) for change in feed if change["action"] in REMINDERS]


class TestMoments:
    async def test_a_dose_inside_its_due_soon_window_is_reminded_in_one_pass(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -355, 10)

        assert await reminders.remind() == 1
        assert await reminders.remind() == 0

        await settled(client, 4)
        feed = await read_all(client, limit=1000)
        reminder = feed[-1]
        shown = (await client.get(f"{DOSES}/{given['id']}", headers=auth())).json()
        assert {key: reminder[key] for key in ("resource", "id", "action", "version", "by")} == {
            "resource": "pet-vaccination",
            "id": given["id"],
            "action": "due-soon",
            "version": 1,
            "by": BY,
        }
        assert reminder["record"] == shown
        assert shown == given  # a reminder writes nothing

    async def test_due_soon_then_overdue_each_at_its_moment(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 65)

        assert await reminders.remind(now=later(34)) == 0
        assert await reminders.remind(now=later(35.01)) == 1
        assert await reminders.remind(now=later(64.9)) == 0
        assert await reminders.remind(now=later(65.01)) == 1
        assert await reminders.remind(now=later(200)) == 0

        assert await reminders_of(client) == [(given["id"], "due-soon", 1), (given["id"], "overdue", 1)]

    async def test_once_dueAt_has_passed_only_overdue(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -370, -5)

        assert await reminders.remind() == 1

        assert await reminders_of(client) == [(given["id"], "overdue", 1)]

    async def test_moments_more_than_the_due_soon_days_past_are_skipped(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        lepto = (await create_vaccine(client, name="Lepto")).json()
        await dose(client, rex, rabies, -400, -31)
        waiting = await dose(client, rex, lepto, -300, 65)

        assert await reminders.remind() == 0  # the old one is marked, without a change
        assert await reminders.remind(now=later(96)) == 0  # the other's two moments, both long past
        assert await reminders.remind(now=later(400)) == 0

        assert await reminders_of(client) == []
        assert waiting["id"]

    async def test_a_whole_batch_and_more(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        vaccines = [(await create_vaccine(client, name=f"Vaccine {n}")).json() for n in range(7)]
        given = [await dose(client, rex, vaccine, -300, 5 + n) for n, vaccine in enumerate(vaccines)]
        reminders = Reminders(settings, lambda: store)
        reminders.BATCH = 3

        assert await reminders.remind() == 7

        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

    async def test_moments_that_come_during_a_pass_are_written_in_it(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        lepto = (await create_vaccine(client, name="Lepto")).json()
        first = await dose(client, rex, rabies, -300, 31)
        second = await dose(client, rex, lepto, -300, 32)
        readings = iter([later(1.5), later(2.5)])
        # The first batch reads the clock before the second dose's due-soon moment, the next one after it.
        reminders = Reminders(settings, lambda: store, clock=lambda: next(readings, later(2.5)))
        reminders.BATCH = reminders.LEAST_BATCH = 1

        assert await reminders.remind() == 2

        assert await reminders_of(client) == [(first["id"], "due-soon", 1), (second["id"], "due-soon", 1)]


class TestOnlyWhileTrue:
    async def test_a_booster_before_the_moment_takes_its_place(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -300, 40)
        booster = await dose(client, rex, rabies, -1, 364)

        assert await reminders.remind(now=later(45)) == 0
        assert await reminders.remind(now=later(340)) == 1

        assert await reminders_of(client) == [(booster["id"], "due-soon", 1)]

    async def test_a_dose_entered_in_error_or_deleted_is_not_reminded(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        lepto = (await create_vaccine(client, name="Lepto")).json()
        wrong = await dose(client, rex, rabies, -300, 40)
        gone = await dose(client, rex, lepto, -300, 40)
        marked = await client.patch(
            f"{DOSES}/{wrong['id']}", json={"status": "entered-in-error", "statusReason": "Not given."}, headers=auth()
        )
        assert marked.status_code == 200, marked.text
        assert (await client.delete(f"{DOSES}/{gone['id']}", headers=auth())).status_code in (200, 204)

        assert await reminders.remind(now=later(45)) == 0

        assert await reminders_of(client) == []

    async def test_a_dose_back_as_the_latest_is_not_reminded_twice(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        first = await dose(client, rex, rabies, -300, 10)
        assert await reminders.remind() == 1
        booster = await dose(client, rex, rabies, -1, 364)
        marked = await client.patch(
            f"{DOSES}/{booster['id']}",
            json={"status": "entered-in-error", "statusReason": "Not given."},
            headers=auth(),
        )
        assert marked.status_code == 200, marked.text

        assert await reminders.remind() == 0
        assert await reminders.remind(now=later(11)) == 1

        assert await reminders_of(client) == [(first["id"], "due-soon", 1), (first["id"], "overdue", 1)]

    async def test_a_dose_moved_to_another_pet_is_not_reminded_twice(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 10)
        assert await reminders.remind() == 1
        other = (await create(client, ALICE, name="Max")).json()
        moved = await client.patch(f"{DOSES}/{given['id']}", json={"petId": other["id"]}, headers=auth())
        assert moved.status_code == 200, moved.text

        assert await reminders.remind() == 0
        assert await reminders.remind(now=later(11)) == 1

        assert await reminders_of(client) == [(given["id"], "due-soon", 1), (given["id"], "overdue", 2)]

    async def test_a_pet_that_died_is_reminded_nothing(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -300, 40)
        died = await client.patch(f"/v1/pets/{rex['id']}", json={"deceasedAt": at(0)[:10]}, headers=auth())
        assert died.status_code == 200, died.text

        assert await reminders.remind(now=later(45)) == 0

        assert await reminders_of(client) == []

    async def test_a_new_dueAt_is_reminded_again(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 10)
        assert await reminders.remind() == 1
        moved = await client.patch(f"{DOSES}/{given['id']}", json={"dueAt": at(20)}, headers=auth())
        assert moved.status_code == 200, moved.text
        noted = await client.patch(f"{DOSES}/{given['id']}", json={"notes": "Booked."}, headers=auth())
        assert noted.status_code == 200, noted.text

        assert await reminders.remind() == 1
        assert await reminders.remind(now=later(21)) == 1

        assert await reminders_of(client) == [
            (given["id"], "due-soon", 1),
            (given["id"], "due-soon", 3),
            (given["id"], "overdue", 3),
        ]


class TestOnce:
    async def test_two_instances_racing_write_each_reminder_once(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        pets = [rex, *[(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(9)]]
        vaccines = [rabies, (await create_vaccine(client, name="Lepto")).json()]
        given = [await dose(client, pet, vaccine, -300, 3) for pet in pets for vaccine in vaccines]
        other = open_store(settings)  # a third instance's
        try:
            duties = [Reminders(settings, lambda: store), Reminders(settings, lambda: other)]
            for duty in duties:
                duty.BATCH = 3
            written = await asyncio.gather(*(duty.remind() for duty in duties), *(duty.remind() for duty in duties))
        finally:
            await other.close()

        assert sum(written) == len(given)
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

    @pytest.mark.only_on("postgresql")  # on SQLite a write transaction holds the database
    async def test_a_reminder_waits_for_a_write_of_the_vaccine_it_shows(
        self, client: Client, reminders: Reminders, database_url: str, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        # A vaccine renamed meanwhile comes before the reminder in the log: the reminder must show the new name.
        await dose(client, rex, rabies, -355, 10)

        assert await waits_without_a_transaction_id(database_url, ("vaccines", rabies["id"]), reminders.remind) == 1

    @pytest.mark.only_on("sqlite")
    @pytest.mark.parametrize("apart_at", [1, Reminders.APART_AT], ids=["a burst", "a few"])
    async def test_one_sqlite_pass_at_a_time_and_another_takes_over_after_kill_9(
        self,
        client: Client,
        reminders: Reminders,
        settings: Settings,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        apart_at: int,
    ) -> None:
        given = await dose(client, rex, rabies, -300, 3)
        reminders.APART_AT = apart_at
        lock = f"{sqlite_path(settings.resolved_database_url)}.reminders-lock"
        # Another process's pass, as the lock file sees it (a server's other worker, or another server).
        holding = "import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print(flush=True)"
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", f"{holding}; sys.stdin.read()", lock, stdin=PIPE, stdout=PIPE
        )
        try:
            assert holder.stdout is not None
            await holder.stdout.readline()
            assert await reminders.remind() == 0
            assert reminders.processes == 0  # a burst's process is not started to find the lock held
            # It looks again an interval later, not at once: the other writes until nothing is left.
            assert await reminders.next_wait() == reminders.interval_seconds
        finally:
            holder.kill()
            await holder.wait()

        assert await reminders.remind() == 1
        assert reminders.processes == (1 if apart_at == 1 else 0)
        assert await reminders_of(client) == [(given["id"], "due-soon", 1)]

    @pytest.mark.only_on("postgresql")  # on SQLite a batch reads its rows in the transaction that sets them
    async def test_an_instance_that_loses_a_batch_writes_from_the_range_end(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 9)
        other = open_store(settings)  # a third instance's
        try:
            first, second = Reminders(settings, lambda: store), Reminders(settings, lambda: other)
            first.BATCH = second.BATCH = 3
            batches: list[list[str]] = []
            own = second._remind_batch

            async def raced(tx: Transaction, found: Sequence[Due], now: int, *, read_again: bool) -> tuple[int, int]:
                if not batches:
                    # The first instance sets the batch's rows between the second's read and its write (through a
                    # store opened here: on SQLite the second's pass runs on a thread of its own, see Reminders).
                    taker = open_store(settings)
                    try:
                        async with taker.transaction(write=True) as taking:
                            await first._remind_batch(taking, found, now, read_again=True)
                    finally:
                        await taker.close()
                batches.append([str(row[0]) for row in found])
                return await own(tx, found, now, read_again=read_again)

            second._remind_batch = raced  # type: ignore[method-assign]
            assert await second.remind() == 6
            assert await first.remind() == 0
        finally:
            await other.close()

        ids = [one["id"] for one in given]
        # Its first batch lost, the second instance wrote from the range's end until it met what the first had written.
        assert batches == [ids[:3], ids[:-4:-1], ids[-4:-7:-1]]
        assert sorted(await reminders_of(client)) == sorted((one, "due-soon", 1) for one in ids)


class TestOffTheLoop:
    async def test_a_sqlite_pass_writes_on_a_thread_of_its_own(
        self, client: Client, store: Store, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        await dose(client, rex, rabies, -300, 10)
        threads: list[int] = []
        own = reminders._remind_batch

        async def noted(tx: Transaction, found: Sequence[Due], now: int, *, read_again: bool) -> tuple[int, int]:
            threads.append(threading.get_ident())
            return await own(tx, found, now, read_again=read_again)

        reminders._remind_batch = noted  # type: ignore[method-assign]
        assert await reminders.remind() == 1

        # On SQLite the batch's statements and COMMIT leave the event loop to its requests; on PostgreSQL they wait
        # on it without holding it.
        assert (threads[0] != threading.get_ident()) == (store.dialect == "sqlite")

    async def test_a_sqlite_batch_reads_its_rows_once_in_its_write_transaction(
        self,
        client: Client,
        store: Store,
        reminders: Reminders,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        await dose(client, rex, rabies, -300, 10)
        read_again: list[int] = []
        own = reminders_module.rows_by_id

        def counted(ids: Sequence[Any]) -> Any:
            read_again.append(len(ids))
            return own(ids)

        monkeypatch.setattr(reminders_module, "rows_by_id", counted)
        assert await reminders.remind() == 1

        # On SQLite no write can come between the read and the compare-and-set, which share a write transaction; on
        # PostgreSQL the batch holds its pets, then reads its rows again.
        assert read_again == ([] if store.dialect == "sqlite" else [1])

    async def test_a_cancelled_pass_ends_after_its_batch_and_the_next_writes_the_rest_once(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 6)
        reminders = Reminders(settings, lambda: store)
        reminders.BATCH = reminders.LEAST_BATCH = 2
        loop = asyncio.get_running_loop()
        in_batch, go_on = asyncio.Event(), threading.Event()
        own = reminders._remind_batch

        async def held(tx: Transaction, found: Sequence[Due], now: int, *, read_again: bool) -> tuple[int, int]:
            loop.call_soon_threadsafe(in_batch.set)
            await asyncio.to_thread(go_on.wait)  # the first batch waits here until the pass is cancelled
            return await own(tx, found, now, read_again=read_again)

        reminders._remind_batch = held  # type: ignore[method-assign]
        passing = asyncio.create_task(reminders.remind())
        await in_batch.wait()
        passing.cancel()
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await passing

        # On SQLite its batch ends and commits on its thread after the task was cancelled, and no other follows; on
        # PostgreSQL the batch, cancelled where it waits on the loop, is rolled back.
        kept = 2 if store.dialect == "sqlite" else 0

        async def batch_ended() -> bool:
            return len(await reminders_of(client)) == kept

        await until(batch_ended, what="the cancelled pass's batch")
        await asyncio.sleep(0.2)
        assert len(await reminders_of(client)) == kept
        reminders._remind_batch = own  # type: ignore[method-assign]
        assert await reminders.remind() == len(given) - kept
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

    @pytest.mark.only_on("sqlite")
    async def test_a_burst_is_written_by_a_process_of_its_own(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 5)
        reminders.BATCH = reminders.LEAST_BATCH = 2
        reminders.APART_AT = 6

        assert await reminders.remind() == 5  # fewer owed than APART_AT: on a thread
        assert reminders.processes == 0
        reminders.APART_AT = 5
        assert await reminders.remind(now=later(30)) == 5  # a burst: in a process, in batches, each once
        assert reminders.processes == 1
        assert await reminders.remind(now=later(30)) == 0

        assert sorted(await reminders_of(client)) == sorted(
            (one["id"], action, 1) for one in given for action in REMINDERS
        )

    @pytest.mark.only_on("sqlite")
    async def test_a_sqlite_burst_is_written_in_the_order_of_its_pets(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_sooner_for_later_pets(client, rex, rabies, 6)
        in_batches_of_two(reminders)

        assert await reminders.remind(now=later(1)) == 6  # a burst, in a process
        assert reminders.processes == 1

        pet_of = {one["id"]: one["petId"] for one in given}
        written = [pet_of[dose_id] for dose_id, _, _ in await reminders_of(client)]
        assert written == sorted(written) == [one["petId"] for one in given]

    @pytest.mark.only_on("sqlite")
    async def test_a_sqlite_burst_reads_ahead_a_part_at_a_time_and_writes_each_once(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_sooner_for_later_pets(client, rex, rabies, 6)
        in_batches_of_two(reminders)
        reminders.READ_AHEAD = 3

        assert await reminders.remind(now=later(1)) == 6

        # Read three at a time in the order of their moments (the last pet's first), written two at a time in the
        # order of their pets; the one left is read again with the next part: pets 3 and 4, then of 5, 2 and 1
        # pets 1 and 2, then of 5 and 0 both.
        order = [given[n]["id"] for n in (3, 4, 1, 2, 0, 5)]
        assert await reminders_of(client) == [(dose_id, "due-soon", 1) for dose_id in order]

    @pytest.mark.only_on("sqlite")
    async def test_a_dose_deleted_after_the_burst_read_it_is_not_reminded(
        self,
        client: Client,
        reminders: Reminders,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        given = await doses_sooner_for_later_pets(client, rex, rabies, 4)
        in_batches_of_two(reminders)
        own = reminders_module.ReadAhead.take
        gone = given[3]  # read with the others, in the second batch
        deleted: list[bool] = []

        async def then_deleted(ahead: reminders_module.ReadAhead, *arguments: Any) -> list[Due]:
            taken = await own(ahead, *arguments)
            if not deleted and any(row[0] == uuid.UUID(gone["id"]) for row in ahead.rows):
                assert (await client.delete(f"{DOSES}/{gone['id']}", headers=auth())).status_code in (200, 204)
                deleted.append(True)
            return taken

        monkeypatch.setattr(reminders_module.ReadAhead, "take", then_deleted)
        # In this process, so that its read ahead is the one above: the dose is deleted once read, before its batch.
        assert await reminders.remind_alone(later(1), threading.Event()) == (3, True)

        assert deleted
        assert sorted(await reminders_of(client)) == sorted(
            (one["id"], "due-soon", 1) for one in given if one is not gone
        )

    async def test_a_burst_is_spread_over_the_time_it_is_given(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        pets = [rex, *[(await create(client, ALICE, name=f"Pet {n}")).json() for n in range(5)]]
        given = [await dose(client, pet, rabies, -300, 3) for pet in pets]  # one moment for all six
        moment = int(datetime.datetime.fromisoformat(given[0]["dueAt"]).timestamp() * 1000) - 30 * DAY_MS
        reminders.APART_AT = 6
        reminders.BATCH = reminders.LEAST_BATCH = 2
        reminders.SPREAD_SECONDS = 2.0

        started = time.monotonic()
        assert await reminders.remind(now=moment) == 6
        # Three batches, each followed by its share of what the spread leaves: the pass ends about 2 s after it
        # began, where it would end within a few milliseconds (on SQLite, about 0.6 s for its process to start).
        assert time.monotonic() - started >= 1.6
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

    @pytest.mark.only_on("sqlite")
    async def test_a_burst_stopped_ends_after_its_batch_and_the_next_pass_writes_the_rest_once(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 6)
        reminders.APART_AT = 1
        reminders.BATCH = reminders.LEAST_BATCH = 2
        # A rest of a few seconds after each batch: the process is stopped (SIGTERM) while the first rests.
        reminders.REST = {"sqlite": 1_000.0}
        passing = asyncio.create_task(reminders.remind())

        async def first_batch_written() -> bool:
            return len(await reminders_of(client)) >= 2

        await until(first_batch_written, what="the burst's first batch")
        passing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await passing

        assert len(await reminders_of(client)) == 2
        reminders.REST = Reminders.REST
        assert await reminders.remind() == len(given) - 2
        assert reminders.processes == 2
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

    @pytest.mark.only_on("sqlite")
    async def test_a_burst_whose_worker_is_killed_ends_after_its_batch_and_lets_go_of_the_lock(
        self,
        client: Client,
        store: Store,
        reminders: Reminders,
        rex: dict[str, Any],
        rabies: dict[str, Any],
        tmp_path: Path,
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 6)
        assert isinstance(store, SqliteStore)
        in_batches_of_two(reminders)
        reminders.REST = {"sqlite": 10_000.0}  # a rest of some seconds after each batch
        # A worker in miniature: it starts the pass's process as the duty does, then is killed with SIGKILL, which
        # it cannot pass on.
        said = tmp_path / "apart.stderr"
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-c", STARTS_A_PASS_AND_WAITS, str(said), stdin=PIPE, stdout=PIPE
        )
        assert worker.stdin is not None
        assert worker.stdout is not None
        worker.stdin.write(msgspec.json.encode(reminders.order_of_a_pass(None, parent=worker.pid)))
        worker.stdin.close()
        apart = Path(f"/proc/{int(await worker.stdout.readline())}/stat")  # the pass's process has started

        async def first_batch_written() -> bool:
            return len(await reminders_of(client)) >= 2

        # Two processes' start (the worker's, then the pass's), on a machine the suite keeps busy.
        await until(first_batch_written, what="the burst's first batch", seconds=30)
        worker.kill()
        await worker.wait()

        async def lock_let_go() -> bool:
            return not store.held_elsewhere("reminders")

        # Within its first rest (10,000 times its batch's time: `until` waits 10 s), not at the end of its pass.
        await until(lock_let_go, what="the orphaned pass to end")
        written = len(await reminders_of(client))
        assert written in (2, 4)  # the batch under way when the worker died, if any, committed
        reminders.REST = Reminders.REST  # the next pass rests as a pass does: with the rests above, 100 s
        assert await reminders.remind() == len(given) - written
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)

        async def apart_ended() -> bool:
            return process_ended(apart)

        await until(apart_ended, what="the orphaned pass's process to end")
        # Its report had no one to go to, and it said nothing of that.
        assert "Traceback" not in said.read_text()

    @pytest.mark.only_on("sqlite")
    async def test_a_burst_whose_worker_ended_before_it_began_writes_nothing(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 3)
        # Its parent named as a process that is not its parent now: the worker that started it has ended.
        order = reminders.order_of_a_pass(None, parent=1)
        apart = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "petrecords.reminders_apart", stdin=PIPE, stdout=PIPE
        )
        said, _ = await apart.communicate(msgspec.json.encode(order))

        assert apart.returncode == 0
        assert msgspec.json.decode(said, type=ReminderReport) == ReminderReport(written=0, held=True)
        assert await reminders_of(client) == []
        assert await reminders.remind() == len(given)

    @pytest.mark.only_on("sqlite")
    async def test_a_sqlite_pass_empties_the_log_that_readers_keep_from_starting_again(
        self, client: Client, store: Store, settings: Settings, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await doses_a_day_apart(client, rex, rabies, 6)
        reminders = Reminders(settings, lambda: store)
        reminders.BATCH = reminders.LEAST_BATCH = 2
        reminders.LOG_BYTES = 0
        database = sqlite_path(settings.resolved_database_url)
        assert database is not None
        reader = pysqlite3.connect(database, isolation_level=None, check_same_thread=False)
        log_sizes: list[int] = []
        own = reminders._read_and_remind

        async def read_across(on: Store, statement: Statement, now: int) -> tuple[list[Due], int, int]:
            # A reader from before the batch's COMMIT to after it, as requests always are on a busy service: no
            # checkpoint meanwhile copies the batch's frames, and SQLite starts the log again from its beginning only
            # once all of them are copied.
            log_sizes.append(os.stat(f"{database}-wal").st_size)
            reader.execute("BEGIN")
            reader.execute("SELECT count(*) FROM pets").fetchall()
            try:
                return await own(on, statement, now)
            finally:
                reader.execute("COMMIT")

        reminders._read_and_remind = read_across  # type: ignore[method-assign]
        try:
            assert await reminders.remind() == len(given)
        finally:
            reader.close()

        # Each batch found the log its predecessor wrote emptied, and the last one left it empty.
        assert log_sizes[1:] == [0] * (len(log_sizes) - 1)
        assert os.stat(f"{database}-wal").st_size == 0
        assert sorted(await reminders_of(client)) == sorted((one["id"], "due-soon", 1) for one in given)


class TestSeenAsChanges:
    async def test_the_history_shows_the_reminders_after_their_write(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 10)
        await reminders.remind()
        await reminders.remind(now=later(11))
        replaced = await client.patch(f"{DOSES}/{given['id']}", json={"notes": "Called."}, headers=auth())
        assert replaced.status_code == 200, replaced.text

        history = (await client.get(f"{DOSES}/{given['id']}/history", headers=auth())).json()

        assert [(item["action"], item["version"]) for item in history["items"]] == [
            ("created", 1),
            ("due-soon", 1),
            ("overdue", 1),
            ("replaced", 2),
        ]
        assert history["totalCount"] == 4
        assert [(item["action"], item["by"]) for item in history["items"]][1] == ("due-soon", BY)

    async def test_the_owner_sees_them_and_others_do_not(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 10)

        await reminders.remind()

        assert await reminders_of(client, ALICE) == [(given["id"], "due-soon", 1)]
        assert await reminders_of(client, BOB) == []

    async def test_a_grantee_sees_them_within_the_share_window_only(
        self, client: Client, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        lepto = (await create_vaccine(client, name="Lepto")).json()
        while_shared = await dose(client, rex, rabies, -300, 10)
        after_it = await dose(client, rex, lepto, -300, 20)
        shared = (await share(client, rex, CLINIC)).json()
        assert await reminders.remind() == 2
        revoked = await client.delete(f"/v1/pet-shares/{shared['id']}", headers=auth())
        assert revoked.status_code == 200, revoked.text

        assert await reminders.remind(now=later(11)) == 1
        assert await reminders.remind(now=later(21)) == 1

        def seen_by_vet(changes: list[dict[str, Any]]) -> list[tuple[str, str]]:
            return [(change["id"], change["action"]) for change in changes if change["action"] in REMINDERS]

        vet = await client.get("/v1/changes", params={"limit": "1000"}, headers=as_vet())
        assert vet.status_code == 200, vet.text
        assert sorted(seen_by_vet(vet.json()["items"])) == sorted(
            [(while_shared["id"], "due-soon"), (after_it["id"], "due-soon")]
        )
        assert len(await reminders_of(client, ALICE)) == 4

    async def test_each_reminder_has_a_nats_message_id_of_its_own(
        self, client: Client, store: Store, reminders: Reminders, rex: dict[str, Any], rabies: dict[str, Any]
    ) -> None:
        given = await dose(client, rex, rabies, -300, 10)
        await reminders.remind()
        await reminders.remind(now=later(11))
        await client.patch(f"{DOSES}/{given['id']}", json={"dueAt": at(30)}, headers=auth())
        await reminders.remind()

        async with store.transaction(write=False) as tx:
            changes = await tx.changes_after((0, 0), limit=100, reader=None, resources=("pet-vaccination",))

        ids = [message_id(change) for change in changes]
        assert [change.action for change in changes] == ["created", "due-soon", "overdue", "replaced", "due-soon"]
        assert len(set(ids)) == len(ids)


@pytest.mark.parametrize("days", [0])
async def test_no_due_soon_days_still_reminds_overdue(
    make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings], days: int
) -> None:
    settings = make_settings(due_soon_days=days)
    async with make_client(settings) as client:
        pet = (await create(client, ALICE, name="Rex")).json()
        vaccine = (await create_vaccine(client, name="Rabies")).json()
        given = await dose(client, pet, vaccine, -300, 10)
        store = open_store(settings)
        try:
            reminders = Reminders(settings, lambda: store)
            assert await reminders.remind() == 0
            assert await reminders.remind(now=later(10.5)) == 1
        finally:
            await store.close()

        assert await reminders_of(client) == [(given["id"], "overdue", 1)]


async def test_every_instance_runs_the_duty(
    make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
) -> None:
    async with make_client(make_settings(reminders_interval_seconds=0.1)) as client:
        pet = (await create(client, ALICE, name="Rex")).json()
        vaccine = (await create_vaccine(client, name="Rabies")).json()

        given = await dose(client, pet, vaccine, -300, 1)

        async def reminded() -> bool:
            return await reminders_of(client) == [(given["id"], "due-soon", 1)]

        await until(reminded, what="the due-soon reminder")


async def test_the_duty_wakes_for_a_moment_before_its_interval_ends(
    client: Client,
    make_client: Callable[[Settings], Client],
    make_settings: Callable[..., Settings],
    rex: dict[str, Any],
    rabies: dict[str, Any],
) -> None:
    # The dose is written before the instance with the duty starts: its first pass finds the due-soon moment a few
    # seconds ahead, and the next pass must come then, not at the end of the interval.
    due_at = format_timestamp(later(30) + 3_000)
    body = {"petId": rex["id"], "vaccineId": rabies["id"], "appliedAt": at(-300), "dueAt": due_at}
    created = await client.post(DOSES, json=body, headers=auth(ALICE))
    assert created.status_code == 201, created.text
    given = created.json()

    async with make_client(make_settings(reminders_interval_seconds=30, due_soon_days=30)) as duty:

        async def reminded() -> bool:
            return await reminders_of(duty) == [(given["id"], "due-soon", 1)]

        # Well before the interval's end, whatever the machine's load.
        await until(reminded, what="the due-soon reminder at its moment", seconds=20)


async def test_nats_gets_each_reminder_under_its_subject(
    client: Client,
    store: Store,
    reminders: Reminders,
    rex: dict[str, Any],
    rabies: dict[str, Any],
    broker: NatsServer,
    make_settings: Callable[..., Settings],
) -> None:
    given = await dose(client, rex, rabies, -300, 10)
    await reminders.remind()
    await reminders.remind(now=later(11))
    connection, stream = await _jetstream(broker)
    try:
        await stream.add_stream(name=STREAM, subjects=["petrecords.>"])
        publisher = _publisher(make_settings, broker, store, "only")
        while await publisher.publish_once(stream):
            pass

        ids = await _message_ids(stream)
        last = [await stream.get_msg(STREAM, seq=sequence) for sequence in (len(ids) - 1, len(ids))]
    finally:
        await connection.close()

    assert len(ids) == len(set(ids)) == 5  # the pet, the vaccine, the dose and its two reminders
    assert [message.subject for message in last] == [
        "petrecords.pet-vaccination.due-soon",
        "petrecords.pet-vaccination.overdue",
    ]
    assert [json.loads(message.data)["id"] for message in last] == [given["id"], given["id"]]


async def test_notices_embedding_one_record_show_each_state_of_it(
    client: Client, store: Store, rex: dict[str, Any], rabies: dict[str, Any]
) -> None:
    given = await dose(client, rex, rabies, -300, 10)
    async with store.transaction(write=False) as tx:
        row = await tx.get(PET_VACCINATIONS.collection, uuid.UUID(given["id"]))
    assert row is not None
    vaccine = row["vaccine"]
    renamed = {**row, "vaccine": {**vaccine, "name": "Renamed", "revision": vaccine["revision"] + 1}}
    kept: list[NewChange] = []

    class Recording:
        async def record_changes(self, changes: Sequence[NewChange]) -> None:
            kept.extend(changes)

    rows = [row, renamed, row]
    await keep_notices(tx=Recording(), resource=PET_VACCINATIONS, rows=rows, action="due-soon", by=BY, at=now_ms())  # type: ignore[arg-type]

    # The embedded vaccine is encoded once for each of its states (id and revision), each record as `show` has it.
    assert [change.record for change in kept] == [msgspec.json.encode(show(PET_VACCINATIONS, one)) for one in rows]
    assert json.loads(kept[1].record)["vaccine"]["name"] == "Renamed"
