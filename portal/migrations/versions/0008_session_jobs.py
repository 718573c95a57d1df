"""The sessions' Slurm jobs, for the usage report (issue 28): whose, which
profile and slice, and how long a session idled before the culler stopped
it (``portal_session_jobs``).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "portal_session_jobs",
        sa.Column("job_id", sa.String(32), primary_key=True),
        sa.Column("user", sa.String(255), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("nodes", sa.Integer, nullable=False),
        sa.Column("submitted_at", sa.DateTime, nullable=False),
        sa.Column("idle_seconds", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("ix_portal_session_jobs_user", "portal_session_jobs", ["user"])


def downgrade():
    op.drop_index("ix_portal_session_jobs_user", "portal_session_jobs")
    op.drop_table("portal_session_jobs")
