"""The schema is managed by Alembic: upgrading an empty database to head works, is idempotent, gives exactly the
schema the SQLAlchemy models describe, and several arbiters migrating one PostgreSQL database at once agree."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import TYPE_CHECKING, Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from arbiter.storage.database import Database
from arbiter.storage.migrate import alembic_config, known_head, migrate
from arbiter.storage.tables import Base
from tests.support.arbiters import ROOT

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from sqlalchemy import Connection


def head() -> str:
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def versions(conn: Connection) -> list[str]:
    return list(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())


def tables(conn: Connection) -> set[str]:
    return set(inspect(conn).get_table_names())


def schema_diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True})
    diff: list[Any] = compare_metadata(context, Base.metadata)
    return diff


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    opened = Database.open(database_url)
    yield opened
    await opened.dispose()


async def test_upgrade_to_head_creates_the_schema(database: Database) -> None:
    assert await database.read(tables) == set()
    await migrate(database)
    assert await database.read(tables) == {*Base.metadata.tables, "alembic_version"}
    assert await database.read(versions) == [head()]


async def test_upgrade_is_idempotent(database: Database) -> None:
    await migrate(database)
    await migrate(database)
    assert await database.read(versions) == [head()]
    assert await database.read(tables) == {*Base.metadata.tables, "alembic_version"}


async def test_migrated_schema_matches_the_models(database: Database) -> None:
    await migrate(database)
    assert await database.read(schema_diff) == []


def test_the_head_read_from_the_migration_files_is_alembics() -> None:
    assert known_head() == head()


def _upgrade_to(conn: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, revision)


async def test_a_database_one_revision_behind_is_upgraded(database: Database) -> None:
    before = ScriptDirectory.from_config(alembic_config()).get_revision(head()).down_revision
    assert isinstance(before, str)
    await database.write(_upgrade_to, before)
    assert await database.read(versions) == [before]
    await migrate(database)
    assert await database.read(versions) == [head()]
    assert await database.read(schema_diff) == []


# Migrates the database it is given, then says whether that needed Alembic.
_MIGRATE_AND_SAY = """
import asyncio, sys
from arbiter.storage.database import Database
from arbiter.storage.migrate import migrate

async def main() -> None:
    database = Database.open(sys.argv[1])
    try:
        await migrate(database)
    finally:
        await database.dispose()
    print("alembic" in sys.modules)

asyncio.run(main())
"""


async def test_a_database_at_head_is_migrated_without_importing_alembic(database_url: str) -> None:
    async def migrate_in_a_process() -> str:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _MIGRATE_AND_SAY,
            database_url,
            env={**os.environ, "PYTHONPATH": ROOT},
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode == 0, stderr.decode()
        return stdout.decode().strip()

    database = Database.open(database_url)
    try:
        await migrate(database)
        assert await migrate_in_a_process() == "False"  # at head: nothing to do, and nothing imported to do it
        assert await database.read(versions) == [head()]
    finally:
        await database.dispose()


@pytest.mark.postgres
async def test_concurrent_migrations_on_one_postgres_database_all_succeed(postgres_url: str) -> None:
    # Each Database has its own connection pool, so these are separate PostgreSQL sessions racing exactly as
    # separate arbiter processes starting together would; in one process they start at the same instant.
    databases = [Database.open(postgres_url) for _ in range(4)]
    try:
        await asyncio.wait_for(asyncio.gather(*(migrate(database) for database in databases)), timeout=10)
        assert await databases[0].read(versions) == [head()]
        assert await databases[0].read(schema_diff) == []
    finally:
        for database in databases:
            await database.dispose()


# A process that opens the database, says it is ready, and migrates when told to: two of them, started by one
# word on their stdin, race on the migration itself rather than on how fast Python starts.
_MIGRATOR = """
import asyncio, sys
from arbiter.storage.database import Database
from arbiter.storage.migrate import migrate

async def main() -> None:
    database = Database.open(sys.argv[1])
    try:
        await database.read(lambda conn: None)
        print("ready", flush=True)
        sys.stdin.readline()
        await migrate(database)
    finally:
        await database.dispose()
    print("migrated", flush=True)

asyncio.run(main())
"""


@pytest.mark.postgres
async def test_two_processes_migrating_one_postgres_database_both_succeed(postgres_url: str) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT}
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _MIGRATOR,
            postgres_url,
            env=env,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert await asyncio.wait_for(process.stdout.readline(), timeout=30) == b"ready\n"
        outputs = await asyncio.wait_for(
            asyncio.gather(*(process.communicate(b"go\n") for process in processes)), timeout=30
        )
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    for process, (stdout, stderr) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, stderr.decode()
        assert stdout == b"migrated\n"
    database = Database.open(postgres_url)
    try:
        assert await database.read(versions) == [head()]
        assert await database.read(schema_diff) == []
    finally:
        await database.dispose()
