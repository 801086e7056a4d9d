"""Count, for each grantee, the pets and the vaccinations that the shares naming them grant (by the day, 32 days and
1,024 days the vaccinations are due), and list the shares that will expire, so that a clinic's lists are counted
from a few kept rows (see store/grants.py).

Revision ID: d4f6a8c0e2b5
Revises: c2e4a6b8d0f3
Create Date: 2026-11-26
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d4f6a8c0e2b5"
down_revision: str | None = "c2e4a6b8d0f3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
DAY_MS = 86_400_000
SPAN = 32
SCOPE = "'shared ' || s.grantee"


def upgrade() -> None:
    op.create_table(
        "grant_expiries",
        sa.Column("share_id", sa.Uuid(), nullable=False),
        sa.Column("resource", Text, nullable=False, comment="the shares' resource"),
        sa.Column("grantee", Text, nullable=False),
        sa.Column("target_id", sa.Uuid(), nullable=False, comment="the record the share shares"),
        sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.PrimaryKeyConstraint("share_id", name=op.f("pk_grant_expiries")),
    )
    op.create_index(op.f("ix_grant_expiries_grantee_expires_at"), "grant_expiries", ["grantee", "expires_at"])
    op.create_index(op.f("ix_grant_expiries_expires_at"), "grant_expiries", ["expires_at"])
    # Migrations run under a database lock before any instance serves, so no write is missed here.
    now = int(time.time() * 1000)
    counted = f"(s.expires_at IS NULL OR s.expires_at > {now:d})"
    op.execute(
        "INSERT INTO grant_expiries (share_id, resource, grantee, target_id, expires_at) "  # noqa: S608 - constants
        f"SELECT id, 'pet-shares', grantee, pet_id, expires_at FROM pet_shares WHERE expires_at > {now:d}"
    )
    for resource, table in (("pets", "pets r ON r.id"), ("pet-vaccination", "pet_vaccinations r ON r.pet_id")):
        op.execute(
            "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) "  # noqa: S608 - constants
            f"SELECT '{resource}', {SCOPE}, '', 0, count(*), 0 FROM pet_shares s JOIN {table} = s.pet_id "
            f"WHERE {counted} GROUP BY s.grantee"
        )
    day = f"((r.due_at - ((r.due_at % {DAY_MS}) + {DAY_MS}) % {DAY_MS}) / {DAY_MS})"
    for size in range(3):
        span = SPAN**size
        period = f"(({day} - ((({day}) % {span}) + {span}) % {span}) / {span})"
        op.execute(
            "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
            f"SELECT 'pet-vaccination', {SCOPE}, {size}, {period}, 0, count(*) FROM pet_shares s "
            f"JOIN pet_vaccinations r ON r.pet_id = s.pet_id WHERE {counted} GROUP BY s.grantee, {period}"
        )


def downgrade() -> None:
    op.execute("DELETE FROM period_counts WHERE scope LIKE 'shared %'")
    op.execute("DELETE FROM record_counts WHERE scope LIKE 'shared %'")
    op.drop_index(op.f("ix_grant_expiries_expires_at"), table_name="grant_expiries")
    op.drop_index(op.f("ix_grant_expiries_grantee_expires_at"), table_name="grant_expiries")
    op.drop_table("grant_expiries")
