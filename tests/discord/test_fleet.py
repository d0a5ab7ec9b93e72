"""The fleet on Discord, end to end: the arbiter's bot and three persona bots (real discord.py clients) in one
channel of the local Discord with a person. What appears in the channel, what the arbiter keeps, and what the
pool and the idle cap allow must agree."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from tests.discord.fleet import SLOW_REFUNDS, discord_fleet, eager
from tests.support.fleet import eventually, make_persona

if TYPE_CHECKING:
    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeDiscord
    from tests.support.fleet import Live

# The personas' choices are seeded; with this seed (as with the others tried) kai and mio both nod.
SEED = 0


def trio(world: World) -> list[Persona]:
    """hana's remarks would all ping people if they were posted as they are."""
    bob = world.member.mention
    pinging = (
        f"{bob} you should try the soup first.",
        "Ask @everyone here, someone knows a good recipe.",
        f"Honestly {bob}, noodles are never a bad idea.",
        "Let @here decide, I am fine with anything warm.",
    )
    return [eager("hana", samples=make_persona("hana", remarks=pinging).samples), eager("kai"), eager("mio")]


async def test_a_human_speaks_and_the_personas_answer_and_nod_within_the_pool_until_the_idle_cap(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    channel = {"idle_cap": 3, "tiers": SLOW_REFUNDS}
    async with discord_fleet(world, live, trio(world), channel=channel, seed=SEED) as fleet:
        # Every persona thinks until all three have claimed their turn, then they post one by one: the order of
        # the moves is the test's, what each persona decides is its own (seeded).
        for provider in fleet.providers.values():
            provider.hold()
        asked = await fake.human_says(
            world.lounge, world.member, "what should we cook tonight?", mentions=[world.personas["hana"]]
        )
        await eventually(lambda: all(p.waiting == 1 for p in fleet.providers.values()), what="all three generating")
        assert (await fleet.status()).claims_held == {Tier.REMARK: 1, Tier.AIZUCHI: 2}
        for persona_id in ("hana", "kai", "mio"):
            fleet.providers[persona_id].open()
            await eventually(partial(fleet.posted_by, persona_id), what=f"{persona_id} posts")
        await fleet.settled()

        history = await fleet.history()
        status = await fleet.status()

    # The arbiter's history is the channel: the person's message, then each persona message once, in order.
    human, *lines = history
    assert (human.author_kind, human.author_id, human.platform_message_id) == (
        AuthorKind.HUMAN,
        str(world.member.id),
        str(asked.id),
    )
    assert human.text == "@Hana what should we cook tonight?"  # the mention, readable
    assert human.addressed == ["hana"]
    posts = fleet.persona_posts()
    assert [m.id for m in world.lounge.messages] == [asked.id, *(m.id for m in posts)]
    assert [(line.author_id, line.text, line.platform_message_id) for line in lines] == [
        (world.persona_of(m.author), m.content, str(m.id)) for m in posts
    ]

    # The persona asked answers; the others nod while she has the floor.
    assert [(line.author_id, line.tier) for line in lines] == [
        ("hana", Tier.REMARK),
        ("kai", Tier.AIZUCHI),
        ("mio", Tier.AIZUCHI),
    ]

    # Nobody was pinged by a persona, though hana's lines all had pings in them.
    assert not any(m.live_mentions or m.mentions for m in posts)
    assert not any(marker in m.content for m in posts for marker in ("<@", "@everyone", "@here"))

    # Within the pool: each message paid its tier's cost, and the pool holds exactly what is left.
    assert [line.cost for line in lines] == [60, 5, 5]
    assert status.level == status.capacity - 70
    assert sum(refund.amount for refund in status.refunds) == 70

    # Three bot turns in a row, and then nothing: the idle cap holds them until a person speaks.
    assert (status.bot_streak, status.idle_cap, len(lines)) == (3, 3, 3)
