"""Channel webhooks as Discord answers them, through discord.py: created and listed with Manage Webhooks (50013
without it), at most 15 a channel (30007), the token shown to its own application only, and executed with a name,
an avatar and no pings, the message dispatched with ``webhook_id`` and the webhook as its author."""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord
import pytest

from tests.support.fake_discord import (
    DEFAULT_BOT_PERMISSIONS,
    MAX_CHANNEL_WEBHOOKS,
    Perm,
    RecordingClient,
    WebhookAuthor,
    running,
)

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)
HOOKS = DEFAULT_BOT_PERMISSIONS | Perm.MANAGE_WEBHOOKS


async def test_a_webhook_posts_under_a_name_and_avatar_of_its_own_without_pinging(
    fake: FakeDiscord, world: World
) -> None:
    arbiter = fake.add_bot("arbiter", permissions=HOOKS)
    listener = RecordingClient(intents=CONTENT)

    async with running(listener, arbiter.token):
        channel = await listener.fetch_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        hook = await channel.create_webhook(name="aizuchi")
        sent = await hook.send(
            f"hi {world.member.mention} @everyone",
            username="Hana",
            avatar_url="https://example.test/hana.png",
            allowed_mentions=discord.AllowedMentions.none(),
            wait=True,
        )
        await fake.wait_until(lambda: listener.messages, what="the gateway's MESSAGE_CREATE")

    [posted] = world.lounge.messages
    assert isinstance(posted.author, WebhookAuthor)
    assert (posted.author.id, posted.author.name, posted.author.avatar_url) == (
        hook.id,
        "Hana",
        "https://example.test/hana.png",
    )
    assert not posted.live_mentions
    [seen] = listener.messages
    assert (seen.id, seen.webhook_id, seen.application_id) == (sent.id, hook.id, arbiter.application_id)
    assert (seen.author.id, seen.author.name, seen.author.bot) == (hook.id, "Hana", True)


async def test_creating_and_listing_webhooks_takes_manage_webhooks(fake: FakeDiscord, world: World) -> None:
    plain = fake.add_bot("plain")
    client = RecordingClient(intents=CONTENT)

    async with running(client, plain.token):
        channel = await client.fetch_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        with pytest.raises(discord.Forbidden) as creating:
            await channel.create_webhook(name="aizuchi")
        with pytest.raises(discord.Forbidden) as listing:
            await channel.webhooks()

    assert (creating.value.code, listing.value.code) == (50013, 50013)
    assert fake.webhooks == {}


async def test_a_channel_holds_fifteen_webhooks_and_refuses_the_sixteenth(fake: FakeDiscord, world: World) -> None:
    arbiter = fake.add_bot("arbiter", permissions=HOOKS)
    client = RecordingClient(intents=CONTENT)

    async with running(client, arbiter.token):
        channel = await client.fetch_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        for index in range(MAX_CHANNEL_WEBHOOKS):
            await channel.create_webhook(name=f"hook {index}")
        with pytest.raises(discord.HTTPException) as refused:
            await channel.create_webhook(name="one more")

    assert (refused.value.status, refused.value.code) == (400, 30007)
    assert len(fake.webhooks) == MAX_CHANNEL_WEBHOOKS


@pytest.mark.parametrize("name", ["", "x" * 81, "Discord helper", "clyde"])
async def test_a_bad_webhook_name_is_an_invalid_form_body(fake: FakeDiscord, world: World, name: str) -> None:
    client = RecordingClient(intents=CONTENT)

    async with running(client, fake.add_bot("arbiter", permissions=HOOKS).token):
        with pytest.raises(discord.HTTPException) as refused:
            await client.http.create_webhook(world.lounge.id, name=name)

    assert (refused.value.status, refused.value.code) == (400, 50035)


async def test_only_the_application_that_made_a_webhook_sees_its_token(fake: FakeDiscord, world: World) -> None:
    maker = fake.add_bot("arbiter", permissions=HOOKS)
    other = fake.add_bot("other", permissions=HOOKS)
    mine, theirs = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)

    async with running(mine, maker.token), running(theirs, other.token):
        channel = await mine.fetch_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        made = await channel.create_webhook(name="aizuchi")
        [seen_by_maker] = await channel.webhooks()
        [seen_by_other] = await (await theirs.fetch_channel(world.lounge.id)).webhooks()  # type: ignore[union-attr]

    assert seen_by_maker.id == seen_by_other.id == made.id
    assert seen_by_maker.token == made.token is not None
    assert seen_by_other.token is None
    assert seen_by_maker.user is not None and seen_by_maker.user.id == maker.id


async def test_a_webhook_posts_in_a_thread_of_its_channel(fake: FakeDiscord, world: World) -> None:
    arbiter = fake.add_bot("arbiter", permissions=HOOKS)
    thread = await fake.add_thread(world.lounge, "side talk", owner=world.member)
    client = RecordingClient(intents=CONTENT)

    async with running(client, arbiter.token):
        channel = await client.fetch_channel(world.lounge.id)
        assert isinstance(channel, discord.TextChannel)
        hook = await channel.create_webhook(name="aizuchi")
        await hook.send("in the thread", username="Mio", thread=discord.Object(thread.id), wait=True)
        with pytest.raises(discord.NotFound) as unknown:
            await discord.Webhook.partial(hook.id, "wrong-token", client=client).send("x", wait=True)

    assert [m.content for m in thread.messages] == ["in the thread"]
    assert world.lounge.messages == []
    assert unknown.value.code == 10015
