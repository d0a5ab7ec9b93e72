"""The arbiter's composition root: create every resource at start-up, pass it in, close it at the end."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from arbiter.api.app import build_app, package_version
from arbiter.api.auth import TokenAuth
from arbiter.api.errors import unquoted_bad_requests
from arbiter.core.images import ImageBounds
from arbiter.events import EventHub
from arbiter.feed import catch_up
from arbiter.mcp.kept import KeptSessions, SessionLimits
from arbiter.mcp.route import McpEndpoint, add_mcp_routes
from arbiter.mcp.wake import WakeSockets, add_wake_routes
from arbiter.service import ArbiterService
from arbiter.storage.database import Database, PostgresDatabase, SqliteDatabase
from arbiter.storage.lock import SqliteFileLock, sqlite_path
from arbiter.storage.memory import MemoryStorage
from arbiter.storage.memory_sessions import MemorySessions
from arbiter.storage.migrate import migrate
from arbiter.storage.pubsub import PostgresRelay
from arbiter.storage.sql_port import DatabaseReads, DatabaseSessions
from arbiter.storage.writer import BatchWriter
from arbiter.ticker import RefundTicker

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from arbiter.settings import ArbiterSettings
    from arbiter.storage.port import SessionStore, StorageReads, StorageWriter

__all__ = ("Arbiter", "open_arbiter", "serve_app", "serving")

_log = logging.getLogger(__name__)


class IdFactory:
    """Claim ids: a random per-process prefix and a counter. Unique across processes and restarts without the
    cost of uuid4 (a system call) on every claim."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(6)
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):x}"


@dataclass(frozen=True, slots=True)
class Arbiter:
    settings: ArbiterSettings
    service: ArbiterService
    hub: EventHub
    app: web.Application


@contextlib.asynccontextmanager
async def open_arbiter(
    settings: ArbiterSettings,
    *,
    clock: Callable[[], float] = time.time,
    extra_personas: dict[str, str] | None = None,
    in_memory: bool = False,
) -> AsyncIterator[Arbiter]:
    """Open the database (migrating it), start the writer and, on PostgreSQL, the cross-process relay.

    ``extra_personas`` adds persona tokens beside the configured ones (the local room makes its own). ``in_memory``:
    no database at all, the storage's in-memory twin instead (``arbiter.storage.memory``; ``database_url`` is not
    read); nothing outlives the block.
    """
    tokens = {pid: token.get_secret_value() for pid, token in settings.persona_tokens.items()}
    tokens.update(extra_personas or {})
    agents = {aid: token.get_secret_value() for aid, token in settings.agent_tokens.items()}
    tokens.update(agents)
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    auth = TokenAuth(tokens, admin)
    async with contextlib.AsyncExitStack() as stack:
        hub = EventHub()
        if in_memory:
            storage = Storage.twin(clock, hub)
        else:
            storage = await Storage.database(settings.database_url, clock, hub, stack)
        stack.callback(hub.close_all)  # (after the database's: closed before it)
        await storage.writer.start()
        stack.push_async_callback(storage.writer.close)
        if storage.relay is not None:
            await storage.relay.start()
            stack.push_async_callback(storage.relay.close)
        service = ArbiterService(
            storage.reads,
            storage.writer,
            clock=clock,
            new_id=IdFactory(),
            personas=tokens,
            agents=agents,
            # Other processes on the database hear every event through the relay; alone, only what is watched.
            wants_events=None if storage.relay is not None else hub.watching,
            image_bounds=ImageBounds(settings.images_per_message, settings.image_max_bytes),
        )
        await service.load_personas()
        hub.add_listener(service.registry.on_event)
        if storage.relay is not None:
            storage.relay.heard_again = functools.partial(_heard_again, service, hub)
        ticker = RefundTicker(service, hub, clock)
        stack.callback(ticker.close)
        limits = SessionLimits(settings.mcp_sessions_per_token, settings.mcp_session_idle_s)
        kept = KeptSessions(storage.sessions, clock, limits)
        app = build_app(service, hub, auth)
        add_mcp_routes(app, McpEndpoint(service, hub, kept, package_version()))
        add_wake_routes(app, WakeSockets(service, hub, per_token=limits.per_token))
        yield Arbiter(settings, service, hub, app)


async def _heard_again(service: ArbiterService, hub: EventHub) -> None:
    """What another arbiter process committed while this one's relay did not listen, caught up on once it does: the
    personas it registered, and every stream's messages and levels."""
    await catch_up(service, hub)
    await service.load_personas()


@dataclass(frozen=True, slots=True)
class Storage:
    """The storage behind the port (``arbiter.storage.port``): the database's, or the in-memory twin."""

    writer: StorageWriter
    reads: StorageReads
    sessions: SessionStore
    relay: PostgresRelay | None = None

    @staticmethod
    def twin(clock: Callable[[], float], hub: EventHub) -> Storage:
        twin = MemoryStorage(clock, hub.publish)
        return Storage(twin, twin, MemorySessions())

    @staticmethod
    async def database(
        url: str, clock: Callable[[], float], hub: EventHub, stack: contextlib.AsyncExitStack
    ) -> Storage:
        """The database at ``url``, migrated; closed by ``stack``."""
        database = Database.open(url)
        if isinstance(database, SqliteDatabase):
            stack.enter_context(SqliteFileLock(sqlite_path(database.url)))
        stack.push_async_callback(database.dispose)
        await migrate(database)
        writer = BatchWriter(database, clock, hub.publish, owns_database=database.is_sqlite)
        relay = None
        if isinstance(database, PostgresDatabase):
            # Other processes hear this one's commits, and this one theirs (the channels they changed are forgotten).
            relay = PostgresRelay(
                database.engine, hub.publish, hub.watching, changed=writer.changed_elsewhere, hearing=writer.hearing
            )
            writer.notifier = relay.payloads
            writer.caught_up = relay.caught_up  # a status read sees every commit acknowledged before it
        return Storage(writer, DatabaseReads(database), DatabaseSessions(database), relay)


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str, port: int) -> AsyncIterator[str]:
    """Serve ``app`` for the duration of the block; yields the URL it listens on."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    assert runner.server is not None  # set up
    unquoted_bad_requests(runner.server)
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        await site.start()
        address = _address(runner, host)
        _log.info("arbiter API listening on %s", address)
        yield address
    finally:
        await runner.cleanup()


async def serve_app(app: web.Application, host: str, port: int, *, ready: Callable[[str], None] | None = None) -> None:
    """Serve until cancelled (Ctrl-C or SIGTERM), then shut down gracefully."""
    async with serving(app, host, port) as address:
        if ready is not None:
            ready(address)
        await asyncio.Event().wait()


def _address(runner: web.AppRunner, host: str) -> str:
    for address in runner.addresses:
        if isinstance(address, tuple):
            return f"http://{host}:{address[1]}"
    return f"http://{host}"
