"""token_usage: cache_read_tokens, cache_write_tokens (of the prompt tokens, those the provider read from its prompt
cache and wrote to it)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27 07:50:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0013'
down_revision: str | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('token_usage') as batch_op:
        batch_op.add_column(sa.Column('cache_read_tokens', sa.BigInteger(), server_default='0', nullable=False))
        batch_op.add_column(sa.Column('cache_write_tokens', sa.BigInteger(), server_default='0', nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('token_usage') as batch_op:
        batch_op.drop_column('cache_write_tokens')
        batch_op.drop_column('cache_read_tokens')
