"""Webhooks (contract, section 17): each an owner's URL, the events it selects, whether it is enabled, the cursor
up to which its changes were acknowledged, its secret (and the one before a rotation), whose feed it delivers, and
the state of its retries; and the log of delivery attempts, kept 30 days. Both tables start empty.

Revision ID: 7dc6b29de50a
Revises: d6f8a0c2e4b7
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "7dc6b29de50a"
down_revision: str | None = "d6f8a0c2e4b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("owner_id", Text, nullable=False, comment="who created it: whose feed it delivers"),
        sa.Column("url", Text, nullable=False),
        sa.Column("events", Text, nullable=False, comment="a JSON array of the events it selects"),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("disabled_reason", Text, nullable=True, comment="why the service disabled it"),
        sa.Column("position", Text, nullable=True, comment="the cursor acknowledged; null: after its created change"),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.Column("secret", Text, nullable=False, comment="whsec_ and base64: never shown but when made"),
        sa.Column("previous_secret", Text, nullable=True, comment="the secret before the last rotation"),
        sa.Column(
            "previous_secret_until", sa.BigInteger(), nullable=True, comment="epoch ms: until then, signed by both"
        ),
        sa.Column(
            "sees_all", sa.Boolean(), nullable=False, comment="the owner was an administrator when they wrote it"
        ),
        sa.Column("owner_groups", Text, nullable=False, comment="a JSON array: the owner's groups when they wrote it"),
        sa.Column("failures", sa.Integer(), nullable=False, comment="failed attempts in a row"),
        sa.Column("first_failed_at", sa.BigInteger(), nullable=True, comment="epoch ms: the first of those failures"),
        sa.Column("next_attempt_at", sa.BigInteger(), nullable=True, comment="epoch ms: when to try again"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(op.f("ix_webhooks_created_at_id"), "webhooks", ["created_at", "id"])
    op.create_index(op.f("ix_webhooks_owner_id_created_at_id"), "webhooks", ["owner_id", "created_at", "id"])
    op.create_index(op.f("ix_webhooks_modified_at_id"), "webhooks", ["modified_at", "id"])
    op.create_index(op.f("ix_webhooks_enabled_id"), "webhooks", ["enabled", "id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("webhook_id", sa.Uuid(), nullable=False),
        sa.Column("change_cursor", Text, nullable=False),
        sa.Column("type", Text, nullable=False, comment="{resource}.{action}"),
        sa.Column("attempted_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("outcome", Text, nullable=False, comment="succeeded or failed"),
        sa.Column("error", Text, nullable=True, comment="why it failed, in a few words; never the receiver's answer"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
    )
    op.create_index(
        op.f("ix_webhook_deliveries_webhook_id_attempted_at_id"),
        "webhook_deliveries",
        ["webhook_id", "attempted_at", "id"],
    )
    op.create_index(op.f("ix_webhook_deliveries_attempted_at_id"), "webhook_deliveries", ["attempted_at", "id"])


def downgrade() -> None:
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
