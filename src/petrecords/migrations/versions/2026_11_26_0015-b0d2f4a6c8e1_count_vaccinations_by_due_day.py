"""Count vaccinations by the day, 32 days and 1,024 days their next dose is due, per owner and for everyone, so that
what is overdue is counted from a few kept rows (see tables.period_counts).

Revision ID: b0d2f4a6c8e1
Revises: a8c0e2f4b6d9
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b0d2f4a6c8e1"
down_revision: str | None = "a8c0e2f4b6d9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
DAY_MS = 86_400_000
SPAN = 32


def upgrade() -> None:
    op.create_table(
        "period_counts",
        sa.Column("resource", Text, nullable=False),
        sa.Column("scope", Text, nullable=False, comment="an owner id, or '' for every owner"),
        sa.Column("size", sa.SmallInteger(), nullable=False, comment="0: a day; 1: 32 days; 2: 1,024 days"),
        sa.Column("period", sa.BigInteger(), nullable=False, comment="the period's number from the epoch, of its size"),
        sa.Column("slot", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("resource", "scope", "size", "period", "slot", name=op.f("pk_period_counts")),
    )
    # Migrations run under a database lock before any instance serves, so no write is missed here. Division of
    # integers truncates toward zero on both databases: a day before the epoch is floored by hand.
    day = f"((due_at - ((due_at % {DAY_MS}) + {DAY_MS}) % {DAY_MS}) / {DAY_MS})"
    for size in range(3):
        span = SPAN**size
        period = f"(({day} - ((({day}) % {span}) + {span}) % {span}) / {span})"
        for scope, grouped in (("''", period), ("owner_id", f"owner_id, {period}")):
            op.execute(
                "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
                f"SELECT 'pet-vaccination', {scope}, {size}, {period}, 0, count(*) FROM pet_vaccinations "
                f"GROUP BY {grouped}"
            )


def downgrade() -> None:
    op.drop_table("period_counts")
