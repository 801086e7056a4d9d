"""Reads from a real PostgreSQL streaming replica, made by the test on this machine.

A private primary cluster (initdb, on a free port: the shared server allows no replication connections) and a
replica of it (pg_basebackup -X stream -R, a second `postgres` on another port) whose replay is held back
by `recovery_min_apply_delay`. Two instances of the service (two apps, each with its own pools and sampler,
sharing one Redis) serve callers who must always read their own writes through either instance, while a
caller who wrote nothing is answered by the lagging replica (its answers are stale: the replica is in use).
A grantee's reads through either instance see every share naming them (or one of their groups) as its last
write left it, though the replica has not applied it: made, deleted, gone with its pet, shortened. With a bound
below the replica's lag, the replica answers nothing staler than the bound; stopped, it is skipped without an
error.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from litestar.testing import AsyncTestClient

from petrecords.app import create_app
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.values import format_timestamp
from tests.e2e.debian import unavailable
from tests.e2e.replicas import Clusters, pg_ctl, run, streaming_replica
from tests.support import SECRET, redis_is_up, token

pytestmark = pytest.mark.slow

REDIS_URL = "redis://127.0.0.1:6379/0"
APPLY_DELAY_SECONDS = 6
WAIT_SECONDS = 30.0


@pytest.fixture(scope="module")
def clusters() -> Iterator[Clusters]:
    with streaming_replica(apply_delay_seconds=APPLY_DELAY_SECONDS) as made:
        yield made


def _settings(clusters: Clusters, data_dir: Path, *, max_lag: float) -> Settings:
    return Settings(
        database_url=clusters.primary_url,
        database_read_urls=(clusters.replica_url,),
        database_read_max_lag_seconds=max_lag,
        redis_url=REDIS_URL,
        db_pool_size=4,
        data_dir=data_dir,
        auth_secret=SECRET,
        rate_limit=0,
        access_log=False,
    )


@contextlib.asynccontextmanager
async def _instances(settings: Settings, count: int = 2) -> AsyncIterator[list[AsyncTestClient[Any]]]:
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(count):
            client: AsyncTestClient[Any] = AsyncTestClient(app=create_app(settings))  # type: ignore[arg-type]
            clients.append(await stack.enter_async_context(client))
        yield clients


def _someone(role: str) -> str:
    # Callers of this run alone: positions kept in the shared Redis outlive it.
    return f"{role}-{uuid.uuid4().hex[:12]}@example.com"


def _auth(user: str, *, admin: bool = False) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, admin=admin)}"}


_PET_ON_REPLICA = "SELECT count(*) FROM pets WHERE id = $1"
_SHARE_ON_REPLICA = "SELECT count(*) FROM pet_shares WHERE id = $1"
_UNCHANGED_ON_REPLICA = "SELECT count(*) FROM pet_shares WHERE id = $1 AND expires_at IS NULL"


async def _on_replica(clusters: Clusters, record_id: str, *, query: str = _PET_ON_REPLICA) -> bool:
    connection = await asyncpg.connect(clusters.replica_url, timeout=5)
    try:
        return bool(await connection.fetchval(query, uuid.UUID(record_id)))
    finally:
        await connection.close()


async def _until_the_replica_answers(first: AsyncTestClient[Any], second: AsyncTestClient[Any]) -> None:
    """Until a caller who wrote nothing reads someone's new record from the replica, stale. (On a Redis that has
    never held positions, that starts once the bound has passed on its clock: up to the bound of probes, by a
    caller of their own.)"""
    prober, bystander = _someone("prober"), _someone("admin")
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        created = await first.post("/v1/pets", json={"name": "Probe", "petType": "Dog"}, headers=_auth(prober))
        assert created.status_code == 201, created.text
        seen = await second.get(f"/v1/pets/{created.json()['id']}", headers=_auth(bystander, admin=True))
        if seen.status_code == 404:
            return
        assert seen.status_code == 200, seen.text
        assert time.monotonic() < deadline, "the replica never answered a read"
        await asyncio.sleep(0.1)


@pytest.fixture(scope="module")
def migrated(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Clusters:
    if not redis_is_up():
        unavailable("Redis at 127.0.0.1:6379 is required for read replicas")
    migrate(Settings(database_url=clusters.primary_url, data_dir=tmp_path_factory.mktemp("migrate")))
    # A test may be the first of its worker: the replica applies the schema only after its delay.
    asyncio.run(_until_the_replica_has_the_schema(clusters))
    return clusters


async def _until_the_replica_has_the_schema(clusters: Clusters) -> None:
    deadline = time.monotonic() + APPLY_DELAY_SECONDS + WAIT_SECONDS
    while True:
        connection = await asyncpg.connect(clusters.replica_url, timeout=5)
        try:
            if await connection.fetchval("SELECT to_regclass('pets') IS NOT NULL"):
                return
        finally:
            await connection.close()
        assert time.monotonic() < deadline, "the replica never applied the schema"
        await asyncio.sleep(0.2)


async def test_callers_read_their_own_writes_while_the_replica_lags(migrated: Clusters, tmp_path: Path) -> None:
    alice, bystander = _someone("alice"), _someone("admin")
    async with _instances(_settings(migrated, tmp_path, max_lag=10)) as (first, second):
        await _until_the_replica_answers(first, second)

        for round_number in range(8):
            writer, reader = (first, second) if round_number % 2 else (second, first)
            created = await writer.post(
                "/v1/pets", json={"name": f"Mine {round_number}", "petType": "Cat"}, headers=_auth(alice)
            )
            assert created.status_code == 201, created.text
            pet_id, etag = created.json()["id"], created.headers["ETag"]
            assert not await _on_replica(migrated, pet_id)  # the replica has not applied it yet

            got = await reader.get(f"/v1/pets/{pet_id}", headers=_auth(alice))
            assert got.status_code == 200, got.text
            assert (got.json(), got.headers["ETag"]) == (created.json(), etag)
            listed = await reader.get("/v1/pets?pageSize=100&sort=-createdAt", headers=_auth(alice))
            assert pet_id in [item["id"] for item in listed.json()["items"]]
            assert listed.json()["totalCount"] == len(listed.json()["items"])

            replaced = await reader.put(
                f"/v1/pets/{pet_id}",
                json={"name": f"Renamed {round_number}", "petType": "Cat"},
                headers={**_auth(alice), "If-Match": etag},
            )
            assert replaced.status_code == 200, replaced.text
            again = await writer.get(f"/v1/pets/{pet_id}", headers=_auth(alice))
            assert again.json()["name"] == f"Renamed {round_number}"
            assert again.headers["ETag"] == replaced.headers["ETag"]
            history = await writer.get(f"/v1/pets/{pet_id}/history", headers=_auth(alice))
            assert [item["version"] for item in history.json()["items"]] == [1, 2]
            # A conditional read is the primary's: the version the caller holds is the current one.
            unchanged = await reader.get(
                f"/v1/pets/{pet_id}", headers={**_auth(alice), "If-None-Match": replaced.headers["ETag"]}
            )
            assert unchanged.status_code == 304

        # Meanwhile the bystander, who wrote nothing, is still answered by the replica, behind.
        stale = await second.get(f"/v1/pets/{pet_id}", headers=_auth(bystander, admin=True))
        assert stale.status_code == 404


async def test_a_grantee_reads_every_share_as_its_last_write_left_it(migrated: Clusters, tmp_path: Path) -> None:
    owner, vet, member, new_owner, admin = (_someone(role) for role in ("owner", "vet", "member", "new-owner", "admin"))
    group = f"clinic-{uuid.uuid4().hex[:12]}"
    grantees = {vet: _auth(vet), f"group:{group}": {"Authorization": f"Bearer {token(member, groups=[group])}"}}
    async with _instances(_settings(migrated, tmp_path, max_lag=10)) as (first, second):
        await _until_the_replica_answers(first, second)
        pets: dict[str, str] = {}
        shares: dict[tuple[str, str], str] = {}
        for fate in ("revoked", "deleted", "transferred", "shortened"):
            created = await first.post("/v1/pets", json={"name": fate, "petType": "Dog"}, headers=_auth(owner))
            assert created.status_code == 201, created.text
            pets[fate] = created.json()["id"]
            for grantee in grantees:
                body = {"petId": pets[fate], "grantee": grantee, "access": "read"}
                shared = await first.post("/v1/pet-shares", json=body, headers=_auth(owner))
                assert shared.status_code == 201, shared.text
                shares[(fate, grantee)] = shared.json()["id"]
        assert not await _on_replica(migrated, shares[("shortened", f"group:{group}")], query=_SHARE_ON_REPLICA)

        # A share takes effect with the next request, through either instance, though the replica lacks it.
        for headers in grantees.values():
            for client in (second, first):
                assert await _visible_pets(client, headers) == set(pets.values())

        # Once the replica grants them too (so that it would answer with them), they end in each way a share ends.
        deadline = time.monotonic() + APPLY_DELAY_SECONDS + WAIT_SECONDS
        while not await _on_replica(migrated, shares[("shortened", f"group:{group}")], query=_SHARE_ON_REPLICA):
            assert time.monotonic() < deadline, "the replica never applied the shares"
            await asyncio.sleep(0.2)
        # Far enough ahead that both grantees' shares are shortened before it passes, on a busy machine too.
        expires_at = time.time() + 2.5
        for grantee in grantees:
            soon = {"expiresAt": format_timestamp(int(expires_at * 1000))}
            shortened = await first.patch(
                f"/v1/pet-shares/{shares[('shortened', grantee)]}", json=soon, headers=_auth(owner)
            )
            assert shortened.status_code == 200, shortened.text
        for grantee in grantees:
            deleted = await first.delete(f"/v1/pet-shares/{shares[('revoked', grantee)]}", headers=_auth(owner))
            assert deleted.status_code == 200, deleted.text
        deleted = await first.delete(f"/v1/pets/{pets['deleted']}", headers=_auth(owner))
        assert deleted.status_code == 200, deleted.text
        transfer = {"name": "transferred", "petType": "Dog", "ownerId": new_owner}
        transferred = await first.put(
            f"/v1/pets/{pets['transferred']}", json=transfer, headers=_auth(admin, admin=True)
        )
        assert transferred.status_code == 200, transferred.text
        await asyncio.sleep(max(0.0, expires_at + 0.1 - time.time()))

        for grantee, headers in grantees.items():
            for client in (second, first):
                assert await _visible_pets(client, headers) == set()
                for pet_id in pets.values():
                    got = await client.get(f"/v1/pets/{pet_id}", headers=headers)
                    assert got.status_code == 404, got.text
                listed = await client.get("/v1/pet-shares?pageSize=100", headers=headers)
                assert [item["id"] for item in listed.json()["items"]] == [shares[("shortened", grantee)]]
        # All the while the replica granted what had ended (it has not even applied the first of those writes):
        # every answer above is one it could not have given.
        first_write = shares[("shortened", vet)]
        assert await _on_replica(migrated, first_write, query=_UNCHANGED_ON_REPLICA), (
            "the replica applied the revocations before the grantees' reads: too slow a run to tell"
        )


async def _visible_pets(client: AsyncTestClient[Any], headers: dict[str, str]) -> set[str]:
    """The pets in the caller's list, which must count them exactly."""
    listed = await client.get("/v1/pets?pageSize=100", headers=headers)
    assert listed.status_code == 200, listed.text
    found = {item["id"] for item in listed.json()["items"]}
    assert listed.json()["totalCount"] == len(found)
    return found


async def test_a_replica_further_behind_than_the_bound_answers_nothing(migrated: Clusters, tmp_path: Path) -> None:
    alice, bystander = _someone("alice"), _someone("admin")
    max_lag = 1.0
    async with _instances(_settings(migrated, tmp_path, max_lag=max_lag), count=1) as (client,):
        for _ in range(3):
            created = await client.post("/v1/pets", json={"name": "Fresh", "petType": "Dog"}, headers=_auth(alice))
            assert created.status_code == 201, created.text
            answered = time.monotonic()
            pet_id = created.json()["id"]
            # The staleness bound is a time: once it (and a poll) has passed since the answer, nobody reads anything
            # older, though the replica has still not applied it.
            await asyncio.sleep(max(0.0, answered + max_lag + 0.5 - time.monotonic()))
            assert not await _on_replica(migrated, pet_id)
            seen = await client.get(f"/v1/pets/{pet_id}", headers=_auth(bystander, admin=True))
            assert seen.status_code == 200, seen.text


async def test_a_stopped_replica_is_skipped(migrated: Clusters, tmp_path: Path) -> None:
    alice, bystander = _someone("alice"), _someone("admin")
    async with _instances(_settings(migrated, tmp_path, max_lag=10)) as (first, second):
        created = await first.post("/v1/pets", json={"name": "Before", "petType": "Dog"}, headers=_auth(alice))
        assert created.status_code == 201
        # Read through both instances, so that they hold connections to the replica, then stop it.
        for client in (first, second):
            assert (await client.get("/v1/pets", headers=_auth(bystander, admin=True))).status_code == 200
        run(pg_ctl(migrated.replica_dir, "-m", "fast", "-w", "stop"), what="stopping the replica")
        try:
            for client in (first, second, first, second):
                started = time.monotonic()
                listed = await client.get("/v1/pets", headers=_auth(bystander, admin=True))
                assert listed.status_code == 200, listed.text
                got = await client.get(f"/v1/pets/{created.json()['id']}", headers=_auth(alice))
                assert got.status_code == 200, got.text
                assert time.monotonic() - started < 5
        finally:
            run(pg_ctl(migrated.replica_dir, "-w", "-t", "60", "start"), what="starting the replica again")
