"""What orders the change log by commit order on PostgreSQL, where writers run at once (contract section 11).

A change's cursor starts with the id of its transaction, which PostgreSQL assigns at the transaction's first
write. Every write path takes the locks of what it writes (and shares the locks of what it refers to) before
that first write, so of two transactions that touch one record the later one has the greater id; and the feed
never serves a change while a write of this database that could come before it is still in flight. These
tests hold a lock, or a transaction, from outside and look at what the service does meanwhile.
SQLite has one writer at a time, which orders its log by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import httpx
import pytest
from litestar.testing import AsyncTestClient

from petrecords.changes import feed
from petrecords.store.postgres import PostgresTransaction, lock_key
from tests.api.test_changes_feed import read_all, read_feed, summary
from tests.support import ALICE, BOB, POSTGRES_ADMIN_URL, admin, auth, create, create_vaccine, run_sql

Client = AsyncTestClient[Any]
APPLIED = "2026-11-20T10:00:00.000Z"
WAIT_SECONDS = 10.0
Sent = TypeVar("Sent")


# SQLite runs one write transaction at a time: no commit can overtake another.
pytestmark = pytest.mark.only_on("postgresql")


@pytest.fixture
def postgres_url(database_url: str) -> str:
    return database_url


async def _hold_and_watch(database_url: str, lock: int, held: threading.Event, waiting: list[Any]) -> None:
    """Hold a record's lock until a session of the database waits for it; note that session's transaction id."""
    holder = await asyncpg.connect(database_url, timeout=5)
    watcher = await asyncpg.connect(database_url, timeout=5)
    try:
        async with holder.transaction():
            await holder.execute("SELECT pg_advisory_xact_lock($1)", lock)
            held.set()
            deadline = time.monotonic() + WAIT_SECONDS
            while not waiting and time.monotonic() < deadline:
                rows = await watcher.fetch(
                    "SELECT backend_xid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND wait_event = 'advisory'"
                )
                waiting.extend(row["backend_xid"] for row in rows)
                await asyncio.sleep(0.01)
    finally:
        await holder.close()
        await watcher.close()


async def assert_waits_without_a_transaction_id(
    database_url: str, held: tuple[str, str], send: Callable[[], Awaitable[httpx.Response]], status: int
) -> None:
    """`send` waits for the lock of the `held` record (resource, id) with no transaction id of its own yet."""
    response = await waits_without_a_transaction_id(database_url, held, send)
    assert response.status_code == status, response.text


async def waits_without_a_transaction_id(
    database_url: str, held: tuple[str, str], send: Callable[[], Awaitable[Sent]]
) -> Sent:
    """What `send` returns, once it has waited for the lock of the `held` record (resource, id) with no transaction
    id of its own yet."""
    # The test client runs the app on the calling thread's behalf and blocks it: the lock is held elsewhere.
    taken = threading.Event()
    waiting: list[Any] = []
    lock = lock_key(held[0], uuid.UUID(held[1]))
    holder = threading.Thread(target=asyncio.run, args=(_hold_and_watch(database_url, lock, taken, waiting),))
    holder.start()
    try:
        assert await asyncio.to_thread(taken.wait, WAIT_SECONDS)
        sent = await send()
    finally:
        holder.join(WAIT_SECONDS * 2)
    assert waiting, "it never waited for the held lock"
    # Had it written anything before it waited, it would have its id already: a change it then kept would sort
    # before those of the transaction it waited for, which committed first.
    assert waiting == [None]
    return sent


async def _pet_with_vaccination(client: Client, owner: str = ALICE) -> tuple[dict[str, Any], dict[str, Any]]:
    pet = (await create(client, owner, name="Rex")).json()
    vaccine = (await create_vaccine(client)).json()
    body = {"petId": pet["id"], "vaccineId": vaccine["id"], "appliedAt": APPLIED}
    vaccination = await client.post("/v1/pet-vaccination", json=body, headers=auth(owner))
    assert vaccination.status_code == 201, vaccination.text
    return pet, vaccination.json()


class TestEveryWriteLocksBeforeItWrites:
    async def test_a_replace(self, client: Client, postgres_url: str) -> None:
        pet = (await create(client)).json()

        async def send() -> httpx.Response:
            return await client.put(f"/v1/pets/{pet['id']}", json={"name": "Max", "petType": "Dog"}, headers=auth())

        await assert_waits_without_a_transaction_id(postgres_url, ("pets", pet["id"]), send, 200)

    async def test_a_delete(self, client: Client, postgres_url: str) -> None:
        pet = (await create(client)).json()

        async def send() -> httpx.Response:
            return await client.delete(f"/v1/pets/{pet['id']}", headers=auth())

        await assert_waits_without_a_transaction_id(postgres_url, ("pets", pet["id"]), send, 200)

    async def test_a_vaccination_waits_for_its_pet(self, client: Client, postgres_url: str) -> None:
        pet, vaccination = await _pet_with_vaccination(client)
        body = {"petId": pet["id"], "vaccineId": vaccination["vaccineId"], "appliedAt": APPLIED}

        async def send() -> httpx.Response:
            return await client.post("/v1/pet-vaccination", json=body, headers=auth())

        await assert_waits_without_a_transaction_id(postgres_url, ("pets", pet["id"]), send, 201)

    async def test_a_create_whose_idempotency_key_expired(self, client: Client, postgres_url: str) -> None:
        pet, vaccination = await _pet_with_vaccination(client)
        body = {"petId": pet["id"], "vaccineId": vaccination["vaccineId"], "appliedAt": APPLIED}
        headers = {**auth(), "Idempotency-Key": "expiring"}
        first = await client.post("/v1/pet-vaccination", json=body, headers=headers)
        assert first.status_code == 201, first.text
        await run_sql(postgres_url, "UPDATE idempotency_keys SET expires_at = 0")

        async def send() -> httpx.Response:
            return await client.post("/v1/pet-vaccination", json=body, headers=headers)

        await assert_waits_without_a_transaction_id(postgres_url, ("pets", pet["id"]), send, 201)
        again = await client.post("/v1/pet-vaccination", json=body, headers=headers)
        assert again.headers["Idempotent-Replayed"] == "true"
        assert again.json()["id"] != first.json()["id"]

    async def test_an_owner_transfer_waits_for_the_vaccinations_that_follow_the_pet(
        self, client: Client, postgres_url: str
    ) -> None:
        pet, vaccination = await _pet_with_vaccination(client)

        async def send() -> httpx.Response:
            transfer = {"name": "Rex", "petType": "Dog", "ownerId": BOB}
            return await client.put(f"/v1/pets/{pet['id']}", json=transfer, headers=admin())

        await assert_waits_without_a_transaction_id(postgres_url, ("pet-vaccination", vaccination["id"]), send, 200)

    async def test_a_pet_deletion_waits_for_the_vaccinations_it_takes_along(
        self, client: Client, postgres_url: str
    ) -> None:
        pet, vaccination = await _pet_with_vaccination(client)

        async def send() -> httpx.Response:
            return await client.delete(f"/v1/pets/{pet['id']}", headers=auth())

        await assert_waits_without_a_transaction_id(postgres_url, ("pet-vaccination", vaccination["id"]), send, 200)

    @pytest.mark.parametrize("write", ["transfer", "delete"])
    async def test_the_vaccinations_a_pet_takes_along_show_their_vaccine_as_it_is_when_it_commits(
        self, client: Client, postgres_url: str, write: str
    ) -> None:
        pet, vaccination = await _pet_with_vaccination(client)

        async def send() -> httpx.Response:
            if write == "delete":
                return await client.delete(f"/v1/pets/{pet['id']}", headers=auth())
            transfer = {"name": "Rex", "petType": "Dog", "ownerId": BOB}
            return await client.put(f"/v1/pets/{pet['id']}", json=transfer, headers=admin())

        # The vaccine, held as by a replace of it: the vaccination's change must not show it as it was before.
        await assert_waits_without_a_transaction_id(postgres_url, ("vaccines", vaccination["vaccineId"]), send, 200)

    async def test_a_vaccination_deletion_shows_its_vaccine_as_it_is_when_it_commits(
        self, client: Client, postgres_url: str
    ) -> None:
        _, vaccination = await _pet_with_vaccination(client)

        async def send() -> httpx.Response:
            return await client.delete(f"/v1/pet-vaccination/{vaccination['id']}", headers=auth())

        await assert_waits_without_a_transaction_id(postgres_url, ("vaccines", vaccination["vaccineId"]), send, 200)

    async def test_a_vaccine_deletion(self, client: Client, postgres_url: str) -> None:
        vaccine = (await create_vaccine(client)).json()

        async def send() -> httpx.Response:
            return await client.delete(f"/v1/vaccines/{vaccine['id']}", headers=admin())

        await assert_waits_without_a_transaction_id(postgres_url, ("vaccines", vaccine["id"]), send, 200)


@contextlib.asynccontextmanager
async def write_in_flight(database_url: str) -> AsyncIterator[None]:
    """A transaction that has a transaction id (as after its first write) and stays open for the block."""
    connection = await asyncpg.connect(database_url, timeout=5)
    try:
        async with connection.transaction():
            await connection.fetchval("SELECT pg_current_xact_id()")
            yield
    finally:
        await connection.close()


class TestWritesInFlight:
    async def test_one_of_this_database_holds_back_what_committed_after_it_began(
        self, client: Client, postgres_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(feed, "HELD_BACK_WAIT_SECONDS", 0.0)  # the page as one read finds it
        await create(client, ALICE, name="before")
        handed_out = (await read_feed(client))["nextCursor"]
        async with write_in_flight(postgres_url):
            await create(client, ALICE, name="after")
            while_in_flight = await read_feed(client, after=handed_out)
        after_it_ended = await read_feed(client, after=while_in_flight["nextCursor"])

        # Served then, it could have been followed by the write in flight, which would sort before it.
        assert while_in_flight == {"items": [], "nextCursor": handed_out}
        assert [item["record"]["name"] for item in after_it_ended["items"]] == ["after"]

    async def test_a_page_waits_for_what_it_holds_back(
        self, client: Client, postgres_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        reads = _watch_feed_reads(monkeypatch)
        await create(client, ALICE, name="before")
        handed_out = (await read_feed(client))["nextCursor"]
        in_flight, outcome = threading.Event(), []

        async def hold_until_a_read_waits() -> None:
            async with write_in_flight(postgres_url):
                in_flight.set()
                outcome.append(reads.held_back.wait(WAIT_SECONDS))

        # The test client blocks this event loop while the app answers: the write in flight has a thread.
        holder = threading.Thread(target=asyncio.run, args=(hold_until_a_read_waits(),))
        holder.start()
        try:
            assert in_flight.wait(WAIT_SECONDS)
            await create(client, ALICE, name="after")
            page = await read_feed(client, after=handed_out)
        finally:
            holder.join()
        # The page was read while the write was in flight, found "after" held back, and waited for the write
        # to end: "an empty page means the caller has every committed change".
        assert outcome == [True]
        assert [item["record"]["name"] for item in page["items"]] == ["after"]

    async def test_a_whole_page_does_not_wait(
        self, client: Client, postgres_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        await create(client, ALICE, name="before")
        handed_out = (await read_feed(client))["nextCursor"]
        reads = _watch_feed_reads(monkeypatch)
        async with write_in_flight(postgres_url):
            assert (await read_feed(client, after=handed_out))["items"] == []
        # Nothing committed after the cursor: nothing held back, nothing to wait for.
        assert reads.count == 1
        assert not reads.held_back.is_set()

    async def test_one_of_another_database_holds_back_nothing(self, client: Client, postgres_url: str) -> None:
        assert postgres_url.rsplit("/", 1)[1] != POSTGRES_ADMIN_URL.rsplit("/", 1)[1]
        async with write_in_flight(POSTGRES_ADMIN_URL):
            await create(client, ALICE, name="Rex")
            await create_vaccine(client)

            assert summary(await read_all(client)) == [("pets", "created", 1), ("vaccines", "created", 1)]
            assert len(await read_all(client, BOB)) == 1


class _FeedReads:
    def __init__(self) -> None:
        self.count = 0
        self.held_back = threading.Event()


def _watch_feed_reads(monkeypatch: pytest.MonkeyPatch) -> _FeedReads:
    """Counts the feed's reads, and notes one that found changes held back (the app may run in another thread)."""
    reads = _FeedReads()
    changes_page = PostgresTransaction.changes_page

    async def watched(self: PostgresTransaction, *args: Any, **kwargs: Any) -> Any:
        found, whole = await changes_page(self, *args, **kwargs)
        reads.count += 1
        if not whole:
            reads.held_back.set()
        return found, whole

    monkeypatch.setattr(PostgresTransaction, "changes_page", watched)
    return reads
