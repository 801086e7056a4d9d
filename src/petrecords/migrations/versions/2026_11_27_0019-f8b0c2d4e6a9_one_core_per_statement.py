"""PostgreSQL: each statement of this database runs in one process (max_parallel_workers_per_gather = 0, a setting
of the database, so that it holds on every connection: direct, through PgBouncer in any pool mode, on a replica).

A parallel plan spreads one long read (a one-letter search counting a million records) over every core, and the
quick requests beside it wait for a core: at 1,000,000 pets a get by id's p99 beside two such searches was 4.1 ×
its p99 alone, and 2.2 × without parallel plans (bench/README.md). A role that does not own the database may not
set it: the migration then says so in the log and goes on, as the setting is a matter of speed, not of answers.

Revision ID: f8b0c2d4e6a9
Revises: e6a8c0e2f4b7
Create Date: 2026-11-27
"""

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "f8b0c2d4e6a9"
down_revision: str | None = "e6a8c0e2f4b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("petrecords.migrations")

_OWNS_DATABASE = sa.text(
    "SELECT pg_has_role(current_user, datdba, 'MEMBER') FROM pg_database WHERE datname = current_database()"
)


def _set(value: str | None) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    if not bind.execute(_OWNS_DATABASE).scalar_one():
        log.warning(
            "this role does not own the database and may not set max_parallel_workers_per_gather: have its owner "
            "run ALTER DATABASE … SET max_parallel_workers_per_gather = 0 for steadier latencies beside long reads"
        )
        return
    assignment = (
        "RESET max_parallel_workers_per_gather" if value is None else f"SET max_parallel_workers_per_gather = {value}"
    )
    op.execute(f"DO $$ BEGIN EXECUTE format('ALTER DATABASE %I {assignment}', current_database()); END $$")


def upgrade() -> None:
    _set("0")


def downgrade() -> None:
    _set(None)
