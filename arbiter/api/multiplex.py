"""GET /v1/events: one WebSocket for every channel a client follows (the multiplexed event stream).

A persona in a thousand channels holds one socket, not a thousand. The client sends ``StreamCommand`` frames
(``{"subscribe": [{"channel": "lobby", "after": 41}, ...], "unsubscribe": [...]}``); for each channel it follows
the stream runs that channel's ``arbiter.feed.ChannelFeed`` (the same replay and exactly-once join as the
per-channel stream) and sends its events, each naming its channel. With a persona's token it also pushes that
persona's status of a channel (``StatusEvent``: the level and each tier's verdict, as GET status answers it) after
each burst of new messages (or changes of settings or history), so the persona plans its look with no status
request.

Per channel, a feed that falls behind ends alone, with an ``EndedEvent`` naming the seq to subscribe again after:
the other channels go on. Frames go out through one bounded queue, so a slow client holds its feeds back (and
their channels, if they are busy, fall behind) instead of growing memory. A malformed command closes the socket
with code 4400 and the problem in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from typing import TYPE_CHECKING, Literal

from aiohttp import WSCloseCode, WSMsgType, web
from pydantic import ValidationError

from arbiter import contract as wire
from arbiter.api.routes import AUTH, SERVICE
from arbiter.api.stream import HUB
from arbiter.core.errors import NotFound
from arbiter.feed import ChannelFeed

if TYPE_CHECKING:
    from arbiter.events import EventHub
    from arbiter.service import ArbiterService

__all__ = ("BAD_COMMAND", "FRAMES", "MULTIPLEXED", "FrameTexts", "close_multiplexed", "multiplex_handler")

_log = logging.getLogger(__name__)

MULTIPLEXED: web.AppKey[set[web.WebSocketResponse]] = web.AppKey("multiplexed")
# The close code for a command frame that is not one (4000-4999 are for applications).
BAD_COMMAND = 4400
_OUTBOX = 512  # frames waiting for the socket before the feeds wait for it
_STARTING = 16  # feeds reading their history at once: a thousand subscriptions do not make a thousand reads at once
# The events after which a persona looks at its turn (a new message, a change of settings or of the history): its
# status is pushed after a burst of these, for the look to plan from. Claims and levels move the status too, but a
# push after each would cost a status per persona per claim in the channel, and a look planned from a status a
# claim has since moved costs at most a refused claim (which comes with the fresh status). A claim given back is a
# cue all the same: a pass refills the pool and may give up the floor, which others wait on with no message to come.
_CUES = (
    wire.MessageEvent,
    wire.SettingsEvent,
    wire.ClearedEvent,
    wire.RetractedEvent,
    wire.DeletedEvent,
)
_FRAMES_KEPT = 256  # frames remembered by event (every stream of a channel sends the same ones within moments)


def _is_cue(event: wire.ArbiterEvent) -> bool:
    if isinstance(event, wire.ClaimEvent):
        return event.claim.state is wire.SpendState.RELEASED
    return isinstance(event, _CUES)


class FrameTexts:
    """Each live event's frame as JSON, made once for every stream that sends it: the hub hands the same event to
    all of a channel's feeds, and a persona process of six personas follows every channel six times."""

    def __init__(self, kept: int = _FRAMES_KEPT) -> None:
        self._kept = kept
        # By the event's id; the event is held with its text, so its id cannot be reused while it is here.
        self._texts: dict[int, tuple[wire.ArbiterEvent, str]] = {}

    def text(self, event: wire.ArbiterEvent) -> str:
        found = self._texts.get(id(event))
        if found is not None and found[0] is event:
            return found[1]
        text = event.model_dump_json()
        if len(self._texts) >= self._kept:
            del self._texts[next(iter(self._texts))]
        self._texts[id(event)] = (event, text)
        return text


FRAMES: web.AppKey[FrameTexts] = web.AppKey("frames", FrameTexts)


async def multiplex_handler(request: web.Request) -> web.WebSocketResponse:
    principal = request.app[AUTH].principal(request)
    socket = web.WebSocketResponse(heartbeat=30)
    await socket.prepare(request)
    stream = _Multiplex(request.app[SERVICE], request.app[HUB], request.app[FRAMES], socket, principal.persona_id)
    open_sockets = request.app[MULTIPLEXED]
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
        persona_id: str | None,
    ) -> None:
        self._service = service
        self._hub = hub
        self._frames = frames
        self._socket = socket
        self._persona = persona_id
        self._outbox: asyncio.Queue[tuple[str, int, str]] = asyncio.Queue(_OUTBOX)
        # Each channel's current subscription: frames of one it replaced (or of one unsubscribed) still queued are
        # dropped on the way out, so a channel subscribed again starts clean from the new point.
        self._current: dict[str, int] = {}
        self._feeds: dict[str, asyncio.Task[None]] = {}
        self._numbers = itertools.count(1)
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
                    self._apply(command)
                    del command, frame  # not kept while the socket waits for the next one
                elif frame.type is WSMsgType.ERROR:
                    break
                elif frame.type is WSMsgType.BINARY:
                    await self._socket.close(code=BAD_COMMAND, message=b"commands are JSON text frames")
                    break
        finally:
            feeds = [*self._feeds.values(), sender]
            for task in feeds:
                task.cancel()
            await asyncio.gather(*feeds, return_exceptions=True)
            await self._socket.close()

    async def _refuse(self, error: ValidationError) -> None:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "the frame"
        message = f"bad command: {where}: {problem['msg']}"
        # A close frame's reason is at most 123 bytes.
        await self._socket.close(code=BAD_COMMAND, message=message.encode()[:123])

    def _apply(self, command: wire.StreamCommand) -> None:
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

    def _stop(self, channel: str) -> None:
        task = self._feeds.pop(channel, None)
        if task is not None:
            task.cancel()

    async def _put(self, channel: str, number: int, frame: str) -> None:
        await self._outbox.put((channel, number, frame))

    async def _send(self) -> None:
        while True:
            channel, number, frame = await self._outbox.get()
            if self._current.get(channel) != number:
                continue  # from a subscription since replaced or ended by the client
            try:
                await self._socket.send_str(frame)
            except ConnectionResetError:
                return  # the client went away; the reader ends with it

    async def _follow(self, channel: str, after: int | None, recent: int | None, number: int) -> None:
        starting = True
        await self._starting.acquire()
        try:
            feed = ChannelFeed(self._service, self._hub, channel, after=after, recent=recent)
            try:
                await feed.__aenter__()
            except NotFound as error:
                ended = wire.EndedEvent(channel_id=channel, reason="unknown_channel", detail=str(error))
                await self._put(channel, number, ended.model_dump_json())
                return
            try:
                dirty = True  # the first status goes out once the replay is over, with the level
                async for event in feed.events():
                    await self._put(channel, number, self._frames.text(event))
                    if isinstance(event, wire.LevelEvent) and starting:
                        starting = False  # the replay is over: the next feed may read its history
                        self._starting.release()
                    dirty = dirty or _is_cue(event)
                    # Once per burst: the status after the last of the events queued, not one per event.
                    if dirty and self._persona is not None and feed.caught_up:
                        dirty = False
                        await self._push_status(channel, number, self._persona)
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

    async def _push_status(self, channel: str, number: int, persona_id: str) -> None:
        with contextlib.suppress(NotFound):  # the channel is gone: its feed ends too
            status = await self._service.status(channel, persona_id)
            await self._put(channel, number, wire.StatusEvent(channel_id=channel, status=status).model_dump_json())
