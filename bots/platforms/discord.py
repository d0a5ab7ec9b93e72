"""Discord as a platform: one persona's bot account posting, typing and reacting through discord.py."""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

import aiohttp
import discord

from arbiter.contract import DISCORD_SPEECH_TYPES
from bots.errors import PostFailed
from bots.platforms.base import Platform, Posted

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

__all__ = ("DISCORD_FAILURES", "NO_MENTIONS", "DiscordPlatform")

_log = logging.getLogger(__name__)

# Belt and braces: the client has the same default, and the runtime strips mention syntax before posting.
NO_MENTIONS = discord.AllowedMentions.none()
# Every way a request through discord.py fails: Discord's answer (HTTPException), and when Discord could not be reached
# at all, the network (aiohttp, OSError), a rate limit longer than it will wait (RateLimited, a DiscordException) or
# the client closed meanwhile (its HTTP session: RuntimeError).
_FAILURES = (discord.DiscordException, aiohttp.ClientError, OSError, RuntimeError)
DISCORD_FAILURES = _FAILURES
# How a persona says one of its own emojis: by name, between colons.
_EMOJI_BY_NAME = re.compile(r":[A-Za-z0-9_]{2,32}:")
# How many of its latest posts an account remembers what it had seen when it sent them.
_POSTS_REMEMBERED = 256
# How long a post Discord refused (403) keeps a persona quiet in a channel whose permissions seem to allow it.
_REFUSAL_HOLDS_S = 600.0
_VIEW_CHANNEL = discord.Permissions(view_channel=True).value
# What posting takes, by whether the channel is a thread: the permission, and its name in Discord's settings.
_POSTING = {
    False: (discord.Permissions(send_messages=True).value, "Send Messages"),
    True: (discord.Permissions(send_messages_in_threads=True).value, "Send Messages in Threads"),
}


class DiscordPlatform(Platform):
    """Works by channel id alone (a partial messageable): no cache lookups, no extra requests."""

    name = "discord"

    def __init__(self, client: discord.Client, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        # Posts Discord refused (403) by channel: why, the permissions the account seemed to have then, and when. A
        # server may refuse what the permissions seem to allow; the refusal holds until they change, or for a while
        # (a model is not asked for words that would be refused again).
        self._refusals: dict[str, tuple[str, int | None, float]] = {}
        self._told: dict[str, str] = {}  # channels said (once) to be unpostable, and why
        self._said: dict[str, int] = {}  # by channel: the newest message a person said there, as this account saw it
        # By post: self._said in its channel when the post was sent. A person's message with an id between the two
        # crossed the post on its way: it is before the post in the channel, but the persona could not have read it.
        self._seen_at_post: OrderedDict[str, int] = OrderedDict()
        self._own_emojis: dict[str, discord.PartialEmoji] = {}  # the persona's own, by how it says them (":name:")

    def use_emojis(self, emojis: Mapping[str, discord.PartialEmoji]) -> None:
        """The persona's own emojis, uploaded (``bots.app_emojis``): it may react with them from now on."""
        self._own_emojis = dict(emojis)

    def emoji_nods(self) -> tuple[str, ...]:
        return tuple(self._own_emojis)

    def _channel(self, channel_id: str) -> discord.PartialMessageable:
        return self._client.get_partial_messageable(int(channel_id))

    async def post(self, channel_id: str, text: str) -> Posted:
        seen = self.latest_said(channel_id)
        try:
            message = await self._channel(channel_id).send(text, allowed_mentions=NO_MENTIONS)
        except discord.Forbidden as error:
            why = f"Discord refused a post ({error.status} {error.text})"
            self._refusals[channel_id] = (why, self._permissions(channel_id), self._clock() + _REFUSAL_HOLDS_S)
            self.cannot_post(channel_id)  # said once
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        except discord.HTTPException as error:
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        except _FAILURES as error:
            raise PostFailed(f"Discord could not be reached ({type(error).__name__}: {error})") from error
        self._refusals.pop(channel_id, None)
        self._seen_at_post[str(message.id)] = seen
        if len(self._seen_at_post) > _POSTS_REMEMBERED:
            self._seen_at_post.popitem(last=False)
        return Posted(str(message.id))

    def saw(self, message: discord.Message) -> None:
        """The account saw ``message`` on its own gateway (without its content: it needs no privileged intent)."""
        if message.author.bot or message.type.value not in DISCORD_SPEECH_TYPES:
            return  # what the arbiter records and the persona waits for: people speaking
        channel_id = str(message.channel.id)
        self._said[channel_id] = max(self._said.get(channel_id, 0), message.id)

    def latest_said(self, channel_id: str) -> int:
        return self._said.get(channel_id, 0)

    def seen_when_posting(self, platform_message_id: str) -> int | None:
        """The newest message a person had said in the channel, as this account had seen it, when it sent the post
        ``platform_message_id`` (0: none); None for a post it did not send or no longer remembers. A person's
        message between the two ids crossed the post: no persona can wait for what it has not yet seen."""
        return self._seen_at_post.get(platform_message_id)

    def cannot_post(self, channel_id: str) -> str | None:
        """From the permissions discord.py keeps up to date from the gateway (no request is made), and a post Discord
        refused, while they stay as they were (for ``_REFUSAL_HOLDS_S`` at most). A channel it does not know (yet)
        gets the benefit of the doubt."""
        why = None
        channel = self._known(channel_id)
        permissions = None if channel is None else channel.permissions_for(channel.guild.me).value
        # A thread's permissions are its channel's, but posting there takes Send Messages in Threads.
        posting, name = _POSTING[isinstance(channel, discord.Thread)]
        if permissions is not None and not permissions & _VIEW_CHANNEL:
            why = "it lacks the View Channel permission there"
        elif permissions is not None and not permissions & posting:
            why = f"it lacks the {name} permission there"
        elif (refused := self._refusals.get(channel_id)) is not None:
            said, seemed, until = refused
            if seemed == permissions and self._clock() < until:
                why = said
            else:
                del self._refusals[channel_id]  # the permissions changed since, or it was long ago: worth trying again
        self._tell(channel_id, why)
        return why

    def _permissions(self, channel_id: str) -> int | None:
        """The account's permissions in the channel as discord.py knows them (None for a channel it does not know)."""
        channel = self._known(channel_id)
        return None if channel is None else channel.permissions_for(channel.guild.me).value

    def _known(self, channel_id: str) -> discord.abc.GuildChannel | discord.Thread | None:
        """The server channel or thread, if discord.py knows it (from the gateway: no request)."""
        channel = self._client.get_channel(int(channel_id)) if channel_id.isdigit() else None
        return channel if isinstance(channel, discord.abc.GuildChannel | discord.Thread) else None

    def _tell(self, channel_id: str, why: str | None) -> None:
        """Say once that it cannot post in a channel, and once that it can again."""
        if why is None:
            if self._told.pop(channel_id, None) is not None:
                _log.info("may post in channel %s again", channel_id)
        elif self._told.get(channel_id) != why:
            self._told[channel_id] = why
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
        except _FAILURES as error:
            # Typing is a courtesy: without the permission, generate anyway.
            _log.debug("no typing indicator in %s: %s", channel_id, error)
            yield
            return
        try:
            yield
        finally:
            await indicator.__aexit__(None, None, None)

    async def react(self, channel_id: str, platform_message_id: str, emoji: str) -> bool:
        """A Unicode emoji as it is; one of the persona's own by name (``:name:``), if it has it here."""
        reaction: str | discord.PartialEmoji = self._own_emojis.get(emoji.strip(), emoji)
        if isinstance(reaction, str) and _EMOJI_BY_NAME.fullmatch(reaction.strip()):
            _log.info("could not react in %s: %s is not one of its emojis here", channel_id, reaction)
            return False
        try:
            await self._channel(channel_id).get_partial_message(int(platform_message_id)).add_reaction(reaction)
        except (ValueError, *_FAILURES) as error:
            _log.info("could not react in %s: %s", channel_id, error)
            return False
        return True
