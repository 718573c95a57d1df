"""Container images (issue 25): a profile's ``image`` and ``user_images``
("" and false for the profiles stored before), and the audit of the images'
checks, ``portal_image_checks``.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.add_column(sa.Column("image", sa.String(64), nullable=False, server_default=""))
        batch.add_column(
            sa.Column("user_images", sa.Boolean, nullable=False, server_default=sa.false())
        )
    op.create_table(
        "portal_image_checks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("image", sa.String(64), nullable=False),
        sa.Column("framework", sa.String(64), nullable=False),
        sa.Column("stamp", sa.String(128), nullable=False),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("lines", sa.JSON, nullable=False),
        sa.Column("checked_at", sa.DateTime, nullable=False),
        sa.Column("checked_by", sa.String(255), nullable=False),
    )
    op.create_index("ix_portal_image_checks_image", "portal_image_checks", ["image", "framework"])


def downgrade():
    op.drop_index("ix_portal_image_checks_image", "portal_image_checks")
    op.drop_table("portal_image_checks")
    with op.batch_alter_table("portal_profiles") as batch:
        batch.drop_column("user_images")
        batch.drop_column("image")
