"""The fake gateway: one WebSocket per client connection, one session per IDENTIFY, sequence numbers per session.

Every dispatch is stored in its session before it is sent, so a client that drops and RESUMEs gets every event
after the last sequence number it saw, then RESUMED - never one twice, never one lost. Frames go out through one
writer per connection (in order, through one compression stream when the client asked for ``zlib-stream``).

What a test broke in one bot's sessions (``FakeDiscord.ready_without``, ``close_after_ready``,
``refuse_identify``, ``delay_events``) is that bot's :class:`Breakage`, shared by all its sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from .model import FakeBot

__all__ = ("Breakage", "Connection", "GatewayOp", "Op", "Session")


class Op:
    DISPATCH = 0
    HEARTBEAT = 1
    IDENTIFY = 2
    PRESENCE_UPDATE = 3
    VOICE_STATE_UPDATE = 4
    RESUME = 6
    RECONNECT = 7
    REQUEST_GUILD_MEMBERS = 8
    INVALID_SESSION = 9
    HELLO = 10
    HEARTBEAT_ACK = 11


@dataclass(frozen=True)
class GatewayOp:
    """One frame a client sent: which bot (None before a successful IDENTIFY/RESUME), the opcode and its data."""

    bot: FakeBot | None
    op: int
    data: Any
    path: str  # the URL path the connection came in on: "/gateway" (IDENTIFY) or "/resume" (resume_gateway_url)
    compress: str | None  # the transport compression the connection asked for ("zlib-stream") or None


@dataclass
class Breakage:
    """What the test broke in one bot's gateway sessions; every session of the bot shares it, so a change applies
    to its live sessions and to those to come.

    ``ready_without``: fields removed from each READY it gets. ``close_after_ready``: a close code each new session
    is closed with right after its READY (and GUILD_CREATEs), the session ended with it. ``refuse_identify``: each
    IDENTIFY answered INVALID_SESSION (not resumable). ``delay_s``: how much later than sent each dispatch is written
    to its sockets."""

    ready_without: frozenset[str] = frozenset()
    close_after_ready: int | None = None
    refuse_identify: bool = False
    delay_s: float = 0.0


class _ZlibStream:
    def __init__(self) -> None:
        self._context = zlib.compressobj()

    def __call__(self, data: bytes) -> bytes:
        return self._context.compress(data) + self._context.flush(zlib.Z_SYNC_FLUSH)


class _ZstdStream:
    def __init__(self) -> None:
        # Only when a client asks for it, which discord.py does only when the package is installed.
        zstandard = importlib.import_module("zstandard")
        self._context = zstandard.ZstdCompressor().compressobj()
        self._flush = zstandard.COMPRESSOBJ_FLUSH_BLOCK

    def __call__(self, data: bytes) -> bytes:
        return bytes(self._context.compress(data) + self._context.flush(self._flush))


@dataclass(eq=False)
class Connection:
    """One WebSocket. ``send`` queues a frame; the writer task sends them in order.

    A dispatch to a session whose bot's events are delayed (``Breakage.delay_s``) is written that long after it
    was queued, and every frame queued after it waits its turn: nothing overtakes, so the client sees the same
    order and sequence numbers, only later. Such frames are *held back*: ``flush()`` does not wait for them,
    ``flush(delayed=True)`` does."""

    ws: web.WebSocketResponse
    request: web.Request
    path: str
    compress: str | None
    session: Session | None = None
    queued: int = 0
    written: int = 0
    closed: bool = False
    dropped: bool = False  # closed by the fake (drop/reconnect), not by the client
    # (frame, the loop time it may be written at); None ends the writer.
    _queue: asyncio.Queue[tuple[dict[str, Any], float] | None] = field(default_factory=asyncio.Queue)
    _progress: asyncio.Condition = field(default_factory=asyncio.Condition)
    _gone: asyncio.Event = field(default_factory=asyncio.Event)
    _writer: asyncio.Task[None] | None = None
    _last_held: int = 0  # the number (1, 2...) of the last frame held back by a delay, or queued behind one
    _last_due: int = 0  # the number of the last frame that was not

    def start(self) -> None:
        self._writer = asyncio.create_task(self._write_loop(), name=f"fake-discord-writer-{id(self)}")

    def send(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        delay = self.session.breakage.delay_s if self.session is not None and frame["op"] == Op.DISPATCH else 0.0
        self.queued += 1
        if delay > 0 or self.written < self._last_held:
            self._last_held = self.queued
        else:
            self._last_due = self.queued
        self._queue.put_nowait((frame, asyncio.get_running_loop().time() + delay))

    async def flush(self, *, delayed: bool = False) -> None:
        """Wait until every frame queued so far is on the socket (or the socket is gone); frames held back by a
        delay only with ``delayed``."""
        target = self.queued if delayed else self._last_due
        async with self._progress:
            await self._progress.wait_for(lambda: self.written >= target or self.closed)

    async def _write_loop(self) -> None:
        compressor: _ZlibStream | _ZstdStream | None = None
        if self.compress == "zlib-stream":
            compressor = _ZlibStream()
        elif self.compress == "zstd-stream":
            compressor = _ZstdStream()
        try:
            while (item := await self._queue.get()) is not None:
                frame, due = item
                wait = due - asyncio.get_running_loop().time()
                if wait > 0:  # held back by delay_events; a socket that goes away meanwhile ends the wait
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._gone.wait(), wait)
                    if self.closed:
                        break
                text = json.dumps(frame, separators=(",", ":"), ensure_ascii=True)
                if compressor is None:
                    await self.ws.send_str(text)
                else:
                    await self.ws.send_bytes(compressor(text.encode()))
                async with self._progress:
                    self.written += 1
                    self._progress.notify_all()
        except (ConnectionError, RuntimeError):
            pass  # the socket went away under us; the session keeps the events for a RESUME
        finally:
            await self.mark_closed()

    async def mark_closed(self) -> None:
        self.closed = True
        self._gone.set()
        async with self._progress:
            self._progress.notify_all()

    async def stop(self) -> None:
        self._queue.put_nowait(None)
        if self._writer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    def abort(self) -> None:
        """Cut the TCP connection without a close frame, like a network failure."""
        self.dropped = True
        transport = self.request.transport
        if transport is not None:
            transport.abort()


@dataclass(eq=False)
class Session:
    """A gateway session: created by IDENTIFY, continued by RESUME, ended by a clean close or INVALID_SESSION."""

    id: str
    bot: FakeBot
    intents: int
    shard: list[int] | None
    seq: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    connection: Connection | None = None
    valid: bool = True
    breakage: Breakage = field(default_factory=Breakage)  # the bot's, shared by its sessions (FakeDiscord sets it)

    def dispatch(self, event: str, data: Any) -> int:
        """Give the event the next sequence number, store it, and send it if a connection is attached."""
        self.seq += 1
        frame = {"op": Op.DISPATCH, "t": event, "s": self.seq, "d": data}
        self.events.append(frame)
        if self.connection is not None:
            self.connection.send(frame)
        return self.seq

    def replay_after(self, seq: int | None) -> list[dict[str, Any]]:
        last = seq or 0
        return [frame for frame in self.events if frame["s"] > last]

    def has(self, intent: int) -> bool:
        return bool(self.intents & intent)

    def covers(self, guild_id: int) -> bool:
        """Whether the guild's events go to this session: Discord's ``(guild_id >> 22) % num_shards == shard_id``
        (every guild, for a session without ``shard``)."""
        if self.shard is None:
            return True
        shard_id, count = self.shard
        return (guild_id >> 22) % count == shard_id
