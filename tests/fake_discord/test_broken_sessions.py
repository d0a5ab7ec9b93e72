"""Sessions the test breaks for one bot: a READY lacking a field, every session closed after READY, every IDENTIFY
refused, every event late - each as a real discord.py client meets it, and ``mend`` undoing it."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import discord
import pytest

from tests.support.fake_discord import FAST_READY, Op, RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeBot, FakeDiscord

GUILDS = discord.Intents.none() | discord.Intents(guilds=True)
CONTENT = discord.Intents.default() | discord.Intents(message_content=True)


class NoWaitClient(RecordingClient):
    """discord.py waits 5 s before each IDENTIFY but the first (Discord's identify rate limit); the fake has none."""

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        return None


def identifies(fake: FakeDiscord, bot: FakeBot) -> int:
    """IDENTIFYs sent with the bot's token, granted or not (a refused one is logged before any session exists)."""
    return len([g for g in fake.gateway_log if g.op == Op.IDENTIFY and g.data.get("token") == bot.token])


async def test_ready_without_leaves_the_field_out_of_every_ready_of_that_bot_only(fake: FakeDiscord) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    fake.ready_without(hana, "shard")

    sharded = discord.AutoShardedClient(intents=GUILDS, guild_ready_timeout=FAST_READY)
    # discord.py's sharded client cannot read it (its READY parser takes the field for granted): it closes itself.
    with pytest.raises(KeyError, match="shard"):
        await asyncio.wait_for(sharded.start(hana.token), 5)
    await sharded.close()
    async with running(discord.Client(intents=GUILDS, guild_ready_timeout=FAST_READY), hana.token):
        pass  # the plain client has no use for it
    async with running(discord.AutoShardedClient(intents=GUILDS, guild_ready_timeout=FAST_READY), kai.token):
        pass

    readies = [(session.bot, session.events[0]) for session in fake.sessions]
    assert [(bot.name, frame["t"]) for bot, frame in readies] == [
        ("hana", "READY"),
        ("hana", "READY"),
        ("kai", "READY"),
    ]
    assert ["shard" in frame["d"] for _, frame in readies] == [False, False, True]
    assert readies[2][1]["d"]["shard"] == [0, 1]


async def test_close_after_ready_ends_every_new_session_of_that_bot_and_its_resume(
    fake: FakeDiscord, world: World
) -> None:
    hana = fake.add_bot("hana")
    fake.close_after_ready(hana, 4000)
    client = NoWaitClient(intents=GUILDS)
    task = asyncio.create_task(client.start(hana.token))

    # discord.py takes 4000 as a passing trouble: it RESUMEs, is refused, IDENTIFYs again; and so on, forever.
    await fake.wait_until(lambda: hana.identified >= 3, what="three sessions")
    sessions = [s for s in fake.sessions if s.bot is hana]
    assert not any(session.valid for session in sessions)
    assert [frame["t"] for frame in sessions[0].events] == ["READY", "GUILD_CREATE"]
    resumed = {g.data["session_id"] for g in fake.gateway_log if g.op == Op.RESUME}
    assert {s.id for s in sessions[:2]} <= resumed
    assert not fake.connected(hana)

    fake.mend(hana)
    await fake.wait_until(lambda: fake.connected(hana) and client.is_ready(), what="hana on a session that stays")
    await client.close()
    await asyncio.wait_for(task, 5)


async def test_refuse_identify_answers_every_identify_with_invalid_session(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    fake.refuse_identify(hana)
    client = NoWaitClient(intents=GUILDS)
    task = asyncio.create_task(client.start(hana.token))

    await fake.wait_until(lambda: identifies(fake, hana) >= 3, what="three IDENTIFYs")
    assert hana.identified == 0
    assert not [s for s in fake.sessions if s.bot is hana]
    assert not client.is_ready()

    fake.mend(hana)
    await fake.wait_until(lambda: fake.connected(hana) and client.is_ready(), what="hana let in")
    await client.close()
    await asyncio.wait_for(task, 5)
    assert hana.identified == 1


# Long enough that a loaded machine delivers on-time frames well within half of it.
LATE_S = 2.0


async def test_delayed_events_reach_that_bot_later_in_order_with_their_sequence_numbers(
    fake: FakeDiscord, world: World
) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    slow, prompt = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)
    loop = asyncio.get_running_loop()

    async with running(slow, hana.token), running(prompt, kai.token):
        fake.delay_events(hana, LATE_S)
        said = loop.time()
        for text in ("one", "two", "three"):
            await fake.human_says(world.lounge, world.member, text)
        flushed = loop.time() - said  # flush() waits for kai's socket, not for hana's late frames
        await fake.wait_until(lambda: len(prompt.messages) == 3, within=LATE_S / 2)
        heard_by_prompt, heard_by_slow = prompt.contents(), slow.contents()
        await fake.flush_delayed(hana)
        await fake.wait_until(lambda: len(slow.messages) == 3)
        late = loop.time() - said

        fake.delay_events(hana, 0)
        await fake.human_says(world.lounge, world.member, "on time again")
        await fake.wait_until(lambda: len(slow.messages) == 4, within=LATE_S / 2)
        [session] = [s for s in fake.sessions if s.bot is hana]
        assert slow.ws.sequence == session.seq  # every event's number, in order: nothing lost, nothing twice

    assert flushed < LATE_S / 2
    assert heard_by_prompt == ["one", "two", "three"]
    assert heard_by_slow == []
    assert late >= LATE_S
    assert slow.contents() == ["one", "two", "three", "on time again"]
    assert [frame["s"] for frame in session.events] == list(range(1, session.seq + 1))


async def test_mend_undoes_what_was_broken_for_the_next_session(fake: FakeDiscord) -> None:
    hana = fake.add_bot("hana")
    fake.ready_without(hana, "shard", "user")
    fake.close_after_ready(hana, 4000)
    fake.refuse_identify(hana)
    fake.delay_events(hana, 5.0)
    fake.mend(hana)

    async with running(discord.AutoShardedClient(intents=GUILDS, guild_ready_timeout=FAST_READY), hana.token):
        assert fake.connected(hana)

    [session] = fake.sessions
    assert {"shard", "user"} <= session.events[0]["d"].keys()
