"""Where a benchmark may run: the ports and the database it was given (``--port``, ``--database-url``), for a
machine where it must not pick its own (other services, other benchmarks, a sandbox that allows only some).

A given database is used for every run, one after another, each starting on it empty: the arbiter's tables are
dropped before a run (and left after the last one, to be looked at). So that a mistyped URL cannot wipe a real
deployment's data, a database holding any channel that is not a benchmark's (see ``BENCH_CHANNELS``) is refused.
"""

from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

import asyncpg

from arbiter.storage.tables import Base

__all__ = ("BENCH_CHANNELS", "ConfineError", "database_name", "empty_database", "plain_postgres_url", "ports")

# How the channels the benchmarks make are named (``bench arbiter``: bench-..., ``bench conversation``: bench,
# ``bench fleet``: fleet-...), as LIKE patterns.
BENCH_CHANNELS = ("bench%", "fleet-%")
_FOREIGN = " AND ".join(f"id NOT LIKE '{p}'" for p in BENCH_CHANNELS)
_ALEMBIC = "alembic_version"


class ConfineError(Exception):
    """The benchmark cannot run where it was told to (the message says why)."""


def ports(first: int, count: int) -> list[int]:
    """The ports of ``count`` processes from ``first`` on (``first, first + 1, ...``); 0: each picks a free one."""
    if first == 0:
        return [0] * count
    if not 0 < first <= 65_536 - count:
        raise ConfineError(f"--port {first}: the ports {first}-{first + count - 1} are not all valid TCP ports")
    return [first + index for index in range(count)]


def plain_postgres_url(url: str) -> str:
    """The URL as asyncpg takes it (SQLAlchemy's ``+asyncpg`` driver suffix dropped)."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


def database_name(url: str) -> str:
    """The PostgreSQL database a URL names (its path)."""
    name = urllib.parse.unquote(urllib.parse.urlsplit(url).path.lstrip("/"))
    if not name:
        raise ConfineError("--database-url names no database (postgresql://user@host:port/<name>)")
    return name


def _tables() -> list[str]:
    # Children before parents, so each drop is allowed; Alembic's own table too, so the next run migrates afresh.
    return [table.name for table in reversed(Base.metadata.sorted_tables)] + [_ALEMBIC]


def _refuse_if_used(foreign: int, where: str) -> None:
    if foreign:
        raise ConfineError(
            f"{where} holds {foreign} channel(s) not made by a benchmark: give it an empty database of its own"
            " (each run empties it first)"
        )


async def empty_database(url: str) -> None:
    """Drop the arbiter's tables from the database at ``url`` (an SQLite file or PostgreSQL), after checking it holds
    nothing but what a benchmark made. Raises ConfineError when it holds anything else, or cannot be reached."""
    if url.startswith("sqlite"):
        _empty_sqlite(url)
        return
    where = f"the database {database_name(url)!r}"
    try:
        conn = await asyncpg.connect(plain_postgres_url(url))
    except (OSError, asyncpg.PostgresError) as error:
        raise ConfineError(f"cannot connect to {where}: {error}") from error
    try:
        if await conn.fetchval("SELECT to_regclass('channels')") is not None:
            foreign = await conn.fetchval(f"SELECT count(*) FROM channels WHERE {_FOREIGN}")
            _refuse_if_used(foreign, where)
        for table in _tables():
            await conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    finally:
        await conn.close()


def _empty_sqlite(url: str) -> None:
    path = Path(url.split(":///", 1)[1]) if ":///" in url else None
    if path is None or not str(path):
        raise ConfineError("--database-url: an SQLite URL names its file, sqlite:///path/to/file.db")
    if not path.exists():
        return
    where = f"the database {str(path)!r}"
    with sqlite3.connect(path) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'channels'").fetchone():
            (foreign,) = conn.execute(f"SELECT count(*) FROM channels WHERE {_FOREIGN}").fetchone()
            _refuse_if_used(foreign, where)
        for table in _tables():
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    conn.close()
