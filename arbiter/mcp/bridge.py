"""Hand one aiohttp request to an ASGI application (the MCP SDK's transport) and send back what it answers.

Our own, and small, because what it must do that the ASGI adapters for aiohttp did not: tell the application when
the client goes away. The SDK's event streams wait for ``http.disconnect`` to end; aiohttp (without handler
cancellation, which the rest of the API does not want) says nothing when a client leaves, so the bridge looks, once
per ``DISCONNECT_POLL_S``, while the application waits. After the response, or the client, is gone, what the
application still sends is dropped (as uvicorn does).

The application sees only what the arbiter gives it: its own path (never the request's, which may hold a token)
and the request's headers less ``Authorization``; ``extra`` adds to the scope (who is calling).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web

__all__ = ("DISCONNECT_POLL_S", "ASGIApp", "serve_asgi")

_log = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]  # fmt: skip

DISCONNECT_POLL_S = 0.25


class _Exchange:
    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.response: web.StreamResponse | None = None
        self._body_sent = False
        self._done = False

    def gone(self) -> bool:
        transport = self.request.transport
        return self._done or transport is None or transport.is_closing()

    async def receive(self) -> Message:
        if not self._body_sent:
            self._body_sent = True
            # Read whole, within the app's body limit (aiohttp answers 413 past it): MCP messages are small.
            return {"type": "http.request", "body": await self.request.read(), "more_body": False}
        while not self.gone():  # noqa: ASYNC110 - aiohttp has no event for a client that left (see above)
            await asyncio.sleep(DISCONNECT_POLL_S)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self._done:
            return
        try:
            if message["type"] == "http.response.start":
                response = web.StreamResponse(status=message["status"])
                for name, value in message.get("headers", ()):
                    response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
                self.response = response
                await response.prepare(self.request)
            elif message["type"] == "http.response.body" and self.response is not None:
                body = message.get("body", b"")
                if body:
                    await self.response.write(body)
                if not message.get("more_body", False):
                    self._done = True
                    await self.response.write_eof()
        except ConnectionError:
            self._done = True  # the client went away; the application hears it at its next receive


async def serve_asgi(app: ASGIApp, request: web.Request, path: str, extra: dict[str, Any]) -> web.StreamResponse:
    """Answer ``request`` with what ``app`` answers. ``path`` is the one the application sees."""
    host, port = request.url.host, request.url.port
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(k.lower(), v) for k, v in request.raw_headers if k.lower() != b"authorization"],
        "client": (request.remote or "", 0),
        "server": (host or "", port or 0),
        **extra,
    }
    exchange = _Exchange(request)
    await app(scope, exchange.receive, exchange.send)
    if exchange.response is None:
        _log.error("%s %s: the MCP transport sent no answer", request.method, path)
        return web.Response(status=500)
    return exchange.response
