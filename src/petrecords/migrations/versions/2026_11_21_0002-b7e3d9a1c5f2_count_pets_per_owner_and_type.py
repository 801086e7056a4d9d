"""Count pets per owner and type.

Revision ID: b7e3d9a1c5f2
Revises: a1f0c2d3e4b5
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b7e3d9a1c5f2"
down_revision: str | None = "a1f0c2d3e4b5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "pet_counts",
        sa.Column("scope", Text, nullable=False, comment="an owner id, or '' for every owner"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "pet_type", "slot", name=op.f("pk_pet_counts")),
    )
    # Migrations run under a database lock before any instance serves, so no write is missed here.
    op.execute(
        "INSERT INTO pet_counts (scope, pet_type, slot, count) "
        "SELECT owner_id, pet_type, 0, COUNT(*) FROM pets GROUP BY owner_id, pet_type"
    )
    op.execute(
        "INSERT INTO pet_counts (scope, pet_type, slot, count) "
        "SELECT '', pet_type, 0, COUNT(*) FROM pets GROUP BY pet_type"
    )


def downgrade() -> None:
    op.drop_table("pet_counts")
