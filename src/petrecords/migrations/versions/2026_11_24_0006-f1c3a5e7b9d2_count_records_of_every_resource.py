"""Kept counts and idempotency keys for every resource, not only pets.

Revision ID: f1c3a5e7b9d2
Revises: e5b8f2a4c7d1
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f1c3a5e7b9d2"
down_revision: str | None = "e5b8f2a4c7d1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "record_counts",
        sa.Column("resource", Text, nullable=False),
        sa.Column("scope", Text, nullable=False, comment="an owner id, or '' for every owner"),
        sa.Column("partition", Text, nullable=False, comment="a value of the resource's counted column, or ''"),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column(
            "writes",
            sa.BigInteger(),
            nullable=False,
            server_default="0",
            comment="writes counted in this row; their sum over the every-owner rows is the data's version",
        ),
        sa.PrimaryKeyConstraint("resource", "scope", "partition", "slot", name=op.f("pk_record_counts")),
    )
    # Migrations run under a database lock before any instance serves, so no write is missed here.
    op.execute(
        "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) "
        "SELECT 'pets', scope, pet_type, slot, count, writes FROM pet_counts"
    )
    op.drop_table("pet_counts")
    op.add_column(
        "idempotency_keys",
        sa.Column("resource", Text, nullable=False, server_default="pets", comment="the resource the key created in"),
    )


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as table:
        table.drop_column("resource")
    op.create_table(
        "pet_counts",
        sa.Column("scope", Text, nullable=False, comment="an owner id, or '' for every owner"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column(
            "writes",
            sa.BigInteger(),
            nullable=False,
            server_default="0",
            comment="writes counted in this row; their sum over the every-owner rows is the data's version",
        ),
        sa.PrimaryKeyConstraint("scope", "pet_type", "slot", name=op.f("pk_pet_counts")),
    )
    op.execute(
        "INSERT INTO pet_counts (scope, pet_type, slot, count, writes) "
        "SELECT scope, partition, slot, count, writes FROM record_counts WHERE resource = 'pets'"
    )
    op.drop_table("record_counts")
