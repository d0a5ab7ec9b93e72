"""channels and spends: a version, one more with every write of the channel

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27 23:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0006'
down_revision: str | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('channels') as batch_op:
        batch_op.add_column(sa.Column('version', sa.BigInteger(), server_default='0', nullable=False))
    with op.batch_alter_table('spends') as batch_op:
        batch_op.add_column(sa.Column('version', sa.BigInteger(), server_default='0', nullable=False))
        batch_op.create_index('ix_spends_channel_id_version', ['channel_id', 'version'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('spends') as batch_op:
        batch_op.drop_index('ix_spends_channel_id_version')
        batch_op.drop_column('version')
    with op.batch_alter_table('channels') as batch_op:
        batch_op.drop_column('version')
