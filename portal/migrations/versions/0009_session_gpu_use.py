"""The sessions' GPU use as the hub sampled it (issue 28): how many samples,
their mean utilisation, and the most GPUs busy at once
(``portal_session_jobs``; ``spawners.gpu_use``).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("portal_session_jobs") as batch:
        batch.add_column(sa.Column("gpu_samples", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("gpu_busy", sa.Float, nullable=True))
        batch.add_column(sa.Column("gpus_used", sa.Integer, nullable=True))


def downgrade():
    with op.batch_alter_table("portal_session_jobs") as batch:
        batch.drop_column("gpus_used")
        batch.drop_column("gpu_busy")
        batch.drop_column("gpu_samples")
