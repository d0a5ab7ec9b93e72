"""messages: an index by channel, author and seq (a persona's own last lines, with its first claim in a channel)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26 15:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = '0009'
down_revision: str | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('messages') as batch_op:
        batch_op.create_index('ix_messages_channel_id_author_id_seq', ['channel_id', 'author_id', 'seq'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('messages') as batch_op:
        batch_op.drop_index('ix_messages_channel_id_author_id_seq')
