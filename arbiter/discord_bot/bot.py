"""ArbiterBot: records every message of the channels where the fleet is enabled, and serves ``/aizuchi``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import discord

from arbiter.core.errors import ArbiterError, NotFound
from arbiter.core.limits import MAX_TEXT_LENGTH
from arbiter.core.models import AuthorKind
from arbiter.discord_bot.commands import ModeratorCommands, ModeratorTree

if TYPE_CHECKING:
    from arbiter.service import ArbiterService

__all__ = ("ArbiterBot", "arbiter_intents")

_log = logging.getLogger(__name__)


def arbiter_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.message_content = True  # privileged: the history needs what people said (see the README)
    return intents


class ArbiterBot(discord.Client):
    def __init__(
        self,
        service: ArbiterService,
        *,
        guilds: list[int] | None = None,
        moderator_role: str | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to ``discord.Client`` (``guild_ready_timeout``, for one)."""
        super().__init__(intents=arbiter_intents(), allowed_mentions=discord.AllowedMentions.none(), **options)
        self.service = service
        self.tree = ModeratorTree(self)
        self.tree.add_command(ModeratorCommands(service, moderator_role=moderator_role))
        self._guilds = list(guilds or [])

    async def setup_hook(self) -> None:
        # Guild commands appear at once; global ones can take a while, and syncing is rate limited.
        if self._guilds:
            for guild_id in self._guilds:
                guild = discord.Object(guild_id)
                self.tree.copy_global_to(guild=guild)
                await self.tree.sync(guild=guild)
        else:
            await self.tree.sync()

    async def on_ready(self) -> None:
        _log.info("arbiter bot is on Discord as %s", self.user)

    # --- message intake: translate, then hand to the service -------------------------------------------

    async def _enabled(self, channel_id: str) -> bool:
        try:
            return (await self.service.settings(channel_id)).enabled
        except NotFound:
            return False

    async def on_message(self, message: discord.Message) -> None:
        if message.guild is None or self.user is None or message.author.id == self.user.id:
            return
        channel_id = str(message.channel.id)
        if not await self._enabled(channel_id):
            return
        persona = self.service.persona_of_platform_user(str(message.author.id))
        if persona is not None:
            kind, author_id = AuthorKind.PERSONA, persona
        else:
            kind = AuthorKind.BOT if message.author.bot else AuthorKind.HUMAN
            author_id = str(message.author.id)
        mentioned = (self.service.persona_of_platform_user(str(user.id)) for user in message.mentions)
        text = _text(message)
        try:
            await self.service.record_message(
                channel_id,
                author_id=author_id,
                author_name=message.author.display_name[:80],
                text=text,
                author_kind=kind,
                platform_message_id=str(message.id),
                mentions=[persona_id for persona_id in mentioned if persona_id is not None],
            )
        except ArbiterError as error:
            _log.warning("could not record message %s in %s: %s", message.id, channel_id, error)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        if payload.guild_id is None or "content" not in payload.data:
            return  # a DM, or an update that is not an edit of the text (an embed unfurling)
        await self._platform_change(str(payload.channel_id), str(payload.message_id), _text(payload.message))

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        if payload.guild_id is not None:
            await self._platform_change(str(payload.channel_id), str(payload.message_id), None)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        if payload.guild_id is not None:
            for message_id in sorted(payload.message_ids):
                await self._platform_change(str(payload.channel_id), str(message_id), None)

    async def _platform_change(self, channel_id: str, message_id: str, text: str | None) -> None:
        try:
            if text is None:
                await self.service.delete_message(channel_id, message_id)
            else:
                await self.service.edit_message(channel_id, message_id, text)
        except NotFound:
            pass  # a message from before the fleet was enabled, or from another channel
        except ArbiterError as error:
            _log.warning("could not apply a change to message %s in %s: %s", message_id, channel_id, error)


def _text(message: discord.Message) -> str:
    """The message as the history keeps it: mentions readable (@name), attachments noted, within bounds."""
    text = message.clean_content.strip()
    if message.attachments:
        names = ", ".join(attachment.filename for attachment in message.attachments)
        text = f"{text} [attached: {names}]".strip()
    if not text:
        text = "[an embed or a sticker]"
    return text[:MAX_TEXT_LENGTH]
