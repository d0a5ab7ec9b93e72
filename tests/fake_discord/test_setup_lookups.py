"""What a setup check asks Discord over REST, asked by a real discord.py client: the bot's application (its intents'
flags), the guilds it is in (with what its roles grant there), a guild with its roles, its channels and one member;
and a bot leaving a guild."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import discord
import pytest

from tests.support.fake_discord import FAST_READY, Overwrite, Perm, RecordingClient, running

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord


@contextlib.asynccontextmanager
async def logged_in(token: str) -> AsyncIterator[discord.Client]:
    """A client logged in over REST only (no gateway session), as a check makes one."""
    client = discord.Client(intents=discord.Intents(guilds=True))
    try:
        await client.login(token)
        yield client
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("verified", "message_content", "flag"),
    [
        (False, True, "gateway_message_content_limited"),  # the Developer Portal switch of an unverified app
        (True, True, "gateway_message_content"),  # a verified app's approved intent
        (False, False, None),
    ],
)
async def test_the_application_says_whether_the_message_content_intent_is_on(
    fake: FakeDiscord, world: World, verified: bool, message_content: bool, flag: str | None
) -> None:
    hana = fake.add_bot("hana", verified=verified, message_content=message_content, require_code_grant=True)

    async with logged_in(hana.token) as client:
        info = await client.application_info()
        same = await client.http.request(discord.http.Route("GET", "/applications/@me"))

    assert info.id == hana.application_id
    assert info.name == "hana"
    assert info.bot_require_code_grant
    both = {"gateway_message_content", "gateway_message_content_limited"}
    assert {name for name in both if getattr(info.flags, name)} == ({flag} if flag else set())
    assert same["flags"] == info.flags.value
    assert info.flags.gateway_presence == verified
    assert info.flags.gateway_presence_limited != verified


async def test_the_guilds_of_a_bot_are_those_it_is_in_with_what_its_roles_grant(
    fake: FakeDiscord, world: World
) -> None:
    other = fake.add_guild("other")
    hana = fake.add_bot("hana", guilds=[world.guild], permissions=Perm.VIEW_CHANNEL | Perm.ADD_REACTIONS)
    third = fake.add_guild("third")
    fake.join(hana, third)

    async with logged_in(hana.token) as client:
        guilds = [guild async for guild in client.fetch_guilds(limit=None)]
        raw = await client.http.get_guilds(200, with_counts=False)
        counted = await client.http.get_guilds(200)  # discord.py asks for the counts unless told not to
        first = await client.http.get_guilds(1, with_counts=False)
        after = await client.http.get_guilds(1, after=world.guild.id, with_counts=False)
        before = await client.http.get_guilds(5, before=third.id, with_counts=False)
        with pytest.raises(discord.HTTPException) as too_many:
            await client.http.get_guilds(201)

    assert [guild.id for guild in guilds] == [world.guild.id, third.id]  # not "other": it was never invited there
    assert other.id not in {int(g["id"]) for g in raw}
    assert raw[0] == {
        "id": str(world.guild.id),
        "name": "tea house",
        "icon": None,
        "banner": None,
        "owner": False,
        # @everyone's and its managed role's, without overwrites: what Discord reports
        "permissions": str(world.guild.everyone.permissions | Perm.VIEW_CHANNEL | Perm.ADD_REACTIONS),
        "features": [],
    }
    assert raw[1]["permissions"] == str(third.everyone.permissions)  # joined by hand: no managed role there
    assert "approximate_member_count" not in raw[0]
    assert dict(counted[0])["approximate_member_count"] == len(world.guild.members)
    assert [g["id"] for g in first] == [str(world.guild.id)]
    assert [g["id"] for g in after] == [str(third.id)]
    assert [g["id"] for g in before] == [str(world.guild.id)]
    assert (too_many.value.status, too_many.value.code) == (400, 50035)
    assert not fake.unknown_requests


async def test_a_refused_token_is_401_everywhere(fake: FakeDiscord, world: World) -> None:
    client = discord.Client(intents=discord.Intents.none())
    try:
        with pytest.raises(discord.LoginFailure):
            await client.login("not-a-token")
    finally:
        await client.close()

    assert [(r.path, r.status) for r in fake.requests] == [("/users/@me", 401)]


async def test_discord_py_computes_a_members_channel_permissions_from_what_the_fake_answers(
    fake: FakeDiscord, world: World
) -> None:
    hana = fake.add_bot("hana")
    kai = fake.add_bot("kai")
    quiet = fake.add_channel(world.guild, "quiet", overwrites=[Overwrite(target=hana, deny=Perm.SEND_MESSAGES)])
    hidden = fake.add_channel(
        world.guild, "hidden", overwrites=[Overwrite(target=world.guild.everyone, deny=Perm.VIEW_CHANNEL)]
    )
    kai_role = next(role for role in world.guild.roles.values() if role.managed_by is kai)
    await fake.set_overwrites(hidden, [*hidden.overwrites, Overwrite(target=kai_role, allow=Perm.VIEW_CHANNEL)])

    async with logged_in(hana.token) as client:
        guild = await client.fetch_guild(world.guild.id)
        channels = {channel.id: channel for channel in await guild.fetch_channels()}
        members = {bot.id: await guild.fetch_member(bot.id) for bot in (hana, kai)}
        with pytest.raises(discord.NotFound) as stranger:
            await guild.fetch_member(fake.add_bot("stranger", guilds=[]).id)

    assert {role.id for role in guild.roles} == set(world.guild.roles)
    assert set(channels) == {world.lounge.id, quiet.id, hidden.id}  # every channel, seen or not, as Discord lists them
    # discord.py also takes away what a missing permission implies (no Send Messages: no Embed Links...), which the
    # fake leaves to its routes; the permissions a check looks at are the same.
    looked_at = Perm.VIEW_CHANNEL | Perm.SEND_MESSAGES | Perm.ADD_REACTIONS | Perm.READ_MESSAGE_HISTORY
    for channel_id, channel in channels.items():
        for bot_id, member in members.items():
            expected = fake.permissions(fake.users[bot_id], world.guild.channels[channel_id]) & looked_at
            assert channel.permissions_for(member).value & looked_at == expected, (channel.name, member.name)
    assert not channels[quiet.id].permissions_for(members[hana.id]).send_messages
    assert not channels[hidden.id].permissions_for(members[hana.id]).view_channel
    assert channels[hidden.id].permissions_for(members[kai.id]).view_channel
    assert (stranger.value.status, stranger.value.code) == (404, 10007)


async def test_a_guild_the_bot_is_not_in_is_missing_access(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana", guilds=[])

    async with logged_in(hana.token) as client:
        with pytest.raises(discord.Forbidden) as refused:
            await client.fetch_guild(world.guild.id)
        with pytest.raises(discord.NotFound) as unknown:
            await client.fetch_guild(12345)

    assert (refused.value.status, refused.value.code) == (403, 50001)
    assert (unknown.value.status, unknown.value.code) == (404, 10004)


async def test_a_bot_that_leaves_a_guild_loses_it_and_its_managed_role(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    managed = next(role for role in world.guild.roles.values() if role.managed_by is hana)
    watcher = fake.add_bot("watcher")
    watching = RecordingClient(intents=discord.Intents.default() | discord.Intents(members=True))
    leaving = RecordingClient(intents=discord.Intents.default(), guild_ready_timeout=FAST_READY)

    async with running(watching, watcher.token), running(leaving, hana.token):
        assert leaving.get_guild(world.guild.id) is not None
        fake.leave(hana, world.guild)
        await fake.flush()
        await fake.wait_until(lambda: leaving.get_guild(world.guild.id) is None, what="hana's client drops the guild")
        seen = watching.get_guild(world.guild.id)
        assert seen is not None
        await fake.wait_until(lambda: seen.get_member(hana.id) is None, what="the watcher sees hana leave")
        await fake.wait_until(lambda: seen.get_role(managed.id) is None, what="the managed role goes")

    assert hana.id not in world.guild.members
    assert managed.id not in world.guild.roles
    async with logged_in(hana.token) as client:
        assert [guild async for guild in client.fetch_guilds()] == []
    with pytest.raises(ValueError, match="not a member"):
        fake.leave(hana, world.guild)
