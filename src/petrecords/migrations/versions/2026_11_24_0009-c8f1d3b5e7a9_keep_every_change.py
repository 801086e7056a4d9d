"""Keep every change: the change log, and the state the instances share about it.

Revision ID: c8f1d3b5e7a9
Revises: b3e5f7a9c1d4
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c8f1d3b5e7a9"
down_revision: str | None = "b3e5f7a9c1d4"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

INDEXES = (
    ("xid", "position"),
    ("resource", "record_id", "version"),
    ("owner_after", "xid", "position"),
    ("owner_before", "xid", "position"),
)


def upgrade() -> None:
    op.create_table(
        "changes",
        sa.Column("position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
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
        sa.PrimaryKeyConstraint("position", name=op.f("pk_changes")),
        sqlite_autoincrement=True,
    )
    for columns in INDEXES:
        op.create_index(op.f(f"ix_changes_{'_'.join(columns)}"), "changes", list(columns))
    op.create_table(
        "service_state",
        sa.Column("name", Text, nullable=False),
        sa.Column("xid", sa.BigInteger(), nullable=False, server_default="0", comment="a change cursor: its xid"),
        sa.Column(
            "position", sa.BigInteger(), nullable=False, server_default="0", comment="a change cursor: its position"
        ),
        sa.Column("holder", Text, nullable=True, comment="the instance that holds the lease"),
        sa.Column("lease_until", sa.BigInteger(), nullable=False, server_default="0", comment="epoch milliseconds"),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_service_state")),
    )


def downgrade() -> None:
    op.drop_table("service_state")
    for columns in reversed(INDEXES):
        op.drop_index(op.f(f"ix_changes_{'_'.join(columns)}"), table_name="changes")
    op.drop_table("changes")
