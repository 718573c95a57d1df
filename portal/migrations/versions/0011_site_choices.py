"""The site's Slurm on the spawn page (issue 38): a profile's more
partitions, GPU models, choices (account, QOS, reservation, node feature),
node features and the cores and memory of a session without GPUs (none and
0 for the profiles stored before).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

LISTS = ("partitions", "gpu_types", "choose", "features")
NUMBERS = ("max_cores", "max_mem_gb")


def upgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        for name in LISTS:
            batch.add_column(sa.Column(name, sa.JSON, nullable=False, server_default="[]"))
        for name in NUMBERS:
            batch.add_column(sa.Column(name, sa.Integer, nullable=False, server_default="0"))


def downgrade():
    with op.batch_alter_table("portal_profiles") as batch:
        for name in (*NUMBERS, *LISTS):
            batch.drop_column(name)
