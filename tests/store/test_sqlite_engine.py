"""The embedded database's connection: the SQLite library it runs on and the settings it runs with."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import msgspec
import pysqlite3.dbapi2 as sqlite3
import pytest

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import MIN_SQLITE_VERSION, SqliteTooOld, check_sqlite_version, create_sqlite_engine, migrate
from petrecords.errors import DatabaseUnavailable
from petrecords.store.base import Condition, Operator, PageQuery, Row, SortKey, Transaction
from petrecords.store.faults import VANISHED
from petrecords.store.pages import BLOCK
from petrecords.store.queries import list_statement
from petrecords.store.records import reader_of
from petrecords.store.sql import SqlTransaction
from petrecords.store.sqlite import SqliteStore
from tests.support import ALICE, PET_RECORDS, pet_row

PETRECORDS = Path(sys.executable).parent / "petrecords"


class TestSqliteVersion:
    @pytest.mark.parametrize("version", [(3, 7, 0), (3, 45, 1), (3, 51, 2), (3, 50, 9)])
    def test_libraries_with_the_wal_reset_bug_are_refused(self, version: tuple[int, int, int]) -> None:
        with pytest.raises(SqliteTooOld, match=r"3\.51\.3 or later"):
            check_sqlite_version(version)

    @pytest.mark.parametrize("version", [(3, 51, 3), (3, 52, 0), (3, 53, 4), (4, 0, 0)])
    def test_fixed_libraries_are_accepted(self, version: tuple[int, int, int]) -> None:
        check_sqlite_version(version)

    def test_the_engine_runs_on_the_bundled_library_and_it_is_new_enough(self, tmp_path: Path) -> None:
        engine = create_sqlite_engine(f"sqlite:///{tmp_path / 'v.sqlite3'}", busy_timeout_ms=100, autocommit=True)
        try:
            with engine.connect() as connection:
                version = connection.exec_driver_sql("SELECT sqlite_version()").scalar_one()
        finally:
            engine.dispose()
        assert version == sqlite3.sqlite_version
        assert tuple(int(part) for part in version.split(".")[:3]) >= MIN_SQLITE_VERSION

    def test_migrate_refuses_an_old_library_before_creating_anything(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 51, 2))
        database = tmp_path / "old.sqlite3"
        with pytest.raises(SqliteTooOld):
            migrate(Settings(database_url=f"sqlite:///{database}", data_dir=tmp_path))
        assert not database.exists()

    def test_the_store_of_a_worker_refuses_an_old_library(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 51, 2))
        with pytest.raises(SqliteTooOld):
            SqliteStore(f"sqlite:///{tmp_path / 'old.sqlite3'}", busy_timeout_ms=100)

    def test_serve_exits_with_a_message_on_an_old_library(self, tmp_path: Path) -> None:
        # The real command, its SQLite library made to report an affected version before it starts.
        program = (
            "import sys, pysqlite3.dbapi2 as s; s.sqlite_version_info = (3, 51, 2); "
            "from petrecords.cli import main; main(sys.argv[1:])"
        )
        environment = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
        environment["PETRECORDS_DATA_DIR"] = str(tmp_path / "data")
        finished = subprocess.run(
            [sys.executable, "-c", program, "serve", "--port", "9"],
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert finished.returncode == 1
        assert "petrecords serve: SQLite 3.51.2 is too old: 3.51.3 or later is required" in finished.stderr
        assert "Traceback" not in finished.stderr
        assert not (tmp_path / "data" / "petrecords.sqlite3").exists()


def test_connections_use_wal_full_sync_busy_timeout_and_foreign_keys(tmp_path: Path) -> None:
    engine = create_sqlite_engine(f"sqlite:///{tmp_path / 'p.sqlite3'}", busy_timeout_ms=4321, autocommit=True)
    try:
        with engine.connect() as connection:
            pragmas = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar_one()
                for name in ("journal_mode", "synchronous", "busy_timeout", "foreign_keys")
            }
    finally:
        engine.dispose()
    # synchronous 2 is FULL: the WAL is synced at every commit, before the commit is acknowledged.
    assert pragmas == {"journal_mode": "wal", "synchronous": 2, "busy_timeout": 4321, "foreign_keys": 1}


@pytest.mark.parametrize(("cache_kib", "cache_size"), [(None, -2000), (65_536, -65_536)])
def test_a_connections_page_cache_is_sqlites_default_unless_given(
    tmp_path: Path, cache_kib: int | None, cache_size: int
) -> None:
    """A reminders pass opens its store with a larger cache (Reminders.CACHE_KIB); the server's connections keep
    SQLite's default."""
    engine = create_sqlite_engine(
        f"sqlite:///{tmp_path / 'c.sqlite3'}", busy_timeout_ms=100, autocommit=True, cache_kib=cache_kib
    )
    try:
        with engine.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA cache_size").scalar_one() == cache_size
    finally:
        engine.dispose()


@pytest.mark.parametrize("cache_kib", [0, -1])
def test_a_page_cache_of_no_size_is_refused(tmp_path: Path, cache_kib: int) -> None:
    # SQLite reads `cache_size = --1` as a comment, and a cache of 0 as its least.
    with pytest.raises(ValueError, match="give a positive size"):
        create_sqlite_engine(
            f"sqlite:///{tmp_path / 'c.sqlite3'}", busy_timeout_ms=100, autocommit=True, cache_kib=cache_kib
        )


async def test_a_deep_page_never_seeks_from_another_connections_anchors(tmp_path: Path) -> None:
    """`PRAGMA data_version` counts the changes one connection has seen: two readers can show the same value for
    different states of the data (one saw two commits as one change). Anchors kept under it are the reader's own."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'anchors.sqlite3'}", data_dir=tmp_path)
    migrate(settings)
    service, other = open_store(settings), open_store(settings)  # `other`: another process's writes
    rows = 2 * BLOCK + 300
    query = PageQuery(
        conditions=(Condition(("owner_id",), Operator.EQUAL, (ALICE,)),),
        sort=(SortKey("name_key"), SortKey("id")),
        limit=20,
        offset=BLOCK + 57,
    )

    async def first_ids(count: int) -> list[Row]:
        async with other.transaction(write=False) as tx:
            return list(await tx.list(PET_RECORDS, msgspec.structs.replace(query, limit=count, offset=0)))

    async def deep_page(tx: Transaction) -> list[uuid.UUID]:
        return [row["id"] for row in await tx.list(PET_RECORDS, query)]

    async def offset_page() -> list[uuid.UUID]:
        async with other.transaction(write=False) as tx:
            assert isinstance(tx, SqlTransaction)
            return [reader_of(PET_RECORDS).row(row)["id"] for row in await tx.fetch(list_statement(PET_RECORDS, query))]

    async def delete_first(count: int) -> None:
        doomed = await first_ids(count)
        async with other.transaction(write=True) as tx:
            for pet in doomed:
                await tx.delete(PET_RECORDS, pet)

    try:
        async with other.transaction(write=True) as tx:
            await tx.insert_many(PET_RECORDS, [pet_row(f"pet {index:05}") for index in range(rows)])
        async with service.transaction(write=False) as first:  # both readers see the data once
            first_seen = await first.data_version()
            async with service.transaction(write=False) as second:
                assert await second.data_version() == first_seen
        async with service.transaction(write=False) as first:
            assert await deep_page(first) == await offset_page()  # anchors kept on the first reader
        await delete_first(150)
        async with service.transaction(write=False) as first:
            assert await deep_page(first) == await offset_page()
            first_seen = await first.data_version()
        await delete_first(150)  # the second reader sees both deletes as one change
        async with service.transaction(write=False) as first:
            await first.data_version()  # holds the first reader
            async with service.transaction(write=False) as second:
                assert await second.data_version() == first_seen  # the same value, another state
                assert await deep_page(second) == await offset_page()
    finally:
        await service.close()
        await other.close()


def test_a_duty_is_held_by_one_holder_at_a_time_and_a_gone_folder_is_a_503(tmp_path: Path) -> None:
    store = SqliteStore(f"sqlite:///{tmp_path / 'pets.sqlite3'}", busy_timeout_ms=100)
    with store.alone("reminders") as first, store.alone("reminders") as second, store.alone("purging") as other:
        assert (first, second, other) == (True, False, True)
    with store.alone("reminders") as again:
        assert again
    # Made by the first holder, owner-only, and left in place for the next.
    assert (tmp_path / "pets.sqlite3.reminders-lock").stat().st_mode & 0o777 == 0o600

    gone = SqliteStore(f"sqlite:///{tmp_path / 'gone' / 'pets.sqlite3'}", busy_timeout_ms=100)
    with pytest.raises(DatabaseUnavailable) as raised, gone.alone("reminders"):
        pass
    assert raised.value.cause == VANISHED
