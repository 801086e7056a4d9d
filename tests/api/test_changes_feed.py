"""The change feed, GET /v1/changes (contract section 11), on both databases: commit order, every change once
to a reader that follows nextCursor, visibility, retention, and the live stream."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import open_store
from petrecords.changes.retention import Retention
from petrecords.config import Settings
from petrecords.metrics import Metrics
from petrecords.store.base import Store
from petrecords.values import now_ms
from tests.support import ADMIN, ALICE, BOB, admin, assert_error, auth, create, create_vaccine, run_sql, until

Client = AsyncTestClient[Any]
DAY_MS = 86_400_000


async def read_feed(client: Client, user: str = ADMIN, **params: str) -> dict[str, Any]:
    response = await client.get("/v1/changes", params=params, headers=auth(user, admin=user == ADMIN))
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"items", "nextCursor"}
    return body


async def read_all(client: Client, user: str = ADMIN, *, limit: int = 3, **params: str) -> list[dict[str, Any]]:
    """Every change the caller may see, a page at a time, following nextCursor until an empty page."""
    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        query = {**params, "limit": str(limit), **({"after": cursor} if cursor else {})}
        page = await read_feed(client, user, **query)
        assert len(page["items"]) <= limit
        if not page["items"]:
            assert page["nextCursor"] == (cursor or page["nextCursor"])
            return seen
        seen.extend(page["items"])
        cursor = page["nextCursor"]
        assert cursor == page["items"][-1]["cursor"]


async def settled(client: Client, count: int) -> None:
    """Wait until the feed holds all `count` changes written so far: on PostgreSQL it stops short of a write
    that any transaction of the server, in any database, still has in flight."""

    async def complete() -> bool:
        return len(await read_all(client, limit=1000)) >= count

    await until(complete, what=f"{count} changes in the feed")


def summary(changes: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(change["resource"], change["action"], change["version"]) for change in changes]


class TestFeed:
    async def test_every_change_once_in_commit_order(self, client: Client) -> None:
        pet = await create(client, ALICE, name="Rex")
        vaccine = await create_vaccine(client)
        await client.put(pet.headers["location"], json={"name": "Max", "petType": "Dog"}, headers=auth(ALICE))
        await client.delete(vaccine.headers["location"], headers=admin())
        await client.delete(pet.headers["location"], headers=auth(ALICE))
        await settled(client, 5)

        changes = await read_all(client)

        assert summary(changes) == [
            ("pets", "created", 1),
            ("vaccines", "created", 1),
            ("pets", "replaced", 2),
            ("vaccines", "deleted", 2),
            ("pets", "deleted", 3),
        ]
        assert changes[0]["record"] == pet.json()
        assert len({change["cursor"] for change in changes}) == len(changes)

    async def test_a_page_is_full_whenever_enough_changes_follow(self, client: Client) -> None:
        for number in range(7):
            await create(client, ALICE, name=f"pet {number}")
        await settled(client, 7)

        first = await read_feed(client, limit="5")
        second = await read_feed(client, limit="5", after=first["nextCursor"])
        third = await read_feed(client, limit="5", after=second["nextCursor"])

        assert (len(first["items"]), len(second["items"]), len(third["items"])) == (5, 2, 0)
        assert third["nextCursor"] == second["nextCursor"]

    async def test_a_non_admin_sees_their_records_before_and_after_and_the_catalogue(self, client: Client) -> None:
        alices = await create(client, ALICE, name="Rex")
        await create(client, BOB, name="Bobs own")
        await create_vaccine(client)
        transfer = {"name": "Rex", "petType": "Dog", "ownerId": BOB}
        await client.put(alices.headers["location"], json=transfer, headers=admin())
        await client.put(alices.headers["location"], json={**transfer, "name": "Rex II"}, headers=auth(BOB))
        await settled(client, 5)

        alice_sees = [(change["action"], change["record"]["name"]) for change in await read_all(client, ALICE)]
        bob_sees = [(change["action"], change["record"]["name"]) for change in await read_all(client, BOB)]

        assert alice_sees == [("created", "Rex"), ("created", "Rabies"), ("replaced", "Rex")]
        assert bob_sees == [("created", "Bobs own"), ("created", "Rabies"), ("replaced", "Rex"), ("replaced", "Rex II")]

    async def test_vaccinations_that_follow_a_pet_to_its_new_owner(self, client: Client) -> None:
        pet = await create(client, ALICE, name="Rex")
        vaccine = (await create_vaccine(client)).json()
        body = {"petId": pet.json()["id"], "vaccineId": vaccine["id"], "appliedAt": "2026-11-20T10:00:00Z"}
        given = await client.post("/v1/pet-vaccination", json=body, headers=auth(ALICE))
        assert given.status_code == 201, given.text
        await client.put(
            pet.headers["location"], json={"name": "Rex", "petType": "Dog", "ownerId": BOB}, headers=admin()
        )
        await client.put(given.headers["location"], json={**body, "notes": "Bob's now"}, headers=auth(BOB))

        alice_sees = summary(await read_all(client, ALICE))
        bob_sees = summary(await read_all(client, BOB))

        # Alice: her pet and its vaccination until they went, and the moves that took them; Bob: from the moves on.
        assert alice_sees == [
            ("pets", "created", 1),
            ("vaccines", "created", 1),
            ("pet-vaccination", "created", 1),
            ("pets", "replaced", 2),
            ("pet-vaccination", "replaced", 2),
        ]
        assert bob_sees == [
            ("vaccines", "created", 1),
            ("pets", "replaced", 2),
            ("pet-vaccination", "replaced", 2),
            ("pet-vaccination", "replaced", 3),
        ]

    async def test_deletions_are_seen_by_the_owner_only_and_the_catalogues_by_everyone(self, client: Client) -> None:
        pet = await create(client, ALICE, name="Rex")
        vaccine = await create_vaccine(client)
        body = {"petId": pet.json()["id"], "vaccineId": vaccine.json()["id"], "appliedAt": "2026-11-20T10:00:00Z"}
        assert (await client.post("/v1/pet-vaccination", json=body, headers=auth(ALICE))).status_code == 201
        await client.delete(pet.headers["location"], headers=auth(ALICE))
        spare = await create_vaccine(client, name="Spare")
        await client.put(
            spare.headers["location"], json={"name": "Spare", "petType": "Dog", "duration": 9}, headers=admin()
        )
        await client.delete(spare.headers["location"], headers=admin())

        alice_sees = summary(await read_all(client, ALICE))
        bob_sees = summary(await read_all(client, BOB))

        catalogue = [("vaccines", "created", 1), ("vaccines", "replaced", 2), ("vaccines", "deleted", 3)]
        assert alice_sees == [
            ("pets", "created", 1),
            ("vaccines", "created", 1),
            ("pet-vaccination", "created", 1),
            ("pet-vaccination", "deleted", 2),
            ("pets", "deleted", 2),
            *catalogue,
        ]
        assert bob_sees == [("vaccines", "created", 1), *catalogue]
        assert summary(await read_all(client, BOB, resource="pets,pet-vaccination")) == []

    async def test_by_resource(self, client: Client) -> None:
        await create(client, ALICE)
        await create_vaccine(client)
        await settled(client, 2)

        pets = await read_all(client, resource="pets")
        both = await read_all(client, resource="vaccines,pets")
        repeated = await read_all(client, resource="vaccines")

        assert summary(pets) == [("pets", "created", 1)]
        assert summary(both) == [("pets", "created", 1), ("vaccines", "created", 1)]
        assert summary(repeated) == [("vaccines", "created", 1)]

    @pytest.mark.parametrize(
        ("query", "parameter"),
        [
            ("after=nope", "after"),
            ("after=1-2-3", "after"),
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=x", "limit"),
            ("resource=cats", "resource"),
            ("since=1", "since"),
            ("limit=1&limit=2", "limit"),
        ],
    )
    async def test_a_bad_or_unknown_parameter_is_400_naming_it(
        self, client: Client, query: str, parameter: str
    ) -> None:
        response = await client.get(f"/v1/changes?{query}", headers=auth())

        assert list(assert_error(response, 400, 994)["errors"]) == [parameter]

    async def test_it_needs_a_token(self, client: Client) -> None:
        assert_error(await client.get("/v1/changes"), 401, 997)


class TestCursorsNeverHandedOut:
    """A cursor is opaque: any the service never handed out (parts beyond what the database holds, one ahead of
    the log's head, one no change has) is 400/994 naming where it came from, on the page and when a live stream
    resumes, never a 500 nor a stream cut after its 200."""

    @pytest.fixture
    async def last(self, client: Client) -> tuple[int, int]:
        """The cursor of the last change of a log of two, as numbers."""
        await create(client, ALICE, name="one")
        await create(client, ALICE, name="two")
        await settled(client, 2)
        cursor = (await read_all(client))[-1]["cursor"]
        xid, position = cursor.split("-")
        return int(xid, 16), int(position, 16)

    @staticmethod
    def never_handed_out(last: tuple[int, int]) -> list[str]:
        xid, position = last
        return [
            "8000000000000000-0",
            f"{xid:x}-8000000000000000",
            "ffffffffffffffff-ffffffffffffffff",
            "7fffffffffffffff-7fffffffffffffff",
            f"{xid:x}-{position + 1:x}",  # one ahead of the log's head
            f"{xid + 1:x}-0",
            f"0{xid:x}-{position:x}",  # the last change's, written otherwise
            f"{xid:x}-0{position:x}",
            # In capitals, when that writes it otherwise (a cursor of digits alone reads the same).
            *([upper] if (upper := f"{xid:X}-{position:X}") != f"{xid:x}-{position:x}" else []),
        ]

    async def test_on_the_page_it_is_400(self, client: Client, last: tuple[int, int]) -> None:
        for cursor in self.never_handed_out(last):
            response = await client.get("/v1/changes", params={"after": cursor}, headers=auth(ADMIN, admin=True))

            assert list(assert_error(response, 400, 994)["errors"]) == ["after"], cursor

    async def test_when_a_live_stream_resumes_it_is_400(self, client: Client, last: tuple[int, int]) -> None:
        for cursor in self.never_handed_out(last):
            headers = {**auth(ADMIN, admin=True), "Accept": "text/event-stream", "Last-Event-ID": cursor}
            async with asyncio.timeout(5):  # a stream that opened would not end
                response = await client.get("/v1/changes", headers=headers)

            assert list(assert_error(response, 400, 994)["errors"]) == ["Last-Event-ID"], cursor
            after = {"Accept": "text/event-stream", **auth(ADMIN, admin=True)}
            async with asyncio.timeout(5):
                response = await client.get("/v1/changes", params={"after": cursor}, headers=after)

            assert list(assert_error(response, 400, 994)["errors"]) == ["after"], cursor

    async def test_every_cursor_handed_out_is_taken(self, client: Client) -> None:
        empty = await read_feed(client)  # an empty log's page: its nextCursor is where the kept changes start
        await create(client, ALICE, name="one")
        await create(client, ALICE, name="two")
        await settled(client, 2)
        changes = await read_all(client, limit=1)

        for cursor in [empty["nextCursor"], *(change["cursor"] for change in changes)]:
            assert (await read_feed(client, after=cursor))["nextCursor"]


class TestRetention:
    async def test_expired_changes_go_and_a_cursor_behind_them_is_410(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings(changes_retention_days=30)
        store = open_store(settings)  # the retention duty of another instance
        async with make_client(settings) as client:
            old = await create(client, ALICE, name="old")
            await settled(client, 1)
            first = (await read_feed(client))["items"][0]["cursor"]
            for number in range(3):
                await create(client, ALICE, name=f"later {number}")
            await settled(client, 4)
            retention = Retention(settings, lambda: store, instance="test", metrics=Metrics())
            retention.BATCH = 2  # small batches, to see several of them

            removed = await retention.purge(now=now_ms() + 31 * DAY_MS)
            await store.close()

            assert removed == 4
            kept_from = await read_feed(client)
            assert kept_from["items"] == []
            assert (await read_feed(client, after=kept_from["nextCursor"]))["items"] == []
            assert_error(await client.get(f"/v1/changes?after={first}", headers=auth()), 410, 983)
            assert (await client.get(f"{old.headers['location']}/history", headers=auth())).json()["totalCount"] == 0

    async def test_by_default_every_change_is_kept(
        self, make_client: Callable[[Settings], Client], make_settings: Callable[..., Settings]
    ) -> None:
        settings = make_settings()
        store = open_store(settings)
        async with make_client(settings) as client:
            await create(client, ALICE)
            await settled(client, 1)
            retention = Retention(settings, lambda: store, instance="test", metrics=Metrics())

            assert await retention.purge(now=now_ms() + 10_000 * DAY_MS) == 0
            await store.close()
            assert len((await read_feed(client))["items"]) == 1

    async def test_an_error_not_of_the_database_is_logged_counted_and_retention_goes_on(
        self,
        make_client: Callable[[Settings], Client],
        make_settings: Callable[..., Settings],
        database_url: str,
        caplog: pytest.LogCaptureFixture,
    ) -> None:
        settings = make_settings(changes_retention_days=30)
        store = open_store(settings)
        async with make_client(make_settings(changes_retention_days=0)) as client:  # whose own duty does nothing
            await create(client, ALICE)
            await settled(client, 1)
            await run_sql(database_url, "UPDATE changes SET at = 0")  # written long ago: expired
            rounds = 0

            def store_once_broken() -> Store:
                nonlocal rounds
                rounds += 1
                if rounds == 1:
                    raise RuntimeError("not the database's")
                return store

            metrics = Metrics()
            retention = Retention(settings, store_once_broken, instance="test", metrics=metrics)
            retention.INTERVAL_SECONDS = 0.05  # a minute, shortened
            running = asyncio.create_task(retention.run())
            try:

                async def purged() -> bool:
                    return (await read_feed(client))["items"] == []

                await until(purged, what="the expired change removed after the failure", seconds=5)
            finally:
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
                await store.close()

        failures = [record for record in caplog.records if record.name == "petrecords.duties"]
        assert [record.levelno for record in failures] == [logging.ERROR]
        assert failures[0].exc_info is not None
        assert str(failures[0].exc_info[1]) == "not the database's"
        assert 'petrecords_duty_failures_total{duty="retention"} 1.0' in metrics.render().decode()
