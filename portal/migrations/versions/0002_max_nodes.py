"""Profiles may span nodes: ``max_nodes``, 1 for the profiles stored before.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.add_column(sa.Column("max_nodes", sa.Integer, nullable=False, server_default="1"))


def downgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.drop_column("max_nodes")
