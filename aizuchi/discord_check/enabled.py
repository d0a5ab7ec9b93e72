"""The channels the fleet is enabled in, read from the arbiter's database without changing it.

``aizuchi discord check`` may run while the fleet does, so it does not open the arbiter (that would migrate the
database and take the SQLite file's lock, which a running arbiter holds): it reads the one table, read-only. A
database that does not exist yet, or has no tables yet, has no channel enabled.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from arbiter.storage import repository as repo
from arbiter.storage.database import Database, normalize_url
from arbiter.storage.errors import StorageError
from arbiter.storage.lock import sqlite_path

if TYPE_CHECKING:
    from pathlib import Path

    from arbiter.storage.repository import ChannelSummary

__all__ = ("Enabled", "enabled_channels")


@dataclass(frozen=True)
class Enabled:
    """The enabled channels' ids (None: the database could not be read), and why there are none, if there are none
    (a clause: "no channel is enabled yet (...)")."""

    ids: list[str] | None
    why_none: str | None = None


async def enabled_channels(database_url: str) -> Enabled:
    """The channels the fleet is enabled in, as the arbiter's database (``ARBITER_DATABASE_URL``) lists them."""
    try:
        url = normalize_url(database_url)
        if url.get_backend_name() == "sqlite":
            return await asyncio.to_thread(_from_sqlite, sqlite_path(url))
    except StorageError as error:
        return Enabled(None, f"cannot read the enabled channels: {error.message} (ARBITER_DATABASE_URL)")
    database = Database.open(database_url)
    try:
        rows = await database.read(repo.channel_ids)
    except (StorageError, SQLAlchemyError, OSError) as error:
        return Enabled(None, f"cannot read the enabled channels from the database ({_reason(error)})")
    finally:
        await database.dispose()
    return _enabled(rows)


def _from_sqlite(path: Path) -> Enabled:
    if not path.exists():
        return Enabled([], f"no channel is enabled yet (no database at {path} yet)")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    engine = create_engine("sqlite+pysqlite://", creator=lambda: sqlite3.connect(uri, uri=True, timeout=5))
    try:
        with engine.connect() as conn:
            rows = repo.channel_ids(conn)
    except SQLAlchemyError as error:
        if "no such table" in str(error):
            return Enabled([], f"no channel is enabled yet (the database at {path} is new)")
        return Enabled(None, f"cannot read the enabled channels from {path} ({_reason(error)})")
    finally:
        with contextlib.suppress(SQLAlchemyError):
            engine.dispose()
    return _enabled(rows)


def _enabled(rows: list[ChannelSummary]) -> Enabled:
    ids = [channel_id for channel_id, enabled, _ in rows if enabled]
    return Enabled(ids, None if ids else "no channel is enabled yet (a moderator runs /aizuchi enable in one)")


def _reason(error: Exception) -> str:
    original = getattr(error, "orig", None)  # SQLAlchemy's wrapper: the driver's own message is enough
    return str(original or getattr(error, "message", None) or error).splitlines()[0]
