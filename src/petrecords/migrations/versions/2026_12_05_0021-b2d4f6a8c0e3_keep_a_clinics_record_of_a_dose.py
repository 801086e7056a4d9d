"""The clinic's record of a dose, good enough for a certificate: a pet's colour and the day it died (its microchip
may now be an FDX-A or AVID code as well); a vaccine's group and manufacturer; a vaccination's lot, its expiry, the
dose type, the veterinarian and their licence, the clinic, the rabies tag and a status. Every new field is optional
and starts empty; every vaccination stored so far is `completed`, as it was recorded. A rabies tag belongs to one
completed dose in a calendar year (UTC), which a unique index keeps on each database, with the year written in its
SQL; the new list filters each have an index.

Revision ID: b2d4f6a8c0e3
Revises: a0c2e4f6b8d1
Create Date: 2026-12-05
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "b2d4f6a8c0e3"
down_revision: str | None = "a0c2e4f6b8d1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
COLUMNS: dict[str, tuple[sa.Column[Any], ...]] = {
    "pets": (
        sa.Column("color", Text, nullable=True),
        sa.Column("deceased_at", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
    ),
    "vaccines": (
        sa.Column("group_name", Text, nullable=True, comment="the disease its doses protect against"),
        sa.Column("group_key", Text, nullable=True, comment="lower-cased group, for sorting and matching"),
        sa.Column("manufacturer", Text, nullable=True),
    ),
    "pet_vaccinations": (
        sa.Column("lot_number", Text, nullable=True),
        sa.Column("lot_expires_on", sa.Integer(), nullable=True, comment="days since 1970-01-01"),
        sa.Column("dose_type", Text, nullable=True, comment="primary or booster"),
        sa.Column("veterinarian", Text, nullable=True),
        sa.Column("veterinarian_licence", Text, nullable=True),
        sa.Column("clinic", Text, nullable=True),
        sa.Column("rabies_tag", Text, nullable=True, comment="in upper case"),
        sa.Column("status", Text, nullable=False, server_default="completed", comment="completed or entered-in-error"),
        sa.Column("status_reason", Text, nullable=True),
    ),
}
# (table, columns, whether the rows without a value in the first are left out)
INDEXES = (
    ("pets", ("deceased_at", "id"), True),
    ("vaccines", ("group_key", "id"), False),
    ("pet_vaccinations", ("status", "created_at", "id"), False),
    ("pet_vaccinations", ("dose_type", "created_at", "id"), True),
    ("pet_vaccinations", ("rabies_tag", "id"), True),
    ("pet_vaccinations", ("lot_number", "id"), True),
)
TAG_YEAR_INDEX = "ix_pet_vaccinations_rabies_tag_year"
TAG_YEAR_WHERE = "status = 'completed' AND rabies_tag IS NOT NULL"
YEAR_OF_APPLIED_AT = {
    # As PostgreSQL writes it back, so that the schema's comparison with the database finds them equal.
    "postgresql": "EXTRACT(year FROM (to_timestamp((applied_at::numeric / 1000.0)::double precision) "
    "AT TIME ZONE 'UTC'::text))",
    "sqlite": "strftime('%Y', applied_at / 1000.0, 'unixepoch')",
}
MICROCHIP_COMMENTS = ("ISO 11784: 15 digits", "15 digits (ISO 11784), 10 of 0-9 A-F (FDX-A) or 9 (AVID)")


def _index_name(table: str, columns: tuple[str, ...]) -> str:
    return f"ix_{table}_{'_'.join(columns)}"


def _microchip_comment(comment: str, existing: str) -> None:
    # SQLite keeps no comments.
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "pets", "microchip", existing_type=Text, existing_nullable=True, comment=comment, existing_comment=existing
        )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    for table, columns in COLUMNS.items():
        for column in columns:
            op.add_column(table, column)
    for table, indexed, partial in INDEXES:
        where = sa.text(f"{indexed[0]} IS NOT NULL") if partial else None
        op.create_index(
            op.f(_index_name(table, indexed)), table, list(indexed), sqlite_where=where, postgresql_where=where
        )
    op.create_index(
        TAG_YEAR_INDEX,
        "pet_vaccinations",
        ["rabies_tag", sa.text(f"({YEAR_OF_APPLIED_AT[dialect]})")],
        unique=True,
        sqlite_where=sa.text(TAG_YEAR_WHERE),
        postgresql_where=sa.text(TAG_YEAR_WHERE),
    )
    _microchip_comment(MICROCHIP_COMMENTS[1], MICROCHIP_COMMENTS[0])


def downgrade() -> None:
    _microchip_comment(MICROCHIP_COMMENTS[0], MICROCHIP_COMMENTS[1])
    op.drop_index(TAG_YEAR_INDEX, table_name="pet_vaccinations")
    for table, indexed, _partial in reversed(INDEXES):
        op.drop_index(op.f(_index_name(table, indexed)), table_name=table)
    # Dropped in place (SQLite 3.35 and later can): a batch would copy the table and lose its search triggers.
    for table, columns in reversed(COLUMNS.items()):
        for column in reversed(columns):
            op.drop_column(table, column.name)
