"""Create pets and idempotency_keys.

Revision ID: a1f0c2d3e4b5
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a1f0c2d3e4b5"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copy of the text type of this revision: code-point collation on both databases.
Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

PET_INDEXES = (
    ("created_at", "id"),
    ("owner_id", "created_at", "id"),
    ("pet_type", "created_at", "id"),
    ("owner_id", "pet_type", "created_at", "id"),
    ("modified_at", "id"),
    ("name_key", "id"),
    ("owner_id", "name_key", "id"),
)


def upgrade() -> None:
    op.create_table(
        "pets",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("owner_id", Text, nullable=False),
        sa.Column("name", Text, nullable=False),
        sa.Column("name_key", Text, nullable=False, comment="lower-cased name, for sorting and matching"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pets")),
    )
    for columns in PET_INDEXES:
        op.create_index(op.f(f"ix_pets_{'_'.join(columns)}"), "pets", list(columns))

    op.create_table(
        "idempotency_keys",
        sa.Column("caller", Text, nullable=False),
        sa.Column("key", Text, nullable=False),
        sa.Column("request_hash", Text, nullable=False),
        sa.Column("status", sa.SmallInteger(), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("location", Text, nullable=True),
        sa.Column("etag", Text, nullable=True),
        sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.PrimaryKeyConstraint("caller", "key", name=op.f("pk_idempotency_keys")),
    )
    op.create_index(op.f("ix_idempotency_keys_expires_at"), "idempotency_keys", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_idempotency_keys_expires_at"), table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    for columns in reversed(PET_INDEXES):
        op.drop_index(op.f(f"ix_pets_{'_'.join(columns)}"), table_name="pets")
    op.drop_table("pets")
