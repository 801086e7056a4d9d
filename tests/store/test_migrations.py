"""The Alembic history on both databases: reversible, in agreement with the models, safe to run at once.

Each test migrates its own fresh database (a new SQLite file or a throw-away PostgreSQL database), so the
session's shared databases are left alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import asyncpg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from petrecords.config import ConfigurationError, Settings
from petrecords.db import (
    MIGRATION_LOCK_KEY,
    alembic_config,
    create_postgres_engine,
    create_sqlite_engine,
    head_revision,
    is_sqlite,
    known_revisions,
    migrate,
    postgres_dsn,
)
from petrecords.due_rows import DUE_DOSES, due_doses
from petrecords.registry import SCHEMA as metadata
from petrecords.store.counts import count_changes, period_changes
from petrecords.store.grants import add_grant_changes
from petrecords.tables import (
    PERIOD_SIZES,
    PERIOD_SPAN,
    PERIOD_UNIT_MS,
    comparison_options,
    period_counts,
    record_counts,
)
from petrecords.vaccinations import PET_VACCINATIONS
from tests.support import (
    ALICE,
    BOB,
    NOW,
    POSTGRES_ADMIN_URL,
    fetch_sql,
    pet_row,
    run_sql,
    share_row,
    throwaway_postgres,
    vaccination_row,
    vaccine_row,
)

T = TypeVar("T")
PETRECORDS = Path(sys.executable).parent / "petrecords"
APP_TABLES = set(metadata.tables)
BEFORE_TRIGRAMS = "c8f4a2d6e0b7"
"""The revision before the one that makes the trigram indexes (and, on PostgreSQL, the pg_trgm extension)."""
BEFORE_DUE_DAYS = "a8c0e2f4b6d9"
"""The revision before the one that counts vaccinations by the day they are due."""
BEFORE_DUE_HOURS = "d4f6a8c0e2b5"
"""The revision before the one that counts them by the hour."""
BEFORE_ONE_PROCESS = "e6a8c0e2f4b7"
"""The revision before the one that keeps each PostgreSQL statement in one process."""
BEFORE_DUE = "b2d4f6a8c0e3"
"""The revision before the one that keeps what is due."""
DAY_MS = 86_400_000


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind, for this test alone."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.sqlite3'}"
        return
    with throwaway_postgres() as url:
        yield url


def _settings(url: str, data_dir: Path) -> Settings:
    return Settings(database_url=url, data_dir=data_dir, _env_file=None)  # type: ignore[call-arg]


def _on_connection(url: str, data_dir: Path, work: Callable[[sa.Connection], T]) -> T:
    """Run `work` on a synchronous connection to the database (through run_sync for PostgreSQL)."""
    if is_sqlite(url):
        engine = create_sqlite_engine(url, busy_timeout_ms=5000, autocommit=False)
        try:
            with engine.connect() as connection:
                return work(connection)
        finally:
            engine.dispose()

    async def run() -> T:
        async_engine = create_postgres_engine(_settings(url, data_dir))
        try:
            async with async_engine.connect() as connection:
                return await connection.run_sync(work)
        finally:
            await async_engine.dispose()

    return asyncio.run(run())


def _current_revision(connection: sa.Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _table_names(connection: sa.Connection) -> set[str]:
    return set(sa.inspect(connection).get_table_names())


def _insert_as_then(connection: sa.Connection, table: str, rows: list[dict[str, Any]]) -> None:
    """Rows as the store keeps them now, inserted into a table of an older revision: without the columns that came
    later (a clinic's record of a dose)."""
    then = {column["name"] for column in sa.inspect(connection).get_columns(table)}
    connection.execute(sa.insert(metadata.tables[table]), [{k: v for k, v in row.items() if k in then} for row in rows])


def _schema_diff(connection: sa.Connection) -> list[Any]:
    context = MigrationContext.configure(
        connection,
        opts={
            "compare_type": True,
            "compare_server_default": True,
            "target_metadata": metadata,
            **comparison_options(connection.dialect.name),
        },
    )
    with warnings.catch_warnings():
        # Alembic cannot reflect SQLite's expression indexes, so it leaves out of the comparison, and says so, the
        # ones the schema declares and the ones the database has (the rabies tag's year, on SQLite; the other
        # expression indexes exist on PostgreSQL only, tables.hour_indexed).
        warnings.filterwarnings("ignore", "autogenerate skipping metadata-specified expression-based index")
        warnings.filterwarnings("ignore", "Skipped unsupported reflection of expression-based index")
        return list(compare_metadata(context, metadata))


def test_upgrade_downgrade_upgrade(fresh_url: str, tmp_path: Path) -> None:
    settings = _settings(fresh_url, tmp_path)
    assert _on_connection(fresh_url, tmp_path, _current_revision) is None

    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, _current_revision) == head_revision()
    assert _on_connection(fresh_url, tmp_path, _table_names) >= APP_TABLES

    migrate(settings, "base", downgrade=True)
    assert _on_connection(fresh_url, tmp_path, _current_revision) is None
    assert not APP_TABLES & _on_connection(fresh_url, tmp_path, _table_names)

    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, _current_revision) == head_revision()
    assert _on_connection(fresh_url, tmp_path, _table_names) >= APP_TABLES


def test_migrating_twice_is_a_no_op(fresh_url: str, tmp_path: Path) -> None:
    settings = _settings(fresh_url, tmp_path)
    migrate(settings)
    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, _current_revision) == head_revision()
    assert _on_connection(fresh_url, tmp_path, _schema_diff) == []


def test_the_history_read_from_the_migrations_files_is_alembics() -> None:
    """The head and the known revisions are read from the files' revision lines, without importing Alembic."""
    scripts = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == scripts.get_current_head()
    assert known_revisions() == {script.revision for script in scripts.walk_revisions()}


def test_models_and_migrations_agree(fresh_url: str, tmp_path: Path) -> None:
    migrate(_settings(fresh_url, tmp_path))
    assert _on_connection(fresh_url, tmp_path, _schema_diff) == []


def test_models_and_migrations_agree_after_a_round_trip(fresh_url: str, tmp_path: Path) -> None:
    settings = _settings(fresh_url, tmp_path)
    migrate(settings)
    migrate(settings, "base", downgrade=True)
    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, _schema_diff) == []


def test_concurrent_migrators_all_succeed(fresh_url: str, tmp_path: Path) -> None:
    environment = {name: value for name, value in os.environ.items() if not name.startswith("PETRECORDS_")}
    environment["PETRECORDS_DATABASE_URL"] = fresh_url
    environment["PETRECORDS_DATA_DIR"] = str(tmp_path / "data")
    processes = [
        subprocess.Popen(
            [str(PETRECORDS), "migrate"],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs: list[tuple[int, str, str]] = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=60)
            outputs.append((process.returncode, stdout, stderr))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for returncode, stdout, stderr in outputs:
        assert returncode == 0, stderr
        assert "schema at head" in stdout
    assert _on_connection(fresh_url, tmp_path, _current_revision) == head_revision()
    assert _on_connection(fresh_url, tmp_path, _schema_diff) == []


def test_counting_revision_counts_the_pets_already_stored(fresh_url: str, tmp_path: Path) -> None:
    settings = _settings(fresh_url, tmp_path)
    migrate(settings, "a1f0c2d3e4b5")
    owners_and_types = [
        ("a@example.com", "Dog"),
        ("a@example.com", "Dog"),
        ("a@example.com", "Cat"),
        ("b@x.org", "Dog"),
    ]

    def insert_pets(connection: sa.Connection) -> None:
        for number, (owner, pet_type) in enumerate(owners_and_types):
            connection.execute(
                sa.text(
                    "INSERT INTO pets (id, created_at, created_by, modified_at, modified_by, owner_id, name, "
                    "name_key, pet_type, revision) VALUES (:id, 1, :owner, 1, :owner, :owner, 'n', 'n', :type, 1)"
                ),
                {
                    "id": uuid.UUID(int=number + 1) if not is_sqlite(fresh_url) else uuid.UUID(int=number + 1).hex,
                    "owner": owner,
                    "type": pet_type,
                },
            )
        connection.commit()

    def counts(connection: sa.Connection) -> set[tuple[str, str, int]]:
        rows = connection.execute(
            sa.text(
                "SELECT scope, partition, SUM(count) FROM record_counts WHERE resource = 'pets' "
                "GROUP BY scope, partition"
            )
        )
        return {(scope, pet_type, int(total)) for scope, pet_type, total in rows}

    _on_connection(fresh_url, tmp_path, insert_pets)
    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, counts) == {
        ("a@example.com", "Dog", 2),
        ("a@example.com", "Cat", 1),
        ("b@x.org", "Dog", 1),
        ("", "Dog", 3),
        ("", "Cat", 1),
    }


def test_a_migrator_waits_for_another_past_the_statement_timeout(tmp_path: Path) -> None:
    """PostgreSQL, with a statement timeout of 0.1 s: a migrator that waits 1.5 s for another's lock (or runs a
    statement that long) still migrates, for migrations have their own bound (MIGRATION_STATEMENT_TIMEOUT_SECONDS)."""
    with throwaway_postgres() as url:
        settings = _settings(url, tmp_path).model_copy(update={"db_statement_timeout_seconds": 0.1})

        async def hold_the_lock() -> None:
            connection = await asyncpg.connect(postgres_dsn(url))
            try:
                async with connection.transaction():
                    await connection.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
                    await asyncio.sleep(1.5)
            finally:
                await connection.close()

        async def both() -> None:
            holder = asyncio.create_task(hold_the_lock())
            await asyncio.sleep(0.3)
            await asyncio.to_thread(migrate, settings)
            await holder

        asyncio.run(both())
        assert _on_connection(url, tmp_path, _current_revision) == head_revision()


def test_due_day_revision_counts_the_vaccinations_already_stored(fresh_url: str, tmp_path: Path) -> None:
    """Due dates on both sides of the epoch and of each period's edges: the kept counts that the migration writes
    are the ones the service would have kept writing them."""
    settings = _settings(fresh_url, tmp_path)
    migrate(settings, BEFORE_DUE_DAYS)
    vaccine = vaccine_row()
    pets = [pet_row(owner=ALICE), pet_row(owner=BOB)]
    largest = PERIOD_UNIT_MS * PERIOD_SPAN ** (PERIOD_SIZES - 1)
    due_ats = [-largest - 1, -largest, -1, 0, 1, largest - 1, largest, NOW, NOW + 1]
    vaccinations = [vaccination_row(pets[n % 2], vaccine, due_at) for n, due_at in enumerate(due_ats)]

    def insert(connection: sa.Connection) -> None:
        _insert_as_then(connection, "vaccines", [vaccine])
        _insert_as_then(connection, "pets", pets)
        _insert_as_then(connection, "pet_vaccinations", vaccinations)
        connection.commit()

    def counts(connection: sa.Connection) -> Counter[tuple[str, str, int, int]]:
        rows = connection.execute(
            sa.select(
                period_counts.c.resource,
                period_counts.c.scope,
                period_counts.c.size,
                period_counts.c.period,
                period_counts.c.count,
            ).where(period_counts.c.resource == PET_VACCINATIONS.name)
        )
        return Counter({(resource, scope, size, period): count for resource, scope, size, period, count in rows})

    _on_connection(fresh_url, tmp_path, insert)
    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, counts) == period_changes(PET_VACCINATIONS.collection, (), vaccinations)


def test_due_hour_revision_recounts_owners_and_grantees(fresh_url: str, tmp_path: Path) -> None:
    """The periods by the hour that the migration writes are the ones the service would have kept writing the same
    records: for the owners, everyone, and the grantees of the shares it counts (one that never expires, one listed
    in grant_expiries, not one that expired and left the list)."""
    settings = _settings(fresh_url, tmp_path)
    migrate(settings, BEFORE_DUE_HOURS)
    vaccine = vaccine_row()
    pets = [pet_row(owner=ALICE), pet_row(owner=BOB), pet_row(owner=BOB)]
    largest = PERIOD_UNIT_MS * PERIOD_SPAN ** (PERIOD_SIZES - 1)
    due_ats = [-largest - 1, -1, 0, PERIOD_UNIT_MS - 1, PERIOD_UNIT_MS, largest, NOW, NOW + 1]
    vaccinations = [vaccination_row(pets[n % 3], vaccine, due_at) for n, due_at in enumerate(due_ats)]
    counted = {
        "group:clinic": (pets[0], None),
        "carol@example.com": (pets[1], NOW + 1),
        "dave@example.com": (pets[2], 1),
    }
    shares = [share_row(pet, grantee, expires_at) for grantee, (pet, expires_at) in counted.items()]
    listed = [
        {"share_id": share["id"], "resource": "pet-shares", "grantee": share["grantee"], "target_id": share["pet_id"]}
        | {"expires_at": share["expires_at"]}
        for share in shares[1:2]
    ]

    def insert(connection: sa.Connection) -> None:
        _insert_as_then(connection, "vaccines", [vaccine])
        _insert_as_then(connection, "pets", pets)
        _insert_as_then(connection, "pet_vaccinations", vaccinations)
        connection.execute(sa.insert(metadata.tables["pet_shares"]), shares)
        connection.execute(sa.insert(metadata.tables["grant_expiries"]), listed)
        connection.commit()

    def counts(connection: sa.Connection) -> Counter[tuple[str, str, int, int]]:
        rows = connection.execute(
            sa.select(period_counts.c.resource, period_counts.c.scope, period_counts.c.size, period_counts.c.period)
            .add_columns(period_counts.c.count)
            .where(period_counts.c.count != 0, period_counts.c.resource == PET_VACCINATIONS.name)
        )
        return Counter({(resource, scope, size, period): count for resource, scope, size, period, count in rows})

    _on_connection(fresh_url, tmp_path, insert)
    migrate(settings)
    expected = period_changes(PET_VACCINATIONS.collection, (), vaccinations)
    records: Counter[tuple[str, str, str]] = Counter()
    for share in shares[:2]:
        due = [row["due_at"] for row in vaccinations if row["pet_id"] == share["pet_id"]]
        add_grant_changes(records, expected, PET_VACCINATIONS.collection, share["grantee"], due, 1)
    assert _on_connection(fresh_url, tmp_path, counts) == expected


def test_due_revision_keeps_each_living_pets_latest_dose_of_each_group(fresh_url: str, tmp_path: Path) -> None:
    """The due rows the migration writes are each living pet's latest completed dose of each group (vaccines of one
    group, case ignored, renew each other; a vaccine without one is its own group), and their kept counts are the
    ones the service would have kept writing them, for everyone, the owners and the grantees of counted shares."""
    settings = _settings(fresh_url, tmp_path)
    migrate(settings, BEFORE_DUE)
    rabies = {**vaccine_row(), "group_name": "Rabies", "group_key": "rabies"}
    rabies_3y = {
        **vaccine_row(),
        "name": "Rabies 3-year",
        "name_key": "rabies 3-year",
        "group_name": "RABIES",
        "group_key": "rabies",
    }
    lepto = vaccine_row() | {"name": "Lepto", "name_key": "lepto"}
    rex, bo, gone = pet_row(owner=ALICE), pet_row("Bo", owner=BOB), pet_row("Old", owner=BOB)
    gone["deceased_at"] = 20_000
    first = vaccination_row(rex, rabies, NOW - 400 * DAY_MS)
    booster = vaccination_row(rex, rabies_3y, NOW + 700 * DAY_MS)
    wrong = vaccination_row(rex, rabies, NOW + 900 * DAY_MS) | {"status": "entered-in-error", "status_reason": "x"}
    leptos = [vaccination_row(rex, lepto, NOW - DAY_MS), vaccination_row(bo, lepto, NOW + DAY_MS)]
    dead = vaccination_row(gone, lepto, NOW - 2 * DAY_MS)
    vaccinations = [first, booster, wrong, *leptos, dead]
    share = share_row(bo, "group:clinic", None)

    def insert(connection: sa.Connection) -> None:
        _insert_as_then(connection, "vaccines", [rabies, rabies_3y, lepto])
        _insert_as_then(connection, "pets", [rex, bo, gone])
        _insert_as_then(connection, "pet_vaccinations", vaccinations)
        connection.execute(sa.insert(metadata.tables["pet_shares"]), [share])
        connection.commit()

    def kept(connection: sa.Connection) -> tuple[set[Any], Counter[Any], Counter[Any]]:
        due = {tuple(row) for row in connection.execute(sa.select(due_doses.c.id, due_doses.c.group_key))}
        periods = connection.execute(
            sa.select(period_counts.c.scope, period_counts.c.size, period_counts.c.period, period_counts.c.count).where(
                period_counts.c.resource == "due", period_counts.c.count != 0
            )
        )
        records = connection.execute(
            sa.select(record_counts.c.scope, record_counts.c.partition, record_counts.c.count).where(
                record_counts.c.resource == "due", record_counts.c.count != 0
            )
        )
        return (
            due,
            Counter({("due", scope, size, period): count for scope, size, period, count in periods}),
            Counter({("due", scope, partition): count for scope, partition, count in records}),
        )

    _on_connection(fresh_url, tmp_path, insert)
    migrate(settings)
    due, periods, records = _on_connection(fresh_url, tmp_path, kept)
    latest = [booster, *leptos]
    assert due == {
        (booster["id"], "rabies"),
        (leptos[0]["id"], None),
        (leptos[1]["id"], None),
    }
    collection = DUE_DOSES.collection
    expected_periods = period_changes(collection, (), latest)
    expected_records = count_changes(collection, (), latest)
    add_grant_changes(expected_records, expected_periods, collection, "group:clinic", [leptos[1]["due_at"]], 1)
    assert periods == expected_periods
    assert records == +expected_records


def test_each_migration_says_what_it_did(fresh_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = _settings(fresh_url, tmp_path)
    head = head_revision()
    with caplog.at_level(logging.INFO, logger="petrecords.migrations"):
        migrate(settings)
        migrate(settings)
        migrate(settings, "base", downgrade=True)
    messages = [record.getMessage() for record in caplog.records if record.name == "petrecords.migrations"]
    assert messages == [
        f"schema migrated from base to {head}",
        f"schema at {head}: nothing to migrate",
        f"schema migrated from {head} to base",
    ]


def test_name_key_revision_recomputes_keys_in_normalization_form_c(fresh_url: str, tmp_path: Path) -> None:
    settings = _settings(fresh_url, tmp_path)
    migrate(settings, "d9a7c3e5b1f4")
    names = {1: "Cafe\u0301", 2: "Rex", 3: "\u00c9MILE"}  # decomposed, ASCII, composed

    def insert_pets(connection: sa.Connection) -> None:
        for number, name in names.items():
            old_key = "".join(char.lower() for char in name)
            connection.execute(
                sa.text(
                    "INSERT INTO pets (id, created_at, created_by, modified_at, modified_by, owner_id, name, "
                    "name_key, pet_type, revision) VALUES (:id, 1, 'a@b.co', 1, 'a@b.co', 'a@b.co', :name, :key, "
                    "'Dog', 1)"
                ),
                {
                    "id": uuid.UUID(int=number) if not is_sqlite(fresh_url) else uuid.UUID(int=number).hex,
                    "name": name,
                    "key": old_key,
                },
            )
        connection.commit()

    def keys(connection: sa.Connection) -> dict[str, str]:
        return dict(connection.execute(sa.text("SELECT name, name_key FROM pets")).all())  # type: ignore[arg-type]

    _on_connection(fresh_url, tmp_path, insert_pets)
    migrate(settings)
    assert _on_connection(fresh_url, tmp_path, keys) == {
        "Cafe\u0301": "caf\u00e9",
        "Rex": "rex",
        "\u00c9MILE": "\u00e9mile",
    }
    migrate(settings, "d9a7c3e5b1f4", downgrade=True)
    assert _on_connection(fresh_url, tmp_path, keys) == {
        "Cafe\u0301": "cafe\u0301",
        "Rex": "rex",
        "\u00c9MILE": "\u00e9mile",
    }


async def _run_as_superuser(url: str, *statements: str) -> None:
    connection = await asyncpg.connect(url, timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


def test_pg_trgm_missing_and_not_creatable_stops_the_migration_with_what_to_do(tmp_path: Path) -> None:
    """A role that may not create extensions, in a database without pg_trgm: the trigram revision refuses,
    naming the extension and the statement an owner of the database would run; nothing of the revision is
    applied. Once someone who may has created it, the same role migrates to the head."""
    with throwaway_postgres() as admin_url:
        role = f"petrecords_migrator_{uuid.uuid4().hex[:8]}"
        asyncio.run(
            _run_as_superuser(admin_url, f'CREATE ROLE "{role}" LOGIN', f'ALTER SCHEMA public OWNER TO "{role}"')
        )
        try:
            role_url = sa.make_url(admin_url).set(username=role).render_as_string(hide_password=False)
            settings = _settings(role_url, tmp_path)
            migrate(settings, BEFORE_TRIGRAMS)

            with pytest.raises(ConfigurationError, match=r"pg_trgm.*CREATE EXTENSION pg_trgm"):
                migrate(settings)
            assert _on_connection(role_url, tmp_path, _current_revision) == BEFORE_TRIGRAMS

            asyncio.run(_run_as_superuser(admin_url, "CREATE EXTENSION pg_trgm"))
            migrate(settings)
            assert _on_connection(role_url, tmp_path, _current_revision) == head_revision()
            assert _on_connection(role_url, tmp_path, _schema_diff) == []
        finally:
            asyncio.run(_run_as_superuser(admin_url, f'REASSIGN OWNED BY "{role}" TO CURRENT_USER'))
            asyncio.run(_run_as_superuser(admin_url, f'DROP OWNED BY "{role}"', f'DROP ROLE "{role}"'))


async def _parallel_workers(url: str) -> str:
    """What a new connection of the service's kind is allowed: max_parallel_workers_per_gather."""
    return str((await fetch_sql(url, "SHOW max_parallel_workers_per_gather"))[0][0])


def test_postgresql_statements_run_in_one_process_after_migrating(tmp_path: Path) -> None:
    """The database's own setting, which every new connection takes up; the downgrade gives back the server's."""
    with throwaway_postgres() as url:
        server_default = asyncio.run(_parallel_workers(url))
        assert server_default != "0"
        migrate(_settings(url, tmp_path))
        assert asyncio.run(_parallel_workers(url)) == "0"
        migrate(_settings(url, tmp_path), BEFORE_ONE_PROCESS, downgrade=True)
        assert asyncio.run(_parallel_workers(url)) == server_default


def test_a_role_that_does_not_own_the_database_migrates_and_is_told_what_to_ask(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"petrecords_guest_{uuid.uuid4().hex[:8]}"
    with throwaway_postgres() as url:
        name = url.rsplit("/", 1)[1]
        admitted = (
            "CREATE EXTENSION IF NOT EXISTS pg_trgm",
            f'CREATE ROLE "{role}" LOGIN',
            f'GRANT CREATE ON DATABASE "{name}" TO "{role}"',
            f'GRANT CREATE, USAGE ON SCHEMA public TO "{role}"',
        )
        asyncio.run(run_sql(url, "; ".join(admitted)))
        try:
            as_role = url.replace("://postgres@", f"://{role}@")
            with caplog.at_level(logging.WARNING, logger="petrecords.migrations"):
                migrate(_settings(as_role, tmp_path))
            assert _on_connection(as_role, tmp_path, _current_revision) == head_revision()
            assert asyncio.run(_parallel_workers(as_role)) != "0"
            assert any("ALTER DATABASE" in record.getMessage() for record in caplog.records)
        finally:
            asyncio.run(run_sql(url, f'DROP OWNED BY "{role}"'))
            asyncio.run(run_sql(POSTGRES_ADMIN_URL, f'DROP ROLE IF EXISTS "{role}"'))
