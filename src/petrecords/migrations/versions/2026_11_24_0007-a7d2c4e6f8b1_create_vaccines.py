"""Create vaccines: the vaccine catalogue.

Revision ID: a7d2c4e6f8b1
Revises: f1c3a5e7b9d2
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7d2c4e6f8b1"
down_revision: str | None = "f1c3a5e7b9d2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

INDEXES = (("created_at", "id"), ("pet_type", "created_at", "id"), ("name_key", "id"), ("modified_at", "id"))


def upgrade() -> None:
    op.create_table(
        "vaccines",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("name", Text, nullable=False),
        sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
        sa.Column("description", Text, nullable=True),
        sa.Column("description_key", Text, nullable=True, comment="lower-cased description, for matching"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("duration", sa.Integer(), nullable=False, comment="days of protection"),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vaccines")),
    )
    for columns in INDEXES:
        op.create_index(op.f(f"ix_vaccines_{'_'.join(columns)}"), "vaccines", list(columns))


def downgrade() -> None:
    for columns in reversed(INDEXES):
        op.drop_index(op.f(f"ix_vaccines_{'_'.join(columns)}"), table_name="vaccines")
    op.drop_table("vaccines")
    op.execute("DELETE FROM record_counts WHERE resource = 'vaccines'")
