"""What is due: each living pet's latest completed dose of each group (contract section 14), kept in `due_doses`
(see petrecords.due), filled from the doses stored so far, and counted as the vaccinations are: for every owner, each
owner and each grantee of a share, by the hour of dueAt and the periods above it (see tables.period_counts).

A group is its vaccines' `group`, case ignored (the service's match key), or a vaccine alone when it has none; its
latest dose is the one applied last, then of the greater id.

Revision ID: d6f8a0c2e4b7
Revises: b2d4f6a8c0e3
Create Date: 2026-12-05
"""

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

from petrecords.text import match_key

revision: str = "d6f8a0c2e4b7"
down_revision: str | None = "b2d4f6a8c0e3"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
BATCH = 5000
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
            "group_key", Text, nullable=False, comment="group: and the group's match key, or vaccine: and its id"
        ),
        sa.Column(
            "label_key", Text, nullable=False, comment="match key of the group's label, for sorting and matching"
        ),
        sa.Column("vaccine_id", sa.Uuid(), nullable=False),
        sa.Column("applied_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("due_at", sa.BigInteger(), nullable=False, comment="epoch milliseconds"),
        sa.Column("pet_type", Text, nullable=False),
        sa.Column("pet_name_key", Text, nullable=False, comment="the pet's name_key, kept equal to it"),
    ]


_HOUR = f"((due_at - ((due_at % {UNIT}) + {UNIT}) % {UNIT}) / {UNIT})"


def upgrade() -> None:
    op.create_table("due_doses", *_columns(), sa.PrimaryKeyConstraint("id", name=op.f("pk_due_doses")))
    op.create_index(op.f("ix_due_doses_pet_id_group_key"), "due_doses", ["pet_id", "group_key"], unique=True)
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
    """The latest completed dose of each group of each living pet, from the doses in pet order. Migrations run under
    a database lock before any instance serves, so no write is missed here."""
    bind = op.get_bind()
    doses = sa.table(
        "pet_vaccinations",
        sa.column("id", sa.Uuid()),
        sa.column("pet_id", sa.Uuid()),
        sa.column("vaccine_id", sa.Uuid()),
        sa.column("applied_at", sa.BigInteger()),
        sa.column("due_at", sa.BigInteger()),
        sa.column("status", Text),
    )
    pets = sa.table(
        "pets",
        sa.column("id", sa.Uuid()),
        sa.column("owner_id", Text),
        sa.column("pet_type", Text),
        sa.column("name_key", Text),
        sa.column("deceased_at", sa.Integer()),
    )
    vaccines = sa.table("vaccines", sa.column("id", sa.Uuid()), sa.column("name", Text), sa.column("group_name", Text))
    due = sa.table("due_doses", *(sa.column(column.name, column.type) for column in _columns()))
    select = (
        sa.select(
            doses.c.id,
            doses.c.pet_id,
            doses.c.vaccine_id,
            doses.c.applied_at,
            doses.c.due_at,
            pets.c.owner_id,
            pets.c.pet_type,
            pets.c.name_key,
            vaccines.c.name,
            vaccines.c.group_name,
        )
        .join_from(doses, pets, pets.c.id == doses.c.pet_id)
        .join(vaccines, vaccines.c.id == doses.c.vaccine_id)
        .where(doses.c.status == "completed", pets.c.deceased_at.is_(None))
        .order_by(doses.c.pet_id)
    )
    latest: dict[str, dict[str, Any]] = {}
    batch: list[dict[str, Any]] = []
    pet_id = None
    for row in bind.execute(select):
        if row.pet_id != pet_id:
            batch.extend(latest.values())
            latest, pet_id = {}, row.pet_id
            if len(batch) >= BATCH:
                bind.execute(sa.insert(due), batch)
                batch = []
        group = row.group_name
        key = f"vaccine:{row.vaccine_id}" if group is None else f"group:{match_key(group)}"
        current = latest.get(key)
        if current is not None and (current["applied_at"], current["id"].int) > (row.applied_at, row.id.int):
            continue
        latest[key] = {
            "id": row.id,
            "pet_id": row.pet_id,
            "owner_id": row.owner_id,
            "group_key": key,
            "label_key": match_key(row.name if group is None else group),
            "vaccine_id": row.vaccine_id,
            "applied_at": row.applied_at,
            "due_at": row.due_at,
            "pet_type": row.pet_type,
            "pet_name_key": row.name_key,
        }
    batch.extend(latest.values())
    if batch:
        bind.execute(sa.insert(due), batch)


def _count() -> None:
    """The kept counts of the rows: for every owner ('', counting no write), each owner and each grantee, whole and by
    the periods of dueAt (an hour, then 32^k hours). Division of integers truncates toward zero on both databases: a
    period before the epoch is floored by hand."""
    for scope, grouped in (("''", ""), ("r.owner_id", "GROUP BY r.owner_id")):
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
