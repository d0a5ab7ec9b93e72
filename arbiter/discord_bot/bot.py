"""ArbiterBot: records every message of the channels where the fleet is enabled (reading back, after a restart
or a reconnect, what it missed), and serves ``/aizuchi``.

It is discord.py's ``AutoShardedClient``: it opens as many gateway shards as Discord recommends (one below 2,500
servers), each with its own session. Intake and catching up are per shard: a shard that reconnects reads back
what was said in its own servers' channels, while the other shards go on recording."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import mimetypes
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import aiohttp
import discord

from arbiter.contract import DISCORD_SPEECH_TYPES
from arbiter.core.errors import ArbiterError, NotFound
from arbiter.core.images import ImageRef, signed_expiry
from arbiter.core.limits import MAX_TEXT_LENGTH
from arbiter.core.models import AuthorKind
from arbiter.discord_bot.commands import ModeratorCommands, ModeratorTree

if TYPE_CHECKING:
    from arbiter.service import ArbiterService

__all__ = ("ArbiterBot", "CommandSyncRefused", "arbiter_intents")

_log = logging.getLogger(__name__)

# After a restart or a new gateway session the bot reads back what was said meanwhile in each enabled channel:
# at most this many of the newest messages, none older than this. A longer gap is not filled in.
CATCH_UP_LIMIT = 100  # one request: Discord's page size
CATCH_UP_WINDOW_S = 3600.0
# How long a new message waits for a catch-up of its channel to finish before it is recorded anyway (so that
# the history keeps Discord's order: what was said while the bot was away comes before what is said now).
_INTAKE_WAIT_S = 60.0

_CatchUpChannel = discord.TextChannel | discord.VoiceChannel | discord.StageChannel | discord.Thread


def arbiter_intents() -> discord.Intents:
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.message_content = True  # privileged: the history needs what people said (see docs/discord.md)
    return intents


class CommandSyncRefused(ArbiterError):
    """Discord would not take the slash commands: without them no moderator can enable a channel."""

    code = "sync_refused"


class ArbiterBot(discord.AutoShardedClient):
    def __init__(
        self,
        service: ArbiterService,
        *,
        guilds: list[int] | None = None,
        moderator_role: str | None = None,
        **options: Any,
    ) -> None:
        """``options`` go to ``discord.AutoShardedClient`` (``guild_ready_timeout``, for one)."""
        super().__init__(intents=arbiter_intents(), allowed_mentions=discord.AllowedMentions.none(), **options)
        self.service = service
        self.tree = ModeratorTree(self)
        self.tree.add_command(ModeratorCommands(service, moderator_role=moderator_role))
        self._guilds = list(guilds or [])
        # Catching up (see on_shard_ready): the tasks under way, by channel; the channels to catch up on (again).
        self._catch_ups: dict[str, asyncio.Task[None]] = {}
        self._catch_up_again: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        # By shard: cleared from a shard's new session (READY) until its catch-ups are under way.
        self._intake_open: dict[int, asyncio.Event] = {}
        self._warned: set[str] = set()  # channels whose history cannot be read, warned about once

    async def setup_hook(self) -> None:
        # Guild commands appear at once; global ones can take a while, and syncing is rate limited.
        if not self._guilds:
            try:
                await self.tree.sync()
            except (discord.Forbidden, discord.NotFound) as error:
                raise CommandSyncRefused(
                    f"Discord refused the slash commands ({error.status} {error.text}): invite the arbiter's bot "
                    "with the applications.commands scope (run aizuchi discord check for its invite URL)"
                ) from error
            return
        for guild_id in self._guilds:
            guild = discord.Object(guild_id)
            self.tree.copy_global_to(guild=guild)
            try:
                await self.tree.sync(guild=guild)
            except (discord.Forbidden, discord.NotFound) as error:
                raise CommandSyncRefused(
                    f"Discord refused the slash commands in server {guild_id} ({error.status} {error.text}): the "
                    "arbiter's bot is not in that server, or was invited without the applications.commands scope;"
                    " check ARBITER_DISCORD_GUILDS, and run aizuchi discord check for its invite URL"
                ) from error

    async def on_ready(self) -> None:
        # Every shard is ready (each caught up on its own, in on_shard_ready).
        _log.info("arbiter bot is on Discord as %s (%s shards)", self.user, self.shard_count)

    async def on_shard_ready(self, shard_id: int) -> None:
        """After every new session of a shard (the first, and one that replaced a lost session): read back what
        was said in its servers' channels while it was away."""
        _log.info("arbiter bot: shard %d is ready", shard_id)
        self._start_catch_up(shard_id)

    async def on_shard_resumed(self, shard_id: int) -> None:
        """A resumed session: Discord replayed the events it missed; a catch-up fills in any it did not."""
        self._start_catch_up(shard_id)

    async def on_shard_connect(self, shard_id: int) -> None:
        # A shard's new session (READY): its messages may arrive before its on_shard_ready; they wait for its
        # catch-up (see on_message).
        self._gate(shard_id).clear()

    def _gate(self, shard_id: int) -> asyncio.Event:
        gate = self._intake_open.get(shard_id)
        if gate is None:
            gate = self._intake_open[shard_id] = asyncio.Event()
            gate.set()
        return gate

    async def close(self) -> None:
        for task in [*self._background, *self._catch_ups.values()]:
            task.cancel()
        await super().close()

    # --- message intake: translate, then hand to the service -------------------------------------------

    async def _enabled(self, channel_id: str) -> bool:
        try:
            return (await self.service.settings(channel_id)).enabled
        except NotFound:
            return False

    def _observable(self, message: discord.Message) -> bool:
        """Somebody speaking in a server channel: not the arbiter itself, and not a notice Discord wrote (a pin, a
        member joining, a thread created...: see ``DISCORD_SPEECH_TYPES``), which nobody said and nobody answers."""
        return (
            message.guild is not None
            and self.user is not None
            and message.author.id != self.user.id
            and message.type.value in DISCORD_SPEECH_TYPES
        )

    async def on_message(self, message: discord.Message) -> None:
        if not self._observable(message):
            return
        channel_id = str(message.channel.id)
        assert message.guild is not None  # _observable
        await self._after_catch_up(channel_id, message.guild.shard_id)
        if not await self._enabled(channel_id):
            return
        try:
            await self._record(channel_id, message)
        except ArbiterError as error:
            _log.warning("could not record message %s in %s: %s", message.id, channel_id, error)

    async def _record(self, channel_id: str, message: discord.Message, *, at: float | None = None) -> bool:
        """Translate a Discord message into a record of the channel's history (``at``: see record_message).
        Whether it was new there."""
        persona = self._persona_of(message)
        if persona is not None:
            kind, author_id = AuthorKind.PERSONA, persona
        else:
            # A webhook's message is never a person's, whatever its author says.
            kind = AuthorKind.BOT if message.author.bot or message.webhook_id is not None else AuthorKind.HUMAN
            author_id = str(message.author.id)
        spoken_to = [self.service.registry.persona_of_platform_user(str(user.id)) for user in message.mentions]
        replied = message.reference.resolved if message.reference is not None else None
        if isinstance(replied, discord.Message):
            spoken_to.append(self._persona_of(replied))  # a reply to a persona's message speaks to that persona
        result = await self.service.record_message(
            channel_id,
            author_id=author_id,
            author_name=message.author.display_name[:80],
            text=_text(message),
            author_kind=kind,
            platform_message_id=str(message.id),
            mentions=[persona_id for persona_id in spoken_to if persona_id is not None],
            at=at,
            images=_images(message),
        )
        return result.created

    def _persona_of(self, message: discord.Message) -> str | None:
        """The persona who posted ``message``: by its bot account; or, posted through a webhook our application owns
        (one-application mode), by the name it was posted under. Another application's webhook posts no persona's."""
        if message.webhook_id is None:
            return self.service.registry.persona_of_platform_user(str(message.author.id))
        if message.application_id is None or message.application_id != self.application_id:
            return None
        return self.service.registry.persona_named(message.author.name)

    # --- catching up after a restart or a reconnect ------------------------------------------------------

    async def _after_catch_up(self, channel_id: str, shard_id: int) -> None:
        """Wait while the channel's history is being read back, so what is said now is recorded after it."""
        try:
            async with asyncio.timeout(_INTAKE_WAIT_S):
                await self._gate(shard_id).wait()
                while (task := self._catch_ups.get(channel_id)) is not None:
                    await asyncio.wait({task})
        except TimeoutError:
            _log.warning("channel %s: a catch-up is taking long; recording a new message meanwhile", channel_id)

    def _start_catch_up(self, shard_id: int) -> None:
        self._gate(shard_id).clear()
        task = asyncio.create_task(self._catch_up_all(shard_id), name=f"arbiter catch-up, shard {shard_id}")
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _catch_up_all(self, shard_id: int) -> None:
        try:
            for summary in (await self.service.channels()).channels:
                # Channels of the local room share the database; only Discord's (snowflake ids) are read back.
                if summary.enabled and summary.channel_id.isdigit() and self._on_shard(summary.channel_id, shard_id):
                    self._catch_up_channel(summary.channel_id)
        except Exception as error:  # the database; the bot goes on, recording new messages as they come
            _log.warning("could not list the channels to catch up on (%s: %s)", type(error).__name__, error)
        finally:
            self._gate(shard_id).set()  # its new messages now wait only for their own channel's catch-up

    def _on_shard(self, channel_id: str, shard_id: int) -> bool:
        """Whether the channel's server is on that shard. A channel no shard knows (deleted, or the bot is not in
        its server) goes with shard 0, so that its warning (see _readable_channel) still comes once."""
        channel = self.get_channel(int(channel_id))
        guild = getattr(channel, "guild", None)
        return guild.shard_id == shard_id if isinstance(guild, discord.Guild) else shard_id == 0

    def _catch_up_channel(self, channel_id: str) -> None:
        """Catch up on the channel: now, or again right after the catch-up under way, never two at once."""
        self._catch_up_again.add(channel_id)
        if channel_id not in self._catch_ups:
            task = asyncio.create_task(self._catch_up_loop(channel_id), name=f"arbiter catch-up {channel_id}")
            self._catch_ups[channel_id] = task

    async def _catch_up_loop(self, channel_id: str) -> None:
        try:
            while channel_id in self._catch_up_again:
                self._catch_up_again.discard(channel_id)
                try:
                    await self._catch_up(channel_id)
                except (discord.DiscordException, aiohttp.ClientError, ArbiterError, OSError, TimeoutError) as error:
                    _log.warning(
                        "channel %s: could not read back what was said while the arbiter was away (%s: %s)",
                        channel_id,
                        type(error).__name__,
                        error,
                    )
                except Exception:
                    _log.exception("channel %s: catch-up failed", channel_id)
        finally:
            del self._catch_ups[channel_id]

    async def _catch_up(self, channel_id: str) -> None:
        """Read back the channel's last CATCH_UP_LIMIT messages (none older than CATCH_UP_WINDOW_S, nor from before
        the fleet was (re-)enabled there or its history cleared). Record, oldest first and each once, those after the
        newest one recorded; each keeps the time it was said (see ``rules.observe``). And compare the ones recorded
        before with what the channel shows now: an edit or a deletion the bot missed (away, or an event it could not
        read) is applied then (``service.reconcile``)."""
        channel = self._readable_channel(channel_id)
        if channel is None:
            return
        mark = await self.service.intake_mark(channel_id)
        since = self.service.now() - CATCH_UP_WINDOW_S
        if mark.since is not None:
            since = max(since, mark.since)
        after = _snowflake_before(since)
        # Newest first, one page, then oldest first: the last CATCH_UP_LIMIT messages after ``after``.
        history = channel.history(limit=CATCH_UP_LIMIT, after=discord.Object(after), oldest_first=False)
        found = [message async for message in history]
        recorded_up_to = int(mark.after) if mark.after is not None else 0
        if recorded_up_to:
            await self._reconcile(channel_id, found, after, recorded_up_to)
        recorded = 0
        for message in reversed(found):
            if message.id <= recorded_up_to or not self._observable(message):
                continue
            try:
                recorded += await self._record(channel_id, message, at=message.created_at.timestamp())
            except NotFound:
                return  # the channel was deleted meanwhile
            except ArbiterError as error:
                _log.warning("could not record message %s in %s: %s", message.id, channel_id, error)
        if recorded:
            _log.info("channel %s: recorded %d messages said while the arbiter was away", channel_id, recorded)

    async def _reconcile(self, channel_id: str, found: list[discord.Message], after: int, recorded_up_to: int) -> None:
        """Compare the recorded messages a catch-up read back (``found``, newest first, said after ``after``) with
        what the channel shows. The range compared: from the oldest one read back (everything since ``after`` when
        less than a page came) up to the newest recorded one (or the newest read back: nothing after it existed)."""
        oldest = after if len(found) < CATCH_UP_LIMIT else found[-1].id - 1
        newest = max(recorded_up_to, found[0].id if found else 0)
        shown = {str(message.id): _text(message) for message in found if self._observable(message)}
        edited, deleted = await self.service.reconcile(channel_id, shown, after=oldest, until=newest)
        if edited or deleted:
            _log.info("channel %s: %d edits, %d deletions made while the arbiter was away", channel_id, edited, deleted)

    def _readable_channel(self, channel_id: str) -> _CatchUpChannel | None:
        """The channel, if the bot can read its history; else None, with one warning per channel."""
        channel = self.get_channel(int(channel_id))
        if not isinstance(channel, _CatchUpChannel):
            why = "is not a text channel the arbiter's bot can see (deleted, or the bot is not in its server)"
        elif not (permissions := channel.permissions_for(channel.guild.me)).view_channel:
            why = f"(#{channel.name}): the arbiter's bot lacks the View Channel permission there"
        elif not permissions.read_message_history:
            why = f"(#{channel.name}): the arbiter's bot lacks the Read Message History permission there"
        else:
            self._warned.discard(channel_id)
            return channel
        if channel_id not in self._warned:
            self._warned.add(channel_id)
            _log.warning(
                "channel %s %s, so what is said there while the arbiter is away is not recorded", channel_id, why
            )
        return None

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


def _snowflake_before(at: float) -> int:
    """The largest snowflake before POSIX time ``at``: messages after it were said at ``at`` or later."""
    return discord.utils.time_snowflake(dt.datetime.fromtimestamp(max(at, 1_420_070_400.0), dt.UTC)) - 1


def _text(message: discord.Message) -> str:
    """The message as the history keeps it: mentions readable (@name), attachments noted, within bounds."""
    text = message.clean_content.strip()
    if message.attachments:
        names = ", ".join(attachment.filename for attachment in message.attachments)
        text = f"{text} [attached: {names}]".strip()
    if not text:
        text = "[an embed or a sticker]"
    return text[:MAX_TEXT_LENGTH]


def _images(message: discord.Message) -> list[ImageRef]:
    """The images shown with the message, as references: its image attachments, then its embeds' images (a
    link to a picture unfurls into an embed of type "image", whose picture is its thumbnail). The intake keeps
    those the models can take, within its bounds (``arbiter.core.images.bounded``)."""
    found = [
        ImageRef(
            url=attachment.url,
            content_type=(attachment.content_type or "").split(";")[0].strip().lower(),
            size=attachment.size,
            width=attachment.width,
            height=attachment.height,
            expires_at=signed_expiry(attachment.url),
        )
        for attachment in message.attachments
    ]
    for embed in message.embeds:
        pictures = [embed.image, embed.thumbnail] if embed.type == "image" else [embed.image]
        for picture in pictures:
            if picture.url is not None:
                guessed, _ = mimetypes.guess_type(urlsplit(picture.url).path)
                found.append(
                    ImageRef(
                        url=picture.url,
                        content_type=guessed or "",
                        width=picture.width,
                        height=picture.height,
                        expires_at=signed_expiry(picture.url),
                    )
                )
    return found
