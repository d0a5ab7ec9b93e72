"""Channel events and their in-process fan-out to subscribers (the WebSocket streams)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Mapping

__all__ = ("Event", "EventHub", "Subscription")

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened in a channel. ``data`` is JSON-ready; ``type`` is message, level, claim, ..."""

    channel_id: str
    type: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "channel_id": self.channel_id, **self.data}, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str) -> Event:
        data = json.loads(raw)
        return cls(channel_id=data.pop("channel_id"), type=data.pop("type"), data=data)


class Subscription:
    """One subscriber's queue. Iterate it; it ends when the hub drops a subscriber that fell behind."""

    def __init__(self, hub: EventHub, channel_id: str, maxsize: int) -> None:
        self.channel_id = channel_id
        self._hub = hub
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.overflowed = False

    def _offer(self, event: Event) -> bool:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            # A slow reader must not hold everyone back or grow memory: drop it; it can resync from history.
            self.overflowed = True
            self._queue.get_nowait()
            self._queue.put_nowait(None)
            return False
        return True

    def close(self) -> None:
        self._hub._remove(self)
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(None)

    async def __aiter__(self) -> AsyncIterator[Event]:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class EventHub:
    def __init__(self, *, queue_size: int = 1_000) -> None:
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)
        self._queue_size = queue_size
        self._listeners: list[Any] = []

    def subscribe(self, channel_id: str) -> Subscription:
        subscription = Subscription(self, channel_id, self._queue_size)
        self._subscribers[channel_id].add(subscription)
        return subscription

    def watching(self, channel_id: str) -> bool:
        return bool(self._subscribers.get(channel_id))

    def add_listener(self, listener: Any) -> None:
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
