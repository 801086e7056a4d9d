"""Fixtures of the store's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from petrecords.app import open_store
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.store.sqlite import SqliteStore


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """A store of a migrated SQLite database of the test's own, opened as the service opens it."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'pets.sqlite3'}", data_dir=tmp_path)
    migrate(settings)
    opened = open_store(settings)
    assert isinstance(opened, SqliteStore)
    try:
        yield opened
    finally:
        await opened.close()
