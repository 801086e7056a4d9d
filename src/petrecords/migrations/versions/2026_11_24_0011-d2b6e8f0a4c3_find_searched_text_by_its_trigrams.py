"""Find the records whose searchable text holds a substring by its trigrams, on both databases.

PostgreSQL: the pg_trgm extension and a GIN index of each searchable column, updated by each write rather
than through a pending list that every search would read until a vacuum merged it. The extension is made
here when it is missing; a server without it (no contrib package), or a role that may not make it, stops the
migration with a message that says what to do, and nothing of this revision is applied.

SQLite: an FTS5 table per resource with the trigram tokenizer (case-sensitive: the columns hold match keys,
already folded), over the table's own rows by their rowid (external content: no copy of the text; no column
sizes, which only ranking reads), kept in step by triggers in the writing statement's own transaction. A later
migration that rebuilds one of these tables (a batch ALTER copies the rows under new rowids and drops the
triggers) must rebuild its index too.

Revision ID: d2b6e8f0a4c3
Revises: c8f4a2d6e0b7
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from petrecords.config import ConfigurationError

revision: str = "d2b6e8f0a4c3"
down_revision: str | None = "c8f4a2d6e0b7"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SEARCHABLE = {"pets": ("name_key",), "vaccines": ("name_key", "description_key")}

_PG_TRGM = sa.text(
    "SELECT (SELECT installed_version IS NOT NULL FROM pg_available_extensions WHERE name = 'pg_trgm'), "
    "has_database_privilege(current_database(), 'CREATE')"
)


def _require_pg_trgm() -> None:
    installed, may_create = op.get_bind().execute(_PG_TRGM).one()
    if installed is None:
        raise ConfigurationError(
            "PostgreSQL has no pg_trgm extension, which `search` needs: install the server's contrib package "
            "(Debian and Ubuntu: postgresql-contrib), then migrate again"
        )
    if not installed and not may_create:
        raise ConfigurationError(
            "the pg_trgm extension, which `search` needs, is not in this database and this role may not create "
            "it: have the database's owner run CREATE EXTENSION pg_trgm in it, then migrate again"
        )
    op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")


def _sqlite_search_table(table: str, columns: tuple[str, ...]) -> None:
    search, listed = f"{table}_search", ", ".join(columns)
    new, old = (", ".join(f"{row}.{column}" for column in columns) for row in ("new", "old"))
    changed = " OR ".join(f"old.{column} IS NOT new.{column}" for column in columns)
    op.execute(
        f"CREATE VIRTUAL TABLE {search} USING fts5({listed}, content='{table}', content_rowid='rowid', "
        "tokenize='trigram case_sensitive 1', columnsize=0)"
    )
    # The names are this revision's own constants.
    op.execute(f"INSERT INTO {search}({search}) VALUES ('rebuild')")  # noqa: S608
    insert = f"INSERT INTO {search}(rowid, {listed}) VALUES (new.rowid, {new});"  # noqa: S608
    delete = f"INSERT INTO {search}({search}, rowid, {listed}) VALUES ('delete', old.rowid, {old});"  # noqa: S608
    op.execute(f"CREATE TRIGGER {search}_insert AFTER INSERT ON {table} BEGIN {insert} END")
    op.execute(f"CREATE TRIGGER {search}_delete AFTER DELETE ON {table} BEGIN {delete} END")
    op.execute(
        f"CREATE TRIGGER {search}_update AFTER UPDATE OF {listed} ON {table} WHEN {changed} BEGIN {delete} {insert} END"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _require_pg_trgm()
        for table, columns in SEARCHABLE.items():
            for column in columns:
                op.create_index(
                    f"ix_{table}_{column}_trigrams",
                    table,
                    [column],
                    postgresql_using="gin",
                    postgresql_ops={column: "gin_trgm_ops"},
                    postgresql_with={"fastupdate": "off"},
                )
        return
    for table, columns in SEARCHABLE.items():
        _sqlite_search_table(table, columns)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # The extension stays: other schemas of the database may use it, and it holds no data of ours.
        for table, columns in SEARCHABLE.items():
            for column in columns:
                op.drop_index(f"ix_{table}_{column}_trigrams", table_name=table)
        return
    for table in SEARCHABLE:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER {table}_search_{trigger}")
        op.execute(f"DROP TABLE {table}_search")
