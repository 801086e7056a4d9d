"""The due rows by grantee (see petrecords.due_rows.due_grants): one for each due row and each share of its pet, in the
due list's default order for each grantee, so that a clinic's page of `GET /v1/due` walks its own rows and none of
the others'; filled from the due rows and shares stored so far.

Revision ID: a7c9e1b3d5f8
Revises: f0a2c4e6b8d3
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a7c9e1b3d5f8"
down_revision: str | None = "f0a2c4e6b8d3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "due_grants",
        sa.Column("grantee", Text, nullable=False, comment="a share's grantee: an e-mail address, or group:NAME"),
        sa.Column("due_id", sa.Uuid(), nullable=False, comment="the due row (its latest dose's vaccination id)"),
        sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="the share's expiry, kept equal to it"),
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", Text, nullable=False),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("label_key", Text, nullable=False),
        sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.PrimaryKeyConstraint("grantee", "due_id", name=op.f("pk_due_grants")),
    )
    # Migrations run under a database lock before any instance serves, so no write is missed here.
    op.execute(
        "INSERT INTO due_grants (grantee, due_id, expires_at, pet_id, owner_id, pet_type, label_key, due_at) "
        "SELECT s.grantee, r.id, s.expires_at, r.pet_id, r.owner_id, r.pet_type, r.label_key, r.due_at "
        "FROM due_doses r JOIN pet_shares s ON s.pet_id = r.pet_id"
    )
    op.create_index(
        op.f("ix_due_grants_grantee_due_at_pet_id_label_key_due_id_expires_at_owner_id_pet_type"),
        "due_grants",
        ["grantee", "due_at", "pet_id", "label_key", "due_id", "expires_at", "owner_id", "pet_type"],
    )
    op.create_index(op.f("ix_due_grants_pet_id"), "due_grants", ["pet_id"])


def downgrade() -> None:
    op.drop_table("due_grants")
