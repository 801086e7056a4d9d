from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import hypothesis
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine
from litestar.testing import AsyncTestClient, TestClient

from petrecords.app import create_app, open_store, settle_collector
from petrecords.config import Settings
from petrecords.db import migrate
from petrecords.store.base import Row, Store
from petrecords.vaccines import VACCINES
from tests.support import PET_RECORDS, SECRET, throwaway_postgres, vaccine_row, wipe

# How hard property-based tests look, for every one of them: `fast` in `make test` (a developer's many runs a day),
# `long` in `make test-long`, which runs every property-based test again (`-m hypothesis --hypothesis-profile long`)
# with fifty times the examples and four times the steps.
_QUIET = {"deadline": None, "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}
settings.register_profile("fast", max_examples=20, stateful_step_count=25, **_QUIET)
settings.register_profile("long", max_examples=1000, stateful_step_count=100, **_QUIET)
settings.load_profile("fast")

STATEFUL_RUNS_AT_MOST = {"fast": 5, "long": 10}
"""Runs of a state machine: each is a sequence of steps with every caller's view checked after each, so the long
profile's thousand would take hours. `make test-long` runs ten of a hundred steps (forty took 26 minutes of a
worker for the grant counts on PostgreSQL alone, on a machine twice slower than usual, and `.ci/run` ran past its
90 minutes); `make test` five of twenty-five, an eighth of the steps: the sharing model on PostgreSQL took 92 s
of a worker with ten, on a loaded machine, the longest test of `make test` after schemathesis."""


STATEFUL_PARTS = {"long": 3}
"""Tests of its own that a state machine's runs are split into, by profile (one where not named): xdist spreads
them over its workers. Whole, the machines of `make test-long` ran last, one after another on one worker, for
half an hour while the other sat idle."""


def _stateful_parts() -> int:
    return STATEFUL_PARTS.get(hypothesis.settings.get_current_profile_name(), 1)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "stateful_part" in metafunc.fixturenames:
        metafunc.parametrize("stateful_part", range(_stateful_parts()))


def stateful_settings() -> hypothesis.settings:
    """The profile's settings for a state machine: half its examples as runs (each is many steps), at most
    STATEFUL_RUNS_AT_MOST's (five in `make test`, ten in `make test-long`), shared by its parts (a test that takes
    `stateful_part` runs once per part)."""
    profile = hypothesis.settings.default
    most = STATEFUL_RUNS_AT_MOST.get(hypothesis.settings.get_current_profile_name() or "", 10)
    runs = min(profile.max_examples // 2, most)
    return hypothesis.settings(profile, max_examples=-(-runs // _stateful_parts()))


def _heaviest_first(item: pytest.Item) -> int:
    """Where a test of `make test-long` is handed out: the long ones (minutes each), then the parts of state
    machines, then the rest (seconds); in each, those on PostgreSQL first. Handed out in this order, no worker is
    left with a long test to run alone at the end while the others sit idle (a thorough schemathesis run did, for
    a quarter of an hour).

    Not in `make test`: there worksteal gives each worker a share of the queue, in order, so the heaviest first
    would all be the first worker's (see _slow_first_in_each_share)."""
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    # On PostgreSQL, each step waits for a server's answers: the same test takes longer than on SQLite.
    on_sqlite = 1 if "sqlite" in (params.get("database_url"), params.get("server"), params.get("database")) else 0
    if item.get_closest_marker("long") is not None:
        return on_sqlite
    return (2 if "stateful_part" in params else 4) + on_sqlite


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked `only_on(kind)` is about one database: its variants on the other are not collected at all (a
    skip would report a test that could never run). Under the long profile, the heaviest tests come first."""
    kept, dropped = [], []
    for item in items:
        marker = item.get_closest_marker("only_on")
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("database_url") if callspec is not None else None
        (dropped if marker is not None and kind is not None and kind not in marker.args else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    if hypothesis.settings.get_current_profile_name() == "long":
        items.sort(key=_heaviest_first)
    elif (workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) > 1:
        items[:] = _slow_first_in_each_share(items, workers)


def pytest_collection_finish(session: pytest.Session) -> None:
    """The test process's collector set as a server's is (`settle_collector`): what collection made (the modules,
    the test items, their parameters) lives as long as the process and is frozen out of every pass, and full passes
    come about nine times rarer. Five API and store modules (994 tests) took 29 s of CPU instead of 31-33 s: the
    full passes had walked every collected item again and again."""
    settle_collector()


def _slow_first_in_each_share(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order for worksteal (`make test`), which hands each worker a share of the queue, in order, and lets one
    that ran out take the far end of another's: each share begins with a third of the tests that start servers
    (marked slow: a tenth of the tests, more than half the time), so that none is left to start late and run alone
    at the end. Replayed on the durations of a run of 5,601 tests, the collection's order ended 478 s in (the
    workers 409, 425 and 478 s), this one 438 s, against 437 s for the work shared exactly.

    The slow tests are dealt out in groups, one group to each share in turn: the tests that share a server (a
    fixture of their module or class, `_sharing_group`) go together. Dealt one by one, they had landed on every
    worker, and each started that server again: 47 starts of the 16 such servers in `make test`."""
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    groups: dict[tuple[str, ...], list[pytest.Item]] = {}
    for item in slow:
        groups.setdefault(_sharing_group(item), []).append(item)
    dealt = list(groups.values())
    ordered: list[pytest.Item] = []
    remaining, taken = len(items), 0
    for share in range(workers):
        size = remaining // (workers - share)  # as xdist's worksteal cuts the shares
        remaining -= size
        first = [item for group in dealt[share::workers] for item in group]
        fill = size - len(first)
        if fill < 0:
            return items
        ordered.extend(first + rest[taken : taken + fill])
        taken += fill
    return ordered


def _sharing_group(item: pytest.Item) -> tuple[str, ...]:
    """What a test shares with others that it runs beside: its module and the fixtures of module or class scope it
    takes (a server, a cluster, an export), with their parameters, or the lock it holds while it runs (marked
    `one_at_a_time`); a test that takes neither is a group of its own.
    pytest keeps no public record of a fixture's scope on the test, hence `_fixtureinfo`, which its own ordering
    of the tests by fixture reads too."""
    if not isinstance(item, pytest.Function):
        return (item.nodeid,)
    lock = item.get_closest_marker("one_at_a_time")
    if lock is not None:
        # Tests that take turns at one lock: on several workers, all but one would sit waiting for it.
        return ("one_at_a_time", str(lock.args[0]))
    definitions = item._fixtureinfo.name2fixturedefs
    shared = sorted(name for name, chain in definitions.items() if chain[-1].scope in ("module", "class"))
    if not shared:
        return (item.nodeid,)
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return (item.nodeid.split("::")[0], *(f"{name}={params.get(name, '')}" for name in shared))


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database of each kind, shared by the session; tests empty it before use."""
    if request.param == "sqlite":
        directory = tmp_path_factory.mktemp("sqlite")
        url = f"sqlite:///{directory / 'pets.sqlite3'}"
        migrate(Settings(database_url=url, data_dir=directory))
        yield url
        return
    with throwaway_postgres(migrated=True) as url:
        migrate(Settings(database_url=url, data_dir=tmp_path_factory.mktemp("pg")))
        yield url


def test_settings(database_url: str, data_dir: Path, **overrides: Any) -> Settings:
    """The settings of the apps under test: the test database, the test secret, no rate limit, no access log."""
    values: dict[str, Any] = {
        "database_url": database_url,
        "data_dir": data_dir,
        "auth_secret": SECRET,
        "rate_limit": 0,
        "access_log": False,
        # A test of reminders runs the duty's passes itself, at the moments it chooses (tests/api/test_reminders.py).
        "reminders_interval_seconds": 0,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def make_settings(database_url: str, tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return test_settings(overrides.pop("database_url", database_url), tmp_path, **overrides)

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


@pytest.fixture(scope="module")
async def module_client(
    database_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[AsyncTestClient[Any]]:
    """One app with the default test settings for a whole module: building an app and running its lifespan costs
    more than most tests do."""
    settings = test_settings(database_url, tmp_path_factory.mktemp("data"))
    async with AsyncTestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
async def client(database_url: str, module_client: AsyncTestClient[Any]) -> AsyncTestClient[Any]:
    """The module's app, on an emptied database. A test that needs an app of its own (other settings, or one it
    breaks) takes `make_client` or `fresh_client`."""
    await wipe(database_url)
    return module_client


@pytest.fixture
async def fresh_client(
    make_client: Callable[[Settings], AsyncTestClient[Any]], settings: Settings
) -> AsyncIterator[AsyncTestClient[Any]]:
    """An app of its own for one test, on an emptied database."""
    async with make_client(settings) as started:
        yield started


@pytest.fixture
def sync_client(database_url: str, settings: Settings) -> Iterator[TestClient[Any]]:
    """A blocking client (the app runs in a portal thread): for hypothesis tests, which cannot await."""
    asyncio.run(wipe(database_url))
    with TestClient(app=create_app(settings)) as started:  # type: ignore[arg-type]
        yield started


@pytest.fixture
def blocking_store(database_url: str, tmp_path: Path) -> Iterator[tuple[Store, Callable[..., Any]]]:
    """The store, opened in a thread's event loop, and how to call its coroutines from a test that cannot await
    (a hypothesis state machine)."""
    with anyio.from_thread.start_blocking_portal() as portal:
        store = portal.call(_opened, test_settings(database_url, tmp_path))
        try:
            yield store, portal.call
        finally:
            portal.call(store.close)


async def _opened(settings: Settings) -> Store:
    return open_store(settings)


class StoreMachine(RuleBasedStateMachine):
    """A hypothesis state machine that writes through the blocking store it is run on (`run_machine_on_store`)."""

    store: Store
    call: Callable[..., Any]

    def write(self, write: Callable[[Any], Any]) -> None:
        """`write(tx)` in a write transaction of its own, committed."""

        async def run() -> None:
            async with self.store.transaction(write=True) as tx:
                await write(tx)

        self.call(run)

    def write_vaccine_and_pets(self, pets: Iterable[Row]) -> None:
        """A vaccine, kept as `self.vaccine`, and the pets."""
        self.vaccine = vaccine_row()

        async def write(tx: Any) -> None:
            await tx.insert(VACCINES.collection, self.vaccine)
            for pet in pets:
                await tx.insert(PET_RECORDS, pet)

        self.write(write)


def run_machine_on_store(
    machine: type[StoreMachine], database_url: str, blocking_store: tuple[Store, Callable[..., Any]]
) -> None:
    """Run a hypothesis state machine whose `store` and `call` are the blocking store's, each run on an empty
    database."""
    store, call = blocking_store

    class OnThisStore(machine):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            asyncio.run(wipe(database_url))
            super().__init__()
            self.store, self.call = store, call

    OnThisStore.TestCase.settings = stateful_settings()
    OnThisStore.TestCase().runTest()
