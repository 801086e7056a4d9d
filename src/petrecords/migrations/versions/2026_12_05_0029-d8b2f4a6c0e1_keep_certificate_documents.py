"""Each certificate's public JSON kept beside it, with what vouches for it, so that a link's first read is its one
lookup; empty until each certificate is next written or read (it is derived data: a read makes what is missing).

Revision ID: d8b2f4a6c0e1
Revises: c4e8a2f6b1d9
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "d8b2f4a6c0e1"
down_revision: str | None = "c4e8a2f6b1d9"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "certificate_documents",
        sa.Column("certificate_id", sa.Uuid(), nullable=False),
        sa.Column("vouch", Text, nullable=False, comment="what the document was made from (certificates.kept)"),
        sa.Column("good_until", sa.BigInteger(), nullable=False, comment="epoch ms: its first state change"),
        sa.Column("document", sa.LargeBinary(), nullable=False, comment="the public JSON, asOf empty"),
        sa.PrimaryKeyConstraint("certificate_id", name=op.f("pk_certificate_documents")),
    )


def downgrade() -> None:
    op.drop_table("certificate_documents")
