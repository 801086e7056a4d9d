"""The due rows by grantee keep what a page's items show (pet name, group label, vaccine, applied at), in the index a
grantee's page walks, so that a clinic's page of `GET /v1/due` reads that index alone and looks no row up; refilled
from the due rows and shares stored so far.

Revision ID: c4e8a2f6b1d9
Revises: a7c9e1b3d5f8
Create Date: 2026-12-05
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "c4e8a2f6b1d9"
down_revision: str | None = "a7c9e1b3d5f8"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")

OLD_INDEX = "ix_due_grants_grantee_due_at_pet_id_label_key_due_id_expires_at_owner_id_pet_type"
OLD_COLUMNS = ["grantee", "due_at", "pet_id", "label_key", "due_id", "expires_at", "owner_id", "pet_type"]
ITEM_COLUMNS = ["pet_name", "group_label", "vaccine_id", "vaccine_name", "applied_at"]


def _create(*, items: bool) -> None:
    """The table, filled from the due rows and shares, and its indexes: migrations run under a database lock before
    any instance serves, so no write is missed here."""
    more: list[sa.Column[Any]] = [
        sa.Column("pet_name", Text, nullable=False),
        sa.Column("group_label", Text, nullable=False),
        sa.Column("vaccine_id", sa.Uuid(), nullable=False),
        sa.Column("vaccine_name", Text, nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
    ]
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
        *(more if items else []),
        sa.PrimaryKeyConstraint("grantee", "due_id", name=op.f("pk_due_grants")),
    )
    columns = ["pet_id", "owner_id", "pet_type", "label_key", "due_at", *(ITEM_COLUMNS if items else [])]
    op.execute(
        f"INSERT INTO due_grants (grantee, due_id, expires_at, {', '.join(columns)}) "  # noqa: S608
        f"SELECT s.grantee, r.id, s.expires_at, {', '.join('r.' + column for column in columns)} "
        "FROM due_doses r JOIN pet_shares s ON s.pet_id = r.pet_id"
    )
    if items:
        op.create_index("ix_due_grants_grantee_page", "due_grants", [*OLD_COLUMNS, *ITEM_COLUMNS])
    else:
        op.create_index(op.f(OLD_INDEX), "due_grants", OLD_COLUMNS)
    op.create_index(op.f("ix_due_grants_pet_id"), "due_grants", ["pet_id"])


def upgrade() -> None:
    # Written anew rather than altered: every row gains values, and SQLite would copy the table to add its columns.
    op.drop_table("due_grants")
    _create(items=True)


def downgrade() -> None:
    op.drop_table("due_grants")
    _create(items=False)
