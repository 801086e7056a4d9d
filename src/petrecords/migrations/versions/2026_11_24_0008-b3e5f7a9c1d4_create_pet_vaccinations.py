"""Create pet_vaccinations: a vaccine given to a pet, and when the next dose is due.

Revision ID: b3e5f7a9c1d4
Revises: a7d2c4e6f8b1
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b3e5f7a9c1d4"
down_revision: str | None = "a7d2c4e6f8b1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

INDEXES = (
    ("created_at", "id"),
    ("owner_id", "created_at", "id"),
    ("pet_id", "applied_at", "id"),
    ("vaccine_id", "id"),
    ("due_at", "id"),
    ("owner_id", "due_at", "id"),
    ("applied_at", "id"),
    ("owner_id", "applied_at", "id"),
    ("modified_at", "id"),
)


def upgrade() -> None:
    op.create_table(
        "pet_vaccinations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("vaccine_id", sa.Uuid(), nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("notes", Text, nullable=True),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.ForeignKeyConstraint(["pet_id"], ["pets.id"], name=op.f("fk_pet_vaccinations_pet_id_pets")),
        sa.ForeignKeyConstraint(["vaccine_id"], ["vaccines.id"], name=op.f("fk_pet_vaccinations_vaccine_id_vaccines")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pet_vaccinations")),
    )
    for columns in INDEXES:
        op.create_index(op.f(f"ix_pet_vaccinations_{'_'.join(columns)}"), "pet_vaccinations", list(columns))


def downgrade() -> None:
    for columns in reversed(INDEXES):
        op.drop_index(op.f(f"ix_pet_vaccinations_{'_'.join(columns)}"), table_name="pet_vaccinations")
    op.drop_table("pet_vaccinations")
    op.execute("DELETE FROM record_counts WHERE resource = 'pet-vaccination'")
