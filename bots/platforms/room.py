"""The local room as a platform: the arbiter serves the page, so a message the arbiter granted is already
shown to the person (the page follows the channel's event stream). Posting only hands back an id."""

from __future__ import annotations

import contextlib
import itertools
import secrets
from typing import TYPE_CHECKING

from bots.platforms.base import Platform, Posted

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("RoomPlatform",)


class RoomPlatform(Platform):
    """Thinking shows in the room as the persona's held claim, so typing needs nothing here."""

    name = "room"

    def __init__(self, persona_id: str) -> None:
        # Unique across restarts, as platform ids are unique per channel in the history.
        self._prefix = f"room-{persona_id}-{secrets.token_hex(4)}"
        self._ids = itertools.count(1)

    async def post(self, channel_id: str, text: str) -> Posted:
        return Posted(f"{self._prefix}-{next(self._ids)}")

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: str) -> AsyncIterator[None]:
        yield
