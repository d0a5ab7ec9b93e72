"""GET /v1/channels/{channel_id}/events: the channel's live events over a WebSocket.

With ``?after=<seq>`` the stream first replays the messages after that seq from the history, then goes
live without a gap or a duplicate: a client that reconnects loses nothing. ``stream_events`` does the work
for any route that streams a channel (this one, and the local room's).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import WSMsgType, web

from arbiter.api.routes import AUTH, SERVICE, HistoryQuery, _check_path, _parse_query
from arbiter.events import Event, EventHub

__all__ = ("HUB", "events_handler", "stream_events")

_log = logging.getLogger(__name__)

HUB = web.AppKey("hub", EventHub)


async def events_handler(request: web.Request) -> web.StreamResponse:
    request.app[AUTH].principal(request)
    _check_path(request)
    query = _parse_query(request, HistoryQuery)
    assert isinstance(query, HistoryQuery)
    after = query.after if "after" in request.query else None
    return await stream_events(request, request.match_info["channel_id"], after=after)


async def stream_events(request: web.Request, channel_id: str, *, after: int | None) -> web.WebSocketResponse:
    """Answer ``request`` with the channel's event stream: its level first, then every event as it happens.

    With ``after`` the messages after that seq are replayed before the level. An unknown channel raises
    NotFound before the upgrade (a 404, not a socket that closes at once).
    """
    service = request.app[SERVICE]
    # Subscribe before reading the level, so a change in between arrives as an event rather than being lost;
    # an unknown channel is still a 404 before the upgrade.
    with request.app[HUB].subscribe(channel_id) as subscription:
        level = await service.level_event(channel_id)
        socket = web.WebSocketResponse(heartbeat=30)
        await socket.prepare(request)
        sent_seq = await _replay(socket, request, channel_id, after) if after is not None else 0
        await socket.send_str(level.to_json())
        request.app[HUB].announce(level)
        reader = asyncio.create_task(_drain_incoming(socket))
        try:
            async for event in subscription:
                if event.type == "message" and event.data["message"]["seq"] <= sent_seq:
                    continue
                await socket.send_str(event.to_json())
            if subscription.overflowed:
                await socket.close(code=4008, message=b"fell behind; reconnect with ?after=<last seq>")
        except ConnectionResetError:
            pass
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    return socket


async def _replay(socket: web.WebSocketResponse, request: web.Request, channel_id: str, after: int) -> int:
    service = request.app[SERVICE]
    while True:
        page = await service.history(channel_id, after=after, limit=200)
        for message in page.messages:
            event = Event(channel_id, "message", {"message": message.model_dump(mode="json")})
            await socket.send_str(event.to_json())
        after = page.next_after
        if not page.has_more:
            return after


async def _drain_incoming(socket: web.WebSocketResponse) -> None:
    """The stream is one-way; reading keeps pings answered and notices when the client goes away."""
    async for message in socket:
        if message.type == WSMsgType.ERROR:
            break
    # The client is gone: wake the sender so the handler can return.
    await socket.close()
