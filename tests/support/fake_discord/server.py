"""``FakeDiscord``: a local Discord (REST API v10 + gateway) for real discord.py clients, and the test's handle on it.

Entering it starts an aiohttp server on 127.0.0.1 and points discord.py at it (``discord.http.Route.BASE`` and
``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``, class attributes, so every client in the process uses it;
both are restored on exit). The test builds the world (guilds, channels, threads, roles, humans, bots;
``set_overwrites``), plays the humans (``human_says``, ``edit``, ``delete``, ``bulk_delete``, ``human_dms``,
``react``, ``invoke``, and the notices Discord writes itself: ``system_message``), breaks things (``fail_next``,
``drop``, ``invalidate``, ``ready_without``, ``close_after_ready``, ``refuse_identify``, ``delay_events``), and reads
what happened (``requests``, ``channel.messages``, ``gateway_log``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any, Self

import yarl
from aiohttp import WSMsgType, web

from tests.support.eventually import PATIENCE_S, eventually
from tests.support.pictures import picture

from . import rest
from .commands import InvalidInvocation, build_options
from .gateway import Breakage, Connection, GatewayOp, Op, Session
from .model import (
    ALL_PARSE,
    DEFAULT_BOT_PERMISSIONS,
    DEFAULT_EVERYONE_PERMISSIONS,
    FakeBot,
    FakeChannel,
    FakeGuild,
    FakeMember,
    FakeMessage,
    FakeRole,
    FakeUser,
    Intent,
    Overwrite,
    Perm,
    Snowflakes,
    effective_mentions,
    guild_permissions,
    iso,
    permissions_in,
)
from .ratelimits import RateLimits
from .records import (
    ApiError,
    FailureRule,
    InteractionNotAnswered,
    InteractionResult,
    PathPattern,
    RecordedRequest,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from types import TracebackType

    from .emojis import AppEmoji
    from .webhooks import FakeWebhook

__all__ = ("FakeDiscord", "InvalidInvocation")

FIXED_START = 1_785_000_000.0  # the same ordinary day as tests.support.clock.FakeClock
# A client closing with these ends its session (no RESUME afterwards). discord.py's Client.close() itself ends up
# sending 4000 (its reader task closes the socket first), which leaves the session resumable, as on Discord.
CLIENT_CLOSES = (1000, 1001)

DEFAULT_ERRORS: dict[int, tuple[int, str]] = {
    400: (50035, "Invalid Form Body"),
    401: (0, "401: Unauthorized"),
    403: (50013, "Missing Permissions"),
    404: (0, "404: Not Found"),
    429: (0, "You are being rate limited."),
    500: (0, "500: Internal Server Error"),
    502: (0, "502: Bad Gateway"),
    503: (0, "503: Service Unavailable"),
}


class FakeDiscord:
    """A local Discord for discord.py clients. Use ``async with FakeDiscord() as fake:``.

    ``clock`` (seconds, like ``tests.support.clock.FakeClock``) stamps messages and snowflake ids; by default
    time stands still at a fixed instant, so ids are consecutive and every run is the same.
    ``heartbeat_interval_ms`` is what HELLO announces; ``interaction_timeout`` is how long ``invoke`` waits for
    the bot's answer (Discord allows 3 s).

    Sharding: ``GET /gateway/bot`` recommends ``shards`` shards (default: one per 1,000 guilds of the bot, as
    Discord does); a session that IDENTIFYs with ``shard: [id, count]`` gets only the guilds with
    ``(guild_id >> 22) % count == id``, and one that would hold more than ``max_guilds_per_shard`` guilds (Discord:
    2,500) is closed with 4011 "Sharding required"; a bad ``shard`` array gets 4010 "Invalid shard".

    Rate limits: ``rate_limits`` maps bucket names (``ratelimits.BUCKETS``: "messages", "reactions"...) to
    ``(count, per_s)``, and ``global_rate_limit`` is ``(count, per_s)`` per bot; both are off by default
    (``ratelimits.DISCORD_RATE_LIMITS`` are Discord's). See ``ratelimits``.

    Broken sessions, per bot, from the next frame on until ``mend``: ``ready_without`` removes fields from every
    READY it gets; ``close_after_ready`` closes each new session with a code right after its READY and ends it (a
    RESUME is refused); ``refuse_identify`` answers every IDENTIFY with INVALID_SESSION;
    ``delay_events`` writes every dispatch to its sockets some seconds late, in order (``flush`` does not wait
    for those; ``flush_delayed`` does).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] | None = None,
        heartbeat_interval_ms: int = 41_250,
        interaction_timeout: float = 3.0,
        shards: int | None = None,
        max_guilds_per_shard: int = 2500,
        rate_limits: Mapping[str, tuple[int, float]] | None = None,
        global_rate_limit: tuple[int, float] | None = None,
    ) -> None:
        self.clock: Callable[[], float] = clock or (lambda: FIXED_START)
        self.shards = shards
        self.max_guilds_per_shard = max_guilds_per_shard
        self.rate_limits = RateLimits(rate_limits, global_rate_limit)
        self.snowflake = Snowflakes(self.clock)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.interaction_timeout = interaction_timeout

        self.guilds: dict[int, FakeGuild] = {}
        self.cdn: dict[str, tuple[str, bytes, float]] = {}  # attachment id -> its type, bytes and expiry
        self.users: dict[int, FakeUser] = {}
        self.bots: dict[str, FakeBot] = {}  # by token
        # Registered application commands: (application id, guild id or None for global) -> payloads.
        self.commands: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
        self.app_emojis: dict[int, list[AppEmoji]] = {}  # by application id, oldest first
        self.webhooks: dict[int, FakeWebhook] = {}  # channel webhooks, by id
        self.requests: list[RecordedRequest] = []
        self.gateway_log: list[GatewayOp] = []
        self.sessions: list[Session] = []
        self.interactions: dict[int, InteractionResult] = {}
        self.direct_messages: list[dict[str, Any]] = []  # payloads, as sent
        self._dm_channels: dict[tuple[int, int], int] = {}  # (user id, bot id) -> DM channel id

        self._connections: list[Connection] = []
        self._failures: list[FailureRule] = []
        self._breakages: dict[int, Breakage] = {}  # by bot id: what the test broke in its sessions
        self._changed = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._saved: tuple[str, yarl.URL] | None = None
        self.port = 0
        self.ghost_owner = FakeUser(id=self.snowflake(), name="owner")

    # -- lifecycle -------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base(self) -> str:
        """What ``discord.http.Route.BASE`` is set to."""
        return f"{self.base_url}/api/v10"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    @property
    def resume_gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/resume"

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        import discord  # imported here so that importing the package stays cheap

        app = web.Application()
        app.router.add_get("/gateway", self._gateway)
        app.router.add_get("/resume", self._gateway)
        app.router.add_route("*", "/api/{version:v\\d+}/{tail:.*}", self._rest)
        app.router.add_get("/attachments/{attachment_id}/{filename}", self._attachment)
        app.router.add_get("/media/attachments/{attachment_id}/{filename}", self._attachment)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

        self._saved = (discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY)
        discord.http.Route.BASE = self.api_base
        discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(self.gateway_url)

    async def close(self) -> None:
        """Stop the server (close the clients first: a client left running keeps trying to reconnect)."""
        import discord

        for connection in list(self._connections):
            if not connection.closed:
                connection.dropped = True
                with contextlib.suppress(Exception):
                    await connection.ws.close(code=1001)
            await connection.stop()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._saved is not None:
            discord.http.Route.BASE, discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = self._saved
            self._saved = None

    # -- building the world ----------------------------------------------------------------------------------

    def add_guild(self, name: str, *, owner: FakeUser | None = None, shard: tuple[int, int] | None = None) -> FakeGuild:
        """A guild with its @everyone role (id = guild id, ``DEFAULT_EVERYONE_PERMISSIONS``). Without ``owner``
        the owner is a user who is not a member, so nobody in the test has the owner's implicit rights.
        ``shard=(id, count)``: a guild id that falls on that shard."""
        guild_id = self.snowflake() if shard is None else self.snowflake.on_shard(*shard)
        guild = FakeGuild(id=guild_id, name=name, owner_id=(owner or self.ghost_owner).id, created_at=self.clock())
        guild.roles[guild_id] = FakeRole(
            id=guild_id, guild=guild, name="@everyone", permissions=DEFAULT_EVERYONE_PERMISSIONS
        )
        self.guilds[guild_id] = guild
        if owner is not None:
            self.join(owner, guild)
        return guild

    def add_channel(
        self,
        guild: FakeGuild,
        name: str,
        *,
        topic: str | None = None,
        overwrites: Sequence[Overwrite] = (),
    ) -> FakeChannel:
        """A text channel; ``overwrites`` are its permission overwrites (for roles, @everyone, or users)."""
        channel = FakeChannel(
            id=self.snowflake(),
            guild=guild,
            name=name,
            position=len(guild.channels),
            topic=topic,
            overwrites=list(overwrites),
        )
        guild.channels[channel.id] = channel
        for session in self._sessions_in(guild, intent=Intent.GUILDS):
            session.dispatch("CHANNEL_CREATE", channel.payload())
        return channel

    async def add_thread(self, channel: FakeChannel, name: str, *, owner: FakeUser) -> FakeChannel:
        """``owner`` starts a public thread under ``channel`` -> THREAD_CREATE to the bots that see the channel
        (guilds intent). Its permissions are the channel's; posting there takes Send Messages in Threads."""
        thread = FakeChannel(id=self.snowflake(), guild=channel.guild, name=name, parent=channel, owner_id=owner.id)
        thread.created_at = self.clock()
        channel.guild.threads[thread.id] = thread
        for session in self._sessions_in(channel.guild, intent=Intent.GUILDS, channel=channel):
            session.dispatch("THREAD_CREATE", {**thread.payload(), "newly_created": True})
        self._notify()
        await self.flush()
        return thread

    async def set_overwrites(self, channel: FakeChannel, overwrites: Sequence[Overwrite]) -> None:
        """A moderator replaces the channel's permission overwrites -> CHANNEL_UPDATE to the bots (guilds intent)."""
        channel.overwrites = list(overwrites)
        for session in self._sessions_in(channel.guild, intent=Intent.GUILDS):
            session.dispatch("CHANNEL_UPDATE", channel.payload())
        self._notify()
        await self.flush()

    def add_role(
        self,
        guild: FakeGuild,
        name: str,
        *,
        permissions: int | Any = 0,
        mentionable: bool = False,
    ) -> FakeRole:
        """A role; ``permissions`` is an int or a ``discord.Permissions``."""
        role = FakeRole(
            id=self.snowflake(),
            guild=guild,
            name=name,
            permissions=_bits(permissions),
            position=len(guild.roles),
            mentionable=mentionable,
        )
        guild.roles[role.id] = role
        for session in self._sessions_in(guild, intent=Intent.GUILDS):
            session.dispatch("GUILD_ROLE_CREATE", {"guild_id": str(guild.id), "role": role.payload()})
        return role

    def add_human(
        self,
        name: str,
        *,
        guilds: Iterable[FakeGuild] | None = None,
        roles: Iterable[FakeRole] = (),
        permissions: int | Any | None = None,
    ) -> FakeUser:
        """A person, member of ``guilds`` (default: every guild so far) with ``roles`` (each in its own guild).
        ``permissions`` grants extra permissions through a role of their own in each of those guilds (Discord has
        no per-member permissions outside roles and channel overwrites)."""
        user = FakeUser(id=self.snowflake(), name=name)
        self.users[user.id] = user
        self._enrol(user, guilds, roles, permissions)
        return user

    def add_bot(
        self,
        name: str,
        token: str | None = None,
        *,
        message_content: bool = True,
        members: bool = True,
        presences: bool = True,
        verified: bool = False,
        require_code_grant: bool = False,
        guilds: Iterable[FakeGuild] | None = None,
        permissions: int | Any = DEFAULT_BOT_PERMISSIONS,
        roles: Iterable[FakeRole] = (),
    ) -> FakeBot:
        """A bot account with its application (application id = user id, as for every app made since 2019).

        ``message_content``/``members``/``presences``: the privileged intents switched on for it in the
        Developer Portal (a client asking for one that is off is closed with 4014). Whether a client *gets*
        message content depends on the intents it IDENTIFYs with. ``verified``: a verified application (the
        intents' application flags are then GATEWAY_* rather than GATEWAY_*_LIMITED); ``require_code_grant``:
        "Requires OAuth2 Code Grant" is on. The bot joins ``guilds`` (default: every guild so far) with a managed
        role holding ``permissions``, as an invite link would give it."""
        user_id = self.snowflake()
        bot = FakeBot(
            id=user_id,
            name=name,
            bot=True,
            token=token or f"fake.{name}.{user_id}",
            application_id=user_id,
            allow_message_content=message_content,
            allow_members=members,
            allow_presences=presences,
            verified=verified,
            require_code_grant=require_code_grant,
        )
        if bot.token in self.bots:
            raise ValueError(f"token {bot.token!r} is taken by {self.bots[bot.token]!r}")
        self.users[bot.id] = bot
        self.bots[bot.token] = bot
        for guild in list(self.guilds.values()) if guilds is None else guilds:
            managed = self.add_role(guild, name, permissions=permissions)
            managed.managed_by = bot
            self.join(bot, guild, roles=[managed, *(r for r in roles if r.guild is guild)])
        return bot

    def join(self, user: FakeUser, guild: FakeGuild, *, roles: Iterable[FakeRole] = ()) -> FakeMember:
        """Make ``user`` a member of ``guild``. Connected bots hear GUILD_MEMBER_ADD (members intent); a bot that
        joins gets GUILD_CREATE on its live sessions."""
        member = FakeMember(
            user=user, guild=guild, roles=[r for r in roles if r.guild is guild], joined_at=self.clock()
        )
        guild.members[user.id] = member
        for session in self._sessions_in(guild, intent=Intent.GUILD_MEMBERS):
            if session.bot is not user:
                session.dispatch("GUILD_MEMBER_ADD", {**member.payload(), "guild_id": str(guild.id)})
        if isinstance(user, FakeBot):
            for session in self._live_sessions(user):
                if session.covers(guild.id):
                    session.dispatch("GUILD_CREATE", self._guild_create(guild, session))
        return member

    def leave(self, user: FakeUser, guild: FakeGuild) -> None:
        """``user`` leaves ``guild`` (or is kicked from it); a bot's managed role goes with it, as on Discord. A bot's
        live sessions get GUILD_DELETE; bots with the members intent hear GUILD_MEMBER_REMOVE, and those with the
        guilds intent GUILD_ROLE_DELETE for the managed role."""
        self._member(user, guild)
        if isinstance(user, FakeBot):
            for session in self._live_sessions(user):
                if session.covers(guild.id):
                    session.dispatch("GUILD_DELETE", {"id": str(guild.id)})
        del guild.members[user.id]
        for session in self._sessions_in(guild, intent=Intent.GUILD_MEMBERS):
            session.dispatch("GUILD_MEMBER_REMOVE", {"guild_id": str(guild.id), "user": user.payload()})
        for role in [role for role in guild.roles.values() if role.managed_by is user]:
            del guild.roles[role.id]
            for session in self._sessions_in(guild, intent=Intent.GUILDS):
                session.dispatch("GUILD_ROLE_DELETE", {"guild_id": str(guild.id), "role_id": str(role.id)})
        self._notify()

    def set_roles(self, user: FakeUser, guild: FakeGuild, roles: Iterable[FakeRole]) -> FakeMember:
        """Replace a member's roles (GUILD_MEMBER_UPDATE to bots with the members intent)."""
        member = self._member(user, guild)
        member.roles = [role for role in roles if role.guild is guild]
        for session in self._sessions_in(guild, intent=Intent.GUILD_MEMBERS):
            session.dispatch("GUILD_MEMBER_UPDATE", {**member.payload(), "guild_id": str(guild.id)})
        return member

    def permissions(self, user: FakeUser, channel: FakeChannel) -> int:
        """The permission bits ``user`` has in ``channel``, as Discord computes them (0 for a non-member)."""
        member = channel.guild.member(user)
        return 0 if member is None else permissions_in(member, channel)

    # -- playing the humans ----------------------------------------------------------------------------------

    async def human_says(
        self,
        channel: FakeChannel,
        user: FakeUser,
        content: str,
        *,
        mentions: Sequence[FakeUser | FakeRole] = (),
        reply_to: FakeMessage | None = None,
        ping_reply: bool = True,
        embeds: Sequence[dict[str, Any]] = (),
        attachments: Sequence[dict[str, Any]] = (),
    ) -> FakeMessage:
        """``user`` posts ``content`` in ``channel`` from the Discord client (``attachments``: files it uploads
        with it, as ``image_attachment`` makes them). Mentions are read from the content
        (``<@id>``, ``<@&id>``, ``@everyone``); each of ``mentions`` is put in front of it as ``<@id> ``, as when
        a person picks a name from the @ menu. ``reply_to`` makes it a reply, pinging the author unless
        ``ping_reply`` is off. Every bot in the guild that can see the channel gets MESSAGE_CREATE (content
        blank for those without the message-content intent, unless the message mentions them). Returns after
        the events are written to every connected socket."""
        if user.bot:
            raise ValueError("bots post through the REST API; human_says is for people")
        member = self._member(user, channel.guild)
        if not permissions_in(member, channel) & channel.send_permission:
            raise PermissionError(f"{user.name} may not send messages in #{channel.name}")
        prefix = "".join(f"{target.mention} " for target in mentions)
        allowed = None if ping_reply else {"parse": list(ALL_PARSE), "replied_user": False}
        message = self._new_message(
            channel,
            user,
            prefix + content,
            allowed_mentions=allowed,
            default_parse=ALL_PARSE,
            reply_to=reply_to,
            embeds=list(embeds),
            attachments=list(attachments),
        )
        self._publish(message)
        await self.flush()
        return message

    def image_attachment(
        self,
        filename: str,
        *,
        content_type: str = "image/png",
        size: int | None = None,
        width: int = 800,
        height: int = 600,
        expires_in_s: float = 86_400.0,
        data: bytes | None = None,
    ) -> dict[str, Any]:
        """An uploaded image as Discord describes it in a message: its CDN address signed as Discord signs it
        (``ex``: when it expires and ``is``: when it was issued, hexadecimal Unix seconds; ``hm``: the signature),
        by default for a day from now on the fake's clock. The CDN serves ``data`` there (by default a file of
        ``content_type`` and the dimensions) until it expires or ``delete_attachment``; ``size`` defaults to its
        length."""
        attachment_id = self.snowflake()
        issued = int(self.clock())
        expires = int(issued + expires_in_s)
        query = f"ex={expires:x}&is={issued:x}&hm={attachment_id:x}"
        url = f"{self.base_url}/attachments/{attachment_id}/{filename}?{query}"
        if data is None:
            data = picture(content_type, width, height)
        self.cdn[str(attachment_id)] = (content_type, data, float(expires))
        return {
            "id": str(attachment_id),
            "filename": filename,
            "content_type": content_type,
            "size": len(data) if size is None else size,
            "url": url,
            "proxy_url": url.replace("/attachments/", "/media/attachments/", 1),
            "width": width,
            "height": height,
        }

    def delete_attachment(self, attachment: Mapping[str, Any]) -> None:
        """The attachment is gone from the CDN (its message deleted): its address answers 404 from now on."""
        self.cdn.pop(str(attachment["id"]), None)

    async def _attachment(self, request: web.Request) -> web.StreamResponse:
        """Discord's CDN: an attachment's bytes, while its signed address holds (404 once it expired, as Discord
        answers, or once the attachment is gone)."""
        held = self.cdn.get(request.match_info["attachment_id"])
        if held is None or self.clock() >= held[2]:
            return web.Response(status=404, text="This content is no longer available.")
        content_type, data, _expires = held
        return web.Response(body=data, content_type=content_type)

    async def edit(self, message: FakeMessage, content: str, *, announce: bool = True) -> FakeMessage:
        """Edit a message (anyone's: the test is the world) -> MESSAGE_UPDATE to the bots (none with ``announce``
        off: an event lost, or sent by the test in a form of its own with ``send_raw``)."""
        self._apply_edit(message, {"content": content}, announce=announce)
        await self.flush()
        return message

    async def delete(self, message: FakeMessage, *, announce: bool = True) -> None:
        """Delete a message -> MESSAGE_DELETE to the bots that could see it (none with ``announce`` off)."""
        self._apply_delete(message, announce=announce)
        await self.flush()

    async def bulk_delete(self, messages: Sequence[FakeMessage]) -> None:
        """A moderator deletes several messages of one channel at once -> one MESSAGE_DELETE_BULK to the bots."""
        if not messages:
            return
        channel = messages[0].channel
        if any(message.channel is not channel for message in messages):
            raise ValueError("a bulk deletion is of one channel's messages")
        for message in messages:
            message.deleted = True
        data = {
            "ids": [str(message.id) for message in messages],
            "channel_id": str(channel.id),
            "guild_id": str(channel.guild.id),
        }
        for session in self._sessions_in(channel.guild, intent=Intent.GUILD_MESSAGES, channel=channel):
            session.dispatch("MESSAGE_DELETE_BULK", data)
        self._notify()
        await self.flush()

    async def human_dms(self, user: FakeUser, bot: FakeBot, content: str) -> dict[str, Any]:
        """``user`` sends ``bot`` a direct message. As on Discord, only the bot's sessions that asked for the
        DIRECT_MESSAGES intent get it (MESSAGE_CREATE without a guild_id; a DM's content needs no privileged
        intent). Returns the message payload; DMs are kept in ``direct_messages``."""
        if user.bot:
            raise ValueError("human_dms is for people")
        channel_id = self._dm_channels.setdefault((user.id, bot.id), self.snowflake())
        data: dict[str, Any] = {
            "id": str(self.snowflake()),
            "type": 0,
            "channel_id": str(channel_id),
            "author": user.payload(),
            "content": content,
            "timestamp": iso(self.clock()),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": [],
            "mention_roles": [],
            "attachments": [],
            "embeds": [],
            "components": [],
            "pinned": False,
            "flags": 0,
        }
        self.direct_messages.append(data)
        for session in self._live_sessions(bot):
            if session.has(Intent.DIRECT_MESSAGES) and session.covers(0):  # DMs go to shard 0
                session.dispatch("MESSAGE_CREATE", data)
        self._notify()
        await self.flush()
        return data

    async def react(self, user: FakeUser, message: FakeMessage, emoji: str) -> None:
        """``user`` adds a reaction (a unicode emoji, or ``name:id`` for a custom one) -> MESSAGE_REACTION_ADD."""
        self._add_reaction(message, user, emoji)
        await self.flush()

    async def typing(self, user: FakeUser, channel: FakeChannel) -> None:
        """``user`` starts typing -> TYPING_START to the other bots with the typing intent."""
        self._typing(user, channel)
        await self.flush()

    async def system_message(
        self, channel: FakeChannel, user: FakeUser, kind: int, *, content: str = "", about: FakeMessage | None = None
    ) -> FakeMessage:
        """A message Discord writes itself when ``user`` does something, of type ``kind`` (``MessageType``: 6 a pin,
        7 a member joining, 8 a boost, 3 a call, 4 a channel renamed, 18 a thread created...). As on Discord its
        content is empty or the bare fact (a thread's or the channel's new name: ``content``), and a pin refers to the
        pinned message (``about``). Every bot that can see the channel gets MESSAGE_CREATE, and the channel's history
        lists it."""
        message = self._new_message(
            channel, user, content, allowed_mentions={"parse": []}, default_parse=(), reply_to=about, type=kind
        )
        self._publish(message)
        await self.flush()
        return message

    # -- slash commands --------------------------------------------------------------------------------------

    def registered(self, bot: FakeBot, guild: FakeGuild | None = None) -> list[dict[str, Any]]:
        """The commands ``bot`` registered in ``guild`` (None: its global commands), as Discord stores them."""
        return list(self.commands.get((bot.application_id, None if guild is None else guild.id), []))

    async def invoke(
        self,
        user: FakeUser,
        channel: FakeChannel,
        command: str,
        options: Mapping[str, object] | None = None,
        *,
        bot: FakeBot | None = None,
        validate: bool = True,
        enforce_default_permissions: bool = True,
        within: float | None = None,
    ) -> InteractionResult:
        """``user`` runs the slash command ``command`` (its full path: ``"fleet pause"``, ``"budget set daily"``)
        in ``channel`` with ``options`` (name -> value; users, roles and channels as the fake's objects).

        The command is looked up among the guild's and then the global commands of the bots in the guild (name
        ``bot`` when two register the same name). As the Discord client does, the fake refuses (raising
        ``InvalidInvocation``, delivering nothing) an unknown command or option, a value against the registration
        (``validate=False`` sends it anyway), and a member without the command's ``default_member_permissions``
        (``enforce_default_permissions=False``: as if a server admin had opened the command to everyone).
        Otherwise the bot gets INTERACTION_CREATE carrying the member and its computed permissions in the
        channel; this returns once the bot has answered (raising ``InteractionNotAnswered`` after ``within``,
        default ``interaction_timeout``). The result keeps following the response's edits and followups."""
        result = self._start_interaction(
            kind=2,
            user=user,
            channel=channel,
            command=command,
            options=options or {},
            bot=bot,
            validate=validate,
            enforce_default_permissions=enforce_default_permissions,
            focused=None,
        )
        return await self._await_answer(result, within)

    async def autocomplete(
        self,
        user: FakeUser,
        channel: FakeChannel,
        command: str,
        options: Mapping[str, object],
        *,
        focused: str,
        bot: FakeBot | None = None,
        within: float | None = None,
    ) -> list[dict[str, Any]]:
        """``user`` types in option ``focused`` of ``command``: returns the choices the bot offers."""
        result = self._start_interaction(
            kind=4,
            user=user,
            channel=channel,
            command=command,
            options=options,
            bot=bot,
            validate=False,  # a half-typed value is what autocomplete is for
            enforce_default_permissions=True,
            focused=focused,
        )
        await self._await_answer(result, within)
        return result.choices

    # -- breaking things -------------------------------------------------------------------------------------

    def fail_next(
        self,
        method: str,
        path: str,
        status: int,
        *,
        times: int = 1,
        body: Mapping[str, Any] | None = None,
        bot: FakeBot | None = None,
        retry_after: float = 0.05,
    ) -> FailureRule:
        """Answer the next ``times`` REST calls matching ``method`` and ``path`` (literal, or with ``{name}``
        placeholders: ``"/channels/{channel_id}/messages"``; ``*`` for anything) - from ``bot`` only, if given -
        with ``status`` and a Discord error ``body`` (default: the usual one for that status). Nothing else
        happens for those calls: no message is stored, no event dispatched.

        discord.py retries 500/502/504/524 up to five times, sleeping 1, 3, 5, 7 s between tries (the
        webhook/interaction client retries every 5xx), and sleeps ``retry_after`` on a 429 before retrying; use
        403, 400, 404 or 503 for a post that fails at once."""
        code, message = DEFAULT_ERRORS.get(status, (0, f"{status}: error"))
        default: dict[str, Any] = {"message": message, "code": code}
        headers: dict[str, str] = {}
        if status == 429:
            default = {"message": message, "retry_after": retry_after, "global": False, "code": 0}
            # discord.py only honours a 429 that came through Discord's proxy (a ``Via`` header); otherwise it
            # takes it for a Cloudflare ban and raises at once.
            headers = {"Retry-After": str(retry_after), "X-RateLimit-Scope": "user", "Via": "1.1 google"}
        rule = FailureRule(
            method=method.upper(),
            path=PathPattern(path),
            status=status,
            body=dict(body) if body is not None else default,
            headers=headers,
            remaining=times,
            bot=bot,
        )
        self._failures.append(rule)
        return rule

    async def drop(self, bot: FakeBot, *, code: int | None = None) -> None:
        """Cut ``bot``'s gateway connections: without ``code`` the TCP connection is aborted (no close frame,
        like a network failure); with one, the fake closes with that code (4000: resumable; 4004/4010-4014:
        fatal for discord.py). The sessions stay valid, so discord.py reconnects and RESUMEs, and gets every
        event dispatched meanwhile. Returns once the fake has noticed the connections are gone."""
        connections = [s.connection for s in self._live_sessions(bot) if s.connection is not None]
        for connection in connections:
            if code is None:
                connection.abort()
            else:
                connection.dropped = True
                await connection.ws.close(code=code, message=b"dropped by the test")
        await self.wait_until(lambda: all(c.closed for c in connections), what=f"{bot.name}'s connection to close")

    async def send_raw(self, bot: FakeBot, event: str, data: Any) -> None:
        """Dispatch ``event`` with ``data`` exactly as given to ``bot``'s live sessions: for a payload Discord
        could send and a client did not expect (a field missing, a new kind of object)."""
        for session in self._live_sessions(bot):
            session.dispatch(event, data)
        await self.flush()

    async def invalidate(self, bot: FakeBot, *, resumable: bool = False, shard: int | None = None) -> None:
        """Send INVALID_SESSION (op 9) to ``bot``'s connections (only shard ``shard``'s, if given); unless
        ``resumable`` its sessions end, so discord.py identifies again (after its own 5 s ``before_identify_hook``
        wait, unless overridden)."""
        for session in self._live_sessions(bot):
            if shard is not None and (session.shard is None or session.shard[0] != shard):
                continue
            if session.connection is not None:
                session.connection.send({"op": Op.INVALID_SESSION, "d": resumable, "s": None, "t": None})
            if not resumable:
                session.valid = False
        await self.flush()

    async def request_reconnect(self, bot: FakeBot) -> None:
        """Send RECONNECT (op 7): discord.py closes and RESUMEs."""
        for session in self._live_sessions(bot):
            if session.connection is not None:
                session.connection.send({"op": Op.RECONNECT, "d": None, "s": None, "t": None})
        await self.flush()

    def ready_without(self, bot: FakeBot, *fields: str) -> None:
        """Leave ``fields`` out of every READY ``bot`` gets from now on (``"shard"``: as Spacebar does, which
        discord.py's sharded client cannot read; ``"user"``: neither can the plain one)."""
        self._breakage(bot).ready_without |= frozenset(fields)

    def close_after_ready(self, bot: FakeBot, code: int) -> None:
        """Close every new session of ``bot`` with ``code`` right after its READY and GUILD_CREATEs, and end the
        session (Discord's 4007/4009: a RESUME gets INVALID_SESSION). discord.py retries every code but
        1000 and 4004/4010-4014 by itself, forever: it RESUMEs, is refused, waits 5 s and IDENTIFYs again."""
        self._breakage(bot).close_after_ready = code

    def refuse_identify(self, bot: FakeBot) -> None:
        """Answer every IDENTIFY of ``bot`` with INVALID_SESSION (op 9, ``d: false``) and start no session, as
        Discord does to a client identifying too fast. discord.py closes, waits 5 s and IDENTIFYs again, forever."""
        self._breakage(bot).refuse_identify = True

    def delay_events(self, bot: FakeBot, seconds: float) -> None:
        """Write every dispatch to ``bot``'s sessions ``seconds`` later than it is dispatched (0: on time again),
        as over a slow link: the others get it first. Its events keep their order and sequence numbers, and any
        other frame (a HEARTBEAT_ACK, INVALID_SESSION...) queued behind a late one waits for it. ``flush()`` does
        not wait for late frames; ``flush_delayed(bot)`` does."""
        self._breakage(bot).delay_s = seconds

    async def flush_delayed(self, bot: FakeBot) -> None:
        """Wait until every frame queued so far for ``bot``'s connected sessions is on the socket, late ones
        (``delay_events``) included."""
        connections = [s.connection for s in self._live_sessions(bot) if s.connection is not None]
        await asyncio.gather(*(c.flush(delayed=True) for c in connections if not c.closed))

    def mend(self, bot: FakeBot) -> None:
        """Undo ``ready_without``, ``close_after_ready``, ``refuse_identify`` and ``delay_events`` for ``bot``
        (frames already held back still arrive late)."""
        self._breakages.pop(bot.id, None)
        for session in self.sessions:
            if session.bot is bot:
                session.breakage = self._breakage(bot)

    def _breakage(self, bot: FakeBot) -> Breakage:
        """``bot``'s breakage, one object shared by all its sessions (so a change applies to the live ones)."""
        return self._breakages.setdefault(bot.id, Breakage())

    # -- reading what happened -------------------------------------------------------------------------------

    def requests_to(
        self, method: str | None = None, path: str | None = None, *, bot: FakeBot | None = None
    ) -> list[RecordedRequest]:
        """Recorded REST calls, filtered by method, path (as in ``fail_next``) and caller."""
        pattern = None if path is None else PathPattern(path)
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (pattern is None or pattern.match(r.path) is not None)
            and (bot is None or r.bot is bot)
        ]

    @property
    def unknown_requests(self) -> list[RecordedRequest]:
        """Calls to routes the fake does not implement (answered 404 with a message naming the route)."""
        return [r for r in self.requests if r.route is None and not r.injected]

    def gateway_ops(self, bot: FakeBot | None = None, op: int | None = None) -> list[GatewayOp]:
        """Frames clients sent (after a successful IDENTIFY/RESUME, attributed to the bot)."""
        return [g for g in self.gateway_log if (bot is None or g.bot is bot) and (op is None or g.op == op)]

    def connected(self, bot: FakeBot) -> bool:
        """Whether ``bot`` has a live session with a connection attached (after READY or RESUMED)."""
        return any(s.connection is not None and not s.connection.closed for s in self._live_sessions(bot))

    async def wait_connected(self, bot: FakeBot, within: float = PATIENCE_S) -> None:
        await self.wait_until(lambda: self.connected(bot), within=within, what=f"{bot.name} connected")

    async def wait_for_request(
        self,
        method: str,
        path: str,
        *,
        bot: FakeBot | None = None,
        count: int = 1,
        within: float = PATIENCE_S,
    ) -> RecordedRequest:
        """Wait until ``count`` matching calls have been answered; returns the ``count``-th."""

        def done() -> bool:
            return len([r for r in self.requests_to(method, path, bot=bot) if r.status]) >= count

        await self.wait_until(done, within=within, what=f"{count} x {method} {path}")
        return [r for r in self.requests_to(method, path, bot=bot) if r.status][count - 1]

    async def wait_until(self, condition: Callable[[], object], *, within: float = PATIENCE_S, what: str = "") -> None:
        """Wait until ``condition()`` is true: checked whenever the fake's state changes, and every 10 ms (for
        conditions on the clients' side)."""
        await eventually(
            condition, within=within, what=f"fake discord: {what or condition}", every=0.01, wake=self._wake
        )

    async def _wake(self) -> None:
        await self._changed.wait()

    async def flush(self) -> None:
        """Wait until every event dispatched so far is written to the sockets of connected clients."""
        await asyncio.gather(*(c.flush() for c in self._connections if not c.closed))

    # -- internals: world ------------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _enrol(
        self,
        user: FakeUser,
        guilds: Iterable[FakeGuild] | None,
        roles: Iterable[FakeRole],
        permissions: int | Any | None,
    ) -> None:
        roles = list(roles)
        for guild in list(self.guilds.values()) if guilds is None else guilds:
            own = [r for r in roles if r.guild is guild]
            if permissions is not None:
                own.append(self.add_role(guild, f"{user.name}'s role", permissions=permissions))
            self.join(user, guild, roles=own)

    def _member(self, user: FakeUser, guild: FakeGuild) -> FakeMember:
        member = guild.member(user)
        if member is None:
            raise ValueError(f"{user.name} is not a member of {guild.name}")
        return member

    def _guild_create(self, guild: FakeGuild, session: Session) -> dict[str, Any]:
        me = guild.members[session.bot.id]
        # Without the presences intent Discord sends only the bot's own member; the rest comes by chunking
        # (REQUEST_GUILD_MEMBERS), which discord.py does at startup when it has the members intent.
        members = list(guild.members.values()) if session.has(Intent.GUILD_PRESENCES) else [me]
        return {
            **guild.base_payload(),
            "joined_at": iso(me.joined_at),
            "large": False,
            "unavailable": False,
            "member_count": len(guild.members),
            "members": [m.payload() for m in members],
            "channels": [c.payload() for c in guild.channels.values()],
            "threads": [t.payload() for t in guild.threads.values() if permissions_in(me, t) & Perm.VIEW_CHANNEL],
            "presences": [],
            "voice_states": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def _live_sessions(self, bot: FakeBot) -> list[Session]:
        return [s for s in self.sessions if s.valid and s.bot is bot]

    def _sessions_in(
        self, guild: FakeGuild, *, intent: int | None = None, channel: FakeChannel | None = None
    ) -> list[Session]:
        found = []
        for session in self.sessions:
            member = guild.members.get(session.bot.id)
            if not session.valid or member is None or not session.covers(guild.id):
                continue
            if intent is not None and not session.has(intent):
                continue
            if channel is not None and not permissions_in(member, channel) & Perm.VIEW_CHANNEL:
                continue
            found.append(session)
        return found

    def _new_message(
        self,
        channel: FakeChannel,
        author: FakeUser,
        content: str,
        *,
        allowed_mentions: dict[str, Any] | None,
        default_parse: Sequence[str],
        reply_to: FakeMessage | None = None,
        **fields: Any,
    ) -> FakeMessage:
        message = FakeMessage(
            id=self.snowflake(),
            channel=channel,
            author=author,
            content=content,
            created_at=self.clock(),
            allowed_mentions=allowed_mentions,
            reference=reply_to,
            **fields,
        )
        self._compute_mentions(message, default_parse)
        return message

    def _compute_mentions(self, message: FakeMessage, default_parse: Sequence[str]) -> None:
        member = message.channel.guild.member(message.author)
        # Discord checks mentions against the author's permissions (for an interaction response, the bot's).
        author_permissions = 0 if member is None else permissions_in(member, message.channel)
        message.mentions, message.mention_roles, message.mention_everyone = effective_mentions(
            content=message.content,
            author_permissions=author_permissions,
            guild=message.channel.guild,
            users=self.users.values(),
            allowed=message.allowed_mentions,
            default_parse=default_parse,
            reply_to=message.reference,
        )

    def _publish(self, message: FakeMessage) -> None:
        """Store a new message in its channel and dispatch MESSAGE_CREATE (ephemeral ones stay private)."""
        if message.ephemeral:
            return
        message.channel.history.append(message)
        self._dispatch_message("MESSAGE_CREATE", message)
        self._notify()

    def _dispatch_message(self, event: str, message: FakeMessage) -> None:
        for session in self._sessions_in(message.channel.guild, intent=Intent.GUILD_MESSAGES, channel=message.channel):
            session.dispatch(event, message.payload(viewer=session.bot, content_visible=_may_read(session, message)))

    def _apply_edit(self, message: FakeMessage, body: Mapping[str, Any], *, announce: bool = True) -> None:
        if "content" in body and body["content"] is not None and body["content"] != message.content:
            message.edits.append(message.content)
            message.content = body["content"]
        if "embeds" in body and body["embeds"] is not None:
            message.embeds = list(body["embeds"])
        if "components" in body and body["components"] is not None:
            message.components = list(body["components"])
        if body.get("allowed_mentions") is not None:
            message.allowed_mentions = body["allowed_mentions"]
        message.flags &= ~FakeMessage.LOADING
        message.edited_at = self.clock()
        default_parse = ("users",) if message.webhook_id is not None else ALL_PARSE
        self._compute_mentions(message, default_parse)
        if announce and not message.ephemeral and not message.deleted:
            self._dispatch_message("MESSAGE_UPDATE", message)
        self._notify()

    def _apply_delete(self, message: FakeMessage, *, announce: bool = True) -> None:
        if message.deleted:
            return
        message.deleted = True
        if announce and not message.ephemeral:
            channel = message.channel
            data = {"id": str(message.id), "channel_id": str(channel.id), "guild_id": str(channel.guild.id)}
            for session in self._sessions_in(channel.guild, intent=Intent.GUILD_MESSAGES, channel=channel):
                session.dispatch("MESSAGE_DELETE", data)
        self._notify()

    def _add_reaction(self, message: FakeMessage, user: FakeUser, emoji: str) -> bool:
        users = message.reactions.setdefault(emoji, [])
        if user in users:
            return False
        users.append(user)
        channel = message.channel
        data: dict[str, Any] = {
            **self._reaction_event(message, user, emoji),
            "message_author_id": str(message.author.id),
            "burst": False,
            "type": 0,
        }
        member = channel.guild.member(user)
        if member is not None:
            data["member"] = member.payload()
        for session in self._sessions_in(channel.guild, intent=Intent.GUILD_MESSAGE_REACTIONS, channel=channel):
            session.dispatch("MESSAGE_REACTION_ADD", data)
        self._notify()
        return True

    def _remove_reaction(self, message: FakeMessage, user: FakeUser, emoji: str) -> None:
        users = message.reactions.get(emoji, [])
        if user not in users:
            return
        users.remove(user)
        channel = message.channel
        data = {**self._reaction_event(message, user, emoji), "burst": False, "type": 0}
        for session in self._sessions_in(channel.guild, intent=Intent.GUILD_MESSAGE_REACTIONS, channel=channel):
            session.dispatch("MESSAGE_REACTION_REMOVE", data)
        self._notify()

    @staticmethod
    def _reaction_event(message: FakeMessage, user: FakeUser, emoji: str) -> dict[str, Any]:
        name, _, emoji_id = emoji.partition(":")
        return {
            "user_id": str(user.id),
            "channel_id": str(message.channel.id),
            "message_id": str(message.id),
            "guild_id": str(message.channel.guild.id),
            "emoji": {"id": emoji_id or None, "name": name},
        }

    def _typing(self, user: FakeUser, channel: FakeChannel) -> None:
        data: dict[str, Any] = {
            "channel_id": str(channel.id),
            "guild_id": str(channel.guild.id),
            "user_id": str(user.id),
            "timestamp": int(self.clock()),
        }
        member = channel.guild.member(user)
        if member is not None:
            data["member"] = member.payload()
        for session in self._sessions_in(channel.guild, intent=Intent.GUILD_MESSAGE_TYPING, channel=channel):
            if session.bot is not user:
                session.dispatch("TYPING_START", data)
        self._notify()

    # -- internals: interactions -----------------------------------------------------------------------------

    def _find_command(self, guild: FakeGuild, name: str, bot: FakeBot | None) -> tuple[FakeBot, dict[str, Any], bool]:
        """(bot, registration, guild-scoped?) for a top-level command name, as the Discord client lists them."""
        found: list[tuple[FakeBot, dict[str, Any], bool]] = []
        for member in guild.members.values():
            candidate = member.user
            if not isinstance(candidate, FakeBot) or (bot is not None and candidate is not bot):
                continue
            for scope in (guild.id, None):
                for registered in self.commands.get((candidate.application_id, scope), []):
                    if registered["name"] == name and registered.get("type", 1) == 1:
                        found.append((candidate, registered, scope is not None))
                        break
                else:
                    continue
                break
        if not found:
            raise InvalidInvocation(f"no bot in {guild.name} has registered /{name}")
        if len(found) > 1:
            names = ", ".join(b.name for b, _, _ in found)
            raise InvalidInvocation(f"/{name} is registered by several bots ({names}): pass bot=")
        return found[0]

    def _start_interaction(
        self,
        *,
        kind: int,
        user: FakeUser,
        channel: FakeChannel,
        command: str,
        options: Mapping[str, object],
        bot: FakeBot | None,
        validate: bool,
        enforce_default_permissions: bool,
        focused: str | None,
    ) -> InteractionResult:
        guild = channel.guild
        member = self._member(user, guild)
        top, *path = command.split()
        target, registered, guild_scoped = self._find_command(guild, top, bot)
        permissions = permissions_in(member, channel)
        needed = registered.get("default_member_permissions")
        if enforce_default_permissions and needed is not None:
            needed_bits = int(needed)
            admin = guild_permissions(member) & Perm.ADMINISTRATOR or user.id == guild.owner_id
            if not admin and (needed_bits == 0 or permissions & needed_bits != needed_bits):
                raise InvalidInvocation(f"{user.name} lacks /{top}'s default member permissions ({needed})")
        built = build_options(
            registered, path, options, invoker=member, channel=channel, validate=validate, focused=focused
        )
        interaction_id = self.snowflake()
        data: dict[str, Any] = {
            "id": registered["id"],
            "name": top,
            "type": 1,
            "options": built.options,
        }
        if guild_scoped:
            data["guild_id"] = str(guild.id)
        if built.resolved:
            data["resolved"] = built.resolved
        bot_member = guild.members[target.id]
        payload: dict[str, Any] = {
            "id": str(interaction_id),
            "application_id": str(target.application_id),
            "type": kind,
            "data": data,
            "guild_id": str(guild.id),
            "guild": {"id": str(guild.id), "locale": "en-US", "features": []},
            "channel_id": str(channel.id),
            "channel": {**channel.payload(), "permissions": str(permissions)},
            "member": member.payload(permissions=permissions),
            "token": f"interaction-token-{interaction_id}",
            "version": 1,
            "app_permissions": str(permissions_in(bot_member, channel)),
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(guild.id)},
            "context": 0,
            "attachment_size_limit": 10 * 1024 * 1024,
        }
        result = InteractionResult(
            id=interaction_id,
            token=payload["token"],
            kind=kind,
            bot=target,
            user=user,
            channel=channel,
            command=command,
            payload=payload,
        )
        self.interactions[interaction_id] = result
        sessions = [s for s in self._live_sessions(target) if s.covers(guild.id)]
        if sessions:
            sessions[-1].dispatch("INTERACTION_CREATE", payload)
        return result

    async def _await_answer(self, result: InteractionResult, within: float | None) -> InteractionResult:
        await self.flush()
        limit = self.interaction_timeout if within is None else within
        try:
            await self.wait_until(lambda: result.answered, within=limit)
        except AssertionError:
            raise InteractionNotAnswered(
                f"{result.bot.name} did not answer /{result.command} within {limit}s"
            ) from None
        return result

    def _interaction(self, interaction_id: str, token: str) -> InteractionResult:
        result = self.interactions.get(int(interaction_id)) if interaction_id.isdigit() else None
        if result is None or result.token != token:
            raise ApiError(404, 10062, "Unknown interaction")
        return result

    def _interaction_by_token(self, application_id: str, token: str) -> InteractionResult:
        for result in self.interactions.values():
            if result.token == token and str(result.bot.application_id) == application_id:
                return result
        raise ApiError(404, 10015, "Unknown Webhook")

    # -- internals: transport --------------------------------------------------------------------------------

    async def _rest(self, request: web.Request) -> web.StreamResponse:
        return await rest.handle(self, request)

    async def _gateway(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        connection = Connection(ws=ws, request=request, path=request.path, compress=request.query.get("compress"))
        self._connections.append(connection)
        connection.start()
        connection.send({"op": Op.HELLO, "d": {"heartbeat_interval": self.heartbeat_interval_ms}, "s": None, "t": None})
        try:
            async for message in ws:
                if message.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                    await self._on_frame(connection, json.loads(message.data))
        finally:
            session = connection.session
            if session is not None and session.connection is connection:
                session.connection = None
                if not connection.dropped and ws.close_code in CLIENT_CLOSES:
                    session.valid = False
            await connection.mark_closed()
            await connection.stop()
            self._connections.remove(connection)
            self._notify()
        return ws

    async def _on_frame(self, connection: Connection, frame: dict[str, Any]) -> None:
        op: int = frame.get("op", -1)
        data: Any = frame.get("d")
        session = connection.session
        if op == Op.IDENTIFY:
            await self._identify(connection, data)
        elif op == Op.RESUME:
            await self._resume(connection, data)
        elif op == Op.HEARTBEAT:
            connection.send({"op": Op.HEARTBEAT_ACK, "d": None, "s": None, "t": None})
        elif op == Op.REQUEST_GUILD_MEMBERS and session is not None:
            self._members_chunk(session, data)
        bot = None if connection.session is None else connection.session.bot
        self.gateway_log.append(
            GatewayOp(bot=bot, op=op, data=data, path=connection.path, compress=connection.compress)
        )
        self._notify()

    async def _identify(self, connection: Connection, data: dict[str, Any]) -> None:
        bot = self.bots.get(str(data.get("token", "")))
        if bot is None:
            await self._refuse(connection, 4004, "Authentication failed.")
            return
        intents = data.get("intents")
        if not isinstance(intents, int):
            await self._refuse(connection, 4013, "Invalid intent(s).")
            return
        if bot.privileged_refused(intents):
            await self._refuse(connection, 4014, "Disallowed intent(s).")
            return
        shard = data.get("shard")
        if shard is not None and not _valid_shard(shard):
            await self._refuse(connection, 4010, "Invalid shard.")
            return
        breakage = self._breakage(bot)
        if breakage.refuse_identify:
            connection.send({"op": Op.INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        session = Session(
            id=f"fake-session-{len(self.sessions) + 1}", bot=bot, intents=intents, shard=shard, breakage=breakage
        )
        guilds = [g for g in self.guilds.values() if bot.id in g.members and session.covers(g.id)]
        if len(guilds) > self.max_guilds_per_shard:
            await self._refuse(connection, 4011, "Sharding required.")
            return
        bot.identified += 1
        self.sessions.append(session)
        connection.session = session
        session.connection = connection
        ready: dict[str, Any] = {
            "v": 10,
            "user": {**bot.payload(), "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": str(g.id), "unavailable": True} for g in guilds],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self.resume_gateway_url,
            "application": {"id": str(bot.application_id), "flags": bot.application_flags()},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "user_settings": {},
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "auth": {},
        }
        if session.shard is not None:
            ready["shard"] = session.shard
        for name in breakage.ready_without:
            ready.pop(name, None)
        session.dispatch("READY", ready)
        for guild in guilds:
            session.dispatch("GUILD_CREATE", self._guild_create(guild, session))
        if breakage.close_after_ready is not None:
            session.valid = False
            await self._refuse(connection, breakage.close_after_ready, "Closed by the test after READY.")

    async def _resume(self, connection: Connection, data: dict[str, Any]) -> None:
        session = next((s for s in self.sessions if s.id == data.get("session_id")), None)
        if session is None or not session.valid or session.bot.token != data.get("token"):
            connection.send({"op": Op.INVALID_SESSION, "d": False, "s": None, "t": None})
            return
        old = session.connection
        if old is not None and old is not connection:
            old.dropped = True
            old.abort()
        connection.session = session
        session.connection = connection
        for frame in session.replay_after(data.get("seq")):
            connection.send(frame)
        session.dispatch("RESUMED", {})

    def _members_chunk(self, session: Session, data: dict[str, Any]) -> None:
        guild = self.guilds.get(int(data.get("guild_id", 0)))
        if guild is None or session.bot.id not in guild.members:
            return
        query = str(data.get("query") or "").lower()
        wanted = {int(x) for x in data.get("user_ids") or []}
        members = [
            m
            for m in guild.members.values()
            if ((m.user.id in wanted) if wanted else m.user.name.lower().startswith(query))
        ]
        limit = int(data.get("limit") or 0)
        if limit:
            members = members[:limit]
        chunk: dict[str, Any] = {
            "guild_id": str(guild.id),
            "members": [m.payload() for m in members],
            "chunk_index": 0,
            "chunk_count": 1,
        }
        if data.get("nonce"):
            chunk["nonce"] = data["nonce"]
        if wanted:
            chunk["not_found"] = [str(x) for x in wanted if x not in guild.members]
        session.dispatch("GUILD_MEMBERS_CHUNK", chunk)

    async def _refuse(self, connection: Connection, code: int, reason: str) -> None:
        connection.dropped = True
        await connection.flush(delayed=True)  # the close comes after every frame queued before it, late ones too
        await connection.ws.close(code=code, message=reason.encode())


def _may_read(session: Session, message: FakeMessage) -> bool:
    """What the message-content intent guards: a bot without it sees the content of its own messages and of
    messages that mention it, and nothing else."""
    return (
        session.has(Intent.MESSAGE_CONTENT)
        or message.author is session.bot
        or any(user is session.bot for user in message.mentions)
    )


def _valid_shard(shard: object) -> bool:
    """``[shard_id, num_shards]`` with ``0 <= shard_id < num_shards``."""
    return (
        isinstance(shard, list)
        and len(shard) == 2
        and all(isinstance(x, int) and not isinstance(x, bool) for x in shard)
        and 0 <= shard[0] < shard[1]
    )


def _bits(permissions: int | Any) -> int:
    return permissions if isinstance(permissions, int) else int(permissions.value)
