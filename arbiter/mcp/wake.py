"""Wake-up over a plain WebSocket: one text frame per new message in a channel, as the reference design sends them.

The reference design's agents do not subscribe to anything over MCP: each opens a plain WebSocket and runs its turn
whenever a frame arrives, whatever it says. This serves them, unchanged, on the arbiter's own address and port:

- ``/key/<token>/channels/<channel>/ws``: the token in the path, for clients that can set only a URL (those agents);
- ``/channels/<channel>/ws``: the token in the ``Authorization: Bearer <token>`` header.

Each frame is the reference's ``notify()`` payload, byte for byte as its ``JSON.stringify`` writes it:
``{"type":"newMessage","message":{"from":"<member id or person's name>","message":"<text>"}}``; only new messages,
as there (not edits, deletions or refunds); those said through another arbiter process while this one did not hear
it (its PostgreSQL listening connection lost) come once it listens again, read from the history. Any token may
listen (a persona's, an agent's, the admin's), with at most ``mcp_sessions_per_token`` sockets open at once per
token. MCP clients hear the same through resource notifications (``arbiter.mcp.watch``); this is for those that
listen to nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import WSCloseCode, web

from arbiter import contract as wire
from arbiter.api.errors import error_response
from arbiter.api.openapi import WAKE_PATHS
from arbiter.api.routes import AUTH, check_path
from arbiter.core.errors import ArbiterError
from arbiter.events import CatchUpEvent
from arbiter.mcp.tools import history_entries

if TYPE_CHECKING:
    from arbiter.api.auth import Principal
    from arbiter.events import EventHub, Subscription
    from arbiter.service import ArbiterService

__all__ = ("WAKE", "WakeSockets", "add_wake_routes", "wake_frame")

_log = logging.getLogger(__name__)

# Pings every so many seconds: a peer gone without closing (a laptop shut) is noticed, and its slot under the
# per-token cap freed. The reference's agents (npm ws) answer pings by themselves.
HEARTBEAT_S = 30.0
# The most frames sent for messages missed while not hearing another arbiter process: each only wakes the agent,
# which reads the history anyway.
_CATCH_UP = 20
_SHUTTING_DOWN = b"the arbiter is shutting down"  # the close reason


def wake_frame(message: wire.MessageView) -> str:
    """The reference's frame for ``message``: ``from`` as its ``history`` tool (and ours) names the speaker, and
    the JSON written as ``JSON.stringify`` writes it (no spaces, non-ASCII as it is), so agents see the same bytes."""
    [entry] = history_entries([message])
    frame = {"type": "newMessage", "message": entry.model_dump(by_alias=True)}
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def _who(principal: Principal) -> str:
    return "the admin" if principal.persona_id is None else principal.persona_id


class WakeSockets:
    """The open wake-up sockets, counted per token (by whose token it is: one token per member, one admin token).

    ``per_token`` is the ``mcp_sessions_per_token`` setting."""

    def __init__(self, service: ArbiterService, hub: EventHub, *, per_token: int) -> None:
        self._service = service
        self._hub = hub
        self.per_token = per_token
        self._open: Counter[Principal] = Counter()
        self._sockets: set[web.WebSocketResponse] = set()

    def open_for(self, principal: Principal) -> int:
        """How many sockets this principal's token holds (counted from before the upgrade to the handler's end)."""
        return self._open[principal]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.app[AUTH]
        token = request.match_info.get("token")
        principal = auth.identify(token) if token is not None else auth.principal(request)
        check_path(request)
        channel_id = request.match_info["channel_id"]
        held = self._open[principal]
        if held >= self.per_token:
            _log.info("channel=%s: refused a wake-up socket of %s, who has %d open", channel_id, _who(principal), held)
            return error_response(
                429,
                "too_many_sockets",
                f"this token has {held} wake-up sockets open, the most one token may "
                "(ARBITER_MCP_SESSIONS_PER_TOKEN); close one first",
            )
        # Counted before the first await, so that connections arriving together cannot all pass the check.
        self._open[principal] += 1
        try:
            return await self._serve(request, channel_id)
        finally:
            self._open[principal] -= 1
            if self._open[principal] <= 0:
                del self._open[principal]

    async def _serve(self, request: web.Request, channel_id: str) -> web.StreamResponse:
        # Subscribed before the channel is looked up, as the event streams do: alone on SQLite the arbiter builds a
        # channel's events only while someone subscribes, and stream_start waits for what was begun before.
        subscription = self._hub.subscribe(channel_id)
        try:
            # An unknown channel: NotFound, a 404 before the upgrade.
            _level, last_seq = await self._service.stream_start(channel_id)
            socket = web.WebSocketResponse(heartbeat=HEARTBEAT_S)
            await socket.prepare(request)
        except BaseException:
            subscription.close()
            raise
        self._sockets.add(socket)
        sender = asyncio.create_task(self._send(socket, subscription, last_seq), name=f"wake-{channel_id}")
        try:
            async for _message in socket:
                pass  # one-way: reading answers pings and notices the client leaving
        finally:
            self._sockets.discard(socket)
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender
            subscription.close()  # the sender's own, if it was cancelled before it began
        return socket

    async def _send(self, socket: web.WebSocketResponse, subscription: Subscription, seen: int) -> None:
        """``seen``: the last seq before the socket opened; then the last one it was sent a frame for."""
        while True:
            try:
                async for event in subscription:
                    if isinstance(event, wire.MessageEvent):
                        seen = max(seen, event.message.seq)
                        await socket.send_str(wake_frame(event.message))
                    elif isinstance(event, CatchUpEvent) and event.last_seq > seen:
                        # Said through another arbiter process while this one did not hear it: one frame each, as
                        # their events would have brought (read from the history).
                        try:
                            page = await self._service.history(event.channel_id, after=seen, limit=_CATCH_UP)
                        except ArbiterError as error:  # out of reach again: the next message wakes it
                            _log.info("channel=%s: no wake-up for missed messages: %s", event.channel_id, error)
                            continue
                        for message in page.messages:
                            if message.seq <= event.last_seq:
                                await socket.send_str(wake_frame(message))
                        seen = event.last_seq
            except ConnectionResetError:
                return  # the client is gone; the reader notices too and ends the handler
            finally:
                subscription.close()
            if not subscription.overflowed:
                break
            # Dropped for falling behind: subscribing again loses nothing an agent needs, as a frame only wakes it
            # to read the history (the reference's agents ignore what it says).
            _log.info("channel=%s: a wake-up socket fell behind; subscribing again", subscription.channel_id)
            subscription = self._hub.subscribe(subscription.channel_id)
        # The hub closed it: the arbiter is shutting down.
        await socket.close(code=WSCloseCode.GOING_AWAY, message=_SHUTTING_DOWN)

    async def close(self, _app: Any = None) -> None:
        """Close every open socket (on shutdown: an open one would hold it for aiohttp's grace period)."""
        sockets = list(self._sockets)
        closing = (socket.close(code=WSCloseCode.GOING_AWAY, message=_SHUTTING_DOWN) for socket in sockets)
        await asyncio.gather(*closing, return_exceptions=True)


WAKE = web.AppKey("wake", WakeSockets)


def add_wake_routes(app: web.Application, sockets: WakeSockets) -> None:
    app[WAKE] = sockets
    app.on_shutdown.append(sockets.close)
    for path in WAKE_PATHS:
        app.router.add_get(path, sockets.handle)
