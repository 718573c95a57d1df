"""The audit of session time extensions: ``portal_time_extensions``.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "portal_time_extensions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("from_limit", sa.Integer, nullable=False),
        sa.Column("to_limit", sa.Integer, nullable=False),
    )
    op.create_index("ix_portal_time_extensions_user", "portal_time_extensions", ["user"])


def downgrade():
    op.drop_index("ix_portal_time_extensions_user", "portal_time_extensions")
    op.drop_table("portal_time_extensions")
