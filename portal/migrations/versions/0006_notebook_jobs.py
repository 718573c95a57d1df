"""Notebooks run as Slurm jobs (issue 27): a profile's ``max_array`` (16 for
the profiles stored before), and ``portal_notebook_jobs``, one row per
submission (a sweep's array is one row).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        batch.add_column(sa.Column("max_array", sa.Integer, nullable=False, server_default="16"))
    op.create_table(
        "portal_notebook_jobs",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("notebook", sa.String(1024), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("hours", sa.Integer, nullable=False),
        sa.Column("parameters", sa.JSON, nullable=False),
        sa.Column("sweep", sa.JSON, nullable=False),
        sa.Column("tasks", sa.JSON, nullable=False),
        sa.Column("kernel", sa.String(255), nullable=False),
        sa.Column("submitted_at", sa.DateTime, nullable=False),
        sa.Column("submitted_by", sa.String(255), nullable=False),
        sa.Column("rerun_of", sa.String(32), nullable=True),
    )
    op.create_index("ix_portal_notebook_jobs_user", "portal_notebook_jobs", ["user"])


def downgrade():
    op.drop_index("ix_portal_notebook_jobs_user", "portal_notebook_jobs")
    op.drop_table("portal_notebook_jobs")
    with op.batch_alter_table("portal_profiles") as batch:
        batch.drop_column("max_array")
