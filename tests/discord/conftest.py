"""Fixtures for the Discord tests: a local Discord (tests.support.fake_discord) with one guild, the people in it,
the arbiter's bot account and three persona bot accounts; and the arbiter's own bot running against it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from tests.conftest import PERSONA_TOKENS

# Imported before discord.py is, so that discord.py's audioop import happens with its warning silenced.
from tests.support.fake_discord import DEFAULT_BOT_PERMISSIONS, FAST_READY, FakeDiscord, Perm, running
from tests.support.fleet import live_arbiter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from arbiter.discord_bot import ArbiterBot
    from arbiter.server import Arbiter
    from tests.support.fake_discord import FakeBot, FakeChannel, FakeGuild, FakeRole, FakeUser
    from tests.support.fleet import Live

# The moderator role the arbiter is configured with (ARBITER_MODERATOR_ROLE): it grants no permission itself.
CREW_ROLE = "aizuchi crew"
# Persona bots may ping @everyone: so a message of theirs pings nobody only because they ask it not to.
PERSONA_PERMISSIONS = DEFAULT_BOT_PERMISSIONS | Perm.MENTION_EVERYONE


@dataclass
class World:
    fake: FakeDiscord
    guild: FakeGuild
    lounge: FakeChannel  # where the tests enable the fleet
    backroom: FakeChannel  # never enabled
    mods: FakeRole  # Manage Channels
    crew: FakeRole  # CREW_ROLE: no permissions, but named in the arbiter's settings
    mod: FakeUser  # has Manage Channels through mods
    deckhand: FakeUser  # has the crew role only
    member: FakeUser  # @everyone's permissions only
    arbiter: FakeBot  # the arbiter's bot account
    personas: dict[str, FakeBot]  # persona id -> its bot account (display name: the id, titled)

    def persona_of(self, bot: FakeUser) -> str | None:
        return next((pid for pid, account in self.personas.items() if account is bot), None)


def build_world(fake: FakeDiscord, persona_ids: tuple[str, ...]) -> World:
    guild = fake.add_guild("tea house")
    lounge = fake.add_channel(guild, "lounge")
    backroom = fake.add_channel(guild, "backroom")
    mods = fake.add_role(guild, "mods", permissions=Perm.MANAGE_CHANNELS)
    crew = fake.add_role(guild, CREW_ROLE)
    return World(
        fake=fake,
        guild=guild,
        lounge=lounge,
        backroom=backroom,
        mods=mods,
        crew=crew,
        mod=fake.add_human("ann", roles=[mods]),
        deckhand=fake.add_human("dan", roles=[crew]),
        member=fake.add_human("bob"),
        arbiter=fake.add_bot("arbiter"),
        personas={
            pid: fake.add_bot(pid.title(), permissions=PERSONA_PERMISSIONS, message_content=False)
            for pid in persona_ids
        },
    )


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    """The personas are tests.conftest's hana, kai and mio (the ``arbiter`` fixture has their tokens)."""
    return build_world(fake, ("hana", "kai", "mio"))


def arbiter_bot(arbiter: Arbiter, world: World, *, moderator_role: str | None = CREW_ROLE) -> ArbiterBot:
    from arbiter.discord_bot import ArbiterBot

    return ArbiterBot(
        arbiter.service, guilds=[world.guild.id], moderator_role=moderator_role, guild_ready_timeout=FAST_READY
    )


@pytest.fixture
async def bot(arbiter: Arbiter, world: World) -> AsyncIterator[ArbiterBot]:
    """The arbiter's bot on the fake Discord, serving tests.conftest's ``arbiter`` (fake clock, SQLite)."""
    client = arbiter_bot(arbiter, world)
    async with running(client, world.arbiter.token):
        yield client


@pytest.fixture
async def live() -> AsyncIterator[Live]:
    """The arbiter served on a localhost port (real clock, the in-memory twin) with tokens for hana, kai and mio, for
    the fleet."""
    async with live_arbiter(extra_tokens=PERSONA_TOKENS) as served:
        yield served
