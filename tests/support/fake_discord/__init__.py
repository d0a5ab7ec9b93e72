"""A local Discord (REST v10 + gateway) that real discord.py clients connect to, for end-to-end tests offline.

    async with FakeDiscord() as fake:
        guild = fake.add_guild("tea house")
        lounge = fake.add_channel(guild, "lounge")
        mods = fake.add_role(guild, "mods", permissions=discord.Permissions(manage_channels=True))
        ann = fake.add_human("ann", roles=[mods])
        hana = fake.add_bot("hana")
        client = discord.Client(intents=discord.Intents.default() | discord.Intents(message_content=True),
                                guild_ready_timeout=FAST_READY)
        async with running(client, hana.token):
            await fake.human_says(lounge, ann, "hello")
            ...

See ``server.FakeDiscord`` for the test API, ``model`` for the world's objects, ``records`` for what is recorded.
"""

from __future__ import annotations

import warnings

# discord.py imports the standard library's audioop (for voice) at import time, which Python 3.11-3.12 mark
# deprecated; with pytest's filterwarnings=error that import would fail. Import it once here, quietly.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="'audioop' is deprecated", category=DeprecationWarning)
    import discord  # noqa: F401

from .clients import FAST_READY, RecordingClient, running
from .commands import InvalidInvocation
from .gateway import Breakage, GatewayOp, Op
from .model import (
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
)
from .ratelimits import DISCORD_GLOBAL_LIMIT, DISCORD_RATE_LIMITS
from .records import FailureRule, InteractionNotAnswered, InteractionResult, RecordedRequest
from .server import FakeDiscord
from .webhooks import MAX_CHANNEL_WEBHOOKS, FakeWebhook, WebhookAuthor

__all__ = (
    "DEFAULT_BOT_PERMISSIONS",
    "DEFAULT_EVERYONE_PERMISSIONS",
    "DISCORD_GLOBAL_LIMIT",
    "DISCORD_RATE_LIMITS",
    "FAST_READY",
    "MAX_CHANNEL_WEBHOOKS",
    "Breakage",
    "FailureRule",
    "FakeBot",
    "FakeChannel",
    "FakeDiscord",
    "FakeGuild",
    "FakeMember",
    "FakeMessage",
    "FakeRole",
    "FakeUser",
    "FakeWebhook",
    "GatewayOp",
    "Intent",
    "InteractionNotAnswered",
    "InteractionResult",
    "InvalidInvocation",
    "Op",
    "Overwrite",
    "Perm",
    "RecordedRequest",
    "RecordingClient",
    "WebhookAuthor",
    "running",
)
