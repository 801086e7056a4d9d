"""Database URLs, engines and schema migrations (one Alembic history for both databases).

Alembic, and SQLAlchemy's asyncio extension (which brings its ORM along), are imported by what migrates: a process
that only opens a store, as every server worker and data command does, starts without them."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import functools
import logging
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from petrecords.config import ConfigurationError, Settings

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.ext.asyncio import AsyncEngine

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_VERSION_TABLE = "alembic_version"
"""Where Alembic keeps the schema's revision."""
_REVISION_LINE = re.compile(r"""^(down_)?revision(?:: [^=]+)? = (None|["']([^"']+)["'])$""", re.MULTILINE)
"""A migration file's `revision = "…"` or `down_revision = …` line, as script.py.mako writes it or formatted."""
log = logging.getLogger("petrecords.migrations")
# How much longer than the server's statement timeout the client waits for an answer: the server's own
# cancel normally comes first and leaves the connection usable.
CLIENT_TIMEOUT_GRACE_SECONDS = 0.5
# Any constant shared by every instance: the key of the PostgreSQL lock held while migrating.
MIGRATION_LOCK_KEY = 0x7065747265636F72  # "petrecor"
MIGRATION_STATEMENT_TIMEOUT_SECONDS = 3600.0
"""A migration's statements' bound on PostgreSQL, instead of the service's statement timeout: recounting a table of
millions of rows takes minutes, and instances that start meanwhile wait for its lock as long."""
# SQLite 3.7.0 to 3.51.2 have the WAL-reset bug: a database in WAL mode can be corrupted when two
# connections write or checkpoint at the same moment, which is what several server workers do.
MIN_SQLITE_VERSION = (3, 51, 3)


class SqliteTooOld(ConfigurationError):
    """The SQLite library in use lacks a fix the service relies on."""


def check_sqlite_version(version: tuple[int, ...]) -> None:
    if tuple(version[:3]) < MIN_SQLITE_VERSION:
        found = ".".join(map(str, version))
        needed = ".".join(map(str, MIN_SQLITE_VERSION))
        raise SqliteTooOld(
            f"SQLite {found} is too old: {needed} or later is required (it fixes the WAL-reset corruption bug)"
        )


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def async_postgres_url(url: str) -> sa.URL:
    parsed = make_url(url.replace("postgres://", "postgresql://", 1))
    if parsed.get_backend_name() != "postgresql":
        raise ValueError("PETRECORDS_DATABASE_URL must start with sqlite:// or postgresql://")
    return parsed.set(drivername="postgresql+asyncpg")


def sqlite_path(url: str) -> Path | None:
    database = make_url(url).database
    return None if database in (None, "", ":memory:") else Path(database)


def sqlite_uri(path: Path, *, mode: str) -> str:
    """The URI of a database file that SQLite opens in `mode` (`ro`, `rw`): never creating it."""
    return f"{path.absolute().as_uri()}?mode={mode}"


def create_sqlite_engine(
    url: str, *, busy_timeout_ms: int, autocommit: bool, create: bool = True, cache_kib: int | None = None
) -> sa.Engine:
    """SQLite from the pysqlite3 wheel: its library has the WAL fixes the system one lacks.

    WAL lets readers run beside the one writer; synchronous=FULL makes every acknowledged commit
    durable against power loss, not only against a crash of the process. An older library than
    MIN_SQLITE_VERSION is refused (SqliteTooOld) before anything is opened. Without `create`, a connection
    opens only a database file that exists: where there is none, SQLite answers CANTOPEN instead of making
    a new, empty one. `cache_kib`: each connection's page cache, where not SQLite's default (2,000 KiB).
    """
    check_sqlite_version(sqlite3.sqlite_version_info)
    if cache_kib is not None and cache_kib <= 0:
        raise ValueError(f"a page cache of {cache_kib} KiB: give a positive size, or none for SQLite's default")
    path = sqlite_path(url)
    connect_args: dict[str, Any] = {"timeout": busy_timeout_ms / 1000, "check_same_thread": False}
    options: dict[str, Any] = {"connect_args": connect_args}
    if path is not None and not create:
        # SQLAlchemy's sqlite URL cannot say mode=rw; a connection of the engine's own making can.
        uri = sqlite_uri(path, mode="rw")
        options = {"creator": functools.partial(sqlite3.connect, uri, uri=True, **connect_args)}
    elif path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Owner-only, like the data directory: it holds every record (SQLite makes its journals with its mode).
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    engine = sa.create_engine(url, module=sqlite3, isolation_level="AUTOCOMMIT" if autocommit else None, **options)

    @sa.event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode = WAL",
            "synchronous = FULL",
            f"busy_timeout = {busy_timeout_ms}",
            "foreign_keys = ON",
            *(() if cache_kib is None else (f"cache_size = -{int(cache_kib)}",)),
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    return engine


def postgres_dsn(url: str) -> str:
    """The URL as asyncpg takes it: postgresql://…, whatever driver the configured URL names."""
    return async_postgres_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def statement_timeout_ms(settings: Settings) -> int:
    return int(settings.db_statement_timeout_seconds * 1000)


def postgres_connect_args(settings: Settings) -> dict[str, Any]:
    """asyncpg's arguments for every new connection. Every wait on the database is bounded: for a new
    connection to be set up (the connect timeout), for a statement (the server cancels it after the
    statement timeout; the client gives up a little later, for when the server or the network has gone
    silent). Callers that pool connections bound the wait for a free one by the connect timeout too.

    Behind PgBouncer, a startup parameter that it does not track is refused ("unsupported startup
    parameter"): application_name and standard_conforming_strings are tracked, statement_timeout is not, so
    there the statement timeout is set otherwise (see PostgresStore). In transaction pooling, consecutive
    transactions of one client connection run on different server connections, so a statement prepared under
    a name in one is missing (or another one) in the next: asyncpg then prepares every statement unnamed, in the
    same round trips as it runs it."""
    server_settings = {
        "application_name": "petrecords",
        # The server's default since 9.1, pinned because the store's compiled SQL relies on it.
        "standard_conforming_strings": "on",
    }
    if settings.db_pooler == "none":
        server_settings["statement_timeout"] = str(statement_timeout_ms(settings))
        # No statement here runs long enough to gain from JIT compiling it, and the planner's estimates for a
        # generic plan can pass jit_above_cost: a clinic's count of what is due (a few index lookups) took 300 ms
        # at 1,000,000 doses, nearly all of it compiling.
        server_settings["jit"] = "off"
    args: dict[str, Any] = {
        "timeout": settings.db_connect_timeout_seconds,
        "command_timeout": settings.db_statement_timeout_seconds + CLIENT_TIMEOUT_GRACE_SECONDS,
        "server_settings": server_settings,
    }
    if settings.db_pooler == "transaction":
        args["statement_cache_size"] = 0
    return args


def _unique_statement_name() -> str:
    return f"__petrecords_{uuid.uuid4().hex}__"


def create_postgres_engine(settings: Settings) -> AsyncEngine:
    """A SQLAlchemy engine over asyncpg, for migrations: with the store's connection settings and bounds."""
    from sqlalchemy.ext.asyncio import create_async_engine

    connect_args = postgres_connect_args(settings)
    if settings.db_pooler == "transaction":
        # SQLAlchemy prepares each statement under a name, numbered per client connection: behind a transaction
        # pooler two clients' numbers would meet on one server connection. Names of their own never do.
        connect_args["prepared_statement_cache_size"] = 0
        connect_args["prepared_statement_name_func"] = _unique_statement_name
    engine = create_async_engine(
        async_postgres_url(settings.resolved_database_url),
        pool_size=settings.db_pool_size,
        max_overflow=0,
        pool_timeout=settings.db_connect_timeout_seconds,
        pool_recycle=1800,
        connect_args=connect_args,
    )

    @sa.event.listens_for(engine.sync_engine, "checkout")
    def _replace_closed(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        # Closed by the other end while it sat in the pool (a server restart, a cut link): the pool replaces
        # it now, at no cost in round trips, rather than hand it to a request that would then fail.
        if dbapi_connection.driver_connection.is_closed():
            raise sa.exc.DisconnectionError("the pooled connection was closed by the other end")

    @sa.event.listens_for(engine.sync_engine, "handle_error")
    def _abort_broken(context: sa.engine.ExceptionContext) -> None:
        # A connection that timed out on the client side or broke is in an unknown state, and SQLAlchemy
        # invalidates it. It would first try a graceful close, which waits for seconds on a silent network;
        # aborting the socket first makes that immediate. (The server's own errors, such as its statement
        # timeout, leave the connection usable: those are not disconnects.)
        connection = context.connection
        if not context.is_disconnect or connection is None or connection.invalidated or connection.closed:
            return
        driver_connection = connection.connection.driver_connection
        if driver_connection is not None:
            driver_connection.terminate()

    return engine


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


@functools.lru_cache(maxsize=1)
def _history() -> dict[str, str | None]:
    """Each revision of this version's migrations and the one it follows, read from the `revision` and
    `down_revision` lines of their files as Alembic writes them (tests/store/test_migrations.py checks that Alembic
    reads the same history)."""
    history: dict[str, str | None] = {}
    for script in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        lines = {down: revision for down, _, revision in _REVISION_LINE.findall(script.read_text(encoding="utf-8"))}
        if "" not in lines or "down_" not in lines or not lines[""]:
            raise RuntimeError(f'{script.name}: no revision = "…" and down_revision = … lines')
        history[lines[""]] = lines["down_"] or None
    return history


@functools.lru_cache(maxsize=1)
def head_revision() -> str:
    """The newest revision of this version's migrations (read from their files once per process: every store
    opened checks the schema against it)."""
    history = _history()
    heads = set(history) - set(history.values())
    if len(heads) != 1:
        raise RuntimeError(f"the migration history has {len(heads)} heads, not one: {sorted(heads)}")
    return heads.pop()


def known_revisions() -> frozenset[str]:
    """Every schema revision this version's migrations know."""
    return frozenset(_history())


class SchemaTooNew(Exception):
    """The database's schema is at a revision this version does not know: a newer version migrated it."""

    def __init__(self, revision: str) -> None:
        super().__init__(revision)
        self.revision = revision

    def explained(self) -> str:
        return (
            f"its schema is at revision {self.revision}, which this petrecords does not know: a newer version made "
            "it; use that version (or a newer one) with it"
        )


def check_revision_known(revision: str | None) -> None:
    """SchemaTooNew when `revision` is no revision of this version's migrations (None: no schema yet)."""
    if revision is not None and revision not in known_revisions():
        raise SchemaTooNew(revision)


def _current_revision(connection: sa.Connection) -> str | None:
    """The schema's revision, as Alembic keeps it in its version table (None before the first migration)."""
    if not sa.inspect(connection).has_table(_VERSION_TABLE):
        return None
    revisions = connection.execute(sa.text(f"SELECT version_num FROM {_VERSION_TABLE}")).scalars().all()  # noqa: S608
    if len(revisions) > 1:
        raise RuntimeError(f"{_VERSION_TABLE} holds {len(revisions)} revisions, not one: {sorted(revisions)}")
    return revisions[0] if revisions else None


def _run_alembic(connection: sa.Connection, revision: str, *, downgrade: bool = False) -> None:
    """Migrate on `connection` (inside its transaction) and log what changed, if anything. A schema newer than
    this version's is left as it is (SchemaTooNew): Alembic would otherwise fail on a revision it cannot find."""
    before = _current_revision(connection)
    check_revision_known(before)
    fields = {"from_revision": before, "to_revision": before}
    if not downgrade and before == (head_revision() if revision == "head" else revision):
        # What Alembic would find too, without importing it: most starts and data commands find the schema current.
        log.info("schema at %s: nothing to migrate", before or "base", extra={"fields": fields})
        return
    from alembic import command

    config = alembic_config()
    config.attributes["connection"] = connection
    if downgrade:
        command.downgrade(config, revision)
    else:
        command.upgrade(config, revision)
    after = _current_revision(connection)
    fields["to_revision"] = after
    if before == after:
        log.info("schema at %s: nothing to migrate", after or "base", extra={"fields": fields})
    else:
        log.info("schema migrated from %s to %s", before or "base", after or "base", extra={"fields": fields})


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextlib.contextmanager
def held_alone(path: Path) -> Iterator[bool]:
    """Whether the block holds the lock file at `path` alone, not waiting for it (flock): of every process on this
    machine and every other open of it in this one. The kernel lets it go when the process ends, `kill -9` included.
    The file is made owner-only when there is none, and left in place: one removed while held would let the next
    holder lock a new file beside it."""
    with os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o600), "r+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def check_database_folder(settings: Settings) -> None:
    """Refuse an SQLite database in a folder that does not exist: a mistyped path would otherwise be a new, empty
    database. The data directory is the exception, made when missing, as the default database lives there."""
    url = settings.resolved_database_url
    path = sqlite_path(url) if is_sqlite(url) else None
    if path is None or path.parent.is_dir() or path.parent.resolve() == settings.data_dir.resolve():
        return
    raise ConfigurationError(
        f"PETRECORDS_DATABASE_URL {url}: the folder {path.parent.resolve()} does not exist; make it first (or leave "
        "PETRECORDS_DATABASE_URL unset for a database in PETRECORDS_DATA_DIR)"
    )


def serving_lock_path(database: Path) -> Path:
    """The file that every server of an SQLite database holds a shared lock on while it runs, and that a restore
    takes exclusively: so a restore is refused while a server runs, and a server starts only after it."""
    return database.with_name(database.name + ".serve-lock")


@contextlib.contextmanager
def serving(settings: Settings) -> Iterator[None]:
    """Hold the SQLite database's serving lock (shared) for the block; nothing on PostgreSQL."""
    path = sqlite_path(settings.resolved_database_url) if is_sqlite(settings.resolved_database_url) else None
    if path is None:
        yield
        return
    lock = serving_lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)  # waits for a restore that is putting a database in place
        yield


def migrate(settings: Settings, revision: str = "head", *, downgrade: bool = False) -> None:
    """Bring the schema to `revision`. Safe when several instances start at once: one migrates, the
    others wait for it and then find nothing left to do. A database that cannot be reached or written, or an
    SQLite database in a folder that does not exist, or one whose schema a newer version made, is a
    ConfigurationError that names the setting."""
    check_database_folder(settings)
    url = settings.resolved_database_url
    try:
        _migrate(settings, url, revision, downgrade=downgrade)
    except SchemaTooNew as exc:
        shown = make_url(url).render_as_string(hide_password=True)
        raise ConfigurationError(f"PETRECORDS_DATABASE_URL {shown}: {exc.explained()}; nothing was changed") from None
    except (OSError, TimeoutError, sa.exc.DBAPIError, sqlite3.Error, asyncpg.PostgresError) as exc:
        cause = exc.orig if isinstance(exc, sa.exc.DBAPIError) and exc.orig is not None else exc
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        shown = make_url(url).render_as_string(hide_password=True)
        raise ConfigurationError(f"PETRECORDS_DATABASE_URL {shown}: cannot migrate the database: {reason}") from None


def _migrate(settings: Settings, url: str, revision: str, *, downgrade: bool) -> None:
    if is_sqlite(url):
        path = sqlite_path(url)
        lock = path.with_name(path.name + ".migrate-lock") if path else settings.data_dir / "migrate-lock"
        with _file_lock(lock):
            engine = create_sqlite_engine(url, busy_timeout_ms=settings.sqlite_busy_timeout_ms, autocommit=False)
            try:
                with engine.begin() as connection:
                    _run_alembic(connection, revision, downgrade=downgrade)
            finally:
                engine.dispose()
    else:
        asyncio.run(_migrate_postgres(settings, revision, downgrade=downgrade))


async def _migrate_postgres(settings: Settings, revision: str, *, downgrade: bool) -> None:
    # A copy, not validated: the bound is beyond what the service's own statements may be given.
    settings = settings.model_copy(update={"db_statement_timeout_seconds": MIGRATION_STATEMENT_TIMEOUT_SECONDS})
    engine = create_postgres_engine(settings)
    try:
        async with engine.connect() as connection:
            # Held to the end of the transaction that also carries the DDL: PostgreSQL DDL is transactional.
            # Behind a pooler the connection has no statement timeout of its own; this transaction gets one.
            await connection.execute(sa.text(f"SET LOCAL statement_timeout = {statement_timeout_ms(settings)}"))
            await connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            await connection.run_sync(_run_alembic, revision, downgrade=downgrade)
            await connection.commit()
    finally:
        await engine.dispose()
