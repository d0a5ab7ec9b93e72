"""PostgreSQL: aizuchi_changed_elsewhere(), the error a batch's one-statement commit raises when another process
changed one of its channels since the batch read it (see arbiter/storage/pg_commit.py)

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 21:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


revision: str = '0007'
down_revision: str | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name != 'postgresql':
        return  # one process owns a SQLite file: nothing changes its channels behind its back
    # serialization_failure: the statement is rolled back whole, and may be run again.
    op.execute(
        """
        CREATE OR REPLACE FUNCTION aizuchi_changed_elsewhere() RETURNS bigint LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'write this batch under the row locks: a channel changed in another process since it was read, or notes newer than its own are stored'
                USING ERRCODE = 'serialization_failure';
        END
        $$
        """
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('DROP FUNCTION IF EXISTS aizuchi_changed_elsewhere()')
