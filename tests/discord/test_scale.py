"""Discord at scale: the bots shard as Discord recommends (intake, answers and catching up work per shard), and
keep within Discord's rate limits, waiting out its 429s without losing or doubling a post or a reaction."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import discord
import pytest

from arbiter.contract import AuthorKind
from arbiter.discord_bot import ArbiterBot
from bots.discord_client import PersonaClient
from bots.platforms.discord import DiscordPlatform
from tests.discord.conftest import PERSONA_PERMISSIONS
from tests.discord.fleet import discord_fleet, eager
from tests.support.eventually import eventually
from tests.support.fake_discord import FAST_READY, FakeDiscord, Op, RecordingClient, running

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeBot, FakeChannel, FakeGuild, RecordedRequest
    from tests.support.fleet import Live


class NoWaitArbiterBot(ArbiterBot):
    """discord.py waits 5 s before identifying each shard after the first (Discord's identify rate limit); the
    local Discord has no such limit. A gate lets a test hold a shard's new session back."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.identify = asyncio.Event()
        self.identify.set()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        await self.identify.wait()


class NoWaitPersonaClient(PersonaClient):
    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """Discord recommending two shards; on the arbiter's (real) clock, so that catching up reads back what was
    said while a shard was away (it looks back an hour at most)."""
    async with FakeDiscord(shards=2, clock=time.time) as server:
        yield server


def shard_of(guild: FakeGuild, count: int = 2) -> int:
    return (guild.id >> 22) % count


def second_server(world: World) -> tuple[FakeGuild, FakeChannel]:
    """A server on the other shard from the tea house, with the member and every bot of the world in it."""
    fake = world.fake
    garden = fake.add_guild("tea garden", shard=(1 - shard_of(world.guild), 2))
    channel = fake.add_channel(garden, "garden")
    fake.join(world.member, garden)
    for bot in [world.arbiter, *world.personas.values()]:
        managed = fake.add_role(garden, bot.name, permissions=PERSONA_PERMISSIONS)
        managed.managed_by = bot
        fake.join(bot, garden, roles=[managed])
    return garden, channel


def identified_shards(fake: FakeDiscord, bot: FakeBot) -> list[list[int]]:
    return sorted(op.data["shard"] for op in fake.gateway_ops(bot, Op.IDENTIFY))


def guilds_sent(fake: FakeDiscord, bot: FakeBot) -> dict[int, set[int]]:
    """Shard id -> the guilds Discord sent that shard's sessions (GUILD_CREATE)."""
    sent: dict[int, set[int]] = {}
    for session in fake.sessions:
        if session.bot is bot and session.shard is not None:
            created = {int(f["d"]["id"]) for f in session.events if f["t"] == "GUILD_CREATE"}
            sent.setdefault(session.shard[0], set()).update(created)
    return sent


async def test_a_fleet_over_two_shards_takes_part_in_the_channels_of_both(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    garden, garden_channel = second_server(world)
    await live.channel(str(garden_channel.id))
    async with discord_fleet(
        world, live, [eager("hana")], arbiter_type=NoWaitArbiterBot, client_type=NoWaitPersonaClient
    ) as fleet:
        hana = fleet.runtimes["hana"]
        await eventually(lambda: str(garden_channel.id) in hana.channels, what="hana joins the garden")
        await hana.join(str(garden_channel.id)).ready()
        account = world.personas["hana"]
        said = {
            channel.id: await fake.human_says(channel, world.member, f"hello in #{channel.name}", mentions=[account])
            for channel in (world.lounge, garden_channel)
        }
        answered = {}
        for channel in (world.lounge, garden_channel):
            await eventually(
                lambda channel=channel: any(m.author is account for m in channel.messages),
                what=f"hana answers in #{channel.name}",
            )
            await live.settled(str(channel.id))
            answered[channel.id] = [m for m in channel.messages if m.author is account]
        histories = {channel.id: await live.history(str(channel.id)) for channel in (world.lounge, garden_channel)}
        shard_counts = (fleet.bot.shard_count, fleet.clients["hana"].shard_count)

    # Both bots took Discord's recommendation: one session per shard, each given only its own servers.
    assert shard_counts == (2, 2)
    for bot in (world.arbiter, account):
        assert identified_shards(fake, bot) == [[0, 2], [1, 2]]
        assert guilds_sent(fake, bot) == {shard_of(world.guild): {world.guild.id}, shard_of(garden): {garden.id}}
    # In each channel, whichever shard it is on: the person's message was taken in, and hana answered it.
    for channel_id, history in histories.items():
        [answer] = answered[channel_id]
        assert [(m.author_kind, m.platform_message_id) for m in history] == [
            (AuthorKind.HUMAN, str(said[channel_id].id)),
            (AuthorKind.PERSONA, str(answer.id)),
        ]


async def test_a_shard_that_loses_its_session_catches_up_on_its_own_channels_while_the_other_records(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    garden, garden_channel = second_server(world)
    await live.channel(str(garden_channel.id))
    async with discord_fleet(world, live, [], arbiter_type=NoWaitArbiterBot) as fleet:
        bot = fleet.bot
        assert isinstance(bot, NoWaitArbiterBot)
        for channel in (world.lounge, garden_channel):  # the first catch-ups are over: nothing to read back yet
            await fake.wait_for_request("GET", f"/channels/{channel.id}/messages", bot=world.arbiter)
        bot.identify.clear()  # the garden's shard will not get a new session until the test says so
        await fake.invalidate(world.arbiter, shard=shard_of(garden))
        await fake.wait_until(bot.shards[shard_of(garden)].is_closed, what="the garden's shard is away")
        missed = await fake.human_says(garden_channel, world.member, "said while the garden's shard was away")
        heard = await fake.human_says(world.lounge, world.member, "said on the other shard meanwhile")

        async def lounge_recorded() -> bool:
            return [m.platform_message_id for m in await live.history(str(world.lounge.id))] == [str(heard.id)]

        await eventually(lounge_recorded, what="the lounge's shard goes on recording")
        assert await live.history(str(garden_channel.id)) == []
        bot.identify.set()

        async def garden_caught_up() -> bool:
            history = await live.history(str(garden_channel.id))
            return [m.platform_message_id for m in history] == [str(missed.id)]

        await eventually(garden_caught_up, what="the garden's shard catches up")
        sessions = [s.shard for s in fake.sessions if s.bot is world.arbiter]

    # Only the garden's shard started a new session.
    assert sorted(sessions) == sorted([[0, 2], [1, 2], [shard_of(garden), 2]])


async def test_discord_refuses_an_unsharded_bot_in_too_many_servers_and_the_bots_shard_on_their_own() -> None:
    async with FakeDiscord(max_guilds_per_shard=1) as fake:
        guilds = [fake.add_guild("one", shard=(0, 2)), fake.add_guild("two", shard=(1, 2))]
        channels = [fake.add_channel(guild, "talk") for guild in guilds]
        lone = fake.add_bot("lone")
        kai = fake.add_bot("kai")

        unsharded = RecordingClient(intents=discord.Intents(guilds=True))
        with pytest.raises(discord.ConnectionClosed) as refused:
            async with running(unsharded, lone.token):
                pass

        client = NoWaitPersonaClient(guild_ready_timeout=FAST_READY)
        async with running(client, kai.token):
            seen = sorted(guild.id for guild in client.guilds)
            shard_count = client.shard_count
            posted = [await DiscordPlatform(client).post(str(channel.id), "hi") for channel in channels]

    assert refused.value.code == 4011
    assert (shard_count, seen) == (2, sorted(guild.id for guild in guilds))
    assert [[str(m.id) for m in c.messages] for c in channels] == [[p.platform_message_id] for p in posted]


# --- rate limits --------------------------------------------------------------------------------------------

EMOJI = ("👍", "🙂", "😮", "👀")


@pytest.fixture
async def limited() -> AsyncIterator[FakeDiscord]:
    """Low limits: two posts per 0.4 s and one reaction per 0.25 s in a channel; two requests per 0.5 s in all."""
    async with FakeDiscord(rate_limits={"messages": (2, 0.4), "reactions": (1, 0.25)}, global_rate_limit=(2, 0.5)) as f:
        yield f


async def test_a_burst_of_posts_and_nods_waits_out_every_429_and_loses_nothing(limited: FakeDiscord) -> None:
    fake = limited
    guild = fake.add_guild("tea house")
    lounge = fake.add_channel(guild, "lounge")
    member = fake.add_human("bob")
    kai = fake.add_bot("kai", permissions=PERSONA_PERMISSIONS, message_content=False)
    told = [await fake.human_says(lounge, member, f"news {n}") for n in range(len(EMOJI))]
    client = PersonaClient(guild_ready_timeout=FAST_READY)
    platform = DiscordPlatform(client)
    texts = [f"answer {n}" for n in range(len(EMOJI))]
    async with running(client, kai.token):
        results = await asyncio.gather(
            *(platform.react(str(lounge.id), str(m.id), emoji) for m, emoji in zip(told, EMOJI, strict=True)),
            *(platform.post(str(lounge.id), text) for text in texts),
        )

    reacted, posted = results[: len(EMOJI)], results[len(EMOJI) :]
    # Nothing lost, nothing doubled: every nod is on its message once, every answer in the channel once.
    assert reacted == [True] * len(EMOJI)
    assert [m.reactions for m in told] == [{emoji: [kai]} for emoji in EMOJI]
    mine = [m for m in lounge.messages if m.author is kai]
    assert sorted(m.content for m in mine) == texts
    assert sorted(p.platform_message_id for p in posted) == sorted(str(m.id) for m in mine)  # type: ignore[union-attr]

    calls = fake.requests_to(bot=kai)
    refused = [r for r in calls if r.status == 429]
    # The burst went over the global limit (which has no headers to pace by): Discord said 429...
    assert refused and {r.scope for r in refused} == {"global"}
    # ... and each refused call came again only once its retry_after was over.
    for call in refused:
        assert call.retry_after is not None
        again = next(r for r in calls if r.at > call.at and same_call(r, call))
        assert again.at >= call.at + call.retry_after
    # Route by route, discord.py kept to the limits the headers announced: no bucket was ever over them.
    assert not [r for r in calls if r.scope == "user"]


def same_call(a: RecordedRequest, b: RecordedRequest) -> bool:
    return (a.method, a.path, a.json) == (b.method, b.path, b.json)
