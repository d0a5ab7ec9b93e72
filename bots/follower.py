"""One multiplexed event stream for every channel a persona follows, feeding each channel's listener.

A persona in a thousand channels holds one connection to the arbiter, not a thousand. Each listener (a
``ChannelWorker``) says where its channel's stream should start (``subscription``: the recent history when it
arrives, after the last seq it saw when it resumes) and gets its channel's frames, the persona's pushed status
among them. The follower reconnects when the connection drops, subscribing every channel again from where each
listener is; a channel that fell behind is subscribed again alone, from where it is.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from arbiter import contract as wire
from bots.errors import ArbiterRejected, ArbiterUnavailable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from bots.arbiter_client import ArbiterClient, MultiplexedStream

__all__ = ("ChannelListener", "StreamFollower")

_log = logging.getLogger(__name__)

_BATCH = 500  # subscriptions per command frame (a thousand channels: two frames of some 20 KB)


class ChannelListener(Protocol):
    def subscription(self) -> wire.Subscribe:
        """Where the channel's stream should start now."""
        ...

    def on_frame(self, frame: wire.StreamFrame) -> None:
        """One of the channel's frames, in order."""
        ...

    def on_refused(self, detail: str) -> None:
        """The arbiter will not stream the channel (it does not know it, or the persona's token)."""
        ...


class StreamFollower:
    def __init__(
        self,
        arbiter: ArbiterClient,
        *,
        name: str,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        reconnect_s: float = 1.0,
    ) -> None:
        self._arbiter = arbiter
        self._name = name
        self._sleep = sleep
        self._reconnect_s = reconnect_s
        self._listeners: dict[str, ChannelListener] = {}
        self._to_subscribe: set[str] = set()
        self._to_leave: set[str] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.connections = 0  # connections opened so far (the first, then one per reconnection)

    def follow(self, channel_id: str, listener: ChannelListener) -> None:
        self._listeners[channel_id] = listener
        self._to_leave.discard(channel_id)
        self._to_subscribe.add(channel_id)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"stream of {self._name}")

    def leave(self, channel_id: str) -> None:
        if self._listeners.pop(channel_id, None) is not None:
            self._to_subscribe.discard(channel_id)
            self._to_leave.add(channel_id)
            self._changed.set()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        delay = self._reconnect_s
        while True:
            try:
                async with self._arbiter.stream() as stream:
                    self.connections += 1
                    # A new connection follows nothing yet: every channel from where its listener is now.
                    self._to_subscribe, self._to_leave = set(self._listeners), set()
                    self._changed.set()
                    commands = asyncio.create_task(self._send_commands(stream))
                    try:
                        async for frame in stream:
                            delay = self._reconnect_s
                            self._dispatch(frame)
                    finally:
                        commands.cancel()
                        await asyncio.gather(commands, return_exceptions=True)
            except asyncio.CancelledError:
                raise
            except ArbiterRejected as error:
                _log.warning("%s: stream refused (%s); leaving every channel", self._name, error)
                listeners, self._listeners = list(self._listeners.values()), {}
                for listener in listeners:
                    listener.on_refused(str(error))
                self._task = None
                return
            except (ArbiterUnavailable, ValueError) as error:
                _log.info("%s: stream lost (%s); reconnecting", self._name, error)
            else:
                _log.info("%s: stream ended; reconnecting", self._name)
            await self._sleep(delay)
            delay = min(delay * 2, 30.0)

    async def _send_commands(self, stream: MultiplexedStream) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            leaving, self._to_leave = sorted(self._to_leave), set()
            if leaving:
                await stream.unsubscribe(leaving)
            starting, self._to_subscribe = sorted(self._to_subscribe), set()
            subscriptions = [self._listeners[c].subscription() for c in starting if c in self._listeners]
            for first in range(0, len(subscriptions), _BATCH):
                await stream.subscribe(subscriptions[first : first + _BATCH])
            del subscriptions, starting, leaving  # not kept while waiting for the next change

    def _dispatch(self, frame: wire.StreamFrame) -> None:
        listener = self._listeners.get(frame.channel_id)
        if listener is None:
            return  # left since, or frames of a channel the stream is about to stop
        if isinstance(frame, wire.EndedEvent):
            if frame.reason != "unknown_channel":
                _log.info("%s: channel=%s %s; following it again", self._name, frame.channel_id, frame.reason)
                self._to_subscribe.add(frame.channel_id)
                self._changed.set()
            else:
                del self._listeners[frame.channel_id]
                listener.on_refused(frame.detail)
            return
        listener.on_frame(frame)
