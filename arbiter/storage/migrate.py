"""Bring the schema up to date with Alembic at start-up."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from arbiter.storage.database import PostgresDatabase
from arbiter.storage.errors import StorageError

if TYPE_CHECKING:
    from arbiter.storage.database import Database

__all__ = ("alembic_config", "migrate")

MIGRATIONS = Path(__file__).with_name("migrations")
# Several arbiter processes may start at once on one PostgreSQL database: only one migrates at a time.
_ADVISORY_LOCK = 0x61697A75


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


def _upgrade(connection: Connection, postgres: bool) -> None:
    if postgres:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
    config = alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


async def migrate(database: Database) -> None:
    """Also the arbiter's first contact with the database: a URL that leads nowhere fails here, clearly."""
    migrating = database.unbounded() if isinstance(database, PostgresDatabase) else database
    try:
        await migrating.write(_upgrade, not database.is_sqlite)
    except (SQLAlchemyError, OSError) as error:
        reason = error.orig if isinstance(error, DBAPIError) else error
        where = database.url.render_as_string(hide_password=True)
        raise StorageError(
            f"cannot open the database {where}: {reason or type(reason).__name__}", code="database_unavailable"
        ) from error
    finally:
        if migrating is not database:
            await migrating.dispose()
