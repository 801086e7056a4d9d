"""The schema both databases and Alembic share (SQLAlchemy Core): the tables the layer keeps for every
resource, and the columns every resource's table starts with. Each resource's own table lives with its
declaration, on this metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

# Text compares by code point on both databases: SQLite's BINARY collation does, and so does
# PostgreSQL's "C". That is what makes sorting and LIKE give the same answers everywhere.
Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


SEARCHABLE = "searchable"
"""The key of a table's `info` that names its columns (match keys) that `search` patterns read through a trigram
index: on PostgreSQL a GIN index (pg_trgm) of each, declared here; on SQLite an FTS5 table with the trigram
tokenizer, `search_table_name(table)`, which the migrations make and triggers keep in step with the table."""


def trigram_indexed(table: sa.Table, *columns: str) -> None:
    """Declare that substring patterns over `columns` of `table` may be narrowed by a trigram index."""
    table.info[SEARCHABLE] = columns
    for column in columns:
        sa.Index(
            f"ix_{table.name}_{column}_trigrams",
            table.c[column],
            postgresql_using="gin",
            postgresql_ops={column: "gin_trgm_ops"},
            # Each write updates the index at once: a pending list (fastupdate) would be read through by every
            # search until the next vacuum merged it.
            postgresql_with={"fastupdate": "off"},
            info={_ONLY_ON: "postgresql"},
        ).ddl_if(dialect="postgresql")


def only_on(dialect: str, index: sa.Index) -> sa.Index:
    """An index that exists on one database alone (its expression written in that database's SQL): made there by the
    schema and the migrations, and compared with the database there alone."""
    index.info[_ONLY_ON] = dialect
    return index.ddl_if(dialect=dialect)


def search_table_name(table_name: str) -> str:
    """The SQLite FTS5 table that indexes the trigrams of a table's searchable columns."""
    return f"{table_name}_search"


# An FTS5 table's own name, and the names of the tables that SQLite keeps its index in.
_FTS5_TABLE_SUFFIXES = ("", "_data", "_idx", "_docsize", "_config", "_content")
_ONLY_ON = "only_on"
"""The key of an index's `info` that names the one dialect it exists on."""


def comparison_options(dialect: str) -> dict[str, Any]:
    """Alembic's options to compare a database of `dialect` with the schema: its tables, but not the SQLite
    search tables, which the migrations make and SQLAlchemy cannot describe (a virtual table and its storage);
    and the indexes that exist on that dialect."""
    search_tables = {
        search_table_name(table.name) + suffix
        for table in metadata.tables.values()
        if table.info.get(SEARCHABLE)
        for suffix in _FTS5_TABLE_SUFFIXES
    }

    def include_name(name: str | None, type_: str, _parents: Mapping[str, str | None]) -> bool:
        return not (type_ == "table" and name in search_tables)

    def include_object(item: Any, _name: str | None, type_: str, reflected: bool, _compare_to: Any) -> bool:
        return not (type_ == "index" and not reflected and item.info.get(_ONLY_ON, dialect) != dialect)

    return {"include_name": include_name, "include_object": include_object}


def not_null(column: str) -> dict[str, Any]:
    """The options of a partial index that leaves out the rows where `column` is null, on both databases: what
    compares the column with a value (which implies it is not null) can still read it, and a row without a value
    costs no entry in it."""
    where = sa.text(f"{column} IS NOT NULL")
    return {"sqlite_where": where, "postgresql_where": where}


def audit_columns() -> list[sa.Column[Any]]:
    """The columns every resource's table starts with: the id, who wrote the record when, and its revision
    (declaration.AUDIT_COLUMNS; a declaration whose table lacks one is refused at start-up)."""
    return [
        sa.Column("id", sa.Uuid(), primary_key=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
    ]


# How many records of each resource each owner has in each partition (a pet type, say), kept in the transaction
# of every write, so that the total of a list filtered by nothing but owner and partition costs a few rows
# instead of a scan. The scope ALL_OWNERS counts everyone's. Each count is spread over a few rows (slots), so that
# concurrent writers on PostgreSQL, of one owner's records or anyone's, do not all queue on one row lock until
# their commits; a count is the sum of its slots. Every write transaction also counts
# itself in one ALL_OWNERS row: the sum of `writes` changes with every write, which is what tells PostgreSQL
# instances that what they remember about the data (store/pages.py) is out of date.
ALL_OWNERS = ""

record_counts = sa.Table(
    "record_counts",
    metadata,
    sa.Column("resource", Text, primary_key=True),
    sa.Column("scope", Text, primary_key=True, comment="an owner id, or '' for every owner"),
    sa.Column("partition", Text, primary_key=True, comment="a value of the resource's counted column, or ''"),
    sa.Column("slot", sa.SmallInteger(), primary_key=True),
    sa.Column("count", sa.BigInteger(), nullable=False),
    sa.Column(
        "writes",
        sa.BigInteger(),
        nullable=False,
        server_default="0",
        comment="writes counted in this row; their sum over the every-owner rows is the data's version",
    ),
)

# How many records of a resource each owner has (and everyone has, ALL_OWNERS) whose time column (a due date, say:
# see Collection.counted_over) falls in each period, at PERIOD_SIZES sizes: hours, and runs of PERIOD_SPAN hours,
# PERIOD_SPAN² hours and PERIOD_SPAN³ hours, each period numbered from the epoch (period n of size k holds the hours
# n·PERIOD_SPAN^k to (n+1)·PERIOD_SPAN^k - 1). Kept in the transaction of every write, like record_counts and in its
# slots, so that the number of records before an instant is a sum of about a hundred rows and one hour's records,
# exact under concurrent writers.
PERIOD_UNIT_MS = 3_600_000
"""The smallest period: an hour. The records of an instant's own hour before it are read one by one."""
PERIOD_SPAN = 32
"""Periods of one size that make one of the next: 32 hours, 1,024 hours (about 43 days), 32,768 hours (about 3.7
years)."""
PERIOD_SIZES = 4

HOUR_INDEXED = "hour_indexed"
"""The key of a table's `info` that names its column whose hour is indexed (see `hour_indexed`)."""


def period_of(instant: sa.ColumnElement[Any], size: int) -> sa.ColumnElement[Any]:
    """The number of the period of the size given that an instant falls in (as store.counts.periods_of computes it),
    with its constants written in, so that the hour's (size 0) is the expression of the index `hour_indexed`
    declares. Division of integers truncates toward zero on both databases: an instant before the epoch is floored
    by hand."""
    unit = sa.type_coerce(sa.text(str(PERIOD_UNIT_MS * PERIOD_SPAN**size)), sa.BigInteger())
    return sa.Grouping(instant - ((instant % unit) + unit) % unit).op("/", return_type=sa.BigInteger())(unit)


def hour_of(instant: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """The number of the hour an instant falls in: its period of size 0."""
    return period_of(instant, 0)


def hour_indexed(table: sa.Table, column: str) -> None:
    """Declare an index of the hour of `column` (a resource's counted time column, see Collection.counted_over), on
    PostgreSQL. A count up to an instant reads the records of the instant's own hour; found by the hour's number,
    PostgreSQL's plan for any value (the one a prepared statement keeps) expects a few of them from the index's
    statistics, where for a range between two unknown values it expects a two-hundredth of the table and plans
    every run again. SQLite plans every run with its values, and reads the hour's range of the column's index."""
    table.info[HOUR_INDEXED] = column
    sa.Index(f"ix_{table.name}_{column}_hour", hour_of(table.c[column]), info={_ONLY_ON: "postgresql"}).ddl_if(
        dialect="postgresql"
    )


period_counts = sa.Table(
    "period_counts",
    metadata,
    sa.Column("resource", Text, primary_key=True),
    sa.Column("scope", Text, primary_key=True, comment="an owner id, or '' for every owner"),
    sa.Column("size", sa.SmallInteger(), primary_key=True, comment="0: an hour; k: 32^k hours"),
    sa.Column("period", sa.BigInteger(), primary_key=True, comment="the period's number from the epoch, of its size"),
    sa.Column("slot", sa.SmallInteger(), primary_key=True),
    sa.Column("count", sa.BigInteger(), nullable=False),
)

# The shares with an expiry whose grants the kept counts still count (see store/grants.py). A grantee's kept counts
# (scope `GRANTEE_SCOPE` + grantee in record_counts and period_counts) count, for every share naming them that never
# expires or is listed here, the records it grants. A share is listed when written with an expiry in the future; once
# it has expired, a duty takes its grants out of the counts and it out of this table, and until then a count takes
# them out itself: the counts are exact at every instant.
grant_expiries = sa.Table(
    "grant_expiries",
    metadata,
    sa.Column("share_id", sa.Uuid(), primary_key=True),
    sa.Column("resource", Text, nullable=False, comment="the shares' resource"),
    sa.Column("grantee", Text, nullable=False),
    sa.Column("target_id", sa.Uuid(), nullable=False, comment="the record the share shares"),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Index(None, "grantee", "expires_at"),
    sa.Index(None, "expires_at"),
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("caller", Text, primary_key=True),
    sa.Column("key", Text, primary_key=True),
    sa.Column("resource", Text, nullable=False, server_default="pets", comment="the resource the key created in"),
    sa.Column("request_hash", Text, nullable=False),
    sa.Column("status", sa.SmallInteger(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Column("location", Text, nullable=True),
    sa.Column("etag", Text, nullable=True),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Index(None, "expires_at"),
)


# Every committed write of every record, in the order the writes committed (see store/changes.py): a record's
# history, the change feed, and what is published to NATS. `xid` orders the changes of concurrent PostgreSQL
# transactions (SQLite, with one writer, leaves it 0 and orders by `position` alone). Records of shared
# resources are filed under the owner SHARED, which every caller may see.
SHARED = ""

changes = sa.Table(
    "changes",
    metadata,
    sa.Column("position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("xid", sa.BigInteger(), nullable=False, comment="the writing transaction's id (PostgreSQL), else 0"),
    sa.Column("resource", Text, nullable=False),
    sa.Column("record_id", sa.Uuid(), nullable=False),
    sa.Column("action", Text, nullable=False, comment="created, replaced or deleted"),
    sa.Column("version", sa.Integer(), nullable=False, comment="the record's writes, counted from 1"),
    sa.Column("at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("by", Text, nullable=False),
    sa.Column("owner_before", Text, nullable=True, comment="the record's owner before the write; '' if shared"),
    sa.Column("owner_after", Text, nullable=True, comment="the record's owner after the write; '' if shared"),
    sa.Column(
        "record", sa.LargeBinary(), nullable=False, comment="the record's JSON after the write (before, if deleted)"
    ),
    sa.Column("shared_key", sa.Uuid(), nullable=True, comment="the record through whose shares it is seen (a pet)"),
    sa.Column("grantee", Text, nullable=True, comment="of a share's change: whom the share names"),
    sa.Index(None, "xid", "position"),
    sa.Index(None, "resource", "record_id", "version"),
    sa.Index(None, "owner_after", "xid", "position"),
    # A create has no owner before: its change is left out of this index, which only `owner_before = ?` reads.
    sa.Index(None, "owner_before", "xid", "position", **not_null("owner_before")),
    sa.Index(None, "shared_key", "xid", "position"),
    sqlite_autoincrement=True,
)

# Small facts the instances share: where the change log has been purged up to, how far it has been published,
# and which instance holds the lease of a background duty (publishing, purging).
service_state = sa.Table(
    "service_state",
    metadata,
    sa.Column("name", Text, primary_key=True),
    sa.Column("xid", sa.BigInteger(), nullable=False, server_default="0", comment="a change cursor: its xid"),
    sa.Column("position", sa.BigInteger(), nullable=False, server_default="0", comment="a change cursor: its position"),
    sa.Column("holder", Text, nullable=True, comment="the instance that holds the lease"),
    sa.Column("lease_until", sa.BigInteger(), nullable=False, server_default="0", comment="epoch milliseconds"),
)

# Tickets that open one live change stream each (a browser's EventSource cannot send a token): kept by the hash of
# the ticket, never the ticket itself, for the seconds they live, with the caller of the token they were issued for.
stream_tickets = sa.Table(
    "stream_tickets",
    metadata,
    sa.Column("ticket_hash", Text, primary_key=True, comment="SHA-256 of the ticket, hex"),
    sa.Column("caller", sa.LargeBinary(), nullable=False, comment="the caller, as JSON: e-mail, role, groups, exp"),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Index(None, "expires_at"),
)

# When each share granted access, in the change log's order: a window opens with the change that creates a share (or
# replaces it), and closes with the change that replaces or deletes it (both included), and within it grants nothing
# after the share's expiry. The change feed of a grantee holds the changes of the shared records that fall in one of
# its windows: nothing before the share, nothing after it.
share_windows = sa.Table(
    "share_windows",
    metadata,
    sa.Column("share_id", sa.Uuid(), primary_key=True),
    sa.Column("from_xid", sa.BigInteger(), primary_key=True, comment="the opening change's cursor: its xid"),
    sa.Column("from_position", sa.BigInteger(), primary_key=True, comment="the opening change's cursor: its position"),
    sa.Column("grantee", Text, nullable=False),
    sa.Column("shared_key", sa.Uuid(), nullable=False, comment="the id of the record it shares (a pet)"),
    sa.Column("until_xid", sa.BigInteger(), nullable=True, comment="the closing change's cursor: null while open"),
    sa.Column("until_position", sa.BigInteger(), nullable=True),
    sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="epoch milliseconds; null: never"),
    sa.Index(None, "grantee", "shared_key"),
    sa.Index(None, "shared_key", "grantee"),
)
