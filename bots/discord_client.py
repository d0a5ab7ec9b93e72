"""A persona's own Discord bot account: it posts as the persona, and finds the channels it takes part in.

It reads no message content (so it needs no privileged intent): the runtime hears a channel's messages from
the arbiter's event stream, which the arbiter bot fills. It joins the channels the arbiter has the fleet
enabled in that this account can see; DMs and other channels are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import discord

from bots.errors import BotError
from bots.platforms.discord import NO_MENTIONS

if TYPE_CHECKING:
    from bots.runtime import PersonaRuntime

__all__ = ("PersonaClient", "persona_intents")

_log = logging.getLogger(__name__)


def persona_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True  # to notice channels it has not joined yet; content is not needed
    return intents


class PersonaClient(discord.Client):
    def __init__(self, *, refresh_s: float = 60.0) -> None:
        super().__init__(intents=persona_intents(), allowed_mentions=NO_MENTIONS)
        self.runtime: PersonaRuntime | None = None  # attached once built around this client's platform
        self._refresh_s = refresh_s
        self._refresher: asyncio.Task[None] | None = None
        self._look = asyncio.Event()

    async def on_ready(self) -> None:
        assert self.user is not None and self.runtime is not None
        self.runtime.platform.user_id = str(self.user.id)
        try:
            await self.runtime.start()
        except BotError as error:
            _log.error("persona=%s cannot register with the arbiter: %s", self.runtime.persona.id, error)
        _log.info("persona=%s is on Discord as %s", self.runtime.persona.id, self.user)
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._keep_joining(), name=f"channels {self.runtime.persona.id}")
        self._look.set()

    async def on_message(self, message: discord.Message) -> None:
        # A message in a channel it has not joined: maybe the fleet was just enabled there. Look soon.
        if (
            self.runtime is not None
            and message.guild is not None
            and str(message.channel.id) not in self.runtime.channels
        ):
            self._look.set()

    async def _keep_joining(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._look.wait(), self._refresh_s)
            self._look.clear()
            await self._join_enabled()
            await asyncio.sleep(1.0)  # a burst of messages makes one look, not one each

    async def _join_enabled(self) -> None:
        assert self.runtime is not None
        try:
            listed = await self.runtime.arbiter.channels()
        except BotError as error:
            _log.warning("persona=%s cannot list channels: %s", self.runtime.persona.id, error)
            return
        for channel in listed.channels:
            # Other channels (local rooms, say) have ids that are not Discord snowflakes.
            if channel.enabled and channel.channel_id.isdigit() and self.get_channel(int(channel.channel_id)):
                self.runtime.join(channel.channel_id)

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await super().close()
