"""`petrecords backup` and `petrecords restore`: a consistent copy of the SQLite database, and putting one back.

Backup copies through SQLite's online backup API, a step of BACKUP_STEP_PAGES pages at a time, inside one read
transaction on the live database: every step copies from the same snapshot (taken when the backup begins, so
every write acknowledged before is in the copy), and SQLite does not start the copy over when a writer commits
meanwhile, as it would between steps outside a transaction. In WAL mode a reader never blocks a writer: the
service writes on during the whole backup (its write-ahead log is not checkpointed past the backup's snapshot
until it ends). The copy is written to a hidden file beside FILE and appears at FILE only once whole and synced.

Restore is refused while anything uses the database: a server holds its serving lock (db.serving) for as long as
it runs, and every SQLite connection to a database in WAL mode holds a read lock on the shared-memory file's
dead-man-switch byte while it is open. The backup is copied, checked and migrated beside the database, the
database's write-ahead log is checkpointed into it, and the new file then replaces it in one rename: killed at
any point before that rename, the database is as it was. A file is restored only if, once migrated, it holds
every table, column, index and trigger that a database this version migrates holds (a backup of a newer version,
or a database with a table dropped, is refused).

Every file these commands make is created owner-only (mode 0600), whatever the umask: a backup holds every
record.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pysqlite3.dbapi2 as sqlite3

from petrecords.config import ConfigurationError, Settings
from petrecords.db import (
    SchemaTooNew,
    check_revision_known,
    held_alone,
    is_sqlite,
    migrate,
    serving_lock_path,
    sqlite_uri,
)
from petrecords.portability.databases import open_sqlite, sqlite_file
from petrecords.portability.errors import CommandFailed, UseAnotherTool
from petrecords.portability.progress import Meter
from petrecords.portability.records import counted
from petrecords.resources.declaration import ResourceSet

BACKUP_STEP_PAGES = 256
"""Pages copied per step of the backup: 1 MiB at the default page size."""
_WAL_DMS_OFFSET = 128
"""The byte of a WAL database's shared-memory file on which every open connection holds a read lock (SQLite's
unix VFS: UNIX_SHM_DMS)."""


def refuse_postgres(settings: Settings, command: str) -> None:
    if is_sqlite(settings.resolved_database_url):
        return
    how = "back it up with pg_dump" if command == "backup" else "restore it with pg_restore"
    raise UseAnotherTool(
        f"the database is PostgreSQL: {how} (docs/how-to/backup-and-restore.md has the recipe); this command "
        "copies SQLite databases"
    )


def _fsync_directory(directory: Path) -> None:
    handle = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


@contextlib.contextmanager
def _partial_beside(path: Path, what: str) -> Iterator[Path]:
    """A new, empty hidden file beside `path`, owner-only (SQLite writes a database into an empty file, and makes
    its journals with the file's mode), removed unless the block has moved it away."""
    directory = path.resolve().parent
    if not directory.is_dir():
        raise CommandFailed(f"{path}: no directory {directory}")
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".{what}-partial", dir=directory)
    os.close(handle)
    partial = Path(name)
    try:
        yield partial
    finally:
        leftovers = (partial, *(Path(f"{partial}{suffix}") for suffix in ("-journal", "-wal", "-shm", ".migrate-lock")))
        for leftover in leftovers:
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _copy(source: sqlite3.Connection, destination: Path, meter: Meter) -> None:
    copy = sqlite3.connect(destination)
    try:

        def advanced(_status: int, remaining: int, total: int) -> None:
            meter.advance(BACKUP_STEP_PAGES, total - remaining)

        source.backup(copy, pages=BACKUP_STEP_PAGES, progress=advanced)
    finally:
        copy.close()


def _records_in(connection: sqlite3.Connection, resources: ResourceSet) -> str:
    return counted(
        {
            resource.name: connection.execute(f'SELECT count(*) FROM "{resource.table.name}"').fetchone()[0]  # noqa: S608
            for resource in resources.resources
        }
    )


def backup(settings: Settings, resources: ResourceSet, path: Path, *, show_progress: bool) -> str:
    """Copy the configured SQLite database to `path`, a new file, while the service serves and writes; what was
    copied, in a line."""
    if path.exists() or path.is_symlink():
        raise CommandFailed(f"{path} exists: a backup is written to a new file")
    database = sqlite_file(settings)
    if not Path(database).is_file():
        raise CommandFailed(f"no database at {database}")
    with _partial_beside(path, "backup") as partial:
        source = open_sqlite(database, settings)
        try:
            source.execute("BEGIN")
            pages = source.execute("PRAGMA page_count").fetchone()[0]  # the read transaction, and its snapshot, begin
            with Meter("backup", total=pages if show_progress else None, unit="pages") as meter:
                _copy(source, partial, meter)
            held = _records_in(source, resources)  # in the snapshot copied
            source.execute("COMMIT")
        finally:
            source.close()
        with open(partial, "rb+") as copied:
            os.fsync(copied.fileno())
        try:
            os.link(partial, path)  # never over a file that appeared meanwhile
        except FileExistsError:
            raise CommandFailed(f"{path} exists: a backup is written to a new file") from None
        _fsync_directory(path.resolve().parent)
    return f"backed up {database} to {path} ({path.stat().st_size} bytes): {held}"


def _open_elsewhere(database: Path) -> bool:
    """Whether a connection (of any process but this one) has the WAL database open: it holds a read lock on the
    dead-man-switch byte of the shared-memory file."""
    shm = Path(f"{database}-shm")
    try:
        handle = os.open(shm, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        probe = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, _WAL_DMS_OFFSET, 1, 0)
        answer = fcntl.fcntl(handle, fcntl.F_GETLK, probe)
        held: int = struct.unpack("hhqqi", answer)[0]
        return held != fcntl.F_UNLCK
    finally:
        os.close(handle)


@contextlib.contextmanager
def _no_server(database: Path) -> Iterator[None]:
    """Hold the serving lock exclusively for the block, which no server then holds or takes; refused while one
    does, or while anything has the database open."""
    lock = serving_lock_path(database)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with held_alone(lock) as held:
        if not held:
            raise CommandFailed(
                f"a server is using {database} (it holds {lock.name}): stop it first; nothing was restored"
            )
        if _open_elsewhere(database):
            raise CommandFailed(
                f"another process has {database} open (its shared-memory file is locked): stop it first; "
                "nothing was restored"
            )
        yield


def _check_backup(path: Path) -> None:
    try:
        probe = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True)
    except sqlite3.Error as exc:
        raise CommandFailed(f"{path}: cannot open it: {exc}") from None
    try:
        verdict = probe.execute("PRAGMA quick_check").fetchone()[0]
        tables = {row[0] for row in probe.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        versions = (
            probe.execute("SELECT version_num FROM alembic_version").fetchall() if "alembic_version" in tables else []
        )
    except sqlite3.Error as exc:
        raise CommandFailed(f"{path}: not an SQLite database: {exc}") from None
    finally:
        probe.close()
    if verdict != "ok":
        raise CommandFailed(f"{path}: the database is damaged: {verdict}")
    if len(versions) != 1 or not isinstance(versions[0][0], str):
        raise CommandFailed(f"{path}: not a petrecords database (it has no schema version); nothing was restored")
    try:
        check_revision_known(versions[0][0])
    except SchemaTooNew as exc:
        raise CommandFailed(f"{path}: {exc.explained()}; nothing was restored") from None


SchemaItem = tuple[str, str, str]
"""(type, name, column or ""): a table, a column of one, an index or a trigger of an SQLite database."""


def _schema_of(path: Path) -> set[SchemaItem]:
    connection = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True)
    try:
        named = connection.execute("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'").fetchall()
        found: set[SchemaItem] = {(kind, name, "") for kind, name in named}
        for kind, name in named:
            if kind == "table":
                found.update(
                    ("column", name, row[1])
                    for row in connection.execute("SELECT * FROM pragma_table_xinfo(?)", (name,))
                )
    finally:
        connection.close()
    return found


def _reference_schema(settings: Settings, beside: Path) -> set[SchemaItem]:
    """What a database this version migrates holds."""
    with _partial_beside(beside, "reference") as reference:
        migrate(settings.model_copy(update={"database_url": f"sqlite:///{reference}"}))
        return _schema_of(reference)


def _check_complete(settings: Settings, backup_path: Path, migrated: Path) -> None:
    order = ("table", "column", "index", "trigger")
    missing = sorted(
        _reference_schema(settings, migrated) - _schema_of(migrated),
        key=lambda item: (order.index(item[0]) if item[0] in order else len(order), item),
    )
    if missing:
        kind, name, column = missing[0]
        what = f"table {name} has no column {column}" if kind == "column" else f"it has no {kind} {name}"
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CommandFailed(f"{backup_path}: not a complete petrecords database: {what}{more}; nothing was restored")


def restore(settings: Settings, resources: ResourceSet, path: Path, *, show_progress: bool) -> str:
    """Put the backup at `path` in place of the configured SQLite database, which nothing may be using; what was
    restored, in a line."""
    if not path.is_file():
        raise CommandFailed(f"{path}: no such file")
    _check_backup(path)
    database = Path(sqlite_file(settings))
    database.parent.mkdir(parents=True, exist_ok=True)
    with _no_server(database), _partial_beside(database, "restore") as partial:
        backup_copy = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True)
        try:
            with Meter("restore", total=None, unit="pages") as meter:
                _copy(backup_copy, partial, meter)
        finally:
            backup_copy.close()
        # A backup of an older version is brought to this version's schema before it is put in place.
        try:
            migrate(settings.model_copy(update={"database_url": f"sqlite:///{partial}"}))
        except ConfigurationError as exc:
            reason = str(exc).split(": cannot migrate the database: ", 1)[-1]
            raise CommandFailed(
                f"{path}: cannot bring it to this version's schema: {reason}; nothing was restored"
            ) from None
        _check_complete(settings, path, partial)
        restored = sqlite3.connect(sqlite_uri(partial, mode="ro"), uri=True)
        try:
            held = _records_in(restored, resources)
        finally:
            restored.close()
        with open(partial, "rb+") as copied:
            os.fsync(copied.fileno())
        if database.exists():
            # What the database's write-ahead log holds goes into the file, so that none of it is lost if the
            # restore stops before the rename, and no log of the old file is left to meet the new one after it.
            current = open_sqlite(str(database), settings)
            try:
                current.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            finally:
                current.close()
        for leftover in (Path(f"{database}-wal"), Path(f"{database}-shm")):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()
        os.replace(partial, database)
        _fsync_directory(database.parent)
    return f"restored {path} in place of {database}: {held}"
