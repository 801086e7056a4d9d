"""Count the writes a certificate shows, by triggers: each pet's doses (`pet_dose_writes`, one row a pet) and the
vaccines (`vaccine_writes`, one row), so that a certificate's vouch is read by keys instead of summed over the pet's
doses and their vaccines at each first read of a link.

The database moves them, not the service: every writer, of this release or of any other (a rolling upgrade, a
script), moves them in the writing statement's own transaction, so that a document kept with the counts it was made at
is never served after a write it does not show. A dose inserted, changed or deleted counts once for each pet it
belonged to before and after; a vaccine changed or deleted counts once for all pets (vaccines change seldom, and a
row for each of their pets would make a rename of a vaccine that thousands of pets have a write to each). Each count
starts at 0 where no row is: a trigger makes the row it moves, so nothing needs to be counted here.

PostgreSQL counts a statement's doses once, after it (transition tables: an import's COPY is counted in one statement,
not a row at a time); SQLite a row at a time. A later migration that rebuilds `pet_vaccinations` or `vaccines` on
SQLite (a batch ALTER copies the rows into a new table and drops the triggers) must make their triggers again.

Revision ID: b5d7f9a1c3e6
Revises: d8b2f4a6c0e1
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "b5d7f9a1c3e6"
down_revision: str | None = "d8b2f4a6c0e1"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_COUNT_DOSES = """
CREATE FUNCTION count_pet_dose_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pet_dose_writes AS counted (pet_id, writes)
        SELECT DISTINCT pet_id, 1 FROM new_doses ORDER BY pet_id
        ON CONFLICT (pet_id) DO UPDATE SET writes = counted.writes + 1;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO pet_dose_writes AS counted (pet_id, writes)
        SELECT DISTINCT pet_id, 1 FROM old_doses ORDER BY pet_id
        ON CONFLICT (pet_id) DO UPDATE SET writes = counted.writes + 1;
    ELSE
        INSERT INTO pet_dose_writes AS counted (pet_id, writes)
        SELECT pet_id, 1 FROM (SELECT pet_id FROM old_doses UNION SELECT pet_id FROM new_doses) AS pets
        ORDER BY pet_id
        ON CONFLICT (pet_id) DO UPDATE SET writes = counted.writes + 1;
    END IF;
    RETURN NULL;
END
$$
"""
_PG_COUNT_VACCINES = """
CREATE FUNCTION count_vaccine_writes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO vaccine_writes AS counted (id, writes) VALUES (1, 1)
    ON CONFLICT (id) DO UPDATE SET writes = counted.writes + 1;
    RETURN NULL;
END
$$
"""
_PG_TRIGGERS = (
    "CREATE TRIGGER pet_dose_writes_insert AFTER INSERT ON pet_vaccinations REFERENCING NEW TABLE AS new_doses "
    "FOR EACH STATEMENT EXECUTE FUNCTION count_pet_dose_writes()",
    "CREATE TRIGGER pet_dose_writes_update AFTER UPDATE ON pet_vaccinations REFERENCING OLD TABLE AS old_doses "
    "NEW TABLE AS new_doses FOR EACH STATEMENT EXECUTE FUNCTION count_pet_dose_writes()",
    "CREATE TRIGGER pet_dose_writes_delete AFTER DELETE ON pet_vaccinations REFERENCING OLD TABLE AS old_doses "
    "FOR EACH STATEMENT EXECUTE FUNCTION count_pet_dose_writes()",
    "CREATE TRIGGER vaccine_writes_change AFTER UPDATE OR DELETE ON vaccines "
    "FOR EACH ROW EXECUTE FUNCTION count_vaccine_writes()",
)


_SQLITE_COUNT_OLD = (
    "INSERT OR IGNORE INTO pet_dose_writes (pet_id, writes) VALUES (old.pet_id, 0); "
    "UPDATE pet_dose_writes SET writes = writes + 1 WHERE pet_id = old.pet_id;"
)
_SQLITE_COUNT_NEW = (
    "INSERT OR IGNORE INTO pet_dose_writes (pet_id, writes) VALUES (new.pet_id, 0); "
    "UPDATE pet_dose_writes SET writes = writes + 1 WHERE pet_id = new.pet_id;"
)
_SQLITE_COUNT_VACCINES = (
    "INSERT OR IGNORE INTO vaccine_writes (id, writes) VALUES (1, 0); "
    "UPDATE vaccine_writes SET writes = writes + 1 WHERE id = 1;"
)
_SQLITE_TRIGGERS = (
    "CREATE TRIGGER pet_dose_writes_insert AFTER INSERT ON pet_vaccinations BEGIN " + _SQLITE_COUNT_NEW + " END",
    "CREATE TRIGGER pet_dose_writes_delete AFTER DELETE ON pet_vaccinations BEGIN " + _SQLITE_COUNT_OLD + " END",
    "CREATE TRIGGER pet_dose_writes_update AFTER UPDATE ON pet_vaccinations WHEN new.pet_id IS old.pet_id BEGIN "
    + _SQLITE_COUNT_OLD
    + " END",
    # A dose moved to another pet counts for both.
    "CREATE TRIGGER pet_dose_writes_move AFTER UPDATE ON pet_vaccinations WHEN new.pet_id IS NOT old.pet_id BEGIN "
    + _SQLITE_COUNT_OLD
    + " "
    + _SQLITE_COUNT_NEW
    + " END",
    "CREATE TRIGGER vaccine_writes_update AFTER UPDATE ON vaccines BEGIN " + _SQLITE_COUNT_VACCINES + " END",
    "CREATE TRIGGER vaccine_writes_delete AFTER DELETE ON vaccines BEGIN " + _SQLITE_COUNT_VACCINES + " END",
)
_SQLITE_TRIGGER_NAMES = (
    "pet_dose_writes_insert",
    "pet_dose_writes_delete",
    "pet_dose_writes_update",
    "pet_dose_writes_move",
    "vaccine_writes_update",
    "vaccine_writes_delete",
)


def upgrade() -> None:
    op.create_table(
        "pet_dose_writes",
        sa.Column("pet_id", sa.Uuid(), nullable=False),
        sa.Column("writes", sa.BigInteger(), nullable=False, comment="inserts, changes and deletes of its doses"),
        sa.PrimaryKeyConstraint("pet_id", name=op.f("pk_pet_dose_writes")),
    )
    op.create_table(
        "vaccine_writes",
        sa.Column("id", sa.Integer(), nullable=False, comment="1: the one row"),
        sa.Column("writes", sa.BigInteger(), nullable=False, comment="changes and deletes of any vaccine"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_vaccine_writes")),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_COUNT_DOSES)
        op.execute(_PG_COUNT_VACCINES)
        for statement in _PG_TRIGGERS:
            op.execute(statement)
        return
    for statement in _SQLITE_TRIGGERS:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, trigger in (
            ("pet_vaccinations", "pet_dose_writes_insert"),
            ("pet_vaccinations", "pet_dose_writes_update"),
            ("pet_vaccinations", "pet_dose_writes_delete"),
            ("vaccines", "vaccine_writes_change"),
        ):
            op.execute(f"DROP TRIGGER {trigger} ON {table}")
        op.execute("DROP FUNCTION count_pet_dose_writes()")
        op.execute("DROP FUNCTION count_vaccine_writes()")
    else:
        for trigger in _SQLITE_TRIGGER_NAMES:
            op.execute(f"DROP TRIGGER {trigger}")
    op.drop_table("vaccine_writes")
    op.drop_table("pet_dose_writes")
