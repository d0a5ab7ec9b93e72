"""One multiplexed event stream for every channel the personas of a process follow, feeding each channel's
listeners, and carrying the status each persona asks for as it looks at its turn.

Six personas in a thousand channels hold one connection to the arbiter, not six (nor six thousand), and each event
of a channel comes once for all of them. Each listener (a ``ChannelWorker``: one persona in one channel) says where
its channel's stream should start (``subscription``: the recent history when it arrives, after the last seq it saw
when it resumes); a channel is subscribed once, from where the listener furthest behind needs it, and every listener
of the channel gets every frame (those it has seen already, it skips by seq). A status is asked on the stream and
answered on it: computed by the arbiter when asked, so it has every change committed before (``status``). And it
carries the personas' channel calls (a claim, a speech, a release: ``call``), each a frame each way instead of an
HTTP request, while it is open to the channel's arbiter process.

The follower reconnects when the connection drops, subscribing every channel again from where its listeners are; a
channel that fell behind is subscribed again alone, from where it is. If the arbiter refuses the stream (a token it
does not know), every listener is told and the follower stops: reconnecting would only be refused again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING, Protocol

from arbiter import contract as wire
from bots.errors import ArbiterRejected, ArbiterUnavailable

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterable

    from bots.arbiter_client import ArbiterClient, MultiplexedStream

__all__ = ("ChannelListener", "StreamFollower")

_log = logging.getLogger(__name__)

_BATCH = 500  # subscriptions per command frame (a thousand channels: two frames of some 20 KB)


class ChannelListener(Protocol):
    def subscription(self) -> wire.Subscribe:
        """Where the channel's stream should start now, for this listener."""
        ...

    def on_frame(self, frame: wire.ArbiterEvent) -> None:
        """One of the channel's events, in order."""
        ...

    def on_refused(self, detail: str) -> None:
        """The arbiter will not stream the channel (it does not know it, or a token)."""
        ...


async def _within(answer: asyncio.Future[wire.StatusView | None], seconds: float) -> wire.StatusView | None:
    """``answer``'s result, or None when it has not come in ``seconds``; ``answer`` itself is left to come (another
    asker of the same status may wait for it too), also when the asker is cancelled. What ``asyncio.timeout`` around
    ``asyncio.shield`` does, with one future and one timer where those take a timeout object, a timer and a future
    with two callbacks: a look asks a status each time, some twenty times per message of a person."""
    loop = asyncio.get_running_loop()
    waiting: asyncio.Future[wire.StatusView | None] = loop.create_future()

    def relay(done: asyncio.Future[wire.StatusView | None]) -> None:
        if waiting.done():
            return
        if done.cancelled():
            waiting.cancel()
        elif (error := done.exception()) is not None:
            waiting.set_exception(error)
        else:
            waiting.set_result(done.result())

    answer.add_done_callback(relay)
    timer = loop.call_later(seconds, _time_up, waiting)
    try:
        return await waiting
    finally:
        timer.cancel()
        answer.remove_done_callback(relay)


def _time_up(waiting: asyncio.Future[wire.StatusView | None]) -> None:
    if not waiting.done():
        waiting.set_result(None)


def _no_answer(answer: asyncio.Future[tuple[int, str] | None], method: str, path: str, within: float) -> None:
    if not answer.done():
        answer.set_exception(ArbiterUnavailable(f"{method} {path} on the stream: no answer within {within:g}s"))


class StreamFollower:
    """The stream of the personas whose clients are given: opened with the first one's token, acting for the
    others' too (``tokens``: theirs, in any order). ``skip``: kinds of events none of the listeners uses."""

    def __init__(
        self,
        arbiter: ArbiterClient,
        *,
        name: str,
        tokens: Iterable[str] = (),
        skip: Collection[wire.EventType] = (),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        reconnect_s: float = 1.0,
    ) -> None:
        self._arbiter = arbiter
        self._name = name
        self._tokens = list(tokens)
        self._new_tokens: list[str] = []  # added while connected, not sent yet
        self._skip = list(skip)
        self._sleep = sleep
        self._reconnect_s = reconnect_s
        self._listeners: dict[str, dict[str, ChannelListener]] = {}  # channel -> persona -> its listener
        self._to_subscribe: set[str] = set()
        self._to_leave: set[str] = set()
        self._asked: dict[tuple[str, str], asyncio.Future[wire.StatusView | None]] = {}  # (channel, persona)
        self._to_ask: set[tuple[str, str]] = set()
        self._calls: dict[int, asyncio.Future[tuple[int, str] | None]] = {}  # by id, sent or about to be
        self._to_call: list[wire.StreamCall] = []
        self._call_ids = itertools.count(1)
        self._base: str | None = None  # the arbiter process the open stream is connected to
        self._closing = False
        self._changed = asyncio.Event()
        self._open = False  # connected, and the stream acts for every persona
        self._task: asyncio.Task[None] | None = None
        self.connections = 0  # connections opened so far (the first, then one per reconnection)

    def act_for(self, token: str) -> None:
        """The stream acts for the persona whose token this is too, from now on (before any of its listeners follow
        a channel or ask a status)."""
        if token not in self._tokens:
            self._tokens.append(token)
            self._new_tokens.append(token)
            self._changed.set()

    def follow(self, channel_id: str, persona_id: str, listener: ChannelListener) -> None:
        """``listener`` gets the channel's events from now on, from where it says (the channel starts again for all
        its listeners, each skipping what it has seen)."""
        self._listeners.setdefault(channel_id, {})[persona_id] = listener
        self._to_leave.discard(channel_id)
        self._to_subscribe.add(channel_id)
        self._changed.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"stream of {self._name}")

    def leave(self, channel_id: str, persona_id: str) -> None:
        listeners = self._listeners.get(channel_id)
        if listeners is None or listeners.pop(persona_id, None) is None:
            return
        if not listeners:
            del self._listeners[channel_id]
            self._to_subscribe.discard(channel_id)
            self._to_leave.add(channel_id)
            self._changed.set()

    async def status(self, channel_id: str, persona_id: str, *, within: float) -> wire.StatusView | None:
        """The persona's status of the channel, asked on the stream and computed by the arbiter once the ask came:
        it has every change the persona could have heard of. None when the stream is not open, or no answer came
        ``within`` seconds: read it over HTTP then."""
        if not self._open:
            return None
        key = (channel_id, persona_id)
        answer = self._asked.get(key)
        if answer is None:
            answer = self._asked[key] = asyncio.get_running_loop().create_future()
            self._to_ask.add(key)
            self._changed.set()
        if answer.done():
            return answer.result()
        return await _within(answer, within)

    def carries(self, token: str, base: str) -> bool:
        """Whether a call of the persona whose token this is can go on the stream now: it is open, to ``base`` (the
        channel's arbiter process), and acts for that persona."""
        if not self._open or self._closing or self._base != base:
            return False
        return token == self._arbiter.token or token in self._tokens

    async def call(
        self, persona_id: str, method: str, path: str, body: str | None, *, within: float
    ) -> tuple[int, str] | None:
        """A request of the persona's sent on the stream (``ArbiterClient.carry_calls_on``): the answer's status and
        body. None when the connection closed before the call went out: nothing was sent, so HTTP may send it.
        ArbiterUnavailable when it went out and no answer came ``within`` seconds or before the connection closed:
        it may have been carried out, as an HTTP request that timed out may have been."""
        if not self._open or self._closing:
            return None
        number = next(self._call_ids)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[tuple[int, str] | None] = loop.create_future()
        self._calls[number] = answer
        self._to_call.append(wire.StreamCall(id=number, persona=persona_id, method=method, path=path, body=body))
        self._changed.set()
        # A timer that fails the answer, rather than asyncio.timeout's object and timer (a call per claim, speech and
        # release: some 36 per person's message).
        timer = loop.call_later(within, _no_answer, answer, method, path, within)
        try:
            return await answer
        finally:
            timer.cancel()
            self._calls.pop(number, None)

    async def close(self) -> None:
        """Stop following. Calls under way are seen through first (as an HTTP request under way would be): a
        claim's answer, a release's, still comes; calls from now on go over HTTP."""
        self._closing = True
        under_way = [answer for answer in self._calls.values() if not answer.done()]
        if under_way:
            await asyncio.wait(under_way)  # each ends by its answer, its time limit, or the connection's end
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._closed_connection()

    async def _run(self) -> None:
        delay = self._reconnect_s
        while True:
            try:
                async with self._arbiter.stream() as stream:
                    self.connections += 1
                    # A new connection follows nothing yet: every channel from where its listeners are now.
                    self._to_subscribe, self._to_leave = set(self._listeners), set()
                    self._changed.set()
                    commands = asyncio.create_task(self._send_commands(stream))
                    try:
                        async for frame in stream.frames(self._listeners.__contains__):
                            delay = self._reconnect_s
                            self._dispatch(frame)
                    finally:
                        commands.cancel()
                        await asyncio.gather(commands, return_exceptions=True)
                        self._closed_connection()
            except asyncio.CancelledError:
                raise
            except ArbiterRejected as error:
                _log.warning("%s: stream refused (%s); leaving every channel", self._name, error)
                listeners, self._listeners = self._listeners, {}
                for by_persona in listeners.values():
                    for listener in by_persona.values():
                        listener.on_refused(str(error))
                self._task = None
                return
            except (ArbiterUnavailable, ValueError) as error:
                _log.info("%s: stream lost (%s); reconnecting", self._name, error)
            else:
                _log.info("%s: stream ended; reconnecting", self._name)
            await self._sleep(delay)
            delay = min(delay * 2, 30.0)

    def _closed_connection(self) -> None:
        """Asks still waiting will get no answer on this connection: their askers read over HTTP. So do calls not
        sent yet; calls sent are in doubt."""
        self._open, self._base = False, None
        asked, self._asked, self._to_ask = self._asked, {}, set()
        for answer in asked.values():
            if not answer.done():
                answer.set_result(None)
        unsent = {call.id for call in self._to_call}
        calls, self._calls, self._to_call = self._calls, {}, []
        for number, waiting in calls.items():
            if waiting.done():
                continue
            if number in unsent:
                waiting.set_result(None)
            else:
                waiting.set_exception(ArbiterUnavailable("the stream closed before the call's answer came"))

    async def _send_commands(self, stream: MultiplexedStream) -> None:
        self._new_tokens = []
        if self._tokens or self._skip:
            await stream.command(wire.StreamCommand(tokens=self._tokens, skip=self._skip or None))
        self._open, self._base = True, stream.base
        while True:
            await self._changed.wait()
            self._changed.clear()
            tokens, self._new_tokens = self._new_tokens, []
            if tokens:  # before the asks and subscriptions of its personas
                await stream.command(wire.StreamCommand(tokens=tokens))
            leaving, self._to_leave = sorted(self._to_leave), set()
            if leaving:
                await stream.command(wire.StreamCommand(unsubscribe=leaving))
            starting, self._to_subscribe = sorted(self._to_subscribe), set()
            subscriptions = [self._start(channel) for channel in starting if channel in self._listeners]
            for first in range(0, len(subscriptions), _BATCH):
                await stream.command(wire.StreamCommand(subscribe=subscriptions[first : first + _BATCH]))
            asks, self._to_ask = sorted(self._to_ask), set()
            calls, self._to_call = self._to_call, []
            if asks or calls:
                status = [wire.StatusAsk(channel=channel, persona=persona) for channel, persona in asks]
                await stream.command(wire.StreamCommand(status=status, calls=calls))
            del tokens, subscriptions, starting, leaving, asks, calls  # not kept while waiting for the next change

    def _start(self, channel_id: str) -> wire.Subscribe:
        """Where the channel starts for all its listeners: after the earliest seq one resumes from, and with the
        most recent history one arriving asks for."""
        afters: list[int] = []
        recents: list[int] = []
        for listener in self._listeners[channel_id].values():
            start = listener.subscription()
            if start.after is not None:
                afters.append(start.after)
            if start.recent is not None:
                recents.append(start.recent)
        return wire.Subscribe(
            channel=channel_id, after=min(afters) if afters else None, recent=max(recents) if recents else None
        )

    def _dispatch(self, frame: wire.StreamFrame) -> None:
        if isinstance(frame, wire.ReplyEvent):
            waiting = self._calls.pop(frame.id, None)
            if waiting is not None and not waiting.done():
                waiting.set_result((frame.status, frame.body))
            return
        if isinstance(frame, wire.StatusEvent):
            answer = self._asked.pop((frame.channel_id, frame.persona), None)
            if answer is not None and not answer.done():
                answer.set_result(frame.status)
            return
        if isinstance(frame, wire.EndedEvent) and frame.reason == "unknown_channel":
            # The answer to a status asked of a channel the arbiter does not know (any longer): there is none.
            for key in [key for key in self._asked if key[0] == frame.channel_id]:
                self._asked.pop(key).set_result(None)
        listeners = self._listeners.get(frame.channel_id)
        if listeners is None:
            return  # left since, or frames of a channel the stream is about to stop
        if isinstance(frame, wire.EndedEvent):
            if frame.reason != "unknown_channel":
                _log.info("%s: channel=%s %s; following it again", self._name, frame.channel_id, frame.reason)
                self._to_subscribe.add(frame.channel_id)
                self._changed.set()
            else:
                del self._listeners[frame.channel_id]
                for listener in listeners.values():
                    listener.on_refused(frame.detail)
            return
        for persona_id, listener in list(listeners.items()):
            try:
                listener.on_frame(frame)
            except Exception:
                # One persona's failure must not end the stream the others hear on.
                _log.exception("%s: persona=%s channel=%s failed on a frame", self._name, persona_id, frame.channel_id)
