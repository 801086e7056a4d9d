"""The pet record a clinic keeps: birth date, sex, neutered, breed and microchip, all optional; a microchip code
belongs to one pet.

Revision ID: f6b8d0e2a4c7
Revises: e4a6c8b0d2f5
Create Date: 2026-11-26
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "f6b8d0e2a4c7"
down_revision: str | None = "e4a6c8b0d2f5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
COLUMNS: tuple[sa.Column[Any], ...] = (
    sa.Column("birth_date", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
    sa.Column("sex", Text, nullable=True),
    sa.Column("neutered", sa.Boolean(), nullable=True),
    sa.Column("breed", Text, nullable=True),
    sa.Column("breed_key", Text, nullable=True, comment="lower-cased breed, for sorting and matching"),
    sa.Column("microchip", Text, nullable=True, comment="ISO 11784: 15 digits"),
)
INDEXES = (("birth_date", "id"), ("owner_id", "birth_date", "id"), ("breed_key", "id"))


def upgrade() -> None:
    for column in COLUMNS:
        op.add_column("pets", column)
    op.create_index(op.f("ix_pets_microchip"), "pets", ["microchip"], unique=True)
    for columns in INDEXES:
        op.create_index(op.f(f"ix_pets_{'_'.join(columns)}"), "pets", list(columns))


def downgrade() -> None:
    for columns in reversed(INDEXES):
        op.drop_index(op.f(f"ix_pets_{'_'.join(columns)}"), table_name="pets")
    op.drop_index(op.f("ix_pets_microchip"), table_name="pets")
    # Dropped in place (SQLite 3.35 and later can): a batch would copy the table and lose its search triggers.
    for column in reversed(COLUMNS):
        op.drop_column("pets", column.name)
