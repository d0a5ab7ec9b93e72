"""An in-memory platform for tests: a shared room that records what every persona posted and when it typed."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bots.errors import PostFailed
from bots.platforms.base import Platform, Posted

if TYPE_CHECKING:
    import asyncio
    from collections.abc import AsyncIterator, Callable

__all__ = ("MemoryPlatform", "MemoryRoom", "PostRecord")


@dataclass(frozen=True, slots=True)
class PostRecord:
    persona_id: str
    channel_id: str
    text: str
    platform_message_id: str


@dataclass
class MemoryRoom:
    """Everything the personas did, in order. ``fail_post`` decides which posts fail, and posts wait for
    ``post_gate`` while it is set and closed (for failure and shutdown tests)."""

    posts: list[PostRecord] = field(default_factory=list)
    typing: list[tuple[str, str]] = field(default_factory=list)  # (persona, channel), when typing started
    typing_now: set[tuple[str, str]] = field(default_factory=set)
    fail_post: Callable[[str, str, str], bool] = lambda _persona, _channel, _text: False
    post_gate: asyncio.Event | None = None
    posting: int = 0  # posts under way
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def platform(self, persona_id: str) -> MemoryPlatform:
        return MemoryPlatform(self, persona_id)


class MemoryPlatform(Platform):
    name = "memory"

    def __init__(self, room: MemoryRoom, persona_id: str) -> None:
        self.room = room
        self.persona_id = persona_id

    async def post(self, channel_id: str, text: str) -> Posted:
        self.room.posting += 1
        try:
            if self.room.post_gate is not None:
                await self.room.post_gate.wait()
        finally:
            self.room.posting -= 1
        if self.room.fail_post(self.persona_id, channel_id, text):
            raise PostFailed(f"memory room refused the post of {self.persona_id} in {channel_id}")
        record = PostRecord(self.persona_id, channel_id, text, f"m{next(self.room._ids)}")
        self.room.posts.append(record)
        return Posted(record.platform_message_id)

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: str) -> AsyncIterator[None]:
        key = (self.persona_id, channel_id)
        self.room.typing.append(key)
        self.room.typing_now.add(key)
        try:
            yield
        finally:
            self.room.typing_now.discard(key)
