"""Discord through channel webhooks: a persona without a bot of its own posts under its own name and avatar through
a webhook of the arbiter's application (one-application mode).

One webhook per channel serves every such persona (the name and avatar are given with each message); a thread
posts through its channel's. The webhook is looked for among the channel's own first (one the application made
before, a restart ago say: Discord shows a webhook's token only to the application that made it) and made only when
there is none, since a channel holds at most 15. Making and listing webhooks takes the Manage Webhooks permission.

What a webhook cannot do, it does not pretend to: it cannot react (a nod is posted as text), reply (a persona
quotes instead, as its words do), or show typing. It holds no gateway session: the persona hears the channel from
the arbiter's event stream, as every persona does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import discord
from discord.utils import MISSING

from bots.errors import PostFailed
from bots.platforms.base import Platform, Posted
from bots.platforms.discord import DISCORD_FAILURES, NO_MENTIONS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from bots.persona import Persona

__all__ = ("WEBHOOK_NAME", "ChannelHooks", "WebhookPlatform")

_log = logging.getLogger(__name__)

WEBHOOK_NAME = "aizuchi"  # the webhook's own name; each message carries its persona's
# How long after a channel's webhook could not be had it is looked for again (a moderator may have fixed it).
_RETRY_S = 60.0
_HOOKED = (discord.TextChannel, discord.VoiceChannel, discord.StageChannel, discord.ForumChannel)
_UNKNOWN_WEBHOOK = 10015
_TOO_MANY_WEBHOOKS = 30007
_MISSING_ACCESS = 50001

_Hooked = discord.TextChannel | discord.VoiceChannel | discord.StageChannel | discord.ForumChannel
_Target = tuple[discord.Webhook, discord.abc.Snowflake | None]  # the webhook, and the thread to post in (if any)


class ChannelHooks:
    """The webhooks one application's personas post through, one per channel, found or made once and kept.
    ``client``: logged in with the application's bot token (REST only). Shared by the process's webhook personas."""

    def __init__(self, client: discord.Client, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._client = client
        self._clock = clock
        self._targets: dict[str, _Target] = {}  # by channel (or thread) id
        self._hooks: dict[int, discord.Webhook] = {}  # by the channel that holds it
        self._locks: dict[int, asyncio.Lock] = {}
        self._failed: dict[str, tuple[str, float]] = {}  # by channel: why it has no webhook, and when to look again
        self._looking: dict[str, asyncio.Task[None]] = {}
        self._listeners: list[Callable[[str], None]] = []

    def on_ready(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(channel_id)`` when a channel that had no webhook has one again."""
        self._listeners.append(listener)

    async def target(self, channel_id: str) -> _Target:
        """The webhook to post in the channel with, found or made. Raises ``PostFailed`` naming what is missing."""
        known = self._targets.get(channel_id)
        if known is not None:
            return known
        try:
            found = await self._find(channel_id)
        except PostFailed as error:
            if channel_id not in self._failed:
                _log.warning("cannot post through a webhook in channel %s: %s", channel_id, error)
            self._failed[channel_id] = (str(error), self._clock() + _RETRY_S)
            raise
        self._targets[channel_id] = found
        if self._failed.pop(channel_id, None) is not None:
            _log.info("channel %s has its webhook again: its personas may post there", channel_id)
            for listener in self._listeners:
                listener(channel_id)
        return found

    async def prepare(self, channel_id: str) -> str | None:
        """Have the channel's webhook ready before anyone posts there; why it cannot be had, or None."""
        try:
            await self.target(channel_id)
        except PostFailed as error:
            return str(error)
        return None

    def cannot_post(self, channel_id: str) -> str | None:
        """Why a post in the channel would fail, without a request: its webhook could not be had. Once a while has
        passed it is looked for again in the background, and the channel stays quiet until it is found."""
        failed = self._failed.get(channel_id)
        if failed is None:
            return None
        why, retry_at = failed
        if self._clock() >= retry_at and channel_id not in self._looking:
            task = asyncio.get_running_loop().create_task(self._look_again(channel_id), name=f"webhook {channel_id}")
            self._looking[channel_id] = task
        return why

    async def _look_again(self, channel_id: str) -> None:
        try:
            await self.prepare(channel_id)
        finally:
            self._looking.pop(channel_id, None)

    def forget(self, channel_id: str, hook: discord.Webhook) -> None:
        """The webhook is gone (deleted on Discord): the next post finds or makes another."""
        self._targets = {k: v for k, v in self._targets.items() if v[0].id != hook.id}
        self._hooks = {k: v for k, v in self._hooks.items() if v.id != hook.id}
        _log.info("the webhook of channel %s was deleted; finding or making another", channel_id)

    async def _find(self, channel_id: str) -> _Target:
        if not channel_id.isdigit():
            raise PostFailed(f"channel {channel_id} is not a Discord channel")
        channel = await self._fetch(int(channel_id))
        thread = None
        if isinstance(channel, discord.Thread):
            thread = discord.Object(channel.id)
            channel = await self._fetch(channel.parent_id)
        if not isinstance(channel, _HOOKED):
            raise PostFailed(f"channel {channel_id} is not a channel Discord's webhooks post in")
        lock = self._locks.setdefault(channel.id, asyncio.Lock())
        async with lock:  # two personas' first posts in a channel make one webhook, not two
            hook = self._hooks.get(channel.id)
            if hook is None:
                hook = self._hooks[channel.id] = await self._own_or_new(channel)
        return hook, thread

    async def _fetch(self, channel_id: int) -> discord.abc.GuildChannel | discord.abc.PrivateChannel | discord.Thread:
        try:
            return await self._client.fetch_channel(channel_id)
        except discord.HTTPException as error:
            raise PostFailed(_refusal(error, channel_id)) from error
        except DISCORD_FAILURES as error:
            raise PostFailed(f"Discord could not be reached ({type(error).__name__}: {error})") from error

    async def _own_or_new(self, channel: _Hooked) -> discord.Webhook:
        me = self._client.user
        assert me is not None  # logged in
        try:
            # Ours: made by our bot, and its token shown (Discord shows it to the application that made it only).
            for hook in await channel.webhooks():
                if hook.token and hook.user is not None and hook.user.id == me.id:
                    return hook
            made = await channel.create_webhook(name=WEBHOOK_NAME, reason="aizuchi: the personas post through it")
        except discord.HTTPException as error:
            raise PostFailed(_refusal(error, channel.id)) from error
        except DISCORD_FAILURES as error:
            raise PostFailed(f"Discord could not be reached ({type(error).__name__}: {error})") from error
        _log.info("made a webhook in #%s (%s) for the personas to post through", channel.name, channel.id)
        return made


def _refusal(error: discord.HTTPException, channel_id: int) -> str:
    """What a refusal means for the moderators, as a line naming the fix."""
    if error.code == _TOO_MANY_WEBHOOKS:
        return (
            f"channel {channel_id} has 15 webhooks, Discord's limit, none of them ours: delete one (Edit Channel > "
            "Integrations > Webhooks)"
        )
    if error.status == 403 and error.code == _MISSING_ACCESS:
        return f"the arbiter's bot lacks the View Channel permission in channel {channel_id}"
    if error.status == 403:
        return (
            f"the arbiter's bot lacks the Manage Webhooks permission in channel {channel_id}: allow it for its role "
            "(Edit Channel > Permissions)"
        )
    return f"Discord refused the channel's webhook ({error.status} {error.text})"


class _WebhookGone(PostFailed):
    """Discord no longer knows the webhook (someone deleted it)."""


class WebhookPlatform(Platform):
    """One persona posting through its channels' webhooks (``hooks``, shared), under its name and avatar."""

    name = "discord-webhook"
    reacts = False

    def __init__(self, persona: Persona, hooks: ChannelHooks) -> None:
        self._username = persona.display_name  # 1-80 characters, as Discord takes a webhook's username
        self._avatar_url = persona.avatar_url or MISSING
        self._hooks = hooks

    async def post(self, channel_id: str, text: str) -> Posted:
        hook, thread = await self._hooks.target(channel_id)
        try:
            message = await self._send(hook, thread, text)
        except _WebhookGone:
            self._hooks.forget(channel_id, hook)  # deleted meanwhile: once more, through the one found or made now
            hook, thread = await self._hooks.target(channel_id)
            message = await self._send(hook, thread, text)
        return Posted(str(message.id))

    async def _send(self, hook: discord.Webhook, thread: discord.abc.Snowflake | None, text: str) -> discord.Message:
        try:
            return await hook.send(
                text,
                username=self._username,
                avatar_url=self._avatar_url,
                allowed_mentions=NO_MENTIONS,  # nobody is pinged, whatever the text says
                thread=thread if thread is not None else MISSING,
                wait=True,  # the message back, for its id: the arbiter links its grant to it
            )
        except discord.HTTPException as error:
            if error.code == _UNKNOWN_WEBHOOK:
                raise _WebhookGone(f"the channel's webhook was deleted ({error.status} {error.text})") from error
            raise PostFailed(f"Discord refused the message ({error.status}): {error.text}") from error
        except DISCORD_FAILURES as error:
            raise PostFailed(f"Discord could not be reached ({type(error).__name__}: {error})") from error

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: str) -> AsyncIterator[None]:
        yield  # a webhook cannot show typing

    def cannot_post(self, channel_id: str) -> str | None:
        return self._hooks.cannot_post(channel_id)
