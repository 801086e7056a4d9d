"""Cover names in the pet-type indexes.

Revision ID: c4d2e8f1a6b3
Revises: b7e3d9a1c5f2
Create Date: 2026-11-21
"""

from collections.abc import Sequence

from alembic import op

revision: str = "c4d2e8f1a6b3"
down_revision: str | None = "b7e3d9a1c5f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NARROW = (("pet_type", "created_at", "id"), ("owner_id", "pet_type", "created_at", "id"))


def _name(columns: tuple[str, ...]) -> str:
    return op.f(f"ix_pets_{'_'.join(columns)}")


def upgrade() -> None:
    for columns in NARROW:
        covering = (*columns, "name_key")
        op.create_index(_name(covering), "pets", list(covering))
        op.drop_index(_name(columns), table_name="pets")


def downgrade() -> None:
    for columns in NARROW:
        op.create_index(_name(columns), "pets", list(columns))
        op.drop_index(_name((*columns, "name_key")), table_name="pets")
