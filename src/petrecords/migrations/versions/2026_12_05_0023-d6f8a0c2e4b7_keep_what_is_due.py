"""What is due: each living pet's latest completed dose of each group (contract section 14), kept in `due_doses`
(see petrecords.due_rows), filled from the doses stored so far, and counted as the vaccinations are: for every
owner, each owner and each grantee of a share, by the hour of dueAt and the periods above it (see tables.period_counts).

A group is its vaccines' `group`, case ignored (their group_key), or a vaccine alone when it has none; its latest
dose is the one applied last, then of the greater id.

Revision ID: d6f8a0c2e4b7
Revises: b2d4f6a8c0e3
Create Date: 2026-12-05
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "d6f8a0c2e4b7"
down_revision: str | None = "b2d4f6a8c0e3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
UNIT = 3_600_000
SPAN = 32
SIZES = 4
GRANTEE_SCOPE = "'shared ' || s.grantee"
COUNTED = "(s.expires_at IS NULL OR EXISTS (SELECT 1 FROM grant_expiries g WHERE g.share_id = s.id))"
"""A share whose grants the kept counts hold: it never expires, or it is listed (see store/grants.py)."""


def _columns() -> list[sa.Column[Any]]:
    return [
        sa.Column("id", sa.Uuid(), nullable=False, comment="the latest dose's vaccination id"),
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("owner_id", Text, nullable=False, comment="the pet's owner, kept equal to it"),
        sa.Column(
            "group_key", Text, nullable=True, comment="the group's match key; null: the vaccine is a group of its own"
        ),
        sa.Column(
            "label_key", Text, nullable=False, comment="match key of the group's label, for sorting and matching"
        ),
        sa.Column("vaccine_id", sa.Uuid(), nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("pet_name_key", Text, nullable=False, comment="the pet's name_key, kept equal to it"),
        sa.Column("pet_name", Text, nullable=False, comment="the pet's name, kept equal to it"),
        sa.Column("group_label", Text, nullable=False, comment="the vaccine's group, or its name when it has none"),
        sa.Column("vaccine_name", Text, nullable=False, comment="the vaccine's name, kept equal to it"),
    ]


_HOUR = f"((due_at - ((due_at % {UNIT}) + {UNIT}) % {UNIT}) / {UNIT})"


def upgrade() -> None:
    op.create_table("due_doses", *_columns(), sa.PrimaryKeyConstraint("id", name=op.f("pk_due_doses")))
    op.create_index(op.f("ix_due_doses_pet_id_id"), "due_doses", ["pet_id", "id"])
    op.create_index(
        op.f("ix_due_doses_due_at_pet_id_label_key_id"), "due_doses", ["due_at", "pet_id", "label_key", "id"]
    )
    op.create_index(
        op.f("ix_due_doses_owner_id_due_at_pet_id_label_key_id"),
        "due_doses",
        ["owner_id", "due_at", "pet_id", "label_key", "id"],
    )
    if op.get_bind().dialect.name == "postgresql":
        op.create_index("ix_due_doses_due_at_hour", "due_doses", [sa.text(_HOUR)])
    _fill()
    _count()


def _fill() -> None:
    """The latest completed dose of each group of each living pet: a pet's doses of each group (its vaccines'
    group_key, or the vaccine alone) ranked latest first. Migrations run under a database lock before any instance
    serves, so no write is missed here."""
    op.execute(
        "INSERT INTO due_doses (id, pet_id, owner_id, group_key, label_key, vaccine_id, applied_at, due_at, pet_type, "
        "pet_name_key, pet_name, group_label, vaccine_name) SELECT id, pet_id, owner_id, group_key, "
        "label_key, vaccine_id, applied_at, due_at, pet_type, pet_name_key, pet_name, group_label, vaccine_name "
        "FROM (SELECT d.id, d.pet_id, p.owner_id, v.group_key, coalesce(v.group_key, v.name_key) AS "
        "label_key, d.vaccine_id, d.applied_at, d.due_at, p.pet_type, p.name_key AS pet_name_key, p.name AS pet_name, "
        "coalesce(v.group_name, v.name) AS group_label, v.name AS vaccine_name, row_number() OVER "
        "(PARTITION BY d.pet_id, v.group_key, CASE WHEN v.group_key IS NULL THEN d.vaccine_id END "
        "ORDER BY d.applied_at DESC, d.id DESC) AS latest FROM pet_vaccinations d JOIN pets p ON p.id = d.pet_id "
        "JOIN vaccines v ON v.id = d.vaccine_id WHERE d.status = 'completed' AND p.deceased_at IS NULL) ranked "
        "WHERE latest = 1"
    )


def _count() -> None:
    """The kept counts of the rows: for every owner ('', counting no write), each owner and each grantee, whole and by
    the periods of dueAt (an hour, then 32^k hours). Division of integers truncates toward zero on both databases: a
    period before the epoch is floored by hand."""
    # No row for no records: a load into the empty database writes its own (see portability/databases.py).
    for scope, grouped in (("''", "HAVING count(*) > 0"), ("r.owner_id", "GROUP BY r.owner_id")):
        op.execute(
            "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) "  # noqa: S608 - constants
            f"SELECT 'due', {scope}, '', 0, count(*), 0 FROM due_doses r {grouped}"
        )
    op.execute(
        "INSERT INTO record_counts (resource, scope, partition, slot, count, writes) "  # noqa: S608 - constants
        f"SELECT 'due', {GRANTEE_SCOPE}, '', 0, count(*), 0 FROM pet_shares s JOIN due_doses r ON r.pet_id = s.pet_id "
        f"WHERE {COUNTED} GROUP BY s.grantee"
    )
    for size in range(SIZES):
        divisor = UNIT * SPAN**size
        period = f"((r.due_at - ((r.due_at % {divisor}) + {divisor}) % {divisor}) / {divisor})"
        for scope, grouped in (("''", period), ("r.owner_id", f"r.owner_id, {period}")):
            op.execute(
                "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
                f"SELECT 'due', {scope}, {size}, {period}, 0, count(*) FROM due_doses r GROUP BY {grouped}"
            )
        op.execute(
            "INSERT INTO period_counts (resource, scope, size, period, slot, count) "  # noqa: S608 - constants
            f"SELECT 'due', {GRANTEE_SCOPE}, {size}, {period}, 0, count(*) FROM pet_shares s "
            f"JOIN due_doses r ON r.pet_id = s.pet_id WHERE {COUNTED} GROUP BY s.grantee, {period}"
        )


def downgrade() -> None:
    op.execute("DELETE FROM period_counts WHERE resource = 'due'")
    op.execute("DELETE FROM record_counts WHERE resource = 'due'")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_due_doses_due_at_hour", table_name="due_doses")
    op.drop_table("due_doses")
