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
        self._refused: set[str] = set()  # channels it was told it may not post in (warned once each)

    def _channel(self, channel_id: str) -> discord.PartialMessageable:
        return self._client.get_partial_messageable(int(channel_id))

    async def post(self, channel_id: str, text: str) -> Posted:
        try:
            message = await self._channel(channel_id).send(text, allowed_mentions=NO_MENTIONS)
        except discord.Forbidden as error:
            self._refuse(channel_id, f"Discord refused a post ({error.status} {error.text})")
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        except discord.HTTPException as error:
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        self._refused.discard(channel_id)
        return Posted(str(message.id))

    def may_post(self, channel_id: str) -> bool:
        """From the permissions discord.py keeps up to date from the gateway: no request is made. A channel it
        does not know (yet) gets the benefit of the doubt."""
        channel = self._client.get_channel(int(channel_id)) if channel_id.isdigit() else None
        if isinstance(channel, discord.abc.GuildChannel):
            permissions = channel.permissions_for(channel.guild.me)
            if not (permissions.view_channel and permissions.send_messages):
                self._refuse(channel_id, "it lacks View Channel or Send Messages there")
                return False
            if channel_id in self._refused:
                self._refused.discard(channel_id)
                _log.info("may post in channel %s again", channel_id)
        return True

    def _refuse(self, channel_id: str, why: str) -> None:
        if channel_id not in self._refused:
            self._refused.add(channel_id)
            _log.warning(
                "cannot post in channel %s: %s; it stays quiet there until a moderator gives its role Send Messages",
                channel_id,
                why,
            )

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
