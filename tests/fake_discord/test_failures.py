"""Injected REST failures and unknown routes: what discord.py raises, and that nothing happens in the channel."""

from __future__ import annotations

from typing import TYPE_CHECKING

import aiohttp
import discord
import pytest

from tests.support.fake_discord import RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)
POST_MESSAGE = "/channels/{channel_id}/messages"


def text_channel(client: discord.Client, channel_id: int) -> discord.TextChannel:
    channel = client.get_channel(channel_id)
    assert isinstance(channel, discord.TextChannel)
    return channel


@pytest.mark.parametrize(
    ("status", "raised", "code"),
    [
        (400, discord.HTTPException, 50035),
        (403, discord.Forbidden, 50013),
        (404, discord.NotFound, 0),
        (503, discord.DiscordServerError, 0),
    ],
)
async def test_a_failed_post_raises_and_posts_nothing(
    fake: FakeDiscord, world: World, status: int, raised: type[discord.HTTPException], code: int
) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    speaker, listener = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)
    rule = fake.fail_next("POST", POST_MESSAGE, status)

    async with running(speaker, hana.token), running(listener, kai.token):
        channel = text_channel(speaker, world.lounge.id)
        with pytest.raises(raised) as failure:
            await channel.send("this one fails")
        await channel.send("this one goes through")
        await fake.wait_until(lambda: listener.messages)

    assert (failure.value.status, failure.value.code) == (status, code)
    assert rule.used == 1
    assert rule.remaining == 0
    assert [m.content for m in world.lounge.messages] == ["this one goes through"]
    assert listener.contents() == ["this one goes through"]
    assert [(r.status, r.injected) for r in fake.requests_to("POST", POST_MESSAGE)] == [(status, True), (200, False)]


async def test_a_failure_can_target_one_bot(fake: FakeDiscord, world: World) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    first, second = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)
    fake.fail_next("POST", f"/channels/{world.lounge.id}/messages", 403, bot=kai, body={"message": "no", "code": 1})

    async with running(first, hana.token), running(second, kai.token):
        await text_channel(first, world.lounge.id).send("hana speaks")
        with pytest.raises(discord.Forbidden) as failure:
            await text_channel(second, world.lounge.id).send("kai speaks")

    assert failure.value.text == "no"
    assert [m.content for m in world.lounge.messages] == ["hana speaks"]


async def test_a_rate_limit_is_waited_out_and_retried(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)
    fake.fail_next("POST", POST_MESSAGE, 429, retry_after=0.01)

    async with running(client, fake.add_bot("hana").token):
        await text_channel(client, world.lounge.id).send("patience")

    assert [r.status for r in fake.requests_to("POST", POST_MESSAGE)] == [429, 200]
    assert [m.content for m in world.lounge.messages] == ["patience"]


async def test_an_unknown_route_is_answered_404_and_recorded(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{fake.api_base}/guilds/{world.guild.id}/bans", headers={"Authorization": f"Bot {hana.token}"}
        ) as r,
    ):
        body = await r.json()

    assert r.status == 404
    assert body["message"] == f"fake discord has no route for GET /guilds/{world.guild.id}/bans"
    [unknown] = fake.unknown_requests
    assert (unknown.method, unknown.bot) == ("GET", hana)
