"""The fleet on Discord, end to end: the arbiter's bot and three persona bots (real discord.py clients) in one
channel of the local Discord with a person. What appears in the channel, what the arbiter keeps, and what the
pool and the idle cap allow must agree."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from tests.discord.fleet import SLOW_REFUNDS, discord_fleet, eager
from tests.support.fleet import eventually, make_persona

if TYPE_CHECKING:
    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeDiscord
    from tests.support.fleet import Live

# The personas' choices are seeded.
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
    # Room in the pool for three turns whatever they are; refunds slow enough to see what each cost.
    channel = {"idle_cap": 3, "capacity": 300, "tiers": SLOW_REFUNDS}
    async with discord_fleet(world, live, trio(world), channel=channel, seed=SEED) as fleet:
        # Every persona thinks until the test lets it answer: the order of the moves is the test's, what each
        # persona decides is its own (seeded).
        for provider in fleet.providers.values():
            provider.hold()
        asked = await fake.human_says(
            world.lounge, world.member, "what should we cook tonight?", mentions=[world.personas["hana"]]
        )
        await eventually(lambda: fleet.providers["hana"].waiting == 1, what="hana generating")
        others = [fleet.runtimes[pid] for pid in ("kai", "mio")]
        await eventually(lambda: all(r.stats.looks >= 1 for r in others), what="kai and mio look")
        # She was asked: the others wait for her answer, without so much as a nod.
        assert (await fleet.status()).claims_held == {Tier.REMARK: 1}
        assert all(r.stats.llm_requests == 0 for r in others)
        for provider in fleet.providers.values():
            provider.open()
        await eventually(lambda: len(fleet.persona_posts()) == 3, what="three persona messages")
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

    # The persona asked answers first; after her, at most one nod follows any message.
    assert (lines[0].author_id, lines[0].tier) == ("hana", Tier.REMARK)
    assert not any(a.tier is b.tier is Tier.AIZUCHI for a, b in itertools.pairwise(lines))

    # Nobody was pinged by a persona, though hana's lines all had pings in them.
    assert not any(m.live_mentions or m.mentions for m in posts)
    assert not any(marker in m.content for m in posts for marker in ("<@", "@everyone", "@here"))

    # Within the pool: each message paid its tier's cost, and the pool holds exactly what is left.
    spent = sum(line.cost for line in lines)
    assert [line.cost for line in lines] == [status.tiers[line.tier].cost for line in lines if line.tier]
    assert status.level == status.capacity - spent
    assert sum(refund.amount for refund in status.refunds) == spent

    # Three bot turns in a row, and then nothing: the idle cap holds them until a person speaks.
    assert (status.bot_streak, status.idle_cap, len(lines)) == (3, 3, 3)
