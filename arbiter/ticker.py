"""Level events when refunds arrive. The level needs no timer to be right (it is derived); watchers of the
event stream still want to see it rise, so while a channel has subscribers a timer fires at its next refund."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from arbiter.contract import LevelEvent
from arbiter.core.errors import ArbiterError

if TYPE_CHECKING:
    from collections.abc import Callable

    from arbiter.events import Event, EventHub
    from arbiter.service import ArbiterService

__all__ = ("RefundTicker",)

_log = logging.getLogger(__name__)


class RefundTicker:
    def __init__(self, service: ArbiterService, hub: EventHub, clock: Callable[[], float]) -> None:
        self._service = service
        self._hub = hub
        self._clock = clock
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        hub.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if not isinstance(event, LevelEvent) or event.next_refund_at is None:
            return
        if self._hub.watching(event.channel_id):
            self._schedule(event.channel_id, event.next_refund_at)

    def _schedule(self, channel_id: str, due: float) -> None:
        current = self._timers.get(channel_id)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        delay = max(0.0, due - self._clock()) + 0.005
        handle = asyncio.get_running_loop().call_later(delay, self._fire, channel_id)
        self._timers[channel_id] = (due, handle)

    def _fire(self, channel_id: str) -> None:
        self._timers.pop(channel_id, None)
        if not self._hub.watching(channel_id):
            return
        task = asyncio.create_task(self._tick(channel_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tick(self, channel_id: str) -> None:
        try:
            event = await self._service.level_event(channel_id)
        except ArbiterError as error:
            _log.debug("no level tick for channel=%s: %s", channel_id, error)
            return
        self._hub.publish([event])

    def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
