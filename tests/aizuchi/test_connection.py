"""``stay_connected``: a discord.py client against the local Discord, kept on it through what Discord means to be
retried, and ended with the reason by what it does not."""

from __future__ import annotations

import asyncio
import random

import pytest

# Imported before discord.py is, so that discord.py's audioop import happens with its warning silenced.
from tests.support.fake_discord import FAST_READY, FakeDiscord  # isort: skip

import discord

from aizuchi.connection import Account, Backoff, stay_connected
from aizuchi.errors import FleetStopped
from tests.support.fleet import eventually

ACCOUNT = Account("the test bot", "TEST_DISCORD_TOKEN")


def client() -> discord.Client:
    return discord.Client(intents=discord.Intents.none() | discord.Intents(guilds=True), guild_ready_timeout=FAST_READY)


async def connected(bot: discord.Client, token: str) -> asyncio.Task[None]:
    quick = Backoff(first_s=0.05, max_s=0.2)
    task = asyncio.create_task(stay_connected(bot, token, ACCOUNT, backoff=quick, rng=random.Random(1)))
    # Not wait_until_ready(): it may only be called once the client has logged in.
    await eventually(bot.is_ready, within=10.0, what="the client is ready")
    return task


async def test_discord_failing_at_login_is_tried_again_on_a_fresh_session(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    fake.fail_next("GET", "/users/@me", 503, times=2)  # discord.py itself does not retry a 503
    bot = client()

    task = await connected(bot, account.token)
    await bot.close()
    await asyncio.wait_for(task, 5)

    assert len(fake.requests_to("GET", "/users/@me")) == 3
    assert task.result() is None  # closed: it returns, nothing to report


async def test_a_refused_token_ends_it_naming_the_variable(fake: FakeDiscord) -> None:
    bot = client()

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, "no-such-token", ACCOUNT), 5)
    await bot.close()

    assert stopped.value.message.startswith("Discord refused the test bot's token (TEST_DISCORD_TOKEN)")


async def test_a_4xx_while_logging_in_is_final_and_says_what_discord_answered(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    fake.fail_next("GET", "/users/@me", 403)
    bot = client()

    with pytest.raises(FleetStopped) as stopped:
        await asyncio.wait_for(stay_connected(bot, account.token, ACCOUNT), 5)
    await bot.close()

    assert stopped.value.message == "the test bot could not start on Discord: Discord answered 403 Missing Permissions"


async def test_an_event_it_cannot_parse_costs_a_new_session_and_the_old_socket_is_closed(fake: FakeDiscord) -> None:
    account = fake.add_bot("tester")
    guild = fake.add_guild("g")
    channel = fake.add_channel(guild, "c")
    fake.join(account, guild)
    bot = client()
    task = await connected(bot, account.token)
    sessions = len(fake.sessions)

    payload = channel.payload()
    del payload["position"]
    await fake.send_raw(account, "CHANNEL_UPDATE", payload)
    await fake.wait_until(lambda: len(fake.sessions) > sessions and fake.connected(account), within=10.0)
    live = [s for s in fake.sessions if s.connection is not None and not s.connection.closed]
    await bot.close()
    await asyncio.wait_for(task, 5)

    assert len(live) == 1  # the socket the failure left open was closed, not leaked
    assert bot.get_channel(channel.id) is not None  # and the new session's READY filled the cache again
