"""``/mcp`` on the arbiter's aiohttp app: who is calling, which channel, and which side answers (the 2025 protocol
here, ``arbiter.mcp.transport``; the 2026-07-28 protocol, by its ``MCP-Protocol-Version``, the MCP SDK).

The URLs (the channel is optional in each; without it, every tool takes a ``channel`` argument):

- ``/mcp`` and ``/channels/<channel>/mcp``: the token in the ``Authorization: Bearer <token>`` header;
- ``/key/<token>/mcp`` and ``/key/<token>/channels/<channel>/mcp``: the token in the path, for clients that can set
  nothing but a URL (the reference design's agents). Percent-encode a token that has characters other than
  letters, digits and ``-._~``. Every log shows such a path as ``/key/***/...``; the SDK never sees it.

Every form ends in ``/mcp``: some clients (the MCP Inspector's command line) send a URL that does not to
``<origin>/mcp`` instead, dropping the rest of its path.

The SDK is imported, and its session manager started, on the first request of the 2026-07-28 protocol
(``McpEndpoint``): an arbiter no such client reaches does not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import re
from typing import TYPE_CHECKING, Any

from aiohttp import web

from arbiter.api.auth import bearer_token
from arbiter.api.openapi import MCP_METHODS, MCP_PATHS
from arbiter.api.routes import AUTH, check_path
from arbiter.mcp.bridge import serve_asgi
from arbiter.mcp.kept import session_key
from arbiter.mcp.methods import HANDSHAKE_VERSIONS
from arbiter.mcp.tools import Caller
from arbiter.mcp.transport import HandshakeTransport, Visitor

if TYPE_CHECKING:
    from arbiter.events import EventHub
    from arbiter.mcp.kept import KeptSessions
    from arbiter.mcp.server import McpApp
    from arbiter.service import ArbiterService

__all__ = ("MCP", "McpEndpoint", "RedactUrlTokens", "add_mcp_routes", "redact")

_log = logging.getLogger(__name__)

# Up to where the path goes on: a token sent with an unencoded "/" must not leave its tail in a log either.
_IN_PATH = re.compile(r"/key/[^\s?#\"']*?(?=/channels/|/mcp(?:[/\s?#\"']|$)|[\s?#\"']|$)")


def redact(text: str) -> str:
    return _IN_PATH.sub("/key/***", text)


class RedactUrlTokens(logging.Filter):
    """A record that mentions a ``/key/<token>/...`` path (``/mcp``, or the wake-up socket's ``/ws``) in aiohttp's
    access log or its errors shows it without the token: the message is formatted here, with the token taken out,
    and so are the record's other string fields (aiohttp's access log passes the request line as extras too)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "/key/" in message:
            record.msg, record.args = redact(message), None
        for name, value in list(vars(record).items()):
            if isinstance(value, str) and "/key/" in value and name != "msg":
                setattr(record, name, redact(value))
        return True


def _redact_logs() -> None:
    """On the loggers themselves (not a handler), so it holds whatever handlers the process has; once."""
    for name in ("aiohttp.access", "aiohttp.server", "aiohttp.web", "arbiter"):
        logger = logging.getLogger(name)
        if not any(isinstance(existing, RedactUrlTokens) for existing in logger.filters):
            logger.addFilter(RedactUrlTokens())


class McpEndpoint:
    """Serves ``/mcp``: the 2025 protocol here (``arbiter.mcp.transport``), the 2026-07-28 protocol through the
    SDK (``arbiter.mcp.server.McpApp``), which is imported and started on its first request, in a task of its own
    that runs until ``close``."""

    def __init__(self, service: ArbiterService, hub: EventHub, kept: KeptSessions, version: str) -> None:
        self._service = service
        self._hub = hub
        self._version = version
        self._handshake = HandshakeTransport(service, hub, kept, version)
        self._ready: asyncio.Future[McpApp] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        visitor = self._visitor(request)
        version = request.headers.get("MCP-Protocol-Version")
        if version is None or version in HANDSHAKE_VERSIONS:
            return await self._handshake.handle(request, visitor)
        # The 2026-07-28 protocol (and a version we do not know, which the SDK refuses naming the ones it takes).
        app = await self._started()
        return await serve_asgi(app.asgi, request, "/mcp", app.scope(visitor.caller))

    @staticmethod
    def _visitor(request: web.Request) -> Visitor:
        auth = request.app[AUTH]
        token = request.match_info.get("token")
        if token is None:
            token = bearer_token(request)
        principal = auth.identify(token)
        check_path(request)
        return Visitor(Caller(principal.persona_id, request.match_info.get("channel_id")), session_key(token))

    async def _started(self) -> McpApp:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._task = asyncio.create_task(self._run(self._ready), name="mcp")
        return await asyncio.shield(self._ready)

    async def _run(self, ready: asyncio.Future[McpApp]) -> None:
        try:
            # Loading the SDK takes a second: in a thread, so the arbiter goes on answering meanwhile.
            module = await asyncio.to_thread(importlib.import_module, "arbiter.mcp.server")
            app: McpApp = module.McpApp(self._service, self._hub, self._version)
            async with app.running():
                ready.set_result(app)
                _log.info("MCP endpoint (2026-07-28 protocol) started")
                await self._stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
                _log.exception("the MCP endpoint could not start")
            raise

    async def close(self, _app: Any = None) -> None:
        """End every MCP stream (open streams would otherwise hold the arbiter's shutdown)."""
        await self._handshake.close()
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._task


MCP = web.AppKey("mcp", McpEndpoint)


def add_mcp_routes(app: web.Application, endpoint: McpEndpoint) -> None:
    _redact_logs()
    app[MCP] = endpoint
    app.on_shutdown.append(endpoint.close)
    for path in MCP_PATHS:
        for method in MCP_METHODS:
            app.router.add_route(method, path, endpoint.handle)
