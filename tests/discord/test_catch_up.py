"""Nothing said while the fleet was down is lost: on every start and reconnect the arbiter's bot reads back each
enabled channel's messages after the newest one it recorded (the last 100 at most, none older than an hour, none
from before the fleet was enabled there or its history cleared), records them once each, oldest first, with the
time they were said; and the personas take them as context, not as cues.

The arbiter and the local Discord share one fake clock, so "while it was down" and "an hour ago" are exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

import discord
import pytest

from aizuchi.connection import Account, stay_connected
from arbiter.contract import AuthorKind, Tier
from arbiter.discord_bot import ArbiterBot
from arbiter.discord_bot.bot import CATCH_UP_LIMIT, CATCH_UP_WINDOW_S
from tests.conftest import PERSONA_TOKENS
from tests.discord.conftest import CREW_ROLE
from tests.discord.fleet import discord_fleet, eager
from tests.support.eventually import eventually
from tests.support.fake_discord import FAST_READY, FakeDiscord, Overwrite, Perm, RecordingClient, running
from tests.support.fleet import live_arbiter

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from arbiter.contract import MessageView
    from arbiter.server import Arbiter
    from tests.discord.conftest import World
    from tests.support.clock import FakeClock
    from tests.support.fake_discord import FakeChannel, FakeMessage
    from tests.support.fleet import Live


@pytest.fixture
async def fake(clock: FakeClock) -> AsyncIterator[FakeDiscord]:
    """The local Discord on the arbiter's fake clock: a message's time there is its time in the history."""
    async with FakeDiscord(clock=clock) as server:
        yield server


class ArbiterOnline(ArbiterBot):
    """The arbiter's bot, with discord.py's hook before identifying again (after a lost session) held at a gate
    the test opens: so the test can speak while the bot has no session at all. (discord.py's own hook only
    waits 5 s there, for Discord's identify rate limit.)"""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.identify = asyncio.Event()
        self.identify.set()

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        await self.identify.wait()


@contextlib.asynccontextmanager
async def online(arbiter: Arbiter, world: World) -> AsyncIterator[ArbiterOnline]:
    """The arbiter's bot running (a new process's bot: a new gateway session, nothing to resume), kept on Discord as
    ``aizuchi run`` keeps it (``stay_connected``: an event it cannot read costs it a new session)."""
    bot = ArbiterOnline(
        arbiter.service, guilds=[world.guild.id], moderator_role=CREW_ROLE, guild_ready_timeout=FAST_READY
    )
    account = Account("the arbiter's bot", "ARBITER_DISCORD_TOKEN")
    task = asyncio.create_task(stay_connected(bot, world.arbiter.token, account))
    try:
        await eventually(bot.is_ready, what="the arbiter's bot ready")
        yield bot
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def lounge(arbiter: Arbiter, world: World) -> str:
    await arbiter.service.ensure_channel(str(world.lounge.id))
    return str(world.lounge.id)


async def history(arbiter: Arbiter, channel_id: str) -> list[MessageView]:
    return list((await arbiter.service.history(channel_id, limit=500)).messages)


async def barrier(arbiter: Arbiter, world: World, channel: FakeChannel | None = None) -> FakeMessage:
    """Someone speaks, and it is recorded. A new message waits for its channel's catch-up, so once it is in the
    history the catch-up is done."""
    channel = channel or world.lounge
    said = await world.fake.human_says(channel, world.mod, "(anyone here?)")

    async def seen() -> bool:
        return str(said.id) in ids(await history(arbiter, str(channel.id)))

    await eventually(seen, what="the barrier message recorded")
    return said


def ids(messages: list[MessageView]) -> list[str | None]:
    return [m.platform_message_id for m in messages]


def ids_of(messages: list[FakeMessage]) -> list[str]:
    return [str(m.id) for m in messages]


def at(message: FakeMessage) -> float:
    return discord.utils.snowflake_time(message.id).timestamp()  # what discord.py says; milliseconds


async def say(world: World, *texts: str, clock: FakeClock | None = None) -> list[FakeMessage]:
    """The member says each text, a second apart on the clock if given."""
    said = []
    for text in texts:
        said.append(await world.fake.human_says(world.lounge, world.member, text))
        if clock is not None:
            clock.advance(1)
    return said


# --- a restart --------------------------------------------------------------------------------------------------


async def test_what_was_said_while_the_arbiter_was_down_is_recorded_once_in_order_when_it_starts(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    async with online(arbiter, world):
        [before] = await say(world, "before the restart")
        seen = await barrier(arbiter, world)
    clock.advance(60)
    missed = await say(world, "is anyone there?", "hello?", "ok, later then", clock=clock)
    clock.advance(20 * 60)

    async with online(arbiter, world):
        first_back = await barrier(arbiter, world)
    after_first_start = await history(arbiter, lounge)
    async with online(arbiter, world):
        second_back = await barrier(arbiter, world)
    after_second_start = await history(arbiter, lounge)

    assert ids(after_first_start) == ids_of([before, seen, *missed, first_back])
    caught_up = after_first_start[2:5]
    assert [(m.author_kind, m.author_id, m.text) for m in caught_up] == [
        (AuthorKind.HUMAN, str(world.member.id), text) for text in ("is anyone there?", "hello?", "ok, later then")
    ]
    # Each keeps the time it was said, not the time it was read back; a live message has the arbiter's now.
    assert [m.at for m in caught_up] == [at(m) for m in missed] == [clock() - 20 * 60 - 3 + n for n in range(3)]
    assert after_first_start[-1].at == clock()
    # A second start reads the same history again and records nothing twice.
    assert ids(after_second_start) == [*ids(after_first_start), str(second_back.id)]


async def test_what_is_said_while_the_bot_starts_is_recorded_after_what_it_reads_back(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    missed = await say(world, "said while it was down", "this too", clock=clock)
    # discord.py fires on_ready (where the catch-up starts) a moment after READY; messages arrive meanwhile.
    bot = ArbiterBot(arbiter.service, guilds=[world.guild.id], guild_ready_timeout=1.0)
    task = asyncio.create_task(bot.start(world.arbiter.token))
    try:
        await world.fake.wait_connected(world.arbiter)
        [live] = await say(world, "said while it was starting")
        assert not bot.is_ready()

        async def all_recorded() -> bool:
            return len(await history(arbiter, lounge)) == 3

        await eventually(all_recorded, what="every message recorded")
    finally:
        await bot.close()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    messages = await history(arbiter, lounge)
    assert ids(messages) == ids_of([*missed, live])
    assert [m.at for m in messages] == [at(m) for m in missed] + [clock()]


async def test_a_question_read_back_gives_nobody_the_floor(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    hana = world.personas["hana"]
    await arbiter.service.register_persona("hana", "Hana", platform_user_id=str(hana.id))
    await world.fake.human_says(world.lounge, world.member, "what do you think?", mentions=[hana])
    clock.advance(10 * 60)

    async with online(arbiter, world):
        await barrier(arbiter, world)

    asked, _ = await history(arbiter, lounge)
    assert (asked.addressed, asked.at) == (["hana"], clock() - 10 * 60)
    status = await arbiter.service.status(lounge)
    assert (status.priority, status.priority_until) == ([], None)


async def test_a_persona_post_the_arbiter_missed_is_recognised_not_recorded_twice(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    # Hana was granted a remark and posted it while the arbiter's bot was away; linking it failed meanwhile.
    hana = world.personas["hana"]
    await arbiter.service.register_persona("hana", "Hana", platform_user_id=str(hana.id))
    granted = await arbiter.service.consume(lounge, "hana", "Morning, all.", tier=Tier.REMARK)
    poster = RecordingClient(intents=discord.Intents.none())
    async with running(poster, hana.token):
        posted = await poster.get_partial_messageable(world.lounge.id).send("Morning, all.")

    async with online(arbiter, world):
        await barrier(arbiter, world)

    remark, _ = await history(arbiter, lounge)
    assert granted.message is not None
    assert (remark.seq, remark.author_kind, remark.tier) == (granted.message.seq, AuthorKind.PERSONA, Tier.REMARK)
    assert remark.platform_message_id == str(posted.id)


async def test_the_arbiters_own_messages_are_not_read_back(arbiter: Arbiter, world: World, lounge: str) -> None:
    own = RecordingClient(intents=discord.Intents.none())
    async with running(own, world.arbiter.token):
        await own.get_partial_messageable(world.lounge.id).send("(the arbiter said this)")
    [human] = await say(world, "and I said this")

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    assert ids(await history(arbiter, lounge)) == ids_of([human, back])


# --- the bounds ---------------------------------------------------------------------------------------------------


async def test_at_most_the_last_hundred_messages_are_read_back(arbiter: Arbiter, world: World, lounge: str) -> None:
    said = await say(world, *(f"line {n}" for n in range(CATCH_UP_LIMIT + 20)))

    async with online(arbiter, world):
        # (The barrier after the read, or it would be one of the last hundred.)
        await world.fake.wait_for_request("GET", f"/channels/{world.lounge.id}/messages", bot=world.arbiter)
        back = await barrier(arbiter, world)

    assert ids(await history(arbiter, lounge)) == ids_of([*said[-CATCH_UP_LIMIT:], back])
    reads = world.fake.requests_to("GET", f"/channels/{world.lounge.id}/messages", bot=world.arbiter)
    assert [r.query.get("limit") for r in reads] == ["100"]  # one page


async def test_nothing_older_than_an_hour_is_read_back(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    async with online(arbiter, world):
        [recorded] = await say(world, "recorded")
        await barrier(arbiter, world)
    clock.advance(60)
    await say(world, "too long ago")
    clock.advance(CATCH_UP_WINDOW_S)
    [recent] = await say(world, "an hour ago, just")
    clock.advance(1)

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    texts = [m.text for m in await history(arbiter, lounge)]
    assert texts == ["recorded", "(anyone here?)", "an hour ago, just", "(anyone here?)"]
    assert ids(await history(arbiter, lounge))[0] == str(recorded.id)
    assert ids(await history(arbiter, lounge))[-2:] == ids_of([recent, back])


async def test_in_a_channel_with_nothing_recorded_yet_only_the_last_hour_is_read_back(
    arbiter: Arbiter, world: World, clock: FakeClock
) -> None:
    lounge = str(world.lounge.id)
    await arbiter.service.ensure_channel(lounge)
    clock.advance(1)
    await say(world, "long ago")
    clock.advance(CATCH_UP_WINDOW_S + 1)
    recent = await say(world, "a moment ago", "just now")

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    assert ids(await history(arbiter, lounge)) == ids_of([*recent, back])


async def test_what_was_said_before_the_fleet_was_enabled_is_not_read_back(
    arbiter: Arbiter, world: World, clock: FakeClock
) -> None:
    await say(world, "before anyone enabled anything")
    clock.advance(1)
    lounge = str(world.lounge.id)
    await arbiter.service.ensure_channel(lounge)
    clock.advance(1)
    after = await say(world, "now it is on")

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    assert ids(await history(arbiter, lounge)) == ids_of([*after, back])


async def test_what_was_said_while_the_fleet_was_off_there_is_not_read_back(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    async with online(arbiter, world):
        await say(world, "on")
        await barrier(arbiter, world)
    clock.advance(1)
    await arbiter.service.update_settings(lounge, {"enabled": False})
    await say(world, "while it was off", clock=clock)
    await arbiter.service.update_settings(lounge, {"enabled": True})
    clock.advance(1)
    [again] = await say(world, "on again")

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    assert [m.text for m in await history(arbiter, lounge)] == ["on", "(anyone here?)", "on again", "(anyone here?)"]
    assert ids(await history(arbiter, lounge))[-2:] == ids_of([again, back])


async def test_a_cleared_history_stays_cleared_after_a_restart(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    async with online(arbiter, world):
        await say(world, "something regrettable")
        await barrier(arbiter, world)
    clock.advance(1)
    assert await arbiter.service.clear_history(lounge) == 2
    clock.advance(1)
    after = await say(world, "a fresh start")

    async with online(arbiter, world):
        back = await barrier(arbiter, world)

    assert ids(await history(arbiter, lounge)) == ids_of([*after, back])


# --- reconnecting ---------------------------------------------------------------------------------------------------


async def test_a_new_session_after_a_lost_one_reads_back_what_no_event_brought(
    arbiter: Arbiter, world: World, lounge: str, clock: FakeClock
) -> None:
    async with online(arbiter, world) as bot:
        [before] = await say(world, "before")
        await barrier(arbiter, world)
        bot.identify.clear()
        await world.fake.invalidate(world.arbiter)  # the session ends: no event reaches the bot until it is back
        clock.advance(5)
        missed = await say(world, "said with no session", "nobody heard this live", clock=clock)
        bot.identify.set()
        await world.fake.wait_until(lambda: len(world.fake.sessions) == 2 and world.fake.connected(world.arbiter))
        back = await barrier(arbiter, world)
        messages = await history(arbiter, lounge)

    assert ids(messages) == [str(before.id), ids(messages)[1], *ids_of([*missed, back])]
    assert [m.at for m in messages[2:4]] == [at(m) for m in missed]


async def test_a_resumed_session_reads_back_too_and_records_nothing_twice(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    reads = f"/channels/{world.lounge.id}/messages"
    async with online(arbiter, world) as bot:
        [before] = await say(world, "before")
        await barrier(arbiter, world)
        read_at_start = len(world.fake.requests_to("GET", reads, bot=world.arbiter))
        await world.fake.drop(world.arbiter)
        missed = await say(world, "while the connection was down", "still down")
        await world.fake.wait_connected(world.arbiter)
        back = await barrier(arbiter, world)
        await eventually(lambda: not bot._catch_ups, what="the catch-up after resuming done")
        messages = await history(arbiter, lounge)

    # Discord replayed the missed messages on resuming, and the catch-up read the channel again: once each.
    assert len(world.fake.requests_to("GET", reads, bot=world.arbiter)) == read_at_start + 1
    assert ids(messages) == [str(before.id), ids(messages)[1], *ids_of([*missed, back])]


# --- edits and deletions it missed ------------------------------------------------------------------------------


async def test_edits_and_deletions_made_while_it_had_no_session_are_caught_up_on(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    hana = world.personas["hana"]
    await arbiter.service.register_persona("hana", "Hana", platform_user_id=str(hana.id))
    async with online(arbiter, world) as bot:
        typo, gone, kept = await say(world, "I like sobe", "oops, wrong channel", "see you at six")
        assert (await arbiter.service.consume(lounge, "hana", "Six works for me.", tier=Tier.REMARK)).granted
        poster = RecordingClient(intents=discord.Intents.none())
        async with running(poster, hana.token):  # hana's post: the arbiter's bot sees it and links it
            await poster.get_partial_messageable(world.lounge.id).send("Six works for me.")
        [posted] = [m for m in world.lounge.messages if m.author is hana]
        await barrier(arbiter, world)
        assert [m.platform_message_id for m in await history(arbiter, lounge)][3] == str(posted.id)
        bot.identify.clear()
        await world.fake.invalidate(world.arbiter)  # the session ends: no event reaches the bot until it is back
        await world.fake.edit(typo, "I like soba")
        await world.fake.delete(gone)
        await world.fake.delete(posted)  # a moderator deletes a persona's line
        bot.identify.set()
        await world.fake.wait_until(lambda: world.fake.connected(world.arbiter), what="a new session")
        await eventually(lambda: not bot._catch_ups, what="the catch-up done")
        await barrier(arbiter, world)
        messages = await history(arbiter, lounge)

    assert [m.text for m in messages[:3]] == ["I like soba", "see you at six", "(anyone here?)"]
    assert ids(messages)[:2] == ids_of([typo, kept])


async def test_an_edit_whose_event_it_cannot_read_reaches_the_history_after_the_new_session(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    async with online(arbiter, world) as bot:
        [said] = await say(world, "meet at the statoin")
        await barrier(arbiter, world)
        await world.fake.edit(said, "meet at the station", announce=False)
        # The edit's event in a form discord.py cannot read (no channel id): it costs the bot its session.
        await world.fake.send_raw(world.arbiter, "MESSAGE_UPDATE", {"id": str(said.id), "content": "?"})

        async def edited() -> bool:
            return (await history(arbiter, lounge))[0].text == "meet at the station"

        await eventually(edited, what="the edit read back")
        await eventually(lambda: not bot._catch_ups, what="the catch-up done")


# --- channels it cannot read ------------------------------------------------------------------------------------------


async def test_a_channel_it_cannot_read_is_warned_about_once_and_the_others_are_caught_up(
    arbiter: Arbiter, world: World, lounge: str, caplog: pytest.LogCaptureFixture
) -> None:
    fake = world.fake
    no_history = Overwrite(target=world.arbiter, deny=Perm.READ_MESSAGE_HISTORY)
    archive = fake.add_channel(world.guild, "archive", overwrites=[no_history])
    failing = fake.add_channel(world.guild, "flaky")
    for channel in (archive, failing):
        await arbiter.service.ensure_channel(str(channel.id))
    await arbiter.service.ensure_channel("4242424242")  # a channel Discord does not know (deleted since)
    await arbiter.service.ensure_channel("lobby")  # the local room's, in the same database: not Discord's
    missed = await say(world, "said in the lounge while the arbiter was down")
    await fake.human_says(failing, world.member, "said in the flaky channel")
    fake.fail_next("GET", f"/channels/{failing.id}/messages", 503, bot=world.arbiter)

    with caplog.at_level(logging.WARNING, logger="arbiter.discord_bot"):
        async with online(arbiter, world) as bot:
            back = await barrier(arbiter, world)
            await eventually(lambda: not bot._catch_ups, what="every catch-up done")
            # A new session catches up again; what cannot be read is not warned about again.
            await fake.invalidate(world.arbiter)
            await fake.wait_until(lambda: len(fake.sessions) == 2 and fake.connected(world.arbiter))
            await barrier(arbiter, world, failing)
            await eventually(lambda: not bot._catch_ups, what="every catch-up done again")

    assert ids(await history(arbiter, lounge)) == ids_of([*missed, back])
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("arbiter") and r.levelno >= logging.WARNING]
    assert len(warnings) == 3, warnings
    archive_warning, unknown_warning, failed_warning = sorted(
        warnings, key=lambda w: (str(archive.id) not in w, "4242424242" not in w)
    )
    assert str(archive.id) in archive_warning and "Read Message History" in archive_warning
    assert "4242424242" in unknown_warning and "not a text channel the arbiter's bot can see" in unknown_warning
    assert str(failing.id) in failed_warning and "DiscordServerError" in failed_warning
    assert not [w for w in warnings if "lobby" in w]
    # The flaky channel's message came back on the second try (after the new session).
    assert [m.text for m in await history(arbiter, str(failing.id))] == ["said in the flaky channel", "(anyone here?)"]
    assert await history(arbiter, str(archive.id)) == []


# --- the personas ----------------------------------------------------------------------------------------------------


@pytest.fixture
async def live(clock: FakeClock) -> AsyncIterator[Live]:
    """The arbiter served for the persona fleet (on the in-memory twin), on the fake clock the local Discord keeps
    too."""
    async with live_arbiter(extra_tokens=PERSONA_TOKENS, clock=clock) as served:
        yield served


async def test_a_persona_does_not_answer_a_question_read_back_after_a_restart(
    world: World, live: Live, clock: FakeClock
) -> None:
    hana = world.personas["hana"]
    async with discord_fleet(world, live, [eager("hana"), eager("kai")]) as fleet:
        # The arbiter's bot goes down (the personas keep following the arbiter); meanwhile Hana is asked something;
        # twenty minutes later the bot is back.
        await fleet.bot.close()
        clock.advance(1)
        old = await world.fake.human_says(world.lounge, world.member, "what was that film called?", mentions=[hana])
        clock.advance(20 * 60)
        back = ArbiterBot(live.service, guilds=[world.guild.id], guild_ready_timeout=FAST_READY)
        async with running(back, world.arbiter.token):

            async def read_back() -> bool:
                return str(old.id) in ids(await fleet.history())

            await eventually(read_back, what="the question read back")
            [question] = [m for m in await fleet.history() if m.platform_message_id == str(old.id)]
            workers = [runtime.join(fleet.channel_id) for runtime in fleet.runtimes.values()]
            await eventually(lambda: all(w.last_seq >= question.seq for w in workers), what="the personas hear it")
            await fleet.settled()
            posts_then = list(fleet.persona_posts())
            calls_then = {pid: provider.calls for pid, provider in fleet.providers.items()}
            looks_then = {pid: runtime.stats.looks for pid, runtime in fleet.runtimes.items()}

            # A question asked now is answered as ever.
            fresh = await world.fake.human_says(world.lounge, world.member, "and this one?", mentions=[hana])
            await eventually(lambda: fleet.posted_by("hana"), what="hana's answer to the fresh question")
            await fleet.settled()

    assert (posts_then, calls_then) == ([], {"hana": 0, "kai": 0})
    assert all(looks >= 1 for looks in looks_then.values()), looks_then  # each looked at it, and let it be
    [answer] = fleet.posted_by("hana")
    assert answer.id > fresh.id
