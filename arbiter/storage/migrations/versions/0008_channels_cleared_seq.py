"""channels: cleared_seq (the last seq of the history cleared last: nothing may be based on it any more)

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0008'
down_revision: str | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('channels') as batch_op:
        batch_op.add_column(sa.Column('cleared_seq', sa.BigInteger(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('channels') as batch_op:
        batch_op.drop_column('cleared_seq')
