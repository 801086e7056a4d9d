from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import AsyncTestClient, TestClient

from petrecords.app import create_app
from petrecords.config import Settings
from petrecords.db import migrate
from tests.support import SECRET, throwaway_postgres, wipe


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database of each kind, shared by the session; tests empty it before use."""
    if request.param == "sqlite":
        directory = tmp_path_factory.mktemp("sqlite")
        url = f"sqlite:///{directory / 'pets.sqlite3'}"
        migrate(Settings(database_url=url, data_dir=directory))
        yield url
        return
    with throwaway_postgres() as url:
        migrate(Settings(database_url=url, data_dir=tmp_path_factory.mktemp("pg")))
        yield url


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "database_url": database_url,
            "data_dir": tmp_path,
            "auth_secret": SECRET,
            "rate_limit": 0,
            "access_log": False,
        }
        values.update(overrides)
        return Settings(**values)

    return make


@pytest.fixture
def settings(make_settings: Callable[..., Settings]) -> Settings:
    return make_settings()


@pytest.fixture
async def make_client(database_url: str) -> AsyncIterator[Callable[[Settings], AsyncTestClient[Any]]]:
    """Clients of apps built from the given settings, on an emptied database."""
    await wipe(database_url)
    clients: list[AsyncTestClient[Any]] = []

    def make(settings: Settings) -> AsyncTestClient[Any]:
        client: AsyncTestClient[Any] = AsyncTestClient(app=create_app(settings))  # type: ignore[arg-type]
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.__aexit__(None, None, None)


@pytest.fixture
async def client(
    make_client: Callable[[Settings], AsyncTestClient[Any]], settings: Settings
) -> AsyncIterator[AsyncTestClient[Any]]:
    async with make_client(settings) as started:
        yield started


@pytest.fixture
def sync_client(database_url: str, settings: Settings) -> Iterator[TestClient[Any]]:
    """A blocking client (the app runs in a portal thread): for hypothesis tests, which cannot await."""
    asyncio.run(wipe(database_url))
    with TestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started
