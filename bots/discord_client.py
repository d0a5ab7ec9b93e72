"""A persona's own Discord bot account: it posts as the persona, and finds the channels it takes part in.

It reads no message content (so it needs no privileged intent): the runtime hears a channel's messages from
the arbiter's event stream, which the arbiter bot fills. It joins the channels the arbiter has the fleet
enabled in that this account can see; DMs and other channels are ignored.

It is discord.py's ``AutoShardedClient``: as many gateway shards as Discord recommends (one below 2,500
servers). Posting, typing and reacting go over REST, whatever the shard; discord.py keeps them within Discord's
per-route rate limits (it waits out a 429 and retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

import discord

from bots.app_emojis import own_emojis
from bots.errors import BotError
from bots.platforms.discord import NO_MENTIONS, DiscordPlatform

if TYPE_CHECKING:
    from bots.affinity import ChannelShare
    from bots.runtime import PersonaRuntime

__all__ = ("PersonaClient", "persona_intents")

_log = logging.getLogger(__name__)

_FOLLOW_WITHIN_S = 10.0  # how long a newly joined channel may take to start following before the next is looked at


def persona_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True  # to notice channels it has not joined yet; content is not needed
    return intents


class PersonaClient(discord.AutoShardedClient):
    def __init__(self, *, refresh_s: float = 60.0, share: ChannelShare | None = None, **options: Any) -> None:
        """``refresh_s``: how often to look for newly enabled channels unprompted; ``share``: the part of the
        channels this process takes part in, when several persona processes split them (None: every channel);
        ``options`` go to ``discord.AutoShardedClient`` (``guild_ready_timeout``, for one)."""
        super().__init__(intents=persona_intents(), allowed_mentions=NO_MENTIONS, **options)
        self.runtime: PersonaRuntime | None = None  # attached once built around this client's platform
        self._refresh_s = refresh_s
        self._share = share
        self._refresher: asyncio.Task[None] | None = None
        self._look = asyncio.Event()
        self._emojis_found = False

    async def on_ready(self) -> None:
        assert self.user is not None and self.runtime is not None
        self.runtime.platform.user_id = str(self.user.id)
        if not self._emojis_found and isinstance(self.runtime.platform, DiscordPlatform):
            # Once per start, before it joins any channel: its own emojis, uploaded the first time ever.
            self._emojis_found = True
            self.runtime.platform.use_emojis(await own_emojis(self, self.runtime.persona))
        try:
            await self.runtime.start()
        except BotError as error:
            _log.error("persona=%s cannot register with the arbiter: %s", self.runtime.persona.id, error)
        _log.info("persona=%s is on Discord as %s", self.runtime.persona.id, self.user)
        if self._refresher is None:
            self._refresher = asyncio.create_task(self._keep_joining(), name=f"channels {self.runtime.persona.id}")
        self._look.set()

    async def on_shard_ready(self, shard_id: int) -> None:
        # A shard's new session (after the first on_ready): its servers' channels are back; look for any to join.
        self._look.set()

    async def on_guild_channel_update(self, before: discord.abc.GuildChannel, after: discord.abc.GuildChannel) -> None:
        self._permissions_changed(after.guild, after.id)  # its overwrites, say

    async def on_guild_role_update(self, before: discord.Role, after: discord.Role) -> None:
        self._permissions_changed(after.guild)

    def _permissions_changed(self, guild: discord.Guild, channel_id: int | None = None) -> None:
        """What the account may do in the guild's channels (or in one, and its threads) may have changed: the persona
        looks whether it can post in the channels it takes part in there, and tells the arbiter."""
        if self.runtime is None or self.runtime.closed:
            return
        for joined in self.runtime.channels:
            channel = self.get_channel(int(joined)) if joined.isdigit() else None
            if not isinstance(channel, discord.abc.GuildChannel | discord.Thread) or channel.guild != guild:
                continue
            # A thread has its channel's permissions.
            if channel_id is None or channel_id in (channel.id, getattr(channel, "parent_id", None)):
                self.runtime.join(joined).permissions_changed()

    async def on_message(self, message: discord.Message) -> None:
        if self.runtime is None or message.guild is None:
            return
        if isinstance(self.runtime.platform, DiscordPlatform):
            self.runtime.platform.saw(message)
        if str(message.channel.id) not in self.runtime.channels:
            # A message in a channel it has not joined: maybe the fleet was just enabled there. Look soon.
            self._look.set()

    async def _keep_joining(self) -> None:
        while True:
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that lands as the event is set,
            # and close() would then wait here for a whole refresh.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh_s):
                    await self._look.wait()
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
            if self.runtime.closed:
                return  # stopping: the bot leaves Discord next
            channel_id = channel.channel_id
            # Other channels (local rooms, say) have ids that are not Discord snowflakes.
            if not channel.enabled or not channel_id.isdigit() or channel_id in self.runtime.channels:
                continue
            if self._share is not None and not self._share.holds(channel_id):
                continue  # another persona process's
            if not self._sees(int(channel_id)):
                continue
            # It may see a channel and still not be allowed to post there: the platform says so once, and the
            # persona stays quiet there (no model call) until a moderator fixes the permission.
            self.runtime.platform.cannot_post(channel_id)
            worker = self.runtime.join(channel_id)
            try:
                # Following the channel's events from now on: what is said from here is heard (and logged so).
                async with asyncio.timeout(_FOLLOW_WITHIN_S):
                    await worker.ready()
            except TimeoutError:
                _log.warning(
                    "persona=%s: channel %s does not answer yet; it keeps trying", self.runtime.persona.id, channel_id
                )
            else:
                _log.info("persona=%s takes part in channel %s", self.runtime.persona.id, channel_id)

    def _sees(self, channel_id: int) -> bool:
        """Whether this account sees the channel or thread (Discord lists every channel of a guild, seen or not)."""
        channel = self.get_channel(channel_id)
        if not isinstance(channel, discord.abc.GuildChannel | discord.Thread):
            return False
        return channel.permissions_for(channel.guild.me).view_channel

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await super().close()
