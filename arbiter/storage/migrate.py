"""Bring the schema up to date with Alembic at start-up."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, inspect, text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from arbiter.storage.database import PostgresDatabase
from arbiter.storage.errors import StorageError

if TYPE_CHECKING:
    from alembic.config import Config

    from arbiter.storage.database import Database

__all__ = ("alembic_config", "known_head", "migrate")

MIGRATIONS = Path(__file__).with_name("migrations")
# Several arbiter processes may start at once on one PostgreSQL database: only one migrates at a time.
_ADVISORY_LOCK = 0x61697A75
# A migration file's ``revision: str = '0013'`` and ``down_revision: str | None = '0012'`` lines.
_REVISION_LINE = re.compile(r"^(revision|down_revision)\b[^=\n]*=(.*)$", re.MULTILINE)


def alembic_config() -> Config:
    from alembic.config import Config  # noqa: PLC0415 - see _upgrade

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    return config


@functools.cache
def known_head() -> str | None:
    """The head revision, read from the migration files' own lines without Alembic; None when they are not one
    plain chain (a merge, a line this does not read), and Alembic is to find it."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS / "versions").glob("*.py"):
        lines = {match[1]: match[2] for match in _REVISION_LINE.finditer(path.read_text(encoding="utf-8"))}
        try:
            revision, parent = (
                ast.literal_eval(lines["revision"].strip()),
                ast.literal_eval(lines["down_revision"].strip()),
            )
        except (KeyError, ValueError, SyntaxError):
            return None
        if not isinstance(revision, str) or not (parent is None or isinstance(parent, str)):
            return None
        revisions.add(revision)
        if parent is not None:
            parents.add(parent)
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _at_head(connection: Connection) -> bool:
    head = known_head()
    if head is None or not inspect(connection).has_table("alembic_version"):
        return False
    return list(connection.execute(text("SELECT version_num FROM alembic_version")).scalars()) == [head]


def _upgrade(connection: Connection, postgres: bool) -> None:
    if postgres:
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
    # At every start but the first the schema is already at head: Alembic's runtime (it pulls in Mako and
    # Pygments: some 0.2 s of CPU, an eighth of what ``aizuchi run`` imports) is imported only when there is
    # something to migrate.
    if _at_head(connection):
        return
    from alembic import command  # noqa: PLC0415

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
