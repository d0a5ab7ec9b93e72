"""personas: cannot_speak (why a persona said it cannot speak anywhere: its model refused its key)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26 20:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op


revision: str = '0010'
down_revision: str | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('personas') as batch_op:
        batch_op.add_column(sa.Column('cannot_speak', sa.String(length=300), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('personas') as batch_op:
        batch_op.drop_column('cannot_speak')
