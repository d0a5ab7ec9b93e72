"""Database: SQLAlchemy engines behind two async calls, ``read(fn)`` and ``write(fn)``.

``fn`` is plain SQLAlchemy Core code over a ``Connection``, written once for both databases:

- PostgreSQL: an ``AsyncEngine`` on asyncpg; ``fn`` runs through ``AsyncConnection.run_sync``, each
  statement a real async round trip.
- SQLite: one write connection, used under a lock (the batch writer drives it from a thread of its own),
  and a few reader threads. A whole transaction is one hop to a thread. (Measured on this project's
  writer: aiosqlite, which hops to its thread for every cursor call, costs about 1,300 us of CPU per
  batch; one hop per batch costs under 300 us.)

Time spent waiting for the database never blocks the event loop either way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import sqlite3
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from arbiter.storage.errors import StorageError
from arbiter.storage.lock import sqlite_path

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("Database", "HeldConnection", "PostgresDatabase", "SqliteDatabase", "normalize_url")

_log = logging.getLogger(__name__)

T = TypeVar("T")


def normalize_url(url: str) -> URL:
    """Accept the URLs people write (sqlite:///x.db, postgresql://...) and pick the drivers we ship."""
    try:
        parsed = make_url(url)
    except Exception as error:
        raise StorageError(f"cannot read the database URL: {error}", code="bad_database_url") from None
    backend = parsed.get_backend_name()
    if backend == "postgres":  # the form many hosting providers hand out
        backend = "postgresql"
    if backend == "sqlite":
        return parsed.set(drivername="sqlite+pysqlite")
    if backend == "postgresql":
        return parsed.set(drivername="postgresql+asyncpg")
    raise StorageError(
        f"unsupported database {backend!r}: use sqlite:///path.db or postgresql://user@host/db",
        code="bad_database_url",
    )


def _check_folder(path: Path) -> None:
    """Refuse a database file whose folder is missing, rather than make the folder: ``sqlite:///tmp/x.db`` is the
    relative path ``tmp/x.db`` (an absolute one takes four slashes), and creating ``./tmp/`` for it would hide the
    mistake. The database file itself is created on first use, in a folder that exists."""
    folder = path.parent
    if folder.is_dir():
        return
    blocking = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise StorageError(
            f"cannot open the database {path}: {blocking} is a file, not a directory", code="database_unavailable"
        )
    absolute = Path("/", path)
    meant = (
        f", or write sqlite:///{absolute} for {absolute}" if not path.is_absolute() and absolute.parent.is_dir() else ""
    )
    raise StorageError(
        f"cannot open the database {path}: the folder {folder} does not exist: create it{meant}",
        code="database_unavailable",
    )


class Database:
    """Use :meth:`open`; close with :meth:`dispose`."""

    def __init__(self, url: URL) -> None:
        self.url = url

    @property
    def dialect(self) -> str:
        return self.url.get_backend_name()

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @staticmethod
    def open(url: str, *, pool_size: int = 8) -> Database:
        parsed = normalize_url(url)
        if parsed.get_backend_name() == "sqlite":
            # Refuses an in-memory database clearly, before the pool options would fail on it.
            _check_folder(sqlite_path(parsed))
            return SqliteDatabase(parsed)
        return PostgresDatabase(parsed, pool_size=pool_size)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        raise NotImplementedError

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(connection, *args)`` in a transaction that commits when it returns."""
        raise NotImplementedError

    async def dispose(self) -> None:
        raise NotImplementedError


class PostgresDatabase(Database):
    def __init__(self, url: URL, *, pool_size: int) -> None:
        super().__init__(url)
        # No pool_pre_ping: on asyncpg it costs three round trips (BEGIN, a ping, ROLLBACK) at every checkout, more
        # than many of the writer's transactions. A connection the server closed (a restart, a terminated backend)
        # is closed on our side as soon as the event loop reads its end, and is replaced at checkout instead.
        self.engine: AsyncEngine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size)
        # Reads run in autocommit: no BEGIN and ROLLBACK around them, two round trips fewer; each statement sees
        # what was committed when it began, as in a READ COMMITTED transaction. Their connections are made so
        # (setting it at each checkout, and back at each return, cost a read a third more of the arbiter's CPU).
        self.reader: AsyncEngine = create_async_engine(
            url, pool_size=pool_size, max_overflow=pool_size, isolation_level="AUTOCOMMIT"
        )
        for engine in (self.engine, self.reader):
            event.listen(engine.sync_engine, "checkout", _replace_closed)

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.reader.connect() as conn:
            return await conn.run_sync(fn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        async with self.engine.begin() as conn:
            return await conn.run_sync(fn, *args)

    def held(self) -> HeldConnection:
        """A connection in autocommit for one user that runs one thing at a time (the batch writer)."""
        return HeldConnection(self.reader)

    async def dispose(self) -> None:
        await self.engine.dispose()
        await self.reader.dispose()


class HeldConnection:
    """One connection in autocommit, kept for a single user between uses (no pool checkout each time), with its
    driver at hand for the hottest statements: through SQLAlchemy a statement costs about twice the CPU the driver
    does. The driver's errors come out as SQLAlchemy's, as the rest of the storage layer's do; a connection that
    fails is let go, and the next use opens another."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._conn: AsyncConnection | None = None
        self._driver: asyncpg.Connection | None = None

    async def _open(self) -> tuple[AsyncConnection, asyncpg.Connection]:
        if self._conn is None or self._driver is None or self._driver.is_closed():
            await self.close()
            conn = await self._engine.connect()
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            # Its statements are run again and again with new values: planned once, not at each run (PostgreSQL
            # plans a prepared statement anew for its first runs, and keeps doing so when that looks cheaper; for the
            # batch writer's commit it was a fifth more of the server's CPU).
            await driver.execute("SET plan_cache_mode = force_generic_plan")
            # That one plan is made at the first run, often on near-empty tables, where scanning a table whole
            # (and hashing it) looks cheapest; it then stays as the history grows: every commit scanned every
            # spend and message (measured: most of the server's CPU per commit after a few thousand messages, and
            # growing). The writer's statements touch a few rows by key, so they are made to use the keys.
            await driver.execute("SET enable_seqscan = off; SET enable_hashjoin = off; SET enable_mergejoin = off")
            self._conn, self._driver = conn, driver
        return self._conn, self._driver

    async def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        conn, _ = await self._open()
        try:
            return await conn.run_sync(fn, *args)
        except DBAPIError as error:
            if error.connection_invalidated:
                await self.close()
            raise

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        """Rows of ``sql`` (numbered parameters, ``$1``), run on the driver."""
        _, driver = await self._open()
        try:
            return list(await driver.fetch(sql, *args))
        except asyncpg.PostgresError as error:
            raise DBAPIError.instance(sql, args, error, asyncpg.PostgresError) from error
        except (asyncpg.InterfaceError, OSError) as error:
            await self.close()
            raise DBAPIError.instance(sql, args, error, asyncpg.InterfaceError, connection_invalidated=True) from error

    async def close(self) -> None:
        conn, self._conn, self._driver = self._conn, None, None
        if conn is not None:
            with contextlib.suppress(Exception):  # it may be the one that failed
                await conn.close()


def _replace_closed(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    driver = record.driver_connection
    if driver is not None and driver.is_closed():
        # The pool's documented signal: discard this connection and check out (or open) another.
        raise DisconnectionError("the server closed this connection")


class SqliteDatabase(Database):
    def __init__(self, url: URL, *, readers: int = 2) -> None:
        super().__init__(url)
        self.engine: Engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, pool_size=readers + 1, max_overflow=0
        )
        event.listen(self.engine, "connect", _on_connect)
        event.listen(self.engine, "begin", _on_begin)
        self._readers = concurrent.futures.ThreadPoolExecutor(readers, thread_name_prefix="aizuchi-sqlite-reader")
        # SQLite has one writer at a time anyway: one connection, kept open, used under a lock.
        self._write_lock = threading.Lock()
        self._write_conn: Connection | None = None

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        def run() -> T:
            with self.engine.connect() as conn:
                result = fn(conn, *args)
                conn.rollback()
                return result

        return await asyncio.get_running_loop().run_in_executor(self._readers, run)

    def write_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """:meth:`write` for a thread of its own (the batch writer's); blocks until committed."""
        with self._write_lock:
            if self._write_conn is None:
                self._write_conn = self.engine.connect().execution_options(aizuchi_writer=True)
            with self._write_conn.begin():
                return fn(self._write_conn, *args)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._readers, self.write_blocking, fn, *args)

    async def dispose(self) -> None:
        def close_writer() -> None:
            with self._write_lock:
                if self._write_conn is not None:
                    self._write_conn.close()
                    self._write_conn = None

        await asyncio.get_running_loop().run_in_executor(self._readers, close_writer)
        self._readers.shutdown(wait=True)
        self.engine.dispose()


def _on_connect(dbapi_connection: Any, _record: Any) -> None:
    # Take transaction control from the driver so BEGIN is ours (the SQLAlchemy-documented recipe).
    dbapi_connection.isolation_level = None
    # WAL lets readers work while the writer commits; NORMAL syncs at checkpoints, which survives a crash
    # of the process (not of the machine) without an fsync per transaction.
    dbapi_connection.execute("PRAGMA journal_mode=WAL")
    dbapi_connection.execute("PRAGMA synchronous=NORMAL")
    dbapi_connection.execute("PRAGMA busy_timeout=30000")


def _on_begin(connection: Connection) -> None:
    # The writer takes the write lock before it reads, so no other writer can slip in between.
    writer = connection.get_execution_options().get("aizuchi_writer", False)
    sqlite_driver_execute(connection, "BEGIN IMMEDIATE" if writer else "BEGIN")


def sqlite_driver_execute(connection: Connection, sql: str, rows: list[tuple[Any, ...]] | None = None) -> None:
    """Run ``sql`` on the SQLite driver itself (``executemany`` with ``rows``), bypassing SQLAlchemy.

    For the writer's hottest statements only: at thousands a second, SQLAlchemy's per-execute work (cache
    lookup, bind processing, result setup) costs more than SQLite's own, on the thread the event loop shares
    the GIL with. The driver's errors are translated to SQLAlchemy's, so callers see one family."""
    driver = _driver(connection)
    try:
        if rows is None:
            driver.execute(sql)
        else:
            driver.executemany(sql, rows)
    except sqlite3.Error as error:
        raise DBAPIError.instance(sql, rows, error, sqlite3.Error) from error


def sqlite_driver_change(connection: Connection, sql: str, params: tuple[Any, ...]) -> int:
    """Run one statement on the SQLite driver itself and return how many rows it changed (see
    ``sqlite_driver_execute``)."""
    driver = _driver(connection)
    try:
        return driver.execute(sql, params).rowcount
    except sqlite3.Error as error:
        raise DBAPIError.instance(sql, params, error, sqlite3.Error) from error


def sqlite_driver_query(connection: Connection, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """Run a query on the SQLite driver itself and return its rows as tuples; for the hottest reads only (see
    ``sqlite_driver_execute``)."""
    driver = _driver(connection)
    try:
        return driver.execute(sql, params).fetchall()
    except sqlite3.Error as error:
        raise DBAPIError.instance(sql, params, error, sqlite3.Error) from error


def _driver(connection: Connection) -> sqlite3.Connection:
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    return driver
