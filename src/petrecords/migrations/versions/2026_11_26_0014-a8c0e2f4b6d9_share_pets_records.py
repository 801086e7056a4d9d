"""Share pets' records: the shares, the windows in which each granted access (in the change log's order), and for
each change the record through whose shares it is seen and, of a share's change, whom it names.

Revision ID: a8c0e2f4b6d9
Revises: f6b8d0e2a4c7
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "a8c0e2f4b6d9"
down_revision: str | None = "f6b8d0e2a4c7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
SHARE_INDEXES = (
    ("grantee", "pet_id", "expires_at"),
    ("created_at", "id"),
    ("owner_id", "created_at", "id"),
    ("modified_at", "id"),
)


def upgrade() -> None:
    op.create_table(
        "pet_shares",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("grantee", Text, nullable=False, comment="an e-mail address, or group:NAME"),
        sa.Column("access", Text, nullable=False, comment="read or care"),
        sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="epoch milliseconds; null: never"),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.ForeignKeyConstraint(["pet_id"], ["pets.id"], name=op.f("fk_pet_shares_pet_id_pets")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pet_shares")),
    )
    op.create_index(op.f("ix_pet_shares_pet_id_grantee"), "pet_shares", ["pet_id", "grantee"], unique=True)
    for columns in SHARE_INDEXES:
        op.create_index(op.f(f"ix_pet_shares_{'_'.join(columns)}"), "pet_shares", list(columns))
    op.create_table(
        "share_windows",
        sa.Column("share_id", sa.Uuid(), nullable=False),
        sa.Column("from_xid", sa.BigInteger(), nullable=False, comment="the opening change's cursor: its xid"),
        sa.Column(
            "from_position", sa.BigInteger(), nullable=False, comment="the opening change's cursor: its position"
        ),
        sa.Column("grantee", Text, nullable=False),
        sa.Column("shared_key", sa.Uuid(), nullable=False, comment="the id of the record it shares (a pet)"),
        sa.Column("until_xid", sa.BigInteger(), nullable=True, comment="the closing change's cursor: null while open"),
        sa.Column("until_position", sa.BigInteger(), nullable=True),
        sa.Column("expires_at", sa.BigInteger(), nullable=True, comment="epoch milliseconds; null: never"),
        sa.PrimaryKeyConstraint("share_id", "from_xid", "from_position", name=op.f("pk_share_windows")),
    )
    op.create_index(op.f("ix_share_windows_grantee_shared_key"), "share_windows", ["grantee", "shared_key"])
    op.create_index(op.f("ix_share_windows_shared_key_grantee"), "share_windows", ["shared_key", "grantee"])
    # Added and dropped in place: the log is the largest table, and a copy of it would take as long as it is big.
    op.add_column(
        "changes",
        sa.Column("shared_key", sa.Uuid(), nullable=True, comment="the record through whose shares it is seen (a pet)"),
    )
    op.add_column(
        "changes", sa.Column("grantee", Text, nullable=True, comment="of a share's change: whom the share names")
    )
    op.create_index(op.f("ix_changes_shared_key_xid_position"), "changes", ["shared_key", "xid", "position"])


def downgrade() -> None:
    op.drop_index(op.f("ix_changes_shared_key_xid_position"), table_name="changes")
    op.drop_column("changes", "grantee")
    op.drop_column("changes", "shared_key")
    op.drop_index(op.f("ix_share_windows_shared_key_grantee"), table_name="share_windows")
    op.drop_index(op.f("ix_share_windows_grantee_shared_key"), table_name="share_windows")
    op.drop_table("share_windows")
    for columns in reversed(SHARE_INDEXES):
        op.drop_index(op.f(f"ix_pet_shares_{'_'.join(columns)}"), table_name="pet_shares")
    op.drop_index(op.f("ix_pet_shares_pet_id_grantee"), table_name="pet_shares")
    op.drop_table("pet_shares")
