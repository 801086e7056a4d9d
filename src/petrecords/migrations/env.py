"""Alembic environment: the caller hands over the connection (see petrecords.db.migrate)."""

from alembic import context

from petrecords.tables import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
