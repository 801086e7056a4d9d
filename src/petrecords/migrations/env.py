"""Alembic environment: the caller hands over the connection (see petrecords.db.migrate).

The schema, every resource's declaration, is imported only when the database is to be compared with it (Alembic's
autogenerate: set the config's attribute `compare_with_schema`): an upgrade or a downgrade never reads it, and
importing it was a third of a `petrecords migrate` on a new database."""

from typing import Any

from alembic import context

connection = context.config.attributes["connection"]
comparison: dict[str, Any] = {}
if context.config.attributes.get("compare_with_schema"):
    from petrecords.registry import SCHEMA
    from petrecords.tables import comparison_options

    comparison = {"target_metadata": SCHEMA, "compare_type": True, **comparison_options(connection.dialect.name)}
context.configure(
    connection=connection,
    render_as_batch=connection.dialect.name == "sqlite",
    **comparison,
)
with context.begin_transaction():
    context.run_migrations()
