"""Notices of notebook jobs by mail: ``portal_notebook_jobs.notify`` (false
for the jobs submitted before).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_notebook_jobs") as batch:
        batch.add_column(sa.Column("notify", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade():
    with op.batch_alter_table("portal_notebook_jobs") as batch:
        batch.drop_column("notify")
