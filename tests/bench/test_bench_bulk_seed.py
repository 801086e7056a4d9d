"""A bulk seed (bench/due.py's) drops the indexes of the tables it fills and makes them again afterwards: the
database it measures has the indexes the migrations make, no fewer and no other."""

from __future__ import annotations

import sys
from pathlib import Path

import pysqlite3.dbapi2 as sqlite3

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from tests.support import SECRET, bench_module

# bench/shares.py imports bench/run.py and bench/seed.py by their bare names, as it does when run from bench/.
for _name in ("run", "seed"):
    if _name not in sys.modules:
        sys.modules[_name] = bench_module(_name)
shares = bench_module("shares")


def _indexes(path: Path) -> set[tuple[str, str, str]]:
    connection = sqlite3.connect(path)
    try:
        listed = "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        return {(str(name), str(table), str(sql)) for name, table, sql in connection.execute(listed)}
    finally:
        connection.close()


async def test_a_bulk_seed_makes_the_indexes_again_as_the_migrations_made_them(tmp_path: Path) -> None:
    path = tmp_path / "pets.sqlite3"
    settings = Settings(database_url=f"sqlite:///{path}", data_dir=tmp_path, auth_secret=SECRET)
    migrate(settings)
    migrated = _indexes(path)
    seeded = {resource.collection.table.name for resource in shares.BULK_TABLES}
    store = open_store(settings)
    try:
        made = await shares.drop_indexes(store, settings)
        assert {table for _, table, _ in _indexes(path)}.isdisjoint(seeded)
        assert len(made) == sum(1 for _, table, _ in migrated if table in seeded)
        await shares.make_indexes(store, made)
    finally:
        await store.close()
    assert _indexes(path) == migrated
