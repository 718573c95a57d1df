"""The profile store: profiles, their changes, and a key-value table.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "portal_profiles",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("display_name", sa.String(80), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("environment", sa.String(64), nullable=False),
        sa.Column("partition", sa.String(64), nullable=False),
        sa.Column("max_gpus", sa.Integer, nullable=False),
        sa.Column("cores_per_gpu", sa.Integer, nullable=False),
        sa.Column("mem_per_gpu_gb", sa.Integer, nullable=False),
        sa.Column("default_hours", sa.Integer, nullable=False),
        sa.Column("max_hours", sa.Integer, nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
    )
    op.create_table(
        "portal_profile_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("profile", sa.String(32), nullable=False, index=True),
        sa.Column("revision", sa.Integer, nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("author", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("before", sa.JSON, nullable=True),
        sa.Column("after", sa.JSON, nullable=True),
    )
    op.create_table(
        "portal_meta",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
    )


def downgrade():
    op.drop_table("portal_meta")
    op.drop_table("portal_profile_changes")
    op.drop_table("portal_profiles")
