"""Alembic environment: the caller hands over the connection (see petrecords.db.migrate)."""

from alembic import context

from petrecords.registry import SCHEMA
from petrecords.tables import comparison_options

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=SCHEMA,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
    **comparison_options(connection.dialect.name),
)
with context.begin_transaction():
    context.run_migrations()
