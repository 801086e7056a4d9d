"""SQLite group commit: write transactions ready at the same moment share one COMMIT, and each keeps
its own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.store.base import Row
from petrecords.store.sqlite import SqliteStore
from tests.support import PET_RECORDS, owned_by, pet_row, until

OWNER = "alice@example.com"


class Refused(Exception):
    pass


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    url = f"sqlite:///{tmp_path / 'pets.sqlite3'}"
    migrate(Settings(database_url=url, data_dir=tmp_path))
    opened = SqliteStore(url, busy_timeout_ms=2000)
    yield opened
    await opened.close()


def _pet(name: str) -> Row:
    return pet_row(name, owner=OWNER)


async def _create(store: SqliteStore, pet: Row, *, fail: bool = False) -> None:
    async with store.transaction(write=True) as tx:
        await tx.insert(PET_RECORDS, pet)
        if fail:
            raise Refused()


async def _stored(store: SqliteStore, pet: Row) -> bool:
    async with store.transaction(write=False) as tx:
        return await tx.get(PET_RECORDS, pet["id"]) is not None


async def test_concurrent_writes_share_one_commit(store: SqliteStore) -> None:
    pets = [_pet(f"pet {number}") for number in range(12)]
    await asyncio.gather(*(_create(store, pet) for pet in pets))
    assert store.commits == 1
    assert all([await _stored(store, pet) for pet in pets])


async def test_a_failed_member_loses_only_its_own_work(store: SqliteStore) -> None:
    pets = [_pet(f"pet {number}") for number in range(6)]
    outcomes = await asyncio.gather(
        *(_create(store, pet, fail=number in (0, 3)) for number, pet in enumerate(pets)), return_exceptions=True
    )
    assert [isinstance(outcome, Refused) for outcome in outcomes] == [True, False, False, True, False, False]
    assert [await _stored(store, pet) for pet in pets] == [False, True, True, False, True, True]
    async with store.transaction(write=False) as tx:
        assert await tx.count(PET_RECORDS, owned_by(OWNER)) == 4  # the kept counts too


async def test_writes_one_after_another_commit_one_by_one(store: SqliteStore) -> None:
    for number in range(3):
        await _create(store, _pet(f"pet {number}"))
    assert store.commits == 3


async def test_a_read_never_sees_a_write_that_has_not_committed(store: SqliteStore) -> None:
    pet = _pet("pending")
    seen_before_commit: list[bool] = []

    async def read_while_pending() -> None:
        seen_before_commit.append(await _stored(store, pet))

    async with store.transaction(write=True) as tx:
        await tx.insert(PET_RECORDS, pet)
        await read_while_pending()
    assert seen_before_commit == [False]
    assert await _stored(store, pet)


async def test_a_group_whose_file_is_moved_away_commits_nothing_and_every_member_is_told(
    store: SqliteStore, tmp_path: Path
) -> None:
    """The file and its log are renamed while a group is open: no member is acknowledged, nothing of theirs
    is committed into the file under its new name, and the store opens the file again once it is back."""
    path = tmp_path / "pets.sqlite3"
    files = [path, path.with_name("pets.sqlite3-wal"), path.with_name("pets.sqlite3-shm")]
    pets = [_pet(f"pet {number}") for number in range(12)]
    inserted, moved = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with store.transaction(write=True) as tx:
            await tx.insert(PET_RECORDS, pets[0])
            inserted.set()
            await moved.wait()

    tasks = [asyncio.create_task(first()), *(asyncio.create_task(_create(store, pet)) for pet in pets[1:])]
    await until(inserted.is_set, what="the first write to be in the open group")
    for file in files:
        file.rename(file.with_name(f"moved-{file.name}"))
    moved.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    assert [getattr(outcome, "cause", outcome) for outcome in outcomes] == ["vanished"] * len(pets)
    moved_away = sqlite3.connect(tmp_path / "moved-pets.sqlite3")
    try:
        assert moved_away.execute("SELECT count(*) FROM pets").fetchone() == (0,)
    finally:
        moved_away.close()
    path.with_name("moved-pets.sqlite3").rename(path)  # its log went with the last connection to it, checkpointed
    await _create(store, pets[0])
    assert await _stored(store, pets[0])
