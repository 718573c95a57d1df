"""Saved presets (issue 38): a user's named spawn choices, and those an
admin published for everyone (owner ""), in ``portal_presets``.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "portal_presets",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("name", sa.String(80), nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("server_name", sa.String(32), nullable=False, server_default=""),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("updated", sa.DateTime, nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.UniqueConstraint("owner", "name", name="uq_portal_presets_owner_name"),
    )
    op.create_index("ix_portal_presets_owner", "portal_presets", ["owner"])


def downgrade():
    op.drop_index("ix_portal_presets_owner", "portal_presets")
    op.drop_table("portal_presets")
