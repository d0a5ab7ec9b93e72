"""mcp_subscriptions: MCP sessions' subscriptions, so that any process serves them and a restart keeps them

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-26 17:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0011'
down_revision: str | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        'mcp_subscriptions',
        sa.Column('session_id', sa.String(length=80), nullable=False),
        sa.Column('channel_id', sa.String(length=64), nullable=False),
        sa.Column('member', sa.String(length=64), nullable=False),
        sa.Column('touched_at', sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint('session_id', 'channel_id', name=op.f('pk_mcp_subscriptions')),
    )
    with op.batch_alter_table('mcp_subscriptions') as batch_op:
        batch_op.create_index(batch_op.f('ix_mcp_subscriptions_member'), ['member'], unique=False)
        batch_op.create_index(batch_op.f('ix_mcp_subscriptions_touched_at'), ['touched_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('mcp_subscriptions') as batch_op:
        batch_op.drop_index(batch_op.f('ix_mcp_subscriptions_touched_at'))
        batch_op.drop_index(batch_op.f('ix_mcp_subscriptions_member'))
    op.drop_table('mcp_subscriptions')
