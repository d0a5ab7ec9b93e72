"""The fleet on Discord, end to end: the arbiter's bot and three persona bots (real discord.py clients) in one
channel of the local Discord with a person. What appears in the channel, what the arbiter keeps, and what the
pool and the idle cap allow must agree."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import TYPE_CHECKING, NamedTuple

from arbiter.contract import AuthorKind, Tier
from bots.persona import Samples
from bots.platforms.discord import DiscordPlatform
from tests.discord.fleet import SLOW_REFUNDS, discord_fleet, eager
from tests.support.eventually import eventually
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    from collections.abc import Iterable

    from arbiter.contract import MessageView
    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeChannel, FakeDiscord, FakeMessage
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


class Answered(NamedTuple):
    """A question, the personas it is for (the one asked, and any asked before who have not answered yet), and who
    posted first after it; ``crossed``: that post was sent before its account had seen the question."""

    question: int
    asked: frozenset[str]
    poster: str
    crossed: bool


def talkative(persona_id: str) -> Persona:
    """An eager persona with lines enough that it never runs out of fresh ones in a long test: the offline stand-in
    says a line again only long after (a persona's last 30 lines are not said again)."""
    words = random.Random(persona_id)

    def lines(count: int, length: int) -> list[str]:  # random words: no two lines nearly alike
        return [" ".join(words.choices(VOCABULARY, k=length)).capitalize() + "." for _ in range(count)]

    samples = Samples(aizuchi=lines(12, 2), remarks=lines(40, 6), answers=lines(40, 5))
    return eager(persona_id, samples=samples)


async def _recorded(live: Live, channel: FakeChannel, platform_message_id: str) -> bool:
    return any(m.platform_message_id == platform_message_id for m in await live.history(str(channel.id)))


def _story(histories: Iterable[list[MessageView]], first: Answered) -> str:
    """The arbiter's history from a question to a few messages past it: what a failure needs to be read."""
    for history in histories:
        at = next((n for n, m in enumerate(history) if m.platform_message_id == str(first.question)), None)
        if at is not None:
            lines = (
                f"  seq={m.seq} {m.author_kind} {m.author_id} {m.tier} id={m.platform_message_id}"
                f" addressed={m.addressed} at={m.at:.3f} {m.text[:30]!r}"
                for m in history[max(0, at - 3) : at + 5]
            )
            return f"question {first.question}:\n" + "\n".join(lines)
    return f"question {first.question}: not in any history"


VOCABULARY = (
    *("apple", "river", "stone", "cloud", "pepper", "lantern", "violin", "meadow", "copper", "tunnel", "harbor"),
    *("saddle", "glacier", "orchid", "marble", "thunder", "biscuit", "canyon", "feather", "garlic", "hammock"),
    *("island", "jasmine", "kettle", "lemon", "mirror", "nutmeg", "oyster", "pillow", "quartz", "ribbon", "saffron"),
    *("tulip", "umbrella", "velvet", "walnut", "yarrow", "zephyr", "anchor", "blossom", "candle", "dolphin", "ember"),
)


async def test_the_asked_persona_answers_first_when_the_arbiters_bot_hears_discord_half_a_second_late(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    """Discord delivers every event to the arbiter's bot 0.5 s after the personas' bots get it, while the personas
    talk among themselves: a question comes at a random moment of their talk, and the persona asked answers before any
    other persona posts (but for one asked earlier that has not answered yet: they answer in turn); the arbiter's
    history keeps the channel's order (Discord's ids). Several channels at once, so that a hundred questions take
    seconds, not minutes."""
    rng = random.Random(SEED)
    channels = [world.lounge, *(fake.add_channel(world.guild, f"room-{n}") for n in range(9))]
    for channel in channels[1:]:
        await live.channel(str(channel.id))
    fake.delay_events(world.arbiter, 0.5)
    names = {"hana": "Hana", "kai": "Kai", "mio": "Mio"}
    async with discord_fleet(world, live, [talkative(pid) for pid in names], seed=SEED) as fleet:
        await eventually(
            lambda: all(len(r.channels) == len(channels) for r in fleet.runtimes.values()), what="every room followed"
        )

        async def questions(channel: FakeChannel, count: int) -> list[Answered]:
            firsts: list[Answered] = []
            previous: FakeMessage | None = None
            for number in range(count):
                asked = rng.choice(list(names))
                if previous is not None:
                    # The floor as the arbiter will have it when it records this question, so read once it has
                    # heard the last one (half a second late): the asked persona's first post may have crossed it,
                    # and then it still has that question to answer.
                    await eventually(
                        lambda said=str(previous.id): _recorded(live, channel, said),
                        what=f"the arbiter hears question {number - 1} in #{channel.name}",
                    )
                # Asked earlier and not answered with a remark yet: they answer in turn, before this question.
                waiting = frozenset((await live.status(str(channel.id))).priority)
                question = previous = await fake.human_says(
                    channel, world.member, f"{names[asked]}, question {number}?"
                )

                def after(question: FakeMessage = question) -> list[FakeMessage]:
                    return [m for m in channel.messages if m.id > question.id and world.persona_of(m.author)]

                await eventually(
                    lambda asked=asked: any(world.persona_of(m.author) == asked for m in after()),
                    within=10.0,
                    what=f"{asked} answers question {number} in #{channel.name}",
                )
                first = after()[0]
                poster = world.persona_of(first.author) or ""
                platform = fleet.runtimes[poster].platform
                assert isinstance(platform, DiscordPlatform)
                seen = platform.seen_when_posting(str(first.id))
                crossed = seen is not None and seen < question.id
                firsts.append(Answered(question.id, waiting | {asked}, poster, crossed))
                await asyncio.sleep(rng.uniform(0.0, 1.0))  # the others talk on meanwhile
            return firsts

        # Ten questions in each of ten channels: the test holds a worker for the longest channel's questions, one after
        # another, so the hundred are spread wide rather than deep (each channel still talks between its questions).
        answered = await asyncio.gather(*(questions(channel, 10) for channel in channels))
        fake.delay_events(world.arbiter, 0.0)
        await fake.flush_delayed(world.arbiter)
    # The fleet is down: every post it made is linked (closing waits for a speech on its way).
    histories = {channel: await live.history(str(channel.id)) for channel in channels}

    firsts = [first for per_channel in answered for first in per_channel]
    assert len(firsts) == 100
    missed = [first for first in firsts if first.poster not in first.asked]
    # Another persona's post may cross a question on its way (sent before its account could read it); none other
    # comes between a question and the answer. Crossings are rare: the post must be in flight as the question is.
    assert all(first.crossed for first in missed), f"posted first, having seen the question: {missed}\n" + "\n".join(
        _story(histories.values(), first) for first in missed if not first.crossed
    )
    assert len(missed) <= 10, f"posted first: {missed}"
    for channel, history in histories.items():
        posted = [int(m.platform_message_id) for m in history if (m.platform_message_id or "").isdigit()]
        assert posted == sorted(posted), f"#{channel.name}: the history is not in the channel's order"
        assert len(posted) == len(channel.messages)  # every message, each once
