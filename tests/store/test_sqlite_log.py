"""The write-ahead log of a SQLite store emptied on request (SqliteStore.empty_log): copied whole into the database
file and truncated once it has passed a size, never past a reader's snapshot, and without losing a commit."""

from __future__ import annotations

import os
from pathlib import Path

import pysqlite3.dbapi2 as sqlite3

from petrecords.store.sqlite import SqliteStore
from tests.support import PET_RECORDS, pet_row


async def test_the_log_is_emptied_once_past_the_size_and_the_writes_stay(
    sqlite_store: SqliteStore, tmp_path: Path
) -> None:
    log = tmp_path / "pets.sqlite3-wal"
    rows = [pet_row(f"Pet {n}") for n in range(20)]
    async with sqlite_store.transaction(write=True) as tx:
        for row in rows:
            await tx.insert(PET_RECORDS, row)
    size = log.stat().st_size

    assert not await sqlite_store.empty_log(past_bytes=size)
    assert log.stat().st_size == size
    assert await sqlite_store.empty_log(past_bytes=size - 1)
    assert log.stat().st_size == 0

    # The rows are in the database file now: another connection finds them there with the log empty.
    with sqlite3.connect(tmp_path / "pets.sqlite3") as other:
        assert other.execute("SELECT count(*) FROM pets").fetchone()[0] == len(rows)


async def test_a_reader_keeps_its_snapshot_and_the_log_is_emptied_after_it(
    sqlite_store: SqliteStore, tmp_path: Path
) -> None:
    database = tmp_path / "pets.sqlite3"
    # The same file, waiting for a reader no longer than a tenth of a second.
    store = SqliteStore(f"sqlite:///{database}", busy_timeout_ms=100)
    reader = sqlite3.connect(database, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM pets").fetchone()[0] == 0
        async with store.transaction(write=True) as tx:
            await tx.insert(PET_RECORDS, pet_row("Rex"))

        # The reader's snapshot, older than the commit, still reads from the log: it is not emptied under it.
        assert not await store.empty_log(past_bytes=0)
        assert os.stat(f"{database}-wal").st_size > 0
        assert reader.execute("SELECT count(*) FROM pets").fetchone()[0] == 0
        reader.execute("COMMIT")

        assert await store.empty_log(past_bytes=0)
        assert os.stat(f"{database}-wal").st_size == 0
        assert reader.execute("SELECT count(*) FROM pets").fetchone()[0] == 1
    finally:
        reader.close()
        await store.close()
