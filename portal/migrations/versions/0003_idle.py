"""Profiles may set their own idle timeout: ``idle_minutes``, 0 (the site's
``[culling] idle_minutes``) for the profiles stored before.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.add_column(sa.Column("idle_minutes", sa.Integer, nullable=False, server_default="0"))


def downgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.drop_column("idle_minutes")
