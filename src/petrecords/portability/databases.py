"""The two databases as a data command sees them: a snapshot to read every record and change from, and a target
to load them into in one transaction. Generic over the tables of the registered resources.

A snapshot is one read transaction that sees every write committed before it began and none after, while the
service goes on serving and writing:
- SQLite: a read transaction in WAL mode (SQLite's isolation is serializable): its snapshot is fixed at its
  first read, and writers are never blocked by it (the write-ahead log cannot be checkpointed past it meanwhile,
  so it grows with what is written during the export).
- PostgreSQL: REPEATABLE READ, READ ONLY: one snapshot for every statement of the transaction. The changes are
  read in the feed's order, (transaction id, position); a write still in flight when the snapshot was taken is
  in neither its records nor its changes.

A target is one write transaction: nothing of a load is visible, or kept, unless all of it commits.
"""

from __future__ import annotations

import abc
import contextlib
import functools
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec
import pysqlite3.dbapi2 as sqlite3
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects import sqlite as sqlite_dialect

from petrecords.config import Settings
from petrecords.db import is_sqlite, postgres_connect_args, postgres_dsn, sqlite_path
from petrecords.portability.errors import CommandFailed
from petrecords.portability.records import WRITES, timestamp_ms, wire_name
from petrecords.resources.declaration import Kept, Resource
from petrecords.store.base import Row
from petrecords.store.changelog import share_changes_select, share_windows_of
from petrecords.store.counts import kept_count_inserts
from petrecords.store.grants import grant_count_inserts
from petrecords.store.postgres.statements import as_asyncpg_runs_it
from petrecords.store.sqlite import as_sqlite_runs_it
from petrecords.tables import Text, changes, service_state, share_windows
from petrecords.values import now_ms

FETCH_ROWS = 2000
"""Rows read from the database at a time: what a command holds in memory, whatever the size of the data."""
LOAD_CACHE_KIB = 65536
"""SQLite's page cache while a load runs."""
DEFAULT_CACHE_SIZE = -2000
"""SQLite's own default page cache: 2,000 KiB."""
NO_TIMEOUT = "0"
"""A data command's statements take as long as the data needs: PostgreSQL's statement timeout is off for it."""


# --- reading ---------------------------------------------------------------------------------------


@dataclass
class Layout:
    """How one row of a record's query splits into the record and the records it embeds (each a Layout too)."""

    table: sa.FromClause
    columns: list[sa.ColumnElement[Any]]
    embeds: list[tuple[str, Layout]] = field(default_factory=list)

    @property
    def width(self) -> int:
        return len(self.columns) + sum(layout.width for _, layout in self.embeds)

    def all_columns(self) -> list[sa.ColumnElement[Any]]:
        out = list(self.columns)
        for _, layout in self.embeds:
            out.extend(layout.all_columns())
        return out

    def row(self, values: Sequence[Any], start: int = 0) -> Row:
        row: Row = {}
        for offset, column in enumerate(self.columns):
            row[str(column.key)] = typed(column.type, values[start + offset])
        start += len(self.columns)
        for name, layout in self.embeds:
            row[name] = layout.row(values, start)
            start += layout.width
        return row


def typed(column_type: sa.types.TypeEngine[Any], value: Any) -> Any:
    """A value as the store's rows hold it, whichever form the driver returned it in (SQLite's ids are hex, its
    booleans 0 and 1)."""
    if isinstance(value, str) and isinstance(column_type, sa.Uuid):
        return uuid.UUID(hex=value)
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(column_type, sa.Boolean):
        return bool(value)
    if isinstance(value, memoryview):
        return bytes(value)
    return value


@functools.lru_cache(maxsize=64)
def record_query(resource: Resource) -> tuple[sa.Select[Any], Layout]:
    """Every record of the resource with the records it embeds, as its GET shows them, in id order."""
    aliases = iter(range(1_000))

    def layout_of(of: Resource, table: sa.FromClause) -> tuple[Layout, sa.FromClause]:
        layout = Layout(table, list(table.c))
        joined: sa.FromClause = table
        for embed in of.embeds:
            target = of.reference_of(embed.reference).target
            alias = target.table.alias(f"embedded_{next(aliases)}")
            inner, inner_from = layout_of(target, alias)
            joined = joined.join(inner_from, alias.c.id == table.c[of.field_named(embed.reference).column])
            layout.embeds.append((embed.field, inner))
        return layout, joined

    layout, from_clause = layout_of(resource, resource.table)
    statement = sa.select(*layout.all_columns()).select_from(from_clause).order_by(resource.table.c.id)
    return statement, layout


@functools.lru_cache(maxsize=64)
def disowned_query(resource: Resource) -> sa.Select[Any] | None:
    """The first record (by id) whose owner is not that of the record its owner follows (a vaccination's pet's),
    with both owners and that record's id: None for a resource whose owner follows no owned record."""
    through, owner_column = resource.ownership.through, resource.ownership.column
    if through is None or owner_column is None:
        return None
    followed = resource.reference_of(through).target
    if followed.ownership.column is None:
        return None
    table, other = resource.table, followed.table.alias("followed")
    reference = table.c[resource.field_named(through).column]
    return (
        sa.select(table.c.id, table.c[owner_column], reference, other.c[followed.ownership.column])
        .join_from(table, other, other.c.id == reference)
        .where(table.c[owner_column] != other.c[followed.ownership.column])
        .order_by(table.c.id)
        .limit(1)
    )


CHANGES_QUERY = sa.select(*changes.c).order_by(changes.c.xid, changes.c.position)
CHANGES_LAYOUT = Layout(changes, list(changes.c))


class Snapshot(abc.ABC):
    """One consistent state of a database, read in rows."""

    @abc.abstractmethod
    def rows(self, statement: sa.Select[Any]) -> AsyncGenerator[Sequence[Any], None]: ...

    async def count(self, table: sa.Table) -> int:
        async with contextlib.aclosing(self.rows(sa.select(sa.func.count()).select_from(table))) as rows:
            async for row in rows:
                return int(row[0])
        return 0


class SqliteSnapshot(Snapshot):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection

    async def rows(self, statement: sa.Select[Any]) -> AsyncGenerator[Sequence[Any], None]:
        cursor = self._connection.execute(*as_sqlite_runs_it(statement))
        try:
            while batch := cursor.fetchmany(FETCH_ROWS):
                for row in batch:
                    yield row
        finally:
            cursor.close()


class PostgresSnapshot(Snapshot):
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def rows(self, statement: sa.Select[Any]) -> AsyncGenerator[Sequence[Any], None]:
        sql, arguments = as_asyncpg_runs_it(statement)
        async for row in self._connection.cursor(sql, *arguments, prefetch=FETCH_ROWS):
            yield row


def sqlite_file(settings: Settings) -> str:
    path = sqlite_path(settings.resolved_database_url)
    if path is None:
        raise CommandFailed("PETRECORDS_DATABASE_URL names an in-memory SQLite database: there is no file to use")
    return str(path)


def open_sqlite(path: str, settings: Settings) -> sqlite3.Connection:
    connection = sqlite3.connect(path, timeout=settings.sqlite_busy_timeout_ms / 1000, isolation_level=None)
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


async def connect_postgres(settings: Settings, url: str | None = None) -> Any:
    arguments = postgres_connect_args(settings)
    arguments["server_settings"] = {**arguments["server_settings"], "statement_timeout": NO_TIMEOUT}
    arguments.pop("command_timeout", None)
    return await asyncpg.connect(postgres_dsn(url or settings.resolved_database_url), **arguments)


@contextlib.asynccontextmanager
async def snapshot(settings: Settings) -> AsyncIterator[Snapshot]:
    """The configured database's snapshot, for as long as the block runs."""
    if is_sqlite(settings.resolved_database_url):
        connection = open_sqlite(sqlite_file(settings), settings)
        try:
            connection.execute("BEGIN")
            connection.execute("SELECT count(*) FROM sqlite_schema").fetchall()  # the snapshot starts here
            yield SqliteSnapshot(connection)
            connection.execute("COMMIT")
        finally:
            connection.close()
        return
    pg = await connect_postgres(settings)
    try:
        async with pg.transaction(isolation="repeatable_read", readonly=True):
            await pg.fetchval("SELECT 1")  # the snapshot starts here
            yield PostgresSnapshot(pg)
    finally:
        await pg.close()


# --- loading ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """Rows for one table, with the file's line of each (for the message when one cannot be stored)."""

    table: sa.Table
    rows: list[dict[str, Any]]
    lines: list[int]


def insert_columns(table: sa.Table) -> list[str]:
    """The columns a load writes: every one but an autoincrement key (the change log's position)."""
    return [column.name for column in table.c if not (column.primary_key and column.autoincrement is True)]


def owner_before_fix(issued: tuple[str, ...] = ()) -> sa.Update:
    """Whose a record was before each write: whose it was after the record's previous change, where that change is
    kept (a transfer of a pet, or of a vaccination with it); the loader filed each change as if the owner had not
    changed. Not for the resources named in `issued`, whose changes are filed under their issuer as the owner
    before (see Ownership.issuer), as the loader files them too."""
    previous = changes.alias("previous")
    # A reminder writes nothing: its owner is the record's before and after, and it is no write's previous change.
    of_previous = (
        (previous.c.resource == changes.c.resource)
        & (previous.c.record_id == changes.c.record_id)
        & (previous.c.version == changes.c.version - 1)
        & previous.c.action.in_([sa.literal(action, Text) for action in WRITES])
    )
    owner_then = sa.select(previous.c.owner_after).where(of_previous).scalar_subquery()
    differs = sa.exists().where(of_previous, previous.c.owner_after.is_distinct_from(changes.c.owner_before))
    writes = changes.c.action.in_([sa.literal(action, Text) for action in WRITES if action != "created"])
    where = [writes, differs]
    where.extend(changes.c.resource != name for name in issued)
    return sa.update(changes).where(*where).values(owner_before=owner_then)


def windows_of(resource: Resource, share_changes: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """A share resource's windows (see changelog.share_windows_of), each expiry read from its change's record."""
    grants = resource.grants
    assert grants is not None  # noqa: S101 - share resources only
    expires = wire_name(resource, grants.expires_column)

    def expires_of(record: bytes) -> int | None:
        expires_at = msgspec.json.decode(record).get(expires)
        return None if expires_at is None else timestamp_ms(expires, expires_at)

    return share_windows_of(share_changes, expires_of)


class Target(abc.ABC):
    """The configured database, in one write transaction that a load fills, then commits or rolls back."""

    insert_function: Callable[[sa.Table], Any]
    """The dialect's INSERT, which has ON CONFLICT."""

    @abc.abstractmethod
    async def begin(self, tables: Sequence[sa.Table]) -> None:
        """Begin the transaction; no one else writes `tables` until it ends."""

    @abc.abstractmethod
    async def fetch(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> list[Sequence[Any]]: ...

    @abc.abstractmethod
    async def execute(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> None: ...

    @abc.abstractmethod
    async def insert(self, batch: Batch) -> None:
        """Insert the rows; CommandFailed naming the first line whose row cannot be stored."""

    @abc.abstractmethod
    async def held(self, table: sa.Table, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of the ids the table already holds."""

    @abc.abstractmethod
    async def change_xid(self) -> int:
        """The transaction id the loaded changes are filed under (the feed orders by it, then by position)."""

    @abc.abstractmethod
    async def commit(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None:
        """End the transaction (rolled back unless committed) and the connection."""

    async def nonempty(self, tables: Sequence[sa.Table]) -> list[str]:
        found = []
        for table in tables:
            if await self.fetch(sa.select(sa.literal(1)).select_from(table).limit(1)):
                found.append(table.name)
        return found

    async def finish(self, resources: Sequence[Resource], *, published_state: str, kept: Sequence[Kept] = ()) -> None:
        """What the store keeps besides the rows: whose each record was before each change (but an issued record's,
        see owner_before_fix), the records derived from them (see Kept) and the kept counts, the windows in which
        shares granted access, and the publisher's cursor past the loaded changes (they were published, or are
        history, where they come from); then commit."""
        issued = tuple(resource.name for resource in resources if resource.ownership.issuer is not None)
        await self.execute(owner_before_fix(issued))
        for derived in kept:
            # Before the shares' grants are counted, which count the derived records too.
            for fill in derived.fill():
                await self.execute(fill)
            for insert in kept_count_inserts(derived.collection):
                await self.execute(insert)
        for resource in resources:
            for insert in kept_count_inserts(resource.collection):
                await self.execute(insert)
            if resource.grants is not None:
                for insert in grant_count_inserts(resource.collection, now=now_ms()):
                    await self.execute(insert)
                windows = windows_of(resource, await self.fetch(share_changes_select(resource.name)))
                for start in range(0, len(windows), FETCH_ROWS):
                    chunk = windows[start : start + FETCH_ROWS]
                    await self.insert(Batch(share_windows, chunk, [0] * len(chunk)))
        last = await self.fetch(sa.select(changes.c.xid, changes.c.position).order_by(*CHANGE_ORDER_DESC).limit(1))
        if last:
            upsert = self.insert_function(service_state).values(
                name=published_state, xid=last[0][0], position=last[0][1]
            )
            upsert = upsert.on_conflict_do_update(
                index_elements=[service_state.c.name], set_={"xid": last[0][0], "position": last[0][1]}
            )
            await self.execute(upsert)
        await self.commit()


LOG_TABLES = (changes, share_windows)
"""The tables a load fills besides the resources': the change log, and the windows in which shares grant."""
CHANGE_ORDER_DESC = (changes.c.xid.desc(), changes.c.position.desc())


def _sqlite_value(value: Any) -> Any:
    return value.hex if isinstance(value, uuid.UUID) else value  # how SQLAlchemy's Uuid type stores it in SQLite


class SqliteTarget(Target):
    insert_function = staticmethod(sqlite_dialect.insert)

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        self._inserted: dict[str, int] = {}
        """Rows this load has inserted into each table (which held none before)."""

    async def begin(self, tables: Sequence[sa.Table]) -> None:
        # A load updates every index of every table: a larger page cache than the default 2 MiB keeps their
        # pages in memory (64 MiB at most, whatever the size of the load).
        self._connection.execute(f"PRAGMA cache_size = -{LOAD_CACHE_KIB}")
        # References are checked at the commit: records may come in any order.
        self._connection.execute("PRAGMA defer_foreign_keys = ON")
        self._connection.execute("BEGIN IMMEDIATE")
        self._connection.execute("PRAGMA defer_foreign_keys = ON")

    async def fetch(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> list[Sequence[Any]]:
        rows: list[Sequence[Any]] = self._connection.execute(*as_sqlite_runs_it(statement, values)).fetchall()
        return rows

    async def execute(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> None:
        self._connection.execute(*as_sqlite_runs_it(statement, values))

    async def insert(self, batch: Batch) -> None:
        columns = insert_columns(batch.table)
        sql = _insert_sql(batch.table, tuple(columns))
        rows = [tuple(_sqlite_value(row[name]) for name in columns) for row in batch.rows]
        try:
            self._connection.executemany(sql, rows)
        except sqlite3.Error as exc:
            # The rows before the one refused are in (each statement is atomic, the transaction goes on): the one
            # refused is the row after them. (No savepoint per batch: in a transaction of a million rows, SQLite
            # spent most of a load truncating the savepoints' journal.)
            held = self._connection.execute(f'SELECT count(*) FROM "{batch.table.name}"').fetchone()[0]  # noqa: S608
            refused = held - self._inserted.get(batch.table.name, 0)
            line = batch.lines[refused] if 0 <= refused < len(batch.lines) else batch.lines[0]
            raise CommandFailed(f"line {line}: the database refused the record: {exc}") from None
        self._inserted[batch.table.name] = self._inserted.get(batch.table.name, 0) + len(rows)

    async def held(self, table: sa.Table, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        sql = f'SELECT id FROM "{table.name}" WHERE id IN (SELECT value FROM json_each(?))'  # noqa: S608
        listed = msgspec.json.encode([record_id.hex for record_id in ids]).decode()
        return {uuid.UUID(hex=row[0]) for row in self._connection.execute(sql, (listed,))}

    async def change_xid(self) -> int:
        return 0  # one writer at a time: the position alone orders the log

    async def finish(self, resources: Sequence[Resource], *, published_state: str, kept: Sequence[Kept] = ()) -> None:
        # What is left reads whole tables, which the default page cache does as well; what the load's larger
        # cache holds is given back (and no sort of those reads may use as much).
        self._connection.execute(f"PRAGMA cache_size = {DEFAULT_CACHE_SIZE}")
        await super().finish(resources, published_state=published_state, kept=kept)

    async def commit(self) -> None:
        broken = self._connection.execute("PRAGMA foreign_key_check").fetchall()
        if broken:
            table, rowid, parent = broken[0][0], broken[0][1], broken[0][2]
            found = self._connection.execute(f'SELECT id FROM "{table}" WHERE rowid = ?', (rowid,)).fetchone()  # noqa: S608
            named = uuid.UUID(hex=found[0]) if found else rowid
            raise CommandFailed(f"{table} {named} refers to a record of {parent} that the file does not hold")
        self._connection.execute("COMMIT")
        # The load is in the write-ahead log: copied into the database now, rather than by the first writes of
        # the service that then waits for it.
        self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    async def close(self) -> None:
        if self._connection.in_transaction:
            self._connection.execute("ROLLBACK")
        self._connection.close()


@functools.lru_cache(maxsize=64)
def _insert_sql(table: sa.Table, columns: tuple[str, ...]) -> str:
    listed = ", ".join(f'"{name}"' for name in columns)
    marks = ", ".join("?" for _ in columns)
    return f'INSERT INTO "{table.name}" ({listed}) VALUES ({marks})'  # noqa: S608 - the schema's own names


_COPY_LINE = re.compile(r"COPY [^,]+, line (\d+)")


def _postgres_error(exc: BaseException) -> str:
    message = getattr(exc, "message", None) or str(exc)
    detail = getattr(exc, "detail", None)
    return f"{message} ({detail})" if detail else message


class PostgresTarget(Target):
    insert_function = staticmethod(postgresql.insert)

    def __init__(self, connection: Any) -> None:
        self._connection = connection
        self._transaction: Any = None
        self._xid: int | None = None

    async def begin(self, tables: Sequence[sa.Table]) -> None:
        self._transaction = self._connection.transaction()
        await self._transaction.start()
        listed = ", ".join(f'"{table.name}"' for table in tables)
        # Readers go on; writers of these tables wait until the load has committed or rolled back.
        await self._connection.execute(f"LOCK TABLE {listed} IN EXCLUSIVE MODE")

    async def fetch(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> list[Sequence[Any]]:
        sql, arguments = as_asyncpg_runs_it(statement, values)
        return list(await self._connection.fetch(sql, *arguments))

    async def execute(self, statement: sa.ClauseElement, values: dict[str, Any] | None = None) -> None:
        sql, arguments = as_asyncpg_runs_it(statement, values)
        await self._connection.execute(sql, *arguments)

    async def insert(self, batch: Batch) -> None:
        columns = insert_columns(batch.table)
        rows = [tuple(row[name] for name in columns) for row in batch.rows]
        try:
            await self._connection.copy_records_to_table(batch.table.name, records=rows, columns=columns)
        except asyncpg.PostgresError as exc:
            # PostgreSQL says which row of the COPY it refused ("COPY pets, line 3"). No savepoint per batch: a
            # load's thousand subtransactions would slow every other session's snapshots while it runs.
            found = _COPY_LINE.search(getattr(exc, "context", None) or "")
            refused = int(found[1]) - 1 if found else -1
            where = (
                f"line {batch.lines[refused]}"
                if 0 <= refused < len(batch.lines)
                else f"lines {batch.lines[0]}–{batch.lines[-1]}"
            )
            raise CommandFailed(f"{where}: the database refused the record: {_postgres_error(exc)}") from None

    async def held(self, table: sa.Table, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        sql = f'SELECT id FROM "{table.name}" WHERE id = ANY($1::uuid[])'  # noqa: S608 - the schema's own names
        return {row[0] for row in await self._connection.fetch(sql, list(ids))}

    async def change_xid(self) -> int:
        if self._xid is None:
            self._xid = int(await self._connection.fetchval("SELECT pg_current_xact_id()::text::bigint"))
        return self._xid

    async def commit(self) -> None:
        await self._transaction.commit()
        self._transaction = None
        # What autovacuum would do over the next minutes, while the service answers: until then the planner's
        # statistics describe the tables before the load (a search by one who owns three records could be planned
        # as if theirs were most of the table, and read every record that matches: tests/api/test_search_cost.py),
        # and no page is marked all-visible, so that index-only scans read the table too. Every table: the kept
        # counts were rewritten as well.
        await self._connection.execute("VACUUM (ANALYZE)")

    async def close(self) -> None:
        try:
            if self._transaction is not None:
                await self._transaction.rollback()
        finally:
            await self._connection.close()


@contextlib.asynccontextmanager
async def target(settings: Settings) -> AsyncIterator[Target]:
    """The configured database, ready to begin a load."""
    loaded: Target
    if is_sqlite(settings.resolved_database_url):
        loaded = SqliteTarget(open_sqlite(sqlite_file(settings), settings))
    else:
        loaded = PostgresTarget(await connect_postgres(settings))
    try:
        yield loaded
    finally:
        await loaded.close()
