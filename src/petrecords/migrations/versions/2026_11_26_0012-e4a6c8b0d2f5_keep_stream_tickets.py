"""Keep stream tickets: what opens one live change stream from a browser page.

Revision ID: e4a6c8b0d2f5
Revises: d2b6e8f0a4c3
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e4a6c8b0d2f5"
down_revision: str | None = "d2b6e8f0a4c3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "stream_tickets",
        sa.Column("ticket_hash", Text, nullable=False, comment="SHA-256 of the ticket, hex"),
        sa.Column("caller", sa.LargeBinary(), nullable=False, comment="the caller, as JSON: e-mail, role, groups, exp"),
        sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.PrimaryKeyConstraint("ticket_hash", name=op.f("pk_stream_tickets")),
    )
    op.create_index(op.f("ix_stream_tickets_expires_at"), "stream_tickets", ["expires_at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_stream_tickets_expires_at"), table_name="stream_tickets")
    op.drop_table("stream_tickets")
