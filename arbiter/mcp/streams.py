"""The notification streams of MCP sessions (a session's ``GET``): ``notifications/resources/updated`` for each
history it subscribed to, whichever arbiter process it reaches.

A stream holds nothing the session needs afterwards. Its subscriptions are read from the database when it opens
(``arbiter.mcp.kept``) and every ``SYNC_S``, for one made through another process (one made through this process
reaches it at once). A stream that opens with subscriptions already kept is one reconnecting (after a restart, or
to another process): it is told first that each of its histories changed, since no one knows what it missed. At
the arbiter's shutdown each stream ends cleanly, which the SDKs' clients answer by reconnecting, ``retry`` after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from aiohttp import web

from arbiter.mcp.methods import history_uri
from arbiter.mcp.watch import HistoryWatch

if TYPE_CHECKING:
    from arbiter.events import EventHub
    from arbiter.mcp.kept import KeptSessions

__all__ = ("PING_S", "RESTART_RETRY_MS", "RETRY_MS", "SYNC_S", "NotificationStreams", "TooManyStreams")

_log = logging.getLogger(__name__)

PING_S = 15.0  # a comment this often, so that a client that left is noticed (a write to it fails)
SYNC_S = 10.0  # how soon a subscription made through another process reaches a stream here
# How soon a client should reconnect a stream that ended. The SDKs try twice, then give up (the Python SDK's
# MAX_RECONNECTION_ATTEMPTS; the TypeScript SDK's maxRetries): 5 s apart gives a restarting arbiter 10 s to be back,
# which a busy machine needed (at 3 s apart, an arbiter that took over 6 s to start left a client without its stream).
RETRY_MS = 5_000
# The delay a stream ended by a shutdown asks for, its last words: a restart on a loaded machine took over 10 s (load
# 12 on two cores), after which a client told 5 s had given its stream up for good. 15 s apart gives it 30 s; what
# was said meanwhile is only late, never lost (the stream resends what a subscription missed).
RESTART_RETRY_MS = 15_000

_WAKE = ""  # a queue item that only wakes the stream (to end it); channel ids are never empty


def _updated(channel_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": history_uri(channel_id)}}


class TooManyStreams(Exception):
    """The token has ``per_token`` streams open in this process already."""


class _Stream:
    def __init__(self, session_id: str, member: str) -> None:
        self.session_id = session_id
        self.member = member
        self.channels: set[str] = set()
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.pending: set[str] = set()  # channels with a notification queued, so a burst of messages sends one
        self.ended = False
        self.closing = False  # ended by the server's shutdown

    def put(self, item: str) -> None:
        if item not in self.pending:
            self.pending.add(item)
            self.queue.put_nowait(item)

    def end(self) -> None:
        self.ended = True
        self.queue.put_nowait(_WAKE)


class NotificationStreams:
    def __init__(self, hub: EventHub, kept: KeptSessions) -> None:
        self._kept = kept
        self._watch = HistoryWatch(hub, self._changed)
        self._open: dict[str, _Stream] = {}
        self._per_member: Counter[str] = Counter()
        self._listening: dict[str, set[_Stream]] = {}

    def open_count(self, member: str) -> int:
        return self._per_member[member]

    def subscribed(self, session_id: str, channel_id: str, *, subscribe: bool) -> None:
        """A subscription of the session changed through this process: its stream here, if any, follows at once
        (a message said just after the answer is heard)."""
        stream = self._open.get(session_id)
        if stream is None or stream.ended:
            return
        if subscribe and channel_id not in stream.channels:
            self._listen(stream, channel_id)
            stream.channels.add(channel_id)
        elif not subscribe and channel_id in stream.channels:
            self._stop_listening(stream, channel_id)
            stream.channels.discard(channel_id)

    def end(self, session_id: str) -> None:
        stream = self._open.get(session_id)
        if stream is not None:
            stream.end()

    async def close(self) -> None:
        for stream in list(self._open.values()):
            stream.closing = True
            stream.end()
        await self._watch.close()

    async def serve(self, request: web.Request, session_id: str, member: str) -> web.StreamResponse:
        replaced = self._open.get(session_id)
        if replaced is not None:
            replaced.end()  # the client reconnected before this process noticed it had gone
        elif self._per_member[member] >= self._kept.limits.per_token:
            raise TooManyStreams
        stream = _Stream(session_id, member)
        self._open[session_id] = stream
        self._per_member[member] += 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        try:
            # Listening before the client sees the stream open: a message said once it has is heard.
            await self._sync(stream)
            await response.prepare(request)
            # Only the reconnection delay: a block without data is no event to any client (one with an id and empty
            # data, the 2025-11-25 "priming" event, is a parse error to the AI SDK's client, which the reference's
            # agents use).
            await response.write(f"retry: {RETRY_MS}\n\n".encode())
            for channel in stream.channels:
                stream.put(channel)  # subscribed already: a stream reconnecting (a restart, another process) missed
            await self._pump(stream, response)
            if stream.closing:
                await response.write(f"retry: {RESTART_RETRY_MS}\n\n".encode())
        except (ConnectionError, asyncio.CancelledError):
            pass  # the client went away (or the server is going): nothing to tell it
        finally:
            self._forget(stream)
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response

    async def _pump(self, stream: _Stream, response: web.StreamResponse) -> None:
        loop = asyncio.get_running_loop()
        next_sync = loop.time() + SYNC_S
        touch_every = max(self._kept.limits.idle_s / 3, 1.0)
        next_touch = loop.time() + touch_every
        while not stream.ended:
            try:
                item = await asyncio.wait_for(stream.queue.get(), timeout=min(PING_S, SYNC_S))
            except TimeoutError:
                await response.write(b": ping\n\n")
                item = None
            if stream.ended:
                return
            if item is not None:
                stream.pending.discard(item)
            now = loop.time()
            if now >= next_sync:
                await self._sync(stream)
                next_sync = now + SYNC_S
            if now >= next_touch:
                await self._kept.touch(stream.session_id)
                next_touch = now + touch_every
            if item and item in stream.channels:
                data = json.dumps(_updated(item), separators=(",", ":"))
                await response.write(f"event: message\ndata: {data}\n\n".encode())

    async def _sync(self, stream: _Stream) -> None:
        channels = await self._kept.channels(stream.session_id)
        if stream.ended:
            return
        for channel in channels - stream.channels:
            self._listen(stream, channel)
        for channel in stream.channels - channels:
            self._stop_listening(stream, channel)
        stream.channels = channels

    def _listen(self, stream: _Stream, channel: str) -> None:
        self._listening.setdefault(channel, set()).add(stream)
        self._watch.watch(channel)

    def _stop_listening(self, stream: _Stream, channel: str) -> None:
        streams = self._listening.get(channel)
        if streams is not None:
            streams.discard(stream)
            if not streams:
                del self._listening[channel]
        self._watch.unwatch(channel)

    def _forget(self, stream: _Stream) -> None:
        stream.ended = True
        for channel in stream.channels:
            self._stop_listening(stream, channel)
        stream.channels = set()
        if self._open.get(stream.session_id) is stream:
            del self._open[stream.session_id]
        self._per_member[stream.member] -= 1
        if self._per_member[stream.member] <= 0:
            del self._per_member[stream.member]

    async def _changed(self, channel_id: str) -> None:
        for stream in list(self._listening.get(channel_id, ())):
            stream.put(channel_id)
