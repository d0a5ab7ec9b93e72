"""The fake Discord's world: users, bots, guilds, roles, channels, members and messages, and their wire payloads.

Everything here is plain data plus the few rules Discord applies to it: permission computation (roles, then
channel overwrites, as in Discord's documented algorithm), effective mentions under ``allowed_mentions``, and
what a bot without the message-content intent is allowed to see of a message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

__all__ = (
    "ALL_PARSE",
    "ALL_PERMISSIONS",
    "DEFAULT_BOT_PERMISSIONS",
    "DEFAULT_EVERYONE_PERMISSIONS",
    "FakeBot",
    "FakeChannel",
    "FakeGuild",
    "FakeMember",
    "FakeMessage",
    "FakeRole",
    "FakeUser",
    "Intent",
    "Overwrite",
    "Perm",
    "Snowflakes",
    "effective_mentions",
    "iso",
    "permissions_in",
    "role_permissions",
)

DISCORD_EPOCH_MS = 1_420_070_400_000


class Perm:
    """Permission bits (https://discord.com/developers/docs/topics/permissions), the ones the fake looks at."""

    CREATE_INSTANT_INVITE = 1 << 0
    ADMINISTRATOR = 1 << 3
    MANAGE_CHANNELS = 1 << 4
    MANAGE_GUILD = 1 << 5
    ADD_REACTIONS = 1 << 6
    VIEW_CHANNEL = 1 << 10
    SEND_MESSAGES = 1 << 11
    MANAGE_MESSAGES = 1 << 13
    EMBED_LINKS = 1 << 14
    ATTACH_FILES = 1 << 15
    READ_MESSAGE_HISTORY = 1 << 16
    MENTION_EVERYONE = 1 << 17
    USE_EXTERNAL_EMOJIS = 1 << 18
    CHANGE_NICKNAME = 1 << 26
    MANAGE_WEBHOOKS = 1 << 29
    USE_APPLICATION_COMMANDS = 1 << 31
    SEND_MESSAGES_IN_THREADS = 1 << 38


class Intent:
    """Gateway intent bits; the three privileged ones must be allowed for the bot (its "Developer Portal")."""

    GUILDS = 1 << 0
    GUILD_MEMBERS = 1 << 1
    GUILD_PRESENCES = 1 << 8
    GUILD_MESSAGES = 1 << 9
    GUILD_MESSAGE_REACTIONS = 1 << 10
    GUILD_MESSAGE_TYPING = 1 << 11
    DIRECT_MESSAGES = 1 << 12
    MESSAGE_CONTENT = 1 << 15


ALL_PERMISSIONS = (1 << 53) - 1
# What a fresh guild's @everyone may do in text channels (no mention_everyone: a moderator decision).
DEFAULT_EVERYONE_PERMISSIONS = (
    Perm.CREATE_INSTANT_INVITE
    | Perm.ADD_REACTIONS
    | Perm.VIEW_CHANNEL
    | Perm.SEND_MESSAGES
    | Perm.EMBED_LINKS
    | Perm.ATTACH_FILES
    | Perm.READ_MESSAGE_HISTORY
    | Perm.USE_EXTERNAL_EMOJIS
    | Perm.CHANGE_NICKNAME
    | Perm.USE_APPLICATION_COMMANDS
    | Perm.SEND_MESSAGES_IN_THREADS
)
# What an invite link typically grants a chat bot (its managed role).
DEFAULT_BOT_PERMISSIONS = (
    Perm.VIEW_CHANNEL
    | Perm.SEND_MESSAGES
    | Perm.READ_MESSAGE_HISTORY
    | Perm.ADD_REACTIONS
    | Perm.EMBED_LINKS
    | Perm.USE_EXTERNAL_EMOJIS
)

ALL_PARSE = ("users", "roles", "everyone")  # allowed_mentions "parse" that lets everything ping
USER_MENTION = re.compile(r"<@!?(\d+)>")
ROLE_MENTION = re.compile(r"<@&(\d+)>")
EVERYONE_MENTION = re.compile(r"@(everyone|here)\b")


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


class Snowflakes:
    """Ids in Discord's snowflake layout, from the given clock; strictly increasing, so deterministic when the
    clock is (a frozen clock gives consecutive ids)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._last = 0

    def __call__(self) -> int:
        candidate = (int(self._clock() * 1000) - DISCORD_EPOCH_MS) << 22
        self._last = max(candidate, self._last + 1)
        return self._last

    def on_shard(self, shard_id: int, count: int) -> int:
        """The next id whose object Discord puts on shard ``shard_id`` of ``count`` (``(id >> 22) % count``): the
        same id a little later, when that shard's millisecond comes."""
        candidate = self()
        while (candidate >> 22) % count != shard_id:
            candidate = ((candidate >> 22) + 1) << 22
        self._last = candidate
        return candidate


@dataclass(eq=False, kw_only=True)
class FakeUser:
    id: int
    name: str
    bot: bool = False

    @property
    def mention(self) -> str:
        return f"<@{self.id}>"

    def payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "username": self.name,
            "discriminator": "0",
            "global_name": self.name,
            "avatar": None,
            "bot": self.bot,
            "public_flags": 0,
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} id={self.id}>"


@dataclass(eq=False, kw_only=True)
class FakeBot(FakeUser):
    """A bot account and its application. The ``allow_*`` flags are the privileged intents switched on for it
    in the Developer Portal; a client that asks for one that is off is closed with 4014, as Discord does.
    ``verified``: a verified application (its intents show as the GATEWAY_* application flags; an unverified one's,
    every self-hosted bot's, as GATEWAY_*_LIMITED). ``require_code_grant``: "Requires OAuth2 Code Grant" is on
    (a plain invite link then fails)."""

    token: str
    application_id: int
    allow_message_content: bool = True
    allow_members: bool = True
    allow_presences: bool = True
    verified: bool = False
    require_code_grant: bool = False
    identified: int = 0  # successful IDENTIFYs (session starts), for GET /gateway/bot's session_start_limit

    def application_flags(self) -> int:
        """GATEWAY_PRESENCE (1 << 12), GATEWAY_GUILD_MEMBERS (1 << 14), GATEWAY_MESSAGE_CONTENT (1 << 18) for a
        verified app; for an unverified one each is the _LIMITED flag one bit up (13, 15, 19)."""
        limited = 0 if self.verified else 1
        return (
            (1 << (12 + limited) if self.allow_presences else 0)
            | (1 << (14 + limited) if self.allow_members else 0)
            | (1 << (18 + limited) if self.allow_message_content else 0)
        )

    def privileged_refused(self, intents: int) -> bool:
        return bool(
            (intents & Intent.MESSAGE_CONTENT and not self.allow_message_content)
            or (intents & Intent.GUILD_MEMBERS and not self.allow_members)
            or (intents & Intent.GUILD_PRESENCES and not self.allow_presences)
        )

    def application_payload(self) -> dict[str, Any]:
        return {
            "id": str(self.application_id),
            "name": self.name,
            "icon": None,
            "description": "",
            "summary": "",
            "type": None,
            "bot_public": False,
            "bot_require_code_grant": self.require_code_grant,
            "verify_key": "0" * 64,
            "flags": self.application_flags(),
            "owner": {"id": "1", "username": "owner", "discriminator": "0", "avatar": None, "global_name": None},
            "team": None,
            "interactions_endpoint_url": None,
            "bot": self.payload(),
        }


@dataclass(eq=False, kw_only=True)
class FakeRole:
    id: int
    guild: FakeGuild
    name: str
    permissions: int = 0
    position: int = 0
    mentionable: bool = False
    managed_by: FakeBot | None = None

    @property
    def mention(self) -> str:
        return f"<@&{self.id}>"

    @property
    def is_everyone(self) -> bool:
        return self.id == self.guild.id

    def payload(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": str(self.id),
            "name": self.name,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": self.position,
            "permissions": str(self.permissions),
            "managed": self.managed_by is not None,
            "mentionable": self.mentionable,
            "flags": 0,
        }
        if self.managed_by is not None:
            data["tags"] = {"bot_id": str(self.managed_by.id)}
        return data

    def __repr__(self) -> str:
        return f"<FakeRole {self.name} id={self.id}>"


@dataclass(eq=False, kw_only=True)
class Overwrite:
    """A channel permission overwrite for a role (the guild's @everyone included) or a user."""

    target: FakeRole | FakeUser
    allow: int = 0
    deny: int = 0

    def payload(self) -> dict[str, Any]:
        kind = 0 if isinstance(self.target, FakeRole) else 1
        return {"id": str(self.target.id), "type": kind, "allow": str(self.allow), "deny": str(self.deny)}


@dataclass(eq=False, kw_only=True)
class FakeMember:
    user: FakeUser
    guild: FakeGuild
    roles: list[FakeRole] = field(default_factory=list)
    joined_at: float = 0.0
    nick: str | None = None

    def payload(self, *, with_user: bool = True, permissions: int | None = None) -> dict[str, Any]:
        data: dict[str, Any] = {
            "roles": [str(role.id) for role in self.roles],
            "joined_at": iso(self.joined_at),
            "nick": self.nick,
            "avatar": None,
            "banner": None,
            "premium_since": None,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "communication_disabled_until": None,
        }
        if with_user:
            data["user"] = self.user.payload()
        if permissions is not None:
            data["permissions"] = str(permissions)
        return data


@dataclass(eq=False, kw_only=True)
class FakeGuild:
    id: int
    name: str
    owner_id: int
    created_at: float
    roles: dict[int, FakeRole] = field(default_factory=dict)
    channels: dict[int, FakeChannel] = field(default_factory=dict)
    threads: dict[int, FakeChannel] = field(default_factory=dict)  # (public) threads, each under its channel
    members: dict[int, FakeMember] = field(default_factory=dict)

    @property
    def everyone(self) -> FakeRole:
        return self.roles[self.id]

    def member(self, user: FakeUser) -> FakeMember | None:
        return self.members.get(user.id)

    def base_payload(self) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "name": self.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(self.owner_id),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 1,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "preferred_locale": "en-US",
            "system_channel_id": None,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [role.payload() for role in self.roles.values()],
        }

    def __repr__(self) -> str:
        return f"<FakeGuild {self.name} id={self.id}>"


@dataclass(eq=False, kw_only=True)
class FakeChannel:
    """A guild text channel, or a public thread under one (``parent``: a thread has no overwrites of its own, its
    permissions are its parent's). ``messages`` lists what is in it now (no deletions, no ephemeral replies)."""

    id: int
    guild: FakeGuild
    name: str
    position: int = 0
    topic: str | None = None
    overwrites: list[Overwrite] = field(default_factory=list)
    history: list[FakeMessage] = field(default_factory=list)
    parent: FakeChannel | None = None
    owner_id: int = 0  # a thread's: who started it
    created_at: float = 0.0

    @property
    def send_permission(self) -> int:
        """What posting here takes: Send Messages in a channel, Send Messages in Threads in a thread."""
        return Perm.SEND_MESSAGES if self.parent is None else Perm.SEND_MESSAGES_IN_THREADS

    @property
    def mention(self) -> str:
        return f"<#{self.id}>"

    @property
    def messages(self) -> list[FakeMessage]:
        return [message for message in self.history if not message.deleted]

    @property
    def last_message_id(self) -> int | None:
        live = self.messages
        return live[-1].id if live else None

    def payload(self) -> dict[str, Any]:
        if self.parent is not None:
            return self._thread_payload(self.parent)
        return {
            "id": str(self.id),
            "type": 0,
            "guild_id": str(self.guild.id),
            "name": self.name,
            "position": self.position,
            "permission_overwrites": [overwrite.payload() for overwrite in self.overwrites],
            "topic": self.topic,
            "nsfw": False,
            "parent_id": None,
            "rate_limit_per_user": 0,
            "last_message_id": None if self.last_message_id is None else str(self.last_message_id),
            "flags": 0,
        }

    def _thread_payload(self, parent: FakeChannel) -> dict[str, Any]:
        return {
            "id": str(self.id),
            "type": 11,  # a public thread
            "guild_id": str(self.guild.id),
            "parent_id": str(parent.id),
            "owner_id": str(self.owner_id),
            "name": self.name,
            "last_message_id": None if self.last_message_id is None else str(self.last_message_id),
            "rate_limit_per_user": 0,
            "message_count": len(self.messages),
            "member_count": 1,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": iso(self.created_at),
                "locked": False,
                "create_timestamp": iso(self.created_at),
            },
        }

    def __repr__(self) -> str:
        kind = "thread" if self.parent is not None else "channel"
        return f"<FakeChannel {kind} #{self.name} id={self.id}>"


@dataclass(eq=False, kw_only=True)
class FakeMessage:
    """A message as Discord stores it. ``mentions``/``mention_roles``/``mention_everyone`` are the *effective*
    mentions (those that ping), computed from the content under ``allowed_mentions``; ``allowed_mentions`` is
    the object the sender passed, or None when it passed none."""

    id: int
    channel: FakeChannel
    author: FakeUser
    content: str
    created_at: float
    type: int = 0
    embeds: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)
    components: list[dict[str, Any]] = field(default_factory=list)
    flags: int = 0
    tts: bool = False
    nonce: str | int | None = None
    allowed_mentions: dict[str, Any] | None = None
    mentions: list[FakeUser] = field(default_factory=list)
    mention_roles: list[FakeRole] = field(default_factory=list)
    mention_everyone: bool = False
    reference: FakeMessage | None = None
    edited_at: float | None = None
    edits: list[str] = field(default_factory=list)  # earlier contents, oldest first
    deleted: bool = False
    reactions: dict[str, list[FakeUser]] = field(default_factory=dict)
    webhook_id: int | None = None
    application_id: int | None = None
    interaction: dict[str, Any] | None = None  # interaction_metadata, for interaction responses

    EPHEMERAL = 1 << 6
    LOADING = 1 << 7

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & self.EPHEMERAL)

    @property
    def live_mentions(self) -> bool:
        """Whether this message pinged anyone (a user, a role, @everyone/@here)."""
        return bool(self.mentions or self.mention_roles or self.mention_everyone)

    def payload(self, *, viewer: FakeUser | None = None, content_visible: bool = True) -> dict[str, Any]:
        """The message object as ``viewer`` gets it; ``content_visible=False`` blanks what the message-content
        intent guards (content, embeds, attachments, components)."""
        guild = self.channel.guild
        data: dict[str, Any] = {
            "id": str(self.id),
            "type": self.type,
            "channel_id": str(self.channel.id),
            "guild_id": str(guild.id),
            "author": self.author.payload(),
            "content": self.content if content_visible else "",
            "timestamp": iso(self.created_at),
            "edited_timestamp": None if self.edited_at is None else iso(self.edited_at),
            "tts": self.tts,
            "mention_everyone": self.mention_everyone,
            "mentions": [self._mention_payload(user) for user in self.mentions],
            "mention_roles": [str(role.id) for role in self.mention_roles],
            "attachments": self.attachments if content_visible else [],
            "embeds": self.embeds if content_visible else [],
            "components": self.components if content_visible else [],
            "pinned": False,
            "flags": self.flags,
            "reactions": [
                {
                    "emoji": _emoji_payload(emoji),
                    "count": len(users),
                    "count_details": {"normal": len(users), "burst": 0},
                    "me": viewer is not None and any(user.id == viewer.id for user in users),
                    "me_burst": False,
                    "burst_colors": [],
                }
                for emoji, users in self.reactions.items()
                if users
            ],
        }
        member = guild.member(self.author)
        if member is not None and self.webhook_id is None:
            data["member"] = member.payload(with_user=False)
        if self.nonce is not None:
            data["nonce"] = self.nonce
        if self.webhook_id is not None:
            data["webhook_id"] = str(self.webhook_id)
        if self.application_id is not None:
            data["application_id"] = str(self.application_id)
        if self.interaction is not None:
            data["interaction_metadata"] = self.interaction
        if self.reference is not None:
            ref = self.reference
            data["message_reference"] = {
                "type": 0,
                "message_id": str(ref.id),
                "channel_id": str(ref.channel.id),
                "guild_id": str(guild.id),
            }
            # The referenced message is nested one level deep only, as Discord does; its content follows the
            # viewer's intent like the message's own.
            if ref.deleted:
                data["referenced_message"] = None
            else:
                nested = ref.payload(viewer=viewer, content_visible=content_visible or ref.author is viewer)
                nested.pop("referenced_message", None)
                data["referenced_message"] = nested
        return data

    def _mention_payload(self, user: FakeUser) -> dict[str, Any]:
        data = user.payload()
        member = self.channel.guild.member(user)
        if member is not None:
            data["member"] = member.payload(with_user=False)
        return data

    def __repr__(self) -> str:
        return f"<FakeMessage id={self.id} by {self.author.name}: {self.content!r}>"


def _emoji_payload(emoji: str) -> dict[str, Any]:
    name, _, emoji_id = emoji.partition(":")
    return {"id": emoji_id or None, "name": name}


def guild_permissions(member: FakeMember) -> int:
    value = role_permissions(member)
    return ALL_PERMISSIONS if value & Perm.ADMINISTRATOR else value


def role_permissions(member: FakeMember) -> int:
    """A member's permissions as GET /users/@me/guilds reports them: those of @everyone and of its roles together,
    without channel overwrites and without what Administrator implies ("excludes overwrites and implicit
    permissions"); the owner's are all."""
    guild = member.guild
    if member.user.id == guild.owner_id:
        return ALL_PERMISSIONS
    value = guild.everyone.permissions
    for role in member.roles:
        value |= role.permissions
    return value


def permissions_in(member: FakeMember, channel: FakeChannel) -> int:
    """Discord's algorithm: guild permissions, then the @everyone overwrite, the member's role overwrites
    (all denies, then all allows), then the member's own overwrite; no VIEW_CHANNEL means nothing. A thread has
    its parent channel's."""
    channel = channel.parent or channel
    value = guild_permissions(member)
    if value == ALL_PERMISSIONS:  # the owner and administrators: overwrites do not apply
        return ALL_PERMISSIONS
    role_ids = {role.id for role in member.roles}
    by_target = {overwrite.target.id: overwrite for overwrite in channel.overwrites}
    everyone = by_target.get(member.guild.id)
    if everyone is not None:
        value = (value & ~everyone.deny) | everyone.allow
    allow = deny = 0
    for overwrite in channel.overwrites:
        if isinstance(overwrite.target, FakeRole) and overwrite.target.id in role_ids:
            allow |= overwrite.allow
            deny |= overwrite.deny
    value = (value & ~deny) | allow
    own = by_target.get(member.user.id)
    if own is not None and not isinstance(own.target, FakeRole):
        value = (value & ~own.deny) | own.allow
    return value if value & Perm.VIEW_CHANNEL else 0


def effective_mentions(
    *,
    content: str,
    author_permissions: int,
    guild: FakeGuild,
    users: Iterable[FakeUser],
    allowed: dict[str, Any] | None,
    default_parse: Sequence[str],
    reply_to: FakeMessage | None,
) -> tuple[list[FakeUser], list[FakeRole], bool]:
    """Who a message pings. Without ``allowed`` (no allowed_mentions sent) the context's default applies:
    everything for a normal message, users only for interactions and webhooks; a reply pings its author."""
    parse = set(allowed.get("parse") or ()) if allowed is not None else set(default_parse)
    listed_users = {int(x) for x in (allowed or {}).get("users") or ()}
    listed_roles = {int(x) for x in (allowed or {}).get("roles") or ()}
    by_id = {user.id: user for user in users}

    mentioned: list[FakeUser] = []
    for match in USER_MENTION.finditer(content):
        user = by_id.get(int(match.group(1)))
        if user is not None and user not in mentioned and ("users" in parse or user.id in listed_users):
            mentioned.append(user)
    # A webhook is no user: a reply to its message pings nobody.
    if reply_to is not None and not reply_to.deleted and reply_to.webhook_id is None:
        replied_user = True if allowed is None else bool(allowed.get("replied_user", False))
        if replied_user and reply_to.author not in mentioned:
            mentioned.append(reply_to.author)

    roles: list[FakeRole] = []
    may_ping_any_role = bool(author_permissions & Perm.MENTION_EVERYONE)
    for match in ROLE_MENTION.finditer(content):
        role = guild.roles.get(int(match.group(1)))
        if role is None or role in roles or role.is_everyone:
            continue
        if ("roles" in parse or role.id in listed_roles) and (role.mentionable or may_ping_any_role):
            roles.append(role)

    everyone = bool(
        EVERYONE_MENTION.search(content) and "everyone" in parse and author_permissions & Perm.MENTION_EVERYONE
    )
    return mentioned, roles, everyone
