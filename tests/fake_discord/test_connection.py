"""Logging in and connecting: REST login, IDENTIFY, READY, GUILD_CREATE, intents, the cache discord.py builds."""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord
import pytest

from tests.support.fake_discord import Op, RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)


async def test_a_bot_connects_and_has_the_guild_and_channel_cached(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        channel = client.get_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        assert channel.name == "lounge"
        assert channel.guild.name == "tea house"
        assert client.user is not None
        assert client.user.id == hana.id
        assert client.application_id == hana.application_id
        assert channel.guild.me.id == hana.id
        # The bot's own permissions come from its managed role, as after an invite.
        assert channel.permissions_for(channel.guild.me).send_messages
        assert not channel.permissions_for(channel.guild.me).manage_channels
        assert fake.connected(hana)

    assert [r.path for r in fake.requests_to("GET", bot=hana)] == ["/users/@me", "/oauth2/applications/@me"]
    identify = fake.gateway_ops(hana, Op.IDENTIFY)
    assert len(identify) == 1
    assert identify[0].data["intents"] == CONTENT.value
    # discord.py asks for zlib-stream transport compression; the fake speaks it.
    assert identify[0].compress == "zlib-stream"
    assert not fake.unknown_requests


async def test_a_closed_client_disconnects(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")

    async with running(RecordingClient(intents=CONTENT), hana.token):
        assert fake.connected(hana)

    await fake.wait_until(lambda: not fake.connected(hana))


async def test_a_wrong_token_fails_the_login(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)

    with pytest.raises(discord.LoginFailure):
        async with running(client, "not-a-token"):
            pass

    assert [(r.path, r.status) for r in fake.requests] == [("/users/@me", 401)]


async def test_a_privileged_intent_switched_off_for_the_bot_is_refused(fake: FakeDiscord, world: World) -> None:
    quiet = fake.add_bot("quiet", message_content=False)

    with pytest.raises(discord.PrivilegedIntentsRequired):
        async with running(RecordingClient(intents=CONTENT), quiet.token):
            pass


async def test_the_members_intent_fills_the_member_cache_by_chunking(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    with_members = RecordingClient(intents=discord.Intents.default() | discord.Intents(members=True))
    without = RecordingClient(intents=discord.Intents.default())

    async with running(with_members, hana.token), running(without, fake.add_bot("kai").token):
        guild = with_members.get_guild(world.guild.id)
        assert guild is not None
        assert guild.chunked
        mod = guild.get_member(world.mod.id)
        assert mod is not None
        assert [role.name for role in mod.roles] == ["@everyone", "mods"]
        assert mod.guild_permissions.manage_channels

        # Without it Discord sends only the bot's own member.
        bare = without.get_guild(world.guild.id)
        assert bare is not None
        assert bare.get_member(world.mod.id) is None
        assert bare.member_count == len(world.guild.members)

    assert len(fake.gateway_ops(hana, Op.REQUEST_GUILD_MEMBERS)) == 1


async def test_a_channel_created_later_reaches_connected_bots(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        garden = fake.add_channel(world.guild, "garden")
        await fake.flush()
        await fake.wait_until(lambda: client.get_channel(garden.id) is not None)

        channel = client.get_channel(garden.id)
        assert isinstance(channel, discord.TextChannel)
        assert channel.name == "garden"
