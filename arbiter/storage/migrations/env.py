"""Alembic environment. The arbiter runs migrations itself at start-up (arbiter.storage.migrate) on its own
connection; the alembic command line (``alembic revision --autogenerate``) connects with ARBITER_DATABASE_URL."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from alembic import context

from arbiter.storage.tables import Base

if TYPE_CHECKING:
    from sqlalchemy import Connection

target_metadata = Base.metadata


def _run(connection: Connection) -> None:
    # render_as_batch: SQLite cannot ALTER most things in place; batch mode rebuilds the table instead.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


async def _run_from_settings() -> None:
    from arbiter.settings import ArbiterSettings
    from arbiter.storage.database import Database

    database = Database.open(ArbiterSettings().database_url)
    try:
        await database.write(_run)
    finally:
        await database.dispose()


_shared = context.config.attributes.get("connection")
if _shared is not None:
    _run(_shared)
elif context.is_offline_mode():
    from arbiter.settings import ArbiterSettings
    from arbiter.storage.database import normalize_url

    context.configure(
        url=normalize_url(ArbiterSettings().database_url), target_metadata=target_metadata, literal_binds=True
    )
    with context.begin_transaction():
        context.run_migrations()
else:
    asyncio.run(_run_from_settings())
