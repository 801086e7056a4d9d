"""Issue certificates: a pet's certificates, each with the digest of its link's token, the links of deleted
certificates, which answer 410 until they would have expired, and a view of both by digest.

Revision ID: e1a3c5b7d9f2
Revises: 7dc6b29de50a
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e1a3c5b7d9f2"
down_revision: str | None = "7dc6b29de50a"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
CERTIFICATE_INDEXES = (
    ("pet_id", "created_at", "id"),
    ("created_at", "id"),
    ("owner_id", "created_at", "id"),
    ("created_by", "created_at", "id"),
    ("modified_at", "id"),
)


def upgrade() -> None:
    op.create_table(
        "pet_certificates",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("created_by", Text, nullable=False),
        sa.Column("modified_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("modified_by", Text, nullable=False),
        sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("groups", Text, nullable=True, comment="the groups shown, a JSON array; null: every group"),
        sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("token_digest", Text, nullable=False, comment="SHA-256 of the link's token, hexadecimal"),
        sa.Column("revision", sa.Integer(), nullable=False, comment="bumped on every write; the ETag derives from it"),
        sa.ForeignKeyConstraint(["pet_id"], ["pets.id"], name=op.f("fk_pet_certificates_pet_id_pets")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pet_certificates")),
    )
    op.create_index(op.f("ix_pet_certificates_token_digest"), "pet_certificates", ["token_digest"], unique=True)
    for columns in CERTIFICATE_INDEXES:
        op.create_index(op.f(f"ix_pet_certificates_{'_'.join(columns)}"), "pet_certificates", list(columns))
    op.create_table(
        "revoked_certificate_links",
        sa.Column("id", sa.Uuid(), nullable=False, comment="the deleted certificate's id"),
        sa.Column("token_digest", Text, nullable=False, comment="SHA-256 of its link's token, hexadecimal"),
        sa.Column("expires_at", sa.BigInteger(), nullable=False, comment="when it would have expired: epoch ms"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_revoked_certificate_links")),
    )
    op.create_index(
        op.f("ix_revoked_certificate_links_token_digest"), "revoked_certificate_links", ["token_digest"], unique=True
    )
    # Every link, live or revoked, by its digest: a token is looked up in one statement.
    op.execute(
        "CREATE VIEW certificate_links AS "
        "SELECT id, token_digest, expires_at, 0 AS revoked FROM pet_certificates "
        "UNION ALL SELECT id, token_digest, expires_at, 1 AS revoked FROM revoked_certificate_links"
    )


def downgrade() -> None:
    op.execute("DROP VIEW certificate_links")
    op.drop_index(op.f("ix_revoked_certificate_links_token_digest"), table_name="revoked_certificate_links")
    op.drop_table("revoked_certificate_links")
    for columns in reversed(CERTIFICATE_INDEXES):
        op.drop_index(op.f(f"ix_pet_certificates_{'_'.join(columns)}"), table_name="pet_certificates")
    op.drop_index(op.f("ix_pet_certificates_token_digest"), table_name="pet_certificates")
    op.drop_table("pet_certificates")
