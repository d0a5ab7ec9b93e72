"""Which channels' histories MCP clients are subscribed to, and a hub subscription for each while anyone is.

The event hub (``arbiter.events``) carries every change; alone on SQLite the arbiter builds a channel's events only
while someone subscribes to that channel there, so a channel's subscription is held exactly while an MCP client
watches it, and given up with the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.events import CatchUpEvent

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from arbiter.events import EventHub, Subscription

__all__ = ("HistoryWatch",)

_log = logging.getLogger(__name__)

# What changes a channel's history: a message said, taken back, edited, deleted, or all of them cleared; or what may
# have, unheard (another arbiter process's events, while this one did not listen).
_HISTORY_EVENTS = (
    wire.MessageEvent,
    wire.RetractedEvent,
    wire.EditedEvent,
    wire.DeletedEvent,
    wire.ClearedEvent,
    CatchUpEvent,
)


class HistoryWatch:
    """Calls ``changed(channel_id)`` whenever a watched channel's history changes. ``watch`` and ``unwatch`` are
    counted: a channel is watched while it has been watched more times than unwatched."""

    def __init__(self, hub: EventHub, changed: Callable[[str], Awaitable[None]]) -> None:
        self._hub = hub
        self._changed = changed
        self._counts: Counter[str] = Counter()
        self._pumps: dict[str, asyncio.Task[None]] = {}

    def watch(self, channel_id: str) -> None:
        self._counts[channel_id] += 1
        if channel_id not in self._pumps:
            # Subscribed here, not in the task: a message committed before the task first runs is heard too.
            subscription = self._hub.subscribe(channel_id)
            pump = self._pump(channel_id, subscription)
            self._pumps[channel_id] = asyncio.create_task(pump, name=f"mcp-watch-{channel_id}")

    def unwatch(self, channel_id: str) -> None:
        self._counts[channel_id] -= 1
        if self._counts[channel_id] <= 0:
            del self._counts[channel_id]
            pump = self._pumps.pop(channel_id, None)
            if pump is not None:
                pump.cancel()

    def watched(self) -> set[str]:
        return set(self._counts)

    async def close(self) -> None:
        pumps = list(self._pumps.values())
        self._pumps.clear()
        self._counts.clear()
        for pump in pumps:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(asyncio.CancelledError):
                await pump

    async def _pump(self, channel_id: str, subscription: Subscription) -> None:
        while True:
            with subscription:
                async for event in subscription:
                    if isinstance(event, _HISTORY_EVENTS):
                        try:
                            await self._changed(channel_id)
                        except Exception:  # one client's trouble must not stop the others' notifications
                            _log.exception("channel=%s: telling MCP clients of a change failed", channel_id)
            if not subscription.overflowed:
                return  # the hub closed it: the arbiter is shutting down
            # Dropped for falling behind: subscribing again loses nothing a client needs, as a notification only
            # says "read the history again".
            _log.info("channel=%s: MCP notifications fell behind; subscribing again", channel_id)
            subscription = self._hub.subscribe(channel_id)
