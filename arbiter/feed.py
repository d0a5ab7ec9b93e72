"""One client's feed of a channel's events: the messages it missed, replayed from the history, joined to the live
events without a gap or a duplicate. The event stream (``arbiter.api.stream``) sends it over a WebSocket.

How the two join: subscribe first, so that every event published from then on is kept; wait until the writer has
committed what it had begun (``ArbiterService.stream_start``: alone on SQLite the arbiter builds no events for a
channel nobody watches, so a change decided before the subscription would publish none); only then read the
history. Every message is then either in what was read, or committed after the read and so among the events kept;
those the replay already sent (seq up to the last one sent) are skipped. Live messages follow on one seq after
another. Should one not come (its event lost with the connection that relays another arbiter process's events, or
late from it), the next one shows the hole, and the feed reads what is missing from the history. When that
connection is lost, the next one may never come: once the process listens again, a ``CatchUpEvent`` names the
channel's last seq, and the feed reads the messages up to it the same way (``catch_up``).

A feed that falls behind the live events is dropped by the hub at once, with nothing after the last event it
got: ``last_seq`` is where the client resumes (``?after=``) and loses nothing: the last message seq it handed out, or
a later one when the messages between were gone (deleted, retracted) by the time the replay read them.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.core.errors import ArbiterError
from arbiter.events import CatchUpEvent, PersonaEvent

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Container

    from arbiter.events import EventHub, Subscription
    from arbiter.service import ArbiterService

__all__ = ("ChannelFeed", "catch_up")

_log = logging.getLogger(__name__)

_PAGE = 200  # messages per history read while replaying


class ChannelFeed:
    """Use ``async with`` (it subscribes, and raises NotFound for an unknown channel), then iterate ``events()``.

    With ``after``: the messages after that seq, replayed, then the channel's level, then every event as it
    happens. With ``recent``: the same from ``recent`` messages before the channel's last seq when the feed starts
    (a client that arrives and wants some context); with both, from whichever starts earlier. With neither: the
    level, then every event as it happens, messages from the channel's last seq on.
    """

    # One per client and channel followed: a persona process in a thousand channels has a thousand per persona.
    __slots__ = (
        "_after",
        "_hub",
        "_level",
        "_live",
        "_recent",
        "_service",
        "_start_seq",
        "_subscription",
        "_unwanted",
        "channel_id",
        "last_seq",
    )

    def __init__(
        self,
        service: ArbiterService,
        hub: EventHub,
        channel_id: str,
        *,
        after: int | None,
        recent: int | None = None,
        unwanted: Container[str] = frozenset(),
    ) -> None:
        self.channel_id = channel_id
        # The types of live events the client does without (the caller may change it as it goes): never queued. Not
        # "message": the feed follows the seqs through the messages it hands out.
        assert "message" not in unwanted
        self._unwanted = unwanted
        self._service = service
        self._hub = hub
        self._after = after
        self._recent = recent
        self._live = False  # the replay is over (the level was handed out)
        self._subscription: Subscription | None = None
        self._level: wire.LevelEvent | None = None
        self._start_seq = 0  # the channel's last seq when the feed started
        # The last message seq handed out (or, before any, the one the feed starts after): every message after it
        # is still to come. Iterating ``events()`` asks for the next event only once the last is sent, so when the
        # feed ends this is the last message the client was sent.
        self.last_seq = after or 0

    async def __aenter__(self) -> ChannelFeed:
        self._subscription = self._hub.subscribe(self.channel_id, unwanted=self._unwanted)
        try:
            self._level, last_seq = await self._service.stream_start(self.channel_id)
        except BaseException:
            self._subscription.close()
            raise
        self._start_seq = last_seq
        if self._recent is not None:
            start = max(0, last_seq - self._recent)
            self._after = self.last_seq = start if self._after is None else min(self._after, start)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._subscription is not None:
            self._subscription.close()

    def stop(self) -> None:
        """End ``events()`` after what is already queued (the client went away)."""
        if self._subscription is not None:
            self._subscription.close()

    @property
    def fell_behind(self) -> bool:
        """Whether the hub dropped this feed for falling behind (its events then end early)."""
        return self._subscription is not None and self._subscription.overflowed

    @property
    def caught_up(self) -> bool:
        """Whether the replay is over and no live event waits: what was handed out is the channel as it is now,
        as far as this feed knows (a moment to tell the client something about the whole of it)."""
        return self._live and self._subscription is not None and self._subscription.pending == 0

    async def events(self) -> AsyncIterator[wire.ArbiterEvent]:
        assert self._subscription is not None and self._level is not None, "use the feed in `async with`"
        if self._after is not None:
            async for message in self._replay(self._after):
                yield self._sent(message)
        # Up to the channel's last seq when the feed started, the history read had every message: those the replay
        # did not bring are no longer part of the conversation (retracted, deleted). Live messages follow on.
        self.last_seq = max(self.last_seq, self._start_seq)
        # The level after the replay: a client knows the replay is over when it comes. (Not kept: a feed lives as long
        # as its client follows the channel, and a persona process follows a thousand.)
        self._live = True
        level, self._level = self._level, None
        yield level
        self._hub.announce(level)
        del level
        subscription = self._subscription
        while (event := await subscription.next()) is not None:
            if isinstance(event, PersonaEvent):
                continue  # never here: the hub routes by channel id, and a persona event's ("") is no channel's
            if isinstance(event, CatchUpEvent):
                if event.last_seq > self.last_seq:
                    _log.info(
                        "channel=%s: catching up on seqs %d-%d from the history",
                        self.channel_id,
                        self.last_seq + 1,
                        event.last_seq,
                    )
                    async for message in self._replay(self.last_seq, before=event.last_seq + 1):
                        yield self._sent(message)
                    # As at the start: what the history no longer had up to that seq is no longer said.
                    self.last_seq = event.last_seq
                continue
            if isinstance(event, wire.MessageEvent):
                seq = event.message.seq
                if seq <= self.last_seq:
                    continue  # replayed already, or from before the feed started
                if seq > self.last_seq + 1:
                    # Every new message is published, so live seqs follow on one by one; a hole means events that
                    # did not come (lost with the connection that relays another arbiter's events, or still on
                    # their way from it). Seqs commit in order, so those messages are in the history: read them.
                    _log.info(
                        "channel=%s: no events of seqs %d-%d; reading them", self.channel_id, self.last_seq + 1, seq - 1
                    )
                    async for message in self._replay(self.last_seq, before=seq):
                        yield self._sent(message)
                self.last_seq = seq
            yield event

    def _sent(self, message: wire.MessageView) -> wire.MessageEvent:
        self.last_seq = message.seq
        return wire.MessageEvent(channel_id=self.channel_id, message=message)

    async def _replay(self, after: int, *, before: int | None = None) -> AsyncIterator[wire.MessageView]:
        """The messages after seq ``after`` (and before seq ``before``) from the history, oldest first."""
        while True:
            page = await self._service.history(self.channel_id, after=after, limit=_PAGE)
            for message in page.messages:
                if before is not None and message.seq >= before:
                    return
                yield message
            if not page.has_more:
                return
            after = page.next_after


async def catch_up(service: ArbiterService, hub: EventHub) -> None:
    """Every feed here catches up on what other arbiter processes committed while this one did not hear them (see
    ``CatchUpEvent``): called once the relay listens again, so every commit after the read below is heard.

    Each channel followed here is told its last seq and its level as the database has them now: a feed reads the
    messages it lacks up to that seq from the history, in order, and skips them when their events come after all
    (notifications heard since it listens again: their seqs are at most that one, and already sent)."""
    for channel_id in hub.watched():
        try:
            level, last_seq = await service.stream_start(channel_id)
        except ArbiterError as error:  # deleted meanwhile, or the database is out of reach again
            _log.info("channel=%s: no catching up: %s", channel_id, error)
            continue
        hub.publish([CatchUpEvent(channel_id=channel_id, last_seq=last_seq), level])
