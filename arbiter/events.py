"""Channel events and their in-process fan-out to subscribers (the event streams).

Every event is one of ``arbiter.contract``'s event models (what the streams send), or one that no stream sends: a
``PersonaEvent`` keeps every arbiter process's registry of personas current, and a ``CatchUpEvent`` has a channel's
feeds read from the history what another process's events, unheard, did not bring.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from pydantic import BaseModel, Field, TypeAdapter

from arbiter.contract import ArbiterEvent, PersonaInfoView

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Container, Iterable

__all__ = ("CatchUpEvent", "Event", "EventHub", "PersonaEvent", "Subscription", "parse_any_event")

_log = logging.getLogger(__name__)


class PersonaEvent(PersonaInfoView):
    """A persona registered, or changed how it presents itself. Its channel id is empty, which no channel's is,
    so no stream carries it; the service's registry hears it, and through the PostgreSQL relay every other
    arbiter process's does too. (The JSON keeps the persona's fields at the top level, as before the models.)"""

    type: Literal["persona"] = "persona"
    channel_id: Literal[""] = ""


class CatchUpEvent(BaseModel):
    """This process did not hear the other arbiter processes for a while (its PostgreSQL listening connection was
    lost: ``arbiter.storage.pubsub``), so the events they committed meanwhile never reached its streams: the
    channel's last message seq, read once it listened again. No stream sends it: each feed of the channel reads the
    messages after the last one it sent, up to this seq, from the history (as it does for a hole in the seqs); the
    channel's level comes next, as a level event."""

    type: Literal["catch_up"] = "catch_up"
    channel_id: str
    last_seq: int


Event: TypeAlias = Annotated[ArbiterEvent | PersonaEvent | CatchUpEvent, Field(discriminator="type")]
"""Anything published on the hub."""

_ANY_EVENT: TypeAdapter[Event] = TypeAdapter(Event)


def parse_any_event(raw: str | bytes) -> Event:
    """An event from its JSON (``model_dump_json``), as another arbiter process relays it."""
    return _ANY_EVENT.validate_json(raw)


class Subscription:
    """One subscriber's queue of a channel's events. Iterate it; it ends when it is closed (after what was queued
    by then) or when the hub drops it for falling behind (at once: see ``overflowed``)."""

    __slots__ = ("_ended", "_hub", "_maxsize", "_queue", "_unwanted", "_waiter", "channel_id", "overflowed")

    def __init__(self, hub: EventHub, channel_id: str, maxsize: int, unwanted: Container[str] = frozenset()) -> None:
        self.channel_id = channel_id
        self._hub = hub
        self._maxsize = maxsize
        self._unwanted = unwanted  # the types of events its reader would drop (read at each event: it may change)
        # Both made only when needed: a stream follows a thousand channels, most of them quiet most of the time.
        self._queue: deque[Event] | None = None
        self._waiter: asyncio.Future[None] | None = None  # the reader's, while it waits for an event
        self._ended = False
        self.overflowed = False

    def _offer(self, event: Event) -> bool:
        if self._ended:
            return False
        if event.type in self._unwanted:
            return True  # not queued: its reader is not woken for an event it would drop
        if self._queue is None:
            self._queue = deque()
        if len(self._queue) >= self._maxsize:
            # A slow reader must not hold everyone back or grow memory: it is dropped, and resumes from the history
            # with ?after=<the last seq it got>. What is still queued is dropped with it, not just the oldest
            # event: the end of what a reader got is something it knows, a hole in the middle would not be.
            self.overflowed = True
            self._queue = None
            self._end()
            return False
        self._queue.append(event)
        self._wake_reader()
        return True

    @property
    def pending(self) -> int:
        """How many events wait to be read."""
        return 0 if self._queue is None else len(self._queue)

    def close(self) -> None:
        self._hub._remove(self)
        self._end()

    def _end(self) -> None:
        self._ended = True
        self._wake_reader()

    def _wake_reader(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def next(self) -> Event | None:
        """The next event, once there is one; None when the subscription has ended. (What iterating it does, with
        no generator kept alive between events: a stream of a thousand channels waits on a thousand.)"""
        while True:
            if self._queue:
                event = self._queue.popleft()
                if not self._queue:
                    self._queue = None
                return event
            if self._ended:
                return None
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def __aiter__(self) -> AsyncIterator[Event]:
        while (event := await self.next()) is not None:
            yield event

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class EventHub:
    def __init__(self, *, queue_size: int = 1_000) -> None:
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)
        # How many events a subscriber may have waiting before it is dropped as fallen behind. Read at each
        # subscription, so a test can make it small.
        self.queue_size = queue_size
        self._listeners: list[Callable[[Event], Any]] = []

    def subscribe(self, channel_id: str, *, unwanted: Container[str] = frozenset()) -> Subscription:
        """A subscription to the channel's events, but for those whose ``type`` is in ``unwanted`` (which the
        caller may change as it goes)."""
        subscription = Subscription(self, channel_id, self.queue_size, unwanted)
        self._subscribers[channel_id].add(subscription)
        return subscription

    def watching(self, channel_id: str) -> bool:
        return bool(self._subscribers.get(channel_id))

    def watched(self) -> list[str]:
        """The channels someone here follows now."""
        return list(self._subscribers)

    def add_listener(self, listener: Callable[[Event], Any]) -> None:
        """Call ``listener(event)`` for every event published (used for the refund ticker)."""
        self._listeners.append(listener)

    def announce(self, event: Event) -> None:
        """Show ``event`` to the listeners only. For a stream's first level frame, which goes to its new subscriber
        alone: the refund ticker must still learn when that channel's next refund is due."""
        for listener in self._listeners:
            listener(event)

    def publish(self, events: Iterable[Event]) -> None:
        for event in events:
            for listener in self._listeners:
                listener(event)
            for subscription in list(self._subscribers.get(event.channel_id, ())):
                if not subscription._offer(event):
                    _log.warning("dropping a subscriber of channel=%s that fell behind", event.channel_id)
                    self._remove(subscription)

    def close_all(self) -> None:
        for subscriptions in list(self._subscribers.values()):
            for subscription in list(subscriptions):
                subscription.close()

    def _remove(self, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(subscription.channel_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[subscription.channel_id]
