"""Requests refused before anything was submitted, counted by reason
(``portal_refusals``), by the hub and the admin service alike: the
``portal_refused_requests_total`` series (issue 28).

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "portal_refusals",
        sa.Column("reason", sa.String(32), primary_key=True),
        sa.Column("count", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade():
    op.drop_table("portal_refusals")
