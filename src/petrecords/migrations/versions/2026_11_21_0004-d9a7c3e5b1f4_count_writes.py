"""Count writes, as the data's version.

Revision ID: d9a7c3e5b1f4
Revises: c4d2e8f1a6b3
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d9a7c3e5b1f4"
down_revision: str | None = "c4d2e8f1a6b3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "pet_counts",
        sa.Column(
            "writes",
            sa.BigInteger(),
            nullable=False,
            server_default="0",
            comment="writes counted in this row; their sum over the every-owner rows is the data's version",
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("pet_counts") as table:
        table.drop_column("writes")
