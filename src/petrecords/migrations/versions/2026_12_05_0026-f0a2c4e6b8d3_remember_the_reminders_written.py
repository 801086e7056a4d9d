"""Reminders (contract section 15): each due row remembers the last reminder written for its dueAt, in `reminded`
(`none` yet, `due-soon`, `overdue`), and an index of (reminded, dueAt) lets a pass read only the rows whose moment
has come (see petrecords.reminders).

The rows held so far start at `none`: the first pass marks those whose moments are long past without a reminder, and
reminds the others, as it would a dose just written.

Revision ID: f0a2c4e6b8d3
Revises: e1a3c5b7d9f2
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f0a2c4e6b8d3"
down_revision: str | None = "e1a3c5b7d9f2"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.add_column(
        "due_doses",
        sa.Column(
            "reminded",
            Text,
            nullable=False,
            server_default="none",
            comment="the last reminder written for this dueAt: none, due-soon or overdue (see petrecords.reminders)",
        ),
    )
    op.create_index(op.f("ix_due_doses_reminded_due_at_id"), "due_doses", ["reminded", "due_at", "id"])


def downgrade() -> None:
    op.drop_index(op.f("ix_due_doses_reminded_due_at_id"), table_name="due_doses")
    with op.batch_alter_table("due_doses") as batch:
        batch.drop_column("reminded")
