"""Count the kept periods of due dates from the hour instead of the day (sizes 1 hour, 32, 1,024 and 32,768 hours),
so that a count bounded by an instant reads one hour's records instead of one day's (see tables.period_counts).

Revision ID: e6a8c0e2f4b7
Revises: d4f6a8c0e2b5
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e6a8c0e2f4b7"
down_revision: str | None = "d4f6a8c0e2b5"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SPAN = 32
GRANTEE_SCOPE = "'shared ' || s.grantee"
COUNTED = "(s.expires_at IS NULL OR EXISTS (SELECT 1 FROM grant_expiries g WHERE g.share_id = s.id))"
"""A share whose grants the kept counts hold: it never expires, or it is listed (see store/grants.py)."""


def _recount(unit_ms: int, sizes: int) -> None:
    """Every kept period of the vaccinations' due dates, for their owners, everyone and the grantees of the shares
    of their pets, at `sizes` sizes from `unit_ms`. Migrations run under a database lock before any instance
    serves, so no write is missed here. Division of integers truncates toward zero on both databases: a period
    before the epoch is floored by hand."""
    op.execute("DELETE FROM period_counts")
    for size in range(sizes):
        divisor = unit_ms * SPAN**size
        period = f"((r.due_at - ((r.due_at % {divisor}) + {divisor}) % {divisor}) / {divisor})"
        for scope, grouped in (("''", period), ("r.owner_id", f"r.owner_id, {period}")):
            op.execute(
                "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
                f"SELECT 'pet-vaccination', {scope}, {size}, {period}, 0, count(*) FROM pet_vaccinations r "
                f"GROUP BY {grouped}"
            )
        op.execute(
            "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
            f"SELECT 'pet-vaccination', {GRANTEE_SCOPE}, {size}, {period}, 0, count(*) FROM pet_shares s "
            f"JOIN pet_vaccinations r ON r.pet_id = s.pet_id WHERE {COUNTED} GROUP BY s.grantee, {period}"
        )


def _comment(comment: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column("period_counts", "size", existing_type=sa.SmallInteger(), existing_nullable=False,
                        comment=comment)  # fmt: skip


def upgrade() -> None:
    _recount(3_600_000, 4)
    _comment("0: an hour; k: 32^k hours")


def downgrade() -> None:
    _recount(86_400_000, 3)
    _comment("0: a day; 1: 32 days; 2: 1,024 days")
