"""Leave out of two indexes the rows that have no value to find: the changes of creates (no owner before) from the
index of owners before, and pets without a microchip from the index that keeps chips unique. A create writes two
index entries fewer; what compares either column with a value reads the partial index as before.

Revision ID: c2e4a6b8d0f3
Revises: b0d2f4a6c8e1
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "c2e4a6b8d0f3"
down_revision: str | None = "b0d2f4a6c8e1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = (
    ("ix_changes_owner_before_xid_position", "changes", ("owner_before", "xid", "position"), False),
    ("ix_pets_microchip", "pets", ("microchip",), True),
)


def upgrade() -> None:
    for name, table, columns, unique in INDEXES:
        where = sa.text(f"{columns[0]} IS NOT NULL")
        op.drop_index(op.f(name), table_name=table)
        op.create_index(op.f(name), table, list(columns), unique=unique, sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for name, table, columns, unique in INDEXES:
        op.drop_index(op.f(name), table_name=table)
        op.create_index(op.f(name), table, list(columns), unique=unique)
