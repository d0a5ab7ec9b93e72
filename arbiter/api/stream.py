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

from arbiter.api.routes import AUTH, SERVICE, HistoryQuery, check_path, parse_query
from arbiter.events import EventHub
from arbiter.feed import ChannelFeed

__all__ = ("HUB", "events_handler", "stream_events")

_log = logging.getLogger(__name__)

HUB = web.AppKey("hub", EventHub)
# The close code of a stream whose client fell behind (4000-4999 are for applications).
FELL_BEHIND = 4008


async def events_handler(request: web.Request) -> web.StreamResponse:
    request.app[AUTH].principal(request)
    check_path(request)
    query = parse_query(request, HistoryQuery)
    assert isinstance(query, HistoryQuery)
    after = query.after if "after" in request.query else None
    return await stream_events(request, request.match_info["channel_id"], after=after)


async def stream_events(request: web.Request, channel_id: str, *, after: int | None) -> web.WebSocketResponse:
    """Answer ``request`` with the channel's event stream (``arbiter.feed.ChannelFeed``): with ``after``, the
    messages after that seq replayed, then the channel's level, then every event as it happens.

    An unknown channel raises NotFound before the upgrade (a 404, not a socket that closes at once). A client that
    falls behind is closed with code 4008 and "fell behind; reconnect with ?after=<seq>": reconnecting so, it loses
    nothing. The seq is the last message it was sent, or a later one when every message between was deleted or
    retracted before the replay reached it (nothing still in the history lies between).
    """
    async with ChannelFeed(request.app[SERVICE], request.app[HUB], channel_id, after=after) as feed:
        socket = web.WebSocketResponse(heartbeat=30)
        await socket.prepare(request)
        reader = asyncio.create_task(_drain_incoming(socket, feed))
        try:
            async for event in feed.events():
                await socket.send_str(event.model_dump_json())
            if feed.fell_behind:
                _log.info("channel=%s: a stream fell behind after seq %d; closing it", channel_id, feed.last_seq)
                reason = f"fell behind; reconnect with ?after={feed.last_seq}"
                await socket.close(code=FELL_BEHIND, message=reason.encode())
        except ConnectionResetError:
            pass  # the client went away
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
    return socket


async def _drain_incoming(socket: web.WebSocketResponse, feed: ChannelFeed) -> None:
    """The stream is one-way; reading keeps pings answered and notices when the client goes away."""
    async for message in socket:
        if message.type == WSMsgType.ERROR:
            break
    # The client is gone: end the feed, which wakes the sender waiting for the next event, so the handler returns
    # now rather than at the channel's next event.
    feed.stop()
    await socket.close()
