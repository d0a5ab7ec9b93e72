"""Fixtures for the fake Discord's own tests: a server with one guild, a channel, a moderator and a member."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

# Imported before discord.py is, so that discord.py's audioop import happens with its warning silenced.
from tests.support.fake_discord import FakeDiscord, Perm

if TYPE_CHECKING:
    from tests.support.fake_discord import FakeChannel, FakeGuild, FakeRole, FakeUser


@dataclass
class World:
    guild: FakeGuild
    lounge: FakeChannel
    mods: FakeRole
    mod: FakeUser  # has Manage Channels through the mods role
    member: FakeUser  # @everyone's permissions only


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    guild = fake.add_guild("tea house")
    lounge = fake.add_channel(guild, "lounge")
    mods = fake.add_role(guild, "mods", permissions=Perm.MANAGE_CHANNELS)
    return World(
        guild=guild,
        lounge=lounge,
        mods=mods,
        mod=fake.add_human("ann", roles=[mods]),
        member=fake.add_human("bob"),
    )
