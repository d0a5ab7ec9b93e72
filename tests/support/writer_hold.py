"""Make the arbiter's writer wait, so that what is asked meanwhile is written as one batch."""

from __future__ import annotations

import contextlib
import sqlite3
from typing import TYPE_CHECKING

import asyncpg

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("writer_waiting",)


@contextlib.asynccontextmanager
async def writer_waiting(database_url: str) -> AsyncIterator[None]:
    """Hold a lock every commit of the writer needs for the duration of the block, as a long transaction of another
    arbiter process would: what is asked meanwhile queues up, and is written as one batch when the block ends."""
    if database_url.startswith("sqlite"):
        conn = sqlite3.connect(database_url.removeprefix("sqlite:///"), timeout=5, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")  # the write lock: the writer's BEGIN IMMEDIATE waits for it
            yield
            conn.execute("COMMIT")
        finally:
            conn.close()
        return
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
    try:
        async with conn.transaction():
            # Both ways of committing wait for it: the row locks (SELECT ... FOR UPDATE) and the one-statement commit.
            await conn.execute("LOCK TABLE channels IN EXCLUSIVE MODE")
            yield
    finally:
        await conn.close()
