"""The site's choices a notebook job ran with (issue 38): its partition, GPU
model, account, QOS, reservation and node feature ("" for Slurm's default
and for the jobs submitted before), and the cores and memory of a job
without GPUs (0: a GPU's slice).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

NAMES = ("partition", "gpu_type", "account", "qos", "reservation", "feature")
NUMBERS = ("cores", "mem_gb")


def upgrade():
    with op.batch_alter_table("portal_notebook_jobs") as batch:
        for name in NAMES:
            batch.add_column(sa.Column(name, sa.String(64), nullable=False, server_default=""))
        for name in NUMBERS:
            batch.add_column(sa.Column(name, sa.Integer, nullable=False, server_default="0"))


def downgrade():
    with op.batch_alter_table("portal_notebook_jobs") as batch:
        for name in (*NUMBERS, *NAMES):
            batch.drop_column(name)
