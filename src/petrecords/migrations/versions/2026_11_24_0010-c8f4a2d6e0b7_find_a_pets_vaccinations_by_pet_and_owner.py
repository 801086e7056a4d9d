"""Find a pet's vaccinations by the pet and its owner in one index.

With only (pet_id, applied_at, id), an owner's `?petId=…&sort=appliedAt` could be planned on the owner's
index, which also keeps the applied order, and walk every vaccination of the owner to pick one pet's. An
index with both equalities first wins that choice on both databases, and still serves the pet alone.

Revision ID: c8f4a2d6e0b7
Revises: c8f1d3b5e7a9
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "c8f4a2d6e0b7"
down_revision: str | None = "c8f1d3b5e7a9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BY_PET = ("pet_id", "applied_at", "id")
BY_PET_AND_OWNER = ("pet_id", "owner_id", "applied_at", "id")


def _name(columns: tuple[str, ...]) -> str:
    return op.f(f"ix_pet_vaccinations_{'_'.join(columns)}")


def upgrade() -> None:
    op.create_index(_name(BY_PET_AND_OWNER), "pet_vaccinations", list(BY_PET_AND_OWNER))
    op.drop_index(_name(BY_PET), table_name="pet_vaccinations")


def downgrade() -> None:
    op.create_index(_name(BY_PET), "pet_vaccinations", list(BY_PET))
    op.drop_index(_name(BY_PET_AND_OWNER), table_name="pet_vaccinations")
