"""Scratch PostgreSQL databases on the local server (127.0.0.1:5432, trust auth).

Without a reachable server the tests that need one skip with the reason, unless AIZUCHI_REQUIRE_SERVICES=1
(set by CI), which turns the skip into a failure.
"""

from __future__ import annotations

import os
import uuid

import asyncpg
import pytest

SERVER = os.environ.get("AIZUCHI_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def _unavailable(reason: str) -> None:
    if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
        pytest.fail(f"PostgreSQL is required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"PostgreSQL not available: {reason}")


async def create_database() -> str:
    """Create an empty database and return its SQLAlchemy URL."""
    name = f"aizuchi_test_{uuid.uuid4().hex[:12]}"
    try:
        conn = await asyncpg.connect(SERVER, timeout=5)
    except (OSError, asyncpg.PostgresError, TimeoutError) as error:
        _unavailable(f"cannot connect to {SERVER}: {error}")
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return SERVER.replace("postgresql://", "postgresql+asyncpg://").rsplit("/", 1)[0] + f"/{name}"


async def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    conn = await asyncpg.connect(SERVER, timeout=5)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()
