"""GET /v1/events: one WebSocket for every channel a client follows (the multiplexed event stream).

A process of personas in a thousand channels holds one socket, not a thousand per persona. The client sends
``StreamCommand`` frames (``{"subscribe": [{"channel": "lobby", "after": 41}, ...], "unsubscribe": [...]}``); for
each channel it follows the stream runs that channel's ``arbiter.feed.ChannelFeed`` (the same replay and
exactly-once join as the per-channel stream) and sends its events, each naming its channel. The stream acts for the
persona whose token opened it and for those whose tokens a command adds (``tokens``): a persona asks for its status
as it is about to look at its turn (``status``), and gets it as a ``StatusEvent`` computed then, so it plans from
the channel as it is, not as it was at the last message. A client may do without kinds of events it does not use
(``skip``: personas plan from their status, not from the level). A persona's requests may come on it too
(``calls``: a claim, a speech, a release, as their HTTP requests), each answered by a ``ReplyEvent``
(``arbiter.api.stream_calls``).

Per channel, a feed that falls behind ends alone, with an ``EndedEvent`` naming the seq to subscribe again after:
the other channels go on. Frames go out through one bounded outbox, so a slow client holds its feeds back (and
their channels, if they are busy, fall behind) instead of growing memory. The frames that became ready in one turn
of the event loop are written to the socket together, in one write (WebSocket frames back to back, each as
aiohttp would have written it): a persona process's stream carries some fifty frames per message said.

A malformed command closes the socket with code 4400 and the problem in one line; a token in ``tokens`` the arbiter
does not know, 4401; a status asked (or a call made as one) for a persona the stream does not act for, 4403.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import struct
from typing import TYPE_CHECKING, Literal

from aiohttp import WSCloseCode, WSMsgType, web
from pydantic import ValidationError

from arbiter import contract as wire
from arbiter.api.auth import Unauthorized
from arbiter.api.errors import error_body
from arbiter.api.routes import AUTH, SERVICE
from arbiter.api.stream import HUB
from arbiter.api.stream_calls import answer_call
from arbiter.core.errors import NotFound
from arbiter.feed import ChannelFeed

if TYPE_CHECKING:
    from aiohttp.base_protocol import BaseProtocol

    from arbiter.api.auth import TokenAuth
    from arbiter.events import EventHub
    from arbiter.service import ArbiterService

__all__ = (
    "BAD_COMMAND",
    "FRAMES",
    "MULTIPLEXED",
    "NOT_YOURS",
    "UNKNOWN_TOKEN",
    "FrameTexts",
    "close_multiplexed",
    "multiplex_handler",
)

_log = logging.getLogger(__name__)

MULTIPLEXED: web.AppKey[set[web.WebSocketResponse]] = web.AppKey("multiplexed")
# Close codes (4000-4999 are for applications): a command frame that is not one; a token in ``tokens`` the arbiter
# does not know; a status asked for a persona the stream does not act for.
BAD_COMMAND = 4400
UNKNOWN_TOKEN = 4401
NOT_YOURS = 4403
_OUTBOX = 512  # frames waiting for the socket before the feeds wait for it
_STARTING = 16  # feeds reading their history at once: a thousand subscriptions do not make a thousand reads at once
_ANY = 0  # the subscription number of frames sent whatever the channel's subscription is now (statuses)
_FRAMES_KEPT = 256  # frames remembered by event (every stream of a channel sends the same ones within moments)


class FrameTexts:
    """Each live event's frame as JSON (UTF-8), made once for every stream that sends it: the hub hands the same
    event to all of a channel's feeds (each persona process's, the room's, an agent's)."""

    def __init__(self, kept: int = _FRAMES_KEPT) -> None:
        self._kept = kept
        # By the event's id; the event is held with its text, so its id cannot be reused while it is here.
        self._texts: dict[int, tuple[wire.ArbiterEvent, bytes]] = {}

    def text(self, event: wire.ArbiterEvent) -> bytes:
        found = self._texts.get(id(event))
        if found is not None and found[0] is event:
            return found[1]
        # ``model_dump_json`` is this, decoded to str; the socket wants the bytes.
        text = event.__pydantic_serializer__.to_json(event)
        if len(self._texts) >= self._kept:
            del self._texts[next(iter(self._texts))]
        self._texts[id(event)] = (event, text)
        return text


FRAMES: web.AppKey[FrameTexts] = web.AppKey("frames", FrameTexts)


def text_frame_header(length: int) -> bytes:
    """The header of an unmasked, unfragmented, uncompressed WebSocket text frame of ``length`` bytes (RFC 6455
    5.2), as aiohttp's writer makes it for a server's ``send_str``."""
    if length < 126:
        return _LENGTH_7(0x81, length)
    if length < 1 << 16:
        return _LENGTH_16(0x81, 126, length)
    return _LENGTH_64(0x81, 127, length)


_LENGTH_7 = struct.Struct("!BB").pack
_LENGTH_16 = struct.Struct("!BBH").pack
_LENGTH_64 = struct.Struct("!BBQ").pack


class _Outbox:
    """The frames waiting for the socket, in the order they became ready, at most ``limit`` of them: a frame's
    maker waits (``room``) while it is full. The sender takes all there are at once (``take``)."""

    __slots__ = ("_frames", "_limit", "_ready", "_room")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        # (channel, subscription number, the frame's JSON)
        self._frames: list[tuple[str, int, bytes]] = []
        self._ready: asyncio.Future[None] | None = None  # the sender's, while it waits for a frame
        self._room: list[asyncio.Future[None]] = []  # the makers', while it is full

    def offer(self, channel: str, number: int, frame: bytes) -> bool:
        """Whether the frame was taken in (not when the outbox is full)."""
        frames = self._frames
        if len(frames) >= self._limit:
            return False
        frames.append((channel, number, frame))
        ready = self._ready
        if ready is not None and not ready.done():
            ready.set_result(None)
        return True

    async def room(self) -> None:
        """Once the sender has taken what is waiting (the outbox may be full again by then: check)."""
        # Each maker its own future: one cancelled while it waits must not cancel the others' wait.
        waiter = asyncio.get_running_loop().create_future()
        self._room.append(waiter)
        try:
            await waiter
        finally:
            if waiter in self._room:
                self._room.remove(waiter)

    async def take(self) -> list[tuple[str, int, bytes]]:
        """Every frame waiting, once there is one."""
        while not self._frames:
            self._ready = asyncio.get_running_loop().create_future()
            try:
                await self._ready
            finally:
                self._ready = None
        frames, self._frames = self._frames, []
        waiting, self._room = self._room, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)
        return frames


async def multiplex_handler(request: web.Request) -> web.WebSocketResponse:
    principal = request.app[AUTH].principal(request)
    socket = web.WebSocketResponse(heartbeat=30)
    await socket.prepare(request)
    app = request.app
    stream = _Multiplex(
        app[SERVICE],
        app[HUB],
        app[FRAMES],
        socket,
        request.protocol,
        auth=app[AUTH],
        persona_id=principal.persona_id,
    )
    open_sockets = app[MULTIPLEXED]
    open_sockets.add(socket)
    try:
        await stream.run()
    finally:
        open_sockets.discard(socket)
    return socket


async def close_multiplexed(app: web.Application) -> None:
    """End every open multiplexed stream (on shutdown: an open one would hold it for aiohttp's grace period;
    clients reconnect and resume each channel from its own seq)."""
    open_sockets = app[MULTIPLEXED]
    sockets = list(open_sockets)
    await asyncio.gather(*(socket.close(code=WSCloseCode.GOING_AWAY) for socket in sockets), return_exceptions=True)


class _Multiplex:
    def __init__(
        self,
        service: ArbiterService,
        hub: EventHub,
        frames: FrameTexts,
        socket: web.WebSocketResponse,
        protocol: BaseProtocol,
        *,
        auth: TokenAuth,
        persona_id: str | None,
    ) -> None:
        self._service = service
        self._hub = hub
        self._frames = frames
        self._auth = auth
        self._socket = socket
        self._protocol = protocol  # the connection's: the socket's frames are written to its transport
        self._persona = persona_id
        self._personas = {persona_id} if persona_id is not None else set()  # whom the stream acts for
        self._skip: frozenset[str] = frozenset()
        # The skipped types the feeds' subscriptions drop as they come (no wake of a feed for an event it would not
        # send): every one but "message", whose seqs the feeds follow. Changed in place: the feeds read it.
        self._unwanted: set[str] = set()
        self._outbox = _Outbox(_OUTBOX)
        # Each channel's current subscription: frames of one it replaced (or of one unsubscribed) still queued are
        # dropped on the way out, so a channel subscribed again starts clean from the new point.
        self._current: dict[str, int] = {}
        self._feeds: dict[str, asyncio.Task[None]] = {}
        self._answers: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[wire.ReplyEvent]] = set()  # held while carried out
        self._closed = False  # the stream has ended: replies still to come are lost
        self._numbers = itertools.count(_ANY + 1)
        self._starting = asyncio.Semaphore(_STARTING)

    async def run(self) -> None:
        sender = asyncio.create_task(self._send())
        try:
            async for frame in self._socket:
                if frame.type is WSMsgType.TEXT:
                    try:
                        command = wire.StreamCommand.model_validate_json(frame.data)
                    except ValidationError as error:
                        await self._refuse(error)
                        break
                    refusal = self._admit(command)
                    if refusal is not None:
                        code, message = refusal
                        # A close frame's reason is at most 123 bytes.
                        await self._socket.close(code=code, message=message.encode()[:123])
                        break
                    self._apply(command)
                    del command, frame  # not kept while the socket waits for the next one
                elif frame.type is WSMsgType.ERROR:
                    break
                elif frame.type is WSMsgType.BINARY:
                    await self._socket.close(code=BAD_COMMAND, message=b"commands are JSON text frames")
                    break
        finally:
            self._closed = True
            tasks = [*self._feeds.values(), *self._answers, sender]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._socket.close()

    async def _refuse(self, error: ValidationError) -> None:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "the frame"
        message = f"bad command: {where}: {problem['msg']}"
        await self._socket.close(code=BAD_COMMAND, message=message.encode()[:123])

    def _admit(self, command: wire.StreamCommand) -> tuple[int, str] | None:
        """Take in the command's tokens; the close code and reason when it cannot be carried out (a token the
        arbiter does not know, a status asked for a persona the stream does not act for). Never echoes a token."""
        for index, token in enumerate(command.tokens):
            try:
                persona = self._auth.identify(token).persona_id
            except Unauthorized as error:
                return UNKNOWN_TOKEN, f"tokens.{index}: {error}"
            if persona is None:
                return UNKNOWN_TOKEN, f"tokens.{index}: the admin token acts for no persona"
            self._personas.add(persona)
        asked = [("status", [ask.persona for ask in command.status]), ("calls", [c.persona for c in command.calls])]
        for field, named in asked:
            for index, as_whom in enumerate(named):
                persona = as_whom or self._persona
                if persona not in self._personas:
                    whose = f"persona {persona}" if persona is not None else "no persona (the admin token opened it)"
                    return NOT_YOURS, f"{field}.{index}: this stream does not act for {whose}"
        return None

    def _apply(self, command: wire.StreamCommand) -> None:
        if command.skip is not None:
            self._skip = frozenset(command.skip)
            self._unwanted.clear()
            self._unwanted.update(self._skip - {"message"})
        for channel in command.unsubscribe:
            self._stop(channel)
            self._current.pop(channel, None)
        for subscription in command.subscribe:
            channel = subscription.channel
            self._stop(channel)
            number = self._current[channel] = next(self._numbers)
            # The feed gets the subscription's values, not the model: a thousand feeds would keep the commands.
            follow = self._follow(channel, subscription.after, subscription.recent, number)
            self._feeds[channel] = asyncio.create_task(follow, name=f"multiplexed feed of {channel}")
        if command.status:
            asks = [(ask.channel, ask.persona or self._persona) for ask in command.status]
            self._keep(asyncio.create_task(self._answer(asks), name="multiplexed statuses"))
        for call in command.calls:
            persona = call.persona or self._persona
            assert persona is not None  # checked by _admit
            # Each on its own, as HTTP requests are: one that waits for the writer does not hold the others back.
            # Carried out even if the stream closes meanwhile (never cancelled), as an HTTP request is when its
            # client goes away: only the reply is lost (the client counts a call without one as in doubt).
            carried_out = asyncio.create_task(answer_call(self._service, call, persona), name="stream call")
            self._calls.add(carried_out)
            carried_out.add_done_callback(functools.partial(self._reply, call))

    def _keep(self, answer: asyncio.Task[None]) -> None:
        self._answers.add(answer)
        answer.add_done_callback(self._answers.discard)

    def _reply(self, call: wire.StreamCall, carried_out: asyncio.Task[wire.ReplyEvent]) -> None:
        """The call's reply to the outbox (a done callback: no task waits for each call's end to send it)."""
        self._calls.discard(carried_out)
        if self._closed or carried_out.cancelled():
            return
        error = carried_out.exception()
        if error is None:
            reply = carried_out.result()
        else:
            # What HTTP answers with a 500: the client hears of it rather than waiting for its time limit.
            _log.error("%s %s on the stream failed", call.method, call.path, exc_info=error)
            reply = wire.ReplyEvent(id=call.id, status=500, body=error_body("internal", "the arbiter failed"))
        channel, frame = reply.channel_id or "", reply.model_dump_json().encode()
        if not self._outbox.offer(channel, _ANY, frame):
            self._keep(asyncio.create_task(self._put(channel, _ANY, frame), name="stream call reply"))

    def _stop(self, channel: str) -> None:
        task = self._feeds.pop(channel, None)
        if task is not None:
            task.cancel()

    async def _put(self, channel: str, number: int, frame: str | bytes) -> None:
        payload = frame.encode() if isinstance(frame, str) else frame
        while not self._outbox.offer(channel, number, payload):
            await self._outbox.room()

    async def _send(self) -> None:
        while True:
            frames = await self._outbox.take()
            current = self._current
            # Those from a subscription since replaced or ended by the client are dropped.
            live = [frame for channel, number, frame in frames if number == _ANY or current.get(channel) == number]
            del frames
            if not live:
                continue
            try:
                if self._socket.compress:
                    # The client asked for compressed frames: aiohttp's writer compresses them, one at a time.
                    for frame in live:
                        await self._socket.send_frame(frame, WSMsgType.TEXT)
                else:
                    await self._write(live)
            except ConnectionResetError:
                return  # the client went away; the reader ends with it

    async def _write(self, frames: list[bytes]) -> None:
        """The frames, back to back in one write to the connection, then a wait while its buffer is full (what
        aiohttp's ``send_str`` does one frame at a time, for a fraction of the CPU per frame)."""
        transport = self._protocol.transport
        if self._socket.closed or transport is None or transport.is_closing():
            # As aiohttp's writer: nothing after the close frame.
            raise ConnectionResetError("Cannot write to closing transport")
        parts: list[bytes] = []
        for frame in frames:
            parts.append(text_frame_header(len(frame)))
            parts.append(frame)
        transport.write(b"".join(parts))
        if self._protocol.writing_paused:
            # The client reads slower than the stream writes: wait for it, so the outbox fills and the feeds wait.
            await self._protocol._drain_helper()

    async def _answer(self, asks: list[tuple[str, str | None]]) -> None:
        """Each status asked, as it is now (after every change committed before the ask came)."""
        for channel, persona in asks:
            assert persona is not None  # checked by _admit
            try:
                answer = await self._service.status_frame(channel, persona)
            except NotFound as error:
                frame = wire.EndedEvent(channel_id=channel, reason="unknown_channel", detail=str(error))
                await self._put(channel, _ANY, frame.model_dump_json())
                continue
            await self._put(channel, _ANY, answer)

    async def _follow(self, channel: str, after: int | None, recent: int | None, number: int) -> None:
        starting = True
        await self._starting.acquire()
        try:
            feed = ChannelFeed(self._service, self._hub, channel, after=after, recent=recent, unwanted=self._unwanted)
            try:
                await feed.__aenter__()
            except NotFound as error:
                ended = wire.EndedEvent(channel_id=channel, reason="unknown_channel", detail=str(error))
                await self._put(channel, number, ended.model_dump_json())
                return
            try:
                async for event in feed.events():
                    replayed = starting and isinstance(event, wire.LevelEvent)  # the replay's end: always sent
                    if replayed or event.type not in self._skip:
                        await self._put(channel, number, self._frames.text(event))
                    if replayed:
                        starting = False  # the replay is over: the next feed may read its history
                        self._starting.release()
                # The feed ended on the arbiter's side (the client's own unsubscribing cancels this task instead).
                reason: Literal["fell_behind", "closed"] = "fell_behind" if feed.fell_behind else "closed"
                _log.info("channel=%s: a multiplexed feed ended (%s) after seq %d", channel, reason, feed.last_seq)
                ended = wire.EndedEvent(
                    channel_id=channel,
                    reason=reason,
                    after=feed.last_seq,
                    detail=f"{reason.replace('_', ' ')}; subscribe again with after={feed.last_seq}",
                )
                await self._put(channel, number, ended.model_dump_json())
            finally:
                await feed.__aexit__()
        finally:
            if starting:
                self._starting.release()
            if self._feeds.get(channel) is asyncio.current_task():
                del self._feeds[channel]
