"""Alembic environment of the profile store (run by ``ProfileStore.upgrade``)."""

from alembic import context

from portal.store import VERSION_TABLE, Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    # SQLite alters tables by copying them; PostgreSQL with ALTER TABLE itself
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
