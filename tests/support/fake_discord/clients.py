"""Running real discord.py clients against the fake, several in one event loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import discord

from tests.support.eventually import PATIENCE_S, eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("FAST_READY", "RecordingClient", "running")

# discord.py fires on_ready ``guild_ready_timeout`` seconds (2 s by default) after the last GUILD_CREATE, with
# no way to end the wait early; pass this to a test client's constructor to keep startup quick.
FAST_READY = 0.05


@contextlib.asynccontextmanager
async def running(client: discord.Client, token: str, *, ready_within: float = PATIENCE_S) -> AsyncIterator[None]:
    """Start ``client`` (``client.start(token)`` in a task), wait until it is ready, and close it on exit.

    Waits for readiness itself, not a fixed time (a loaded machine may take seconds to connect several clients);
    fails at once if the client stops before it is ready (a refused token, disallowed intents...)."""
    task = asyncio.create_task(client.start(token), name=f"discord-client-{token}")

    def ready() -> bool:
        if task.done():
            task.result()  # raises what stopped it
            raise AssertionError("the client stopped before it was ready")
        return client.is_ready()

    try:
        await eventually(ready, within=ready_within, what=f"the client of {token} ready")
        yield
    finally:
        await client.close()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class RecordingClient(discord.Client):
    """A plain ``discord.Client`` that keeps what it hears, for tests of the fake (and as a bystander bot)."""

    def __init__(self, *, intents: discord.Intents, **options: Any) -> None:
        options.setdefault("guild_ready_timeout", FAST_READY)
        super().__init__(intents=intents, **options)
        self.messages: list[discord.Message] = []
        self.edits: list[tuple[discord.Message, discord.Message]] = []
        self.raw_edits: list[discord.RawMessageUpdateEvent] = []
        self.deletions: list[discord.RawMessageDeleteEvent] = []
        self.reactions: list[discord.RawReactionActionEvent] = []
        self.typing_events: list[discord.RawTypingEvent] = []
        self.resumed = 0

    async def on_message(self, message: discord.Message) -> None:
        self.messages.append(message)

    async def on_message_edit(self, before: discord.Message, after: discord.Message) -> None:
        self.edits.append((before, after))

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self.raw_edits.append(payload)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.deletions.append(payload)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        self.reactions.append(payload)

    async def on_raw_typing(self, payload: discord.RawTypingEvent) -> None:
        self.typing_events.append(payload)

    async def on_resumed(self) -> None:
        self.resumed += 1

    def contents(self) -> list[str]:
        return [message.content for message in self.messages]
