"""Discord as a platform: one persona's bot account posting, typing and reacting through discord.py."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING

import discord

from bots.errors import PostFailed
from bots.platforms.base import Platform, Posted

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("NO_MENTIONS", "DiscordPlatform")

_log = logging.getLogger(__name__)

# Belt and braces: the client has the same default, and the runtime strips mention syntax before posting.
NO_MENTIONS = discord.AllowedMentions.none()


class DiscordPlatform(Platform):
    """Works by channel id alone (a partial messageable): no cache lookups, no extra requests."""

    name = "discord"

    def __init__(self, client: discord.Client) -> None:
        self._client = client

    def _channel(self, channel_id: str) -> discord.PartialMessageable:
        return self._client.get_partial_messageable(int(channel_id))

    async def post(self, channel_id: str, text: str) -> Posted:
        try:
            message = await self._channel(channel_id).send(text, allowed_mentions=NO_MENTIONS)
        except discord.HTTPException as error:
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        return Posted(str(message.id))

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: str) -> AsyncIterator[None]:
        indicator = self._channel(channel_id).typing()
        try:
            await indicator.__aenter__()
        except discord.HTTPException as error:
            # Typing is a courtesy: without the permission, generate anyway.
            _log.debug("no typing indicator in %s: %s", channel_id, error)
            yield
            return
        try:
            yield
        finally:
            await indicator.__aexit__(None, None, None)

    async def react(self, channel_id: str, platform_message_id: str, emoji: str) -> bool:
        try:
            await self._channel(channel_id).get_partial_message(int(platform_message_id)).add_reaction(emoji)
        except (discord.HTTPException, ValueError) as error:
            _log.info("could not react in %s: %s", channel_id, error)
            return False
        return True
