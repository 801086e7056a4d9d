"""The one schema both databases and Alembic share (SQLAlchemy Core)."""

from __future__ import annotations

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

pets = sa.Table(
    "pets",
    metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("created_by", Text, nullable=False),
    sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Column("modified_by", Text, nullable=False),
    sa.Column("owner_id", Text, nullable=False),
    sa.Column("name", Text, nullable=False),
    sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
    sa.Column("pet_type", Text, nullable=False),
    sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
    # The default order and the filters each have an index that ends in the order's tie-breaker.
    sa.Index(None, "created_at", "id"),
    sa.Index(None, "owner_id", "created_at", "id"),
    # name_key rides along at the end so that counting a type's matches of `name`/`search` reads
    # only the index, not every matching row of the table.
    sa.Index(None, "pet_type", "created_at", "id", "name_key"),
    sa.Index(None, "owner_id", "pet_type", "created_at", "id", "name_key"),
    sa.Index(None, "modified_at", "id"),
    sa.Index(None, "name_key", "id"),
    sa.Index(None, "owner_id", "name_key", "id"),
)

# How many pets each owner has of each type, kept in the transaction of every write, so that the
# total of a list filtered by owner and type at most costs a few rows instead of a scan. The scope
# ALL_OWNERS counts everyone's. Rows of that scope are spread over a few slots, so that concurrent
# writers on PostgreSQL do not all queue on one row lock. Every write also counts itself in one
# ALL_OWNERS row: the sum of `writes` changes with every write, which is what tells PostgreSQL
# instances that what they remember about the data (store/pages.py) is out of date.
ALL_OWNERS = ""

pet_counts = sa.Table(
    "pet_counts",
    metadata,
    sa.Column("scope", Text, primary_key=True, comment="an owner id, or '' for every owner"),
    sa.Column("pet_type", Text, primary_key=True),
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

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("caller", Text, primary_key=True),
    sa.Column("key", Text, primary_key=True),
    sa.Column("request_hash", Text, nullable=False),
    sa.Column("status", sa.SmallInteger(), nullable=False),
    sa.Column("body", sa.LargeBinary(), nullable=False),
    sa.Column("location", Text, nullable=True),
    sa.Column("etag", Text, nullable=True),
    sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    sa.Index(None, "expires_at"),
)
