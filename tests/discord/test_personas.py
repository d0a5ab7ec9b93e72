"""The persona bots on Discord: which channels they take part in, how they post (never pinging anyone), that they
type while they think, nod with reactions when their persona says so, and what happens to a post Discord
refuses. The fleet runs in process (tests.discord.fleet); the local Discord records what each bot did."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import discord
import pytest

from arbiter.contract import AuthorKind, Tier
from bots.affinity import ChannelShare, home
from bots.discord_client import PersonaClient
from bots.errors import PostFailed
from bots.platforms.discord import DiscordPlatform
from tests.discord.fleet import SLOW_REFUNDS, discord_fleet, eager
from tests.support.eventually import eventually
from tests.support.fake_discord import FAST_READY, Intent, Op, Overwrite, Perm, RecordingClient, running
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    from tests.discord.conftest import World
    from tests.discord.fleet import DiscordFleet
    from tests.support.fake_discord import FakeDiscord, FakeMessage
    from tests.support.fleet import Live

PRIVILEGED = Intent.MESSAGE_CONTENT | Intent.GUILD_MEMBERS | Intent.GUILD_PRESENCES


# discord_fleet seeds each persona's choices; with this seed the listener below nods to the news.
SEED_THAT_NODS = 0


async def ask(fleet: DiscordFleet, persona_id: str, text: str) -> FakeMessage:
    """The member asks one persona something, @mentioning its bot."""
    world = fleet.world
    return await world.fake.human_says(world.lounge, world.member, text, mentions=[world.personas[persona_id]])


# --- posting ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [403, 404, 503])
async def test_a_post_discord_refuses_is_retracted_and_refunded(
    fake: FakeDiscord, world: World, live: Live, status: int
) -> None:
    hana = world.personas["hana"]
    refusal = fake.fail_next("POST", f"/channels/{world.lounge.id}/messages", status, bot=hana)
    async with discord_fleet(world, live, [make_persona("hana")], channel={"tiers": SLOW_REFUNDS}) as fleet:
        asked = await ask(fleet, "hana", "are you there?")
        await eventually(lambda: fleet.runtimes["hana"].stats.wasted == 1, what="the failed post")
        await fleet.settled()
        after_failure = await fleet.status()
        history_after_failure = await fleet.history()

        if status == 403:
            # Refused for want of a permission: asked again, it asks no model, until its permissions change.
            calls = fleet.providers["hana"].calls
            await ask(fleet, "hana", "still there?")
            await fleet.settled()
            assert (fleet.providers["hana"].calls, fleet.posted_by("hana")) == (calls, [])
            # A moderator gives its role what it seemed to lack (here: one more permission, so that they change).
            await fake.set_overwrites(
                world.lounge, [Overwrite(target=hana, allow=Perm.SEND_MESSAGES | Perm.MANAGE_MESSAGES)]
            )
        # The persona is none the worse for it: asked again, it answers.
        again = await ask(fleet, "hana", "hello?")
        await eventually(lambda: fleet.posted_by("hana"), what="hana's answer")
        await fleet.settled()
        final = await fleet.history()

    assert refusal.used == 1 and refusal.hits[0].status == status
    # Retracted: out of the history; refunded at once, though a remark takes a minute to come back here.
    assert [m.platform_message_id for m in history_after_failure] == [str(asked.id)]
    assert (after_failure.level, after_failure.refunds) == (after_failure.capacity, [])
    [post] = fleet.posted_by("hana")
    assert [m.id for m in world.lounge.messages if m.author is not world.member or m.id in (asked.id, again.id)] == [
        asked.id,
        again.id,
        post.id,
    ]
    assert [(m.author_kind, m.platform_message_id) for m in final if m.author_kind is AuthorKind.PERSONA] == [
        (AuthorKind.PERSONA, str(post.id))
    ]
    assert final[0].platform_message_id == str(asked.id)


async def answer_time(fleet: DiscordFleet, persona_id: str, question: FakeMessage) -> float:
    """Seconds from ``question`` until ``persona_id``'s answer is on Discord."""
    loop = asyncio.get_running_loop()
    asked_at = loop.time()
    await eventually(lambda: [m for m in fleet.posted_by(persona_id) if m.id > question.id], what=f"{persona_id}")
    return loop.time() - asked_at


@pytest.mark.parametrize("why", ["no Send Messages", "a 403 on every post"])
async def test_a_persona_that_cannot_post_hands_the_floor_back_at_once(
    fake: FakeDiscord, world: World, live: Live, why: str
) -> None:
    hana = world.personas["hana"]
    if why == "no Send Messages":
        world.lounge.overwrites.append(Overwrite(target=hana, deny=Perm.SEND_MESSAGES))
        said = "it lacks the Send Messages permission there"
    else:  # a server that refuses what the permissions seem to allow
        fake.fail_next("POST", f"/channels/{world.lounge.id}/messages", 403, bot=hana, times=100)
        said = "Discord refused a post (403 Missing Permissions)"
    channel = {"priority_window_s": 20.0}
    async with discord_fleet(world, live, [eager("hana"), eager("kai")], channel=channel) as fleet:
        question = await ask(fleet, "hana", "what do you think about the new cafe?")
        waited = await answer_time(fleet, "kai", question)
        status = await fake.invoke(world.mod, world.lounge, "aizuchi status")

    assert waited < 3.0  # the floor was hana's for 20 s: kai answered as soon as she was known not to
    assert fleet.posted_by("hana") == []
    assert f"Hana (on; cannot post: {said})" in status.content
    assert [m.author for m in world.lounge.messages][:2] == [world.member, world.personas["kai"]]


async def test_a_permission_taken_away_and_given_back_while_it_runs_is_told_to_the_arbiter_at_once(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    hana = world.personas["hana"]
    channel = {"priority_window_s": 20.0}
    async with discord_fleet(world, live, [eager("hana"), eager("kai")], channel=channel) as fleet:

        async def standing() -> str | None:
            return (await live.service.settings(fleet.channel_id)).personas["hana"].cannot_post

        await fake.set_overwrites(world.lounge, [Overwrite(target=hana, deny=Perm.SEND_MESSAGES)])
        await eventually(standing, what="the arbiter told, before anyone asks her anything")
        question = await ask(fleet, "hana", "what do you think about the new cafe?")
        kai_waited = await answer_time(fleet, "kai", question)
        await fleet.settled()

        await fake.set_overwrites(world.lounge, [])

        async def may_post_again() -> bool:
            return await standing() is None

        await eventually(may_post_again, what="the arbiter told she may post again")
        again = await ask(fleet, "hana", "and now?")
        await answer_time(fleet, "hana", again)

    assert kai_waited < 3.0
    after_again = [m.author for m in world.lounge.messages if m.id > again.id]
    assert after_again[0] is hana  # asked, she has the floor again


async def test_the_persona_types_while_it_generates(fake: FakeDiscord, world: World, live: Live) -> None:
    watcher = fake.add_bot("watcher")
    bystander = RecordingClient(intents=discord.Intents(guilds=True, guild_typing=True))
    async with (
        running(bystander, watcher.token),
        discord_fleet(world, live, [make_persona("hana")]) as fleet,
    ):
        fleet.providers["hana"].hold()
        await ask(fleet, "hana", "what are you reading?")
        await eventually(lambda: fleet.providers["hana"].waiting == 1, what="hana generating")
        await fake.wait_until(lambda: bystander.typing_events, what="a typing indicator")
        typing_while_thinking = [e.user_id for e in bystander.typing_events]
        posted_while_thinking = list(fleet.posted_by("hana"))
        fleet.providers["hana"].open()
        await eventually(lambda: fleet.posted_by("hana"), what="hana's answer")

    hana = world.personas["hana"]
    assert typing_while_thinking == [hana.id]
    assert posted_while_thinking == []
    typing, post = (
        fake.requests_to("POST", f"/channels/{world.lounge.id}/typing", bot=hana)[0],
        fake.requests_to("POST", f"/channels/{world.lounge.id}/messages", bot=hana)[0],
    )
    assert fake.requests.index(typing) < fake.requests.index(post)


async def test_a_persona_without_permission_to_type_still_answers(fake: FakeDiscord, world: World, live: Live) -> None:
    fake.fail_next("POST", f"/channels/{world.lounge.id}/typing", 403, bot=world.personas["hana"])
    async with discord_fleet(world, live, [make_persona("hana")]) as fleet:
        await ask(fleet, "hana", "still there?")
        await eventually(lambda: fleet.posted_by("hana"), what="hana's answer")
        await fleet.settled()
        lines = await fleet.persona_lines()

    assert [m.platform_message_id for m in lines] == [str(m.id) for m in fleet.posted_by("hana")]


@pytest.mark.parametrize("seed", [SEED_THAT_NODS])
async def test_a_persona_that_nods_with_emoji_reacts_instead_of_posting(world: World, live: Live, seed: int) -> None:
    emoji = ("👍", "😮", "🙂", "👀")
    # A listener more than a talker: to a person's news it nods (with this seed; its choice is its own).
    mio = make_persona("mio", aizuchi=emoji, talkativeness=0.0, agreeableness=1.0, extraversion=1.0).model_copy(
        update={"react_with_emoji": True}
    )
    async with discord_fleet(world, live, [mio], channel={"idle_cap": 2}, seed=seed) as fleet:
        told = await world.fake.human_says(world.lounge, world.member, "I'm off to the mountains this weekend.")
        await eventually(lambda: told.reactions or fleet.posted_by("mio"), what="mio reacts")
        await fleet.settled()
        lines = await fleet.persona_lines()

    account = world.personas["mio"]
    [nod] = [m for m in lines if m.author_id == "mio"]
    assert nod.tier is Tier.AIZUCHI and nod.text in emoji
    assert told.reactions == {nod.text: [account]}
    assert nod.platform_message_id is not None and nod.platform_message_id.startswith(f"reaction-{told.id}-")
    assert fleet.posted_by("mio") == []


async def test_the_platform_pings_nobody_whatever_the_text(fake: FakeDiscord, world: World) -> None:
    # The runtime strips mention syntax before posting; the platform must not ping even if it did not.
    kai = world.personas["kai"]
    client = PersonaClient(guild_ready_timeout=FAST_READY)
    platform = DiscordPlatform(client)
    text = f"{world.member.mention} {world.mods.mention} @everyone @here look"
    async with running(client, kai.token):
        posted = await platform.post(str(world.lounge.id), text)

    [message] = world.lounge.messages
    assert (str(message.id), message.content) == (posted.platform_message_id, text)
    assert not message.live_mentions
    assert message.allowed_mentions == {"parse": []}
    assert fake.permissions(kai, world.lounge) & Perm.MENTION_EVERYONE  # it could have pinged everyone


async def test_the_platform_reports_a_refused_post_and_a_refused_reaction(fake: FakeDiscord, world: World) -> None:
    kai = world.personas["kai"]
    said = await fake.human_says(world.lounge, world.member, "hi")
    client = PersonaClient(guild_ready_timeout=FAST_READY)
    platform = DiscordPlatform(client)
    fake.fail_next("POST", f"/channels/{world.lounge.id}/messages", 403, bot=kai)
    async with running(client, kai.token):
        with pytest.raises(PostFailed, match="403"):
            await platform.post(str(world.lounge.id), "hello")
        reacted = await platform.react(str(world.lounge.id), str(said.id), "🙂")
        refused = await platform.react(str(world.lounge.id), str(said.id), "smile")  # not an emoji Discord knows

    assert (reacted, refused) == (True, False)
    assert said.reactions == {"🙂": [kai]}
    assert [m.id for m in world.lounge.messages] == [said.id]


# --- where the personas take part -------------------------------------------------------------------------


async def test_personas_take_part_in_enabled_discord_channels_they_see_and_stay_quiet_where_they_may_not_post(
    fake: FakeDiscord, world: World, live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    guild = world.guild
    staff = fake.add_channel(guild, "staff", overwrites=[Overwrite(target=guild.everyone, deny=Perm.VIEW_CHANNEL)])
    # People talk there; the personas' accounts may read it but not post.
    muzzled = [Overwrite(target=world.personas[pid], deny=Perm.SEND_MESSAGES) for pid in ("hana", "kai")]
    announcements = fake.add_channel(guild, "announcements", overwrites=muzzled)
    for channel_id in (str(staff.id), str(announcements.id), "lobby"):  # "lobby": a local room's channel
        await live.channel(channel_id)
    await live.channel(str(world.backroom.id), enabled=False)
    personas = [eager("hana"), eager("kai")]

    async with discord_fleet(world, live, personas) as fleet:
        # The fleet is ready once both follow the lounge; a persona's client takes up its channels one by one.
        await eventually(
            lambda: all(str(announcements.id) in runtime.channels for runtime in fleet.runtimes.values()),
            what="both follow the announcements",
        )
        joined = {pid: set(runtime.channels) for pid, runtime in fleet.runtimes.items()}
        for text in ("Hana, Kai, anyone?", "Hana?"):
            await fake.human_says(announcements, world.member, text)
        await live.settled(str(announcements.id))
        asked_a_model = {pid: runtime.stats.llm_requests for pid, runtime in fleet.runtimes.items()}
        await fake.human_says(world.lounge, world.member, "Hana, and here?")
        await eventually(lambda: [m for m in world.lounge.messages if m.author is world.personas["hana"]])

    # Where they see the channel they follow it; where they may not post, they say so once and ask no model.
    assert joined == {pid: {str(world.lounge.id), str(announcements.id)} for pid in ("hana", "kai")}
    assert [m.author for m in announcements.messages] == [world.member, world.member]
    warnings = [
        r.getMessage() for r in caplog.records if f"cannot post in channel {announcements.id}" in r.getMessage()
    ]
    assert len(warnings) == 2  # one per persona, however much is said there
    assert asked_a_model == {"hana": 0, "kai": 0}


def _sharing(share: ChannelShare) -> type[PersonaClient]:
    class Sharing(PersonaClient):
        def __init__(self, **options: Any) -> None:
            super().__init__(share=share, **options)

    return Sharing


async def test_a_persona_process_takes_part_only_in_its_share_of_the_channels(world: World, live: Live) -> None:
    # The share the lounge is in (the fleet is ready once every persona follows the lounge), of two.
    share = ChannelShare(home(str(world.lounge.id), 2) + 1, 2)
    made = [world.fake.add_channel(world.guild, f"room-{n}") for n in range(6)]
    for channel in made:
        await live.channel(str(channel.id))
    ours = {str(c.id) for c in made if share.holds(str(c.id))} | {str(world.lounge.id)}
    assert 1 < len(ours) < len(made) + 1  # both shares have some of them (with these ids)

    async with discord_fleet(world, live, [eager("hana")], client_type=_sharing(share)) as fleet:
        hana = fleet.runtimes["hana"]
        await eventually(lambda: set(hana.channels) == ours, what="hana follows the channels of her share")
        # One more channel in each share, the other's made first (its id lists first): she looks at both at once,
        # takes up hers and leaves the other's to the other process.
        # (Channels made later have larger ids; the ones not taken are never enabled.)
        others = next(
            c for c in (world.fake.add_channel(world.guild, "x") for _ in range(64)) if not share.holds(str(c.id))
        )
        mine = next(c for c in (world.fake.add_channel(world.guild, "y") for _ in range(64)) if share.holds(str(c.id)))
        await live.channel(str(others.id))
        await live.channel(str(mine.id))
        await world.fake.human_says(mine, world.member, "anyone here?")
        await eventually(lambda: str(mine.id) in hana.channels, what="hana follows the new channel of her share")

    assert str(others.id) not in hana.channels


async def test_a_thread_the_fleet_is_enabled_in_is_a_conversation_of_its_own(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    hana = world.personas["hana"]
    async with discord_fleet(world, live, [eager("hana")]) as fleet:
        thread = await fake.add_thread(world.lounge, "weekend plans", owner=world.member)
        await fake.system_message(world.lounge, world.member, 18, content="weekend plans")  # "started a thread"
        enabled = await fake.invoke(world.mod, thread, "aizuchi enable")
        first = await fake.human_says(thread, world.member, "so, this weekend")  # the personas come when one speaks
        await eventually(lambda: str(thread.id) in fleet.runtimes["hana"].channels, what="hana follows the thread")
        await fleet.runtimes["hana"].join(str(thread.id)).ready()
        question = await fake.human_says(thread, world.member, "Hana, Saturday or Sunday?")
        await eventually(lambda: [m for m in thread.messages if m.author is hana], what="her answer")
        [answer] = [m for m in thread.messages if m.author is hana]

        async def linked() -> bool:
            return str(answer.id) in [m.platform_message_id for m in await live.history(str(thread.id))]

        await eventually(linked, what="her answer linked")
        in_thread = await live.history(str(thread.id))
        in_lounge = await fleet.history()

    assert enabled.content == "aizuchi is on in this channel."
    assert [m.platform_message_id for m in in_thread] == [str(first.id), str(question.id), str(answer.id)]
    assert in_lounge == []  # neither the thread's talk nor the notice that it started is the lounge's


async def test_a_persona_joins_a_channel_enabled_while_it_runs(
    fake: FakeDiscord, world: World, live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bots.discord_client")
    backroom = str(world.backroom.id)
    async with discord_fleet(world, live, [eager("hana")]) as fleet:
        await fake.invoke(world.mod, world.backroom, "aizuchi enable")
        # Someone speaking in a channel the persona has not joined makes it look again.
        await fake.human_says(world.backroom, world.member, "is anyone here?")
        await eventually(lambda: backroom in fleet.runtimes["hana"].channels, what="hana joins the backroom")
        await eventually(
            lambda: f"persona=hana takes part in channel {backroom}" in caplog.messages, what="hana follows"
        )
        # What was said before it came is context; what is said now it answers.
        asked = await fake.human_says(world.backroom, world.member, "Hana, welcome!")
        await eventually(lambda: [m for m in world.backroom.messages if m.author is world.personas["hana"]])

    [answer] = [m for m in world.backroom.messages if m.author is world.personas["hana"]]
    assert [m.id for m in world.backroom.messages][-2:] == [asked.id, answer.id]


async def test_a_persona_looks_for_newly_enabled_channels_now_and_then(world: World, live: Live) -> None:
    async with discord_fleet(world, live, [make_persona("hana")], refresh_s=0.1) as fleet:  # a minute by default
        await live.channel(str(world.backroom.id))  # enabled without a word said there
        await eventually(lambda: str(world.backroom.id) in fleet.runtimes["hana"].channels, what="hana joins")


async def test_persona_clients_ask_for_no_privileged_intent_and_direct_messages(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    async with discord_fleet(world, live, [make_persona("hana"), make_persona("kai")]):
        pass

    for persona_id in ("hana", "kai"):
        [identify] = fake.gateway_ops(world.personas[persona_id], Op.IDENTIFY)
        assert identify.data["intents"] & PRIVILEGED == 0
        assert identify.data["intents"] & Intent.DIRECT_MESSAGES == 0


async def test_the_fleet_ignores_direct_messages_and_other_channels(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    async with discord_fleet(world, live, [eager("hana"), eager("kai")]) as fleet:
        await fake.human_dms(world.member, world.personas["hana"], "Hana, psst")
        await fake.human_dms(world.member, world.arbiter, "Hana, are you there?")
        await fake.human_says(world.backroom, world.member, "Hana, over here!")
        asked = await ask(fleet, "hana", "one question")
        await eventually(lambda: fleet.posted_by("hana"), what="hana's answer in the lounge")
        await fleet.settled()
        history = await fleet.history()
        joined = {pid: runtime.channels for pid, runtime in fleet.runtimes.items()}

    assert [m.platform_message_id for m in history if m.author_kind is AuthorKind.HUMAN] == [str(asked.id)]
    assert world.backroom.messages[1:] == []  # nobody answered in the backroom
    assert joined == {"hana": [str(world.lounge.id)], "kai": [str(world.lounge.id)]}
    assert [c.channel_id for c in (await live.service.channels()).channels] == [str(world.lounge.id)]
