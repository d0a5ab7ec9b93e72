"""Messages both ways: humans to bots over the gateway, bots to the channel over REST, and what is recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import discord
import pytest

from tests.support.fake_discord import Overwrite, Perm, RecordingClient, running

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)
NO_CONTENT = discord.Intents.default()


def text_channel(client: discord.Client, channel_id: int) -> discord.TextChannel:
    channel = client.get_channel(channel_id)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_a_human_message_reaches_both_bots_with_content_only_for_the_intent(
    fake: FakeDiscord, world: World
) -> None:
    reader, skimmer = RecordingClient(intents=CONTENT), RecordingClient(intents=NO_CONTENT)

    async with running(reader, fake.add_bot("hana").token), running(skimmer, fake.add_bot("kai").token):
        said = await fake.human_says(world.lounge, world.member, "good morning")
        await fake.wait_until(lambda: reader.messages and skimmer.messages)

    for client in (reader, skimmer):
        [message] = client.messages
        assert message.id == said.id
        assert message.author.id == world.member.id
        assert message.channel.id == world.lounge.id
        assert not message.author.bot
    assert reader.contents() == ["good morning"]
    assert skimmer.contents() == [""]


async def test_a_bot_without_the_intent_reads_messages_that_mention_it(fake: FakeDiscord, world: World) -> None:
    kai = fake.add_bot("kai")
    skimmer = RecordingClient(intents=NO_CONTENT)

    async with running(skimmer, kai.token):
        said = await fake.human_says(world.lounge, world.member, "what do you think?", mentions=[kai])
        await fake.wait_until(lambda: skimmer.messages)

    assert said.content == f"<@{kai.id}> what do you think?"
    assert said.live_mentions
    [message] = skimmer.messages
    assert message.content == said.content
    assert [user.id for user in message.mentions] == [kai.id]


@pytest.mark.parametrize(
    ("allowed", "recorded", "pings"),
    [
        pytest.param(discord.AllowedMentions.none(), {"parse": []}, False, id="none"),
        pytest.param(
            discord.AllowedMentions(everyone=False, roles=False, replied_user=False),
            {"parse": ["users"]},
            True,
            id="users-only",
        ),
        pytest.param(None, None, True, id="not-sent"),
    ],
)
async def test_a_bot_post_is_recorded_with_its_allowed_mentions_and_reaches_the_other_bot(
    fake: FakeDiscord, world: World, allowed: discord.AllowedMentions | None, recorded: Any, pings: bool
) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    speaker, listener = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)

    async with running(speaker, hana.token), running(listener, kai.token):
        text = f"{world.member.mention} have some tea"
        channel = text_channel(speaker, world.lounge.id)
        sent = await (channel.send(text) if allowed is None else channel.send(text, allowed_mentions=allowed))
        await fake.wait_until(lambda: listener.messages and speaker.messages)

    [post] = fake.requests_to("POST", f"/channels/{world.lounge.id}/messages")
    assert post.bot is hana
    assert post.status == 200
    assert post.json["content"] == text
    assert post.json.get("allowed_mentions") == recorded
    [stored] = world.lounge.messages
    assert stored.id == sent.id
    assert stored.author is hana
    assert stored.live_mentions is pings
    # Discord echoes a bot's own message to it, and to every other bot in the guild.
    assert [m.id for m in speaker.messages] == [m.id for m in listener.messages] == [sent.id]
    assert listener.messages[0].author.id == hana.id
    assert bool(listener.messages[0].mentions) is pings


async def test_everyone_needs_the_permission_to_ping(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    bold = fake.add_bot("bold", permissions=Perm.VIEW_CHANNEL | Perm.SEND_MESSAGES | Perm.MENTION_EVERYONE)
    speaker, loud = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)

    async with running(speaker, hana.token), running(loud, bold.token):
        await text_channel(speaker, world.lounge.id).send("@everyone hello")
        await text_channel(loud, world.lounge.id).send("@everyone hello")

    assert [m.mention_everyone for m in world.lounge.messages] == [False, True]


async def test_typing_and_a_reaction_are_recorded_and_dispatched(fake: FakeDiscord, world: World) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    nodder, watcher = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)

    async with running(nodder, hana.token), running(watcher, kai.token):
        said = await fake.human_says(world.lounge, world.member, "I made tea")
        await fake.wait_until(lambda: nodder.messages)
        channel = text_channel(nodder, world.lounge.id)
        await channel.typing()
        await nodder.messages[0].add_reaction("🍵")
        await fake.wait_until(lambda: watcher.reactions and watcher.typing_events)

    [typing] = fake.requests_to("POST", "/channels/{channel_id}/typing")
    assert (typing.bot, typing.status, typing.path) == (hana, 204, f"/channels/{world.lounge.id}/typing")
    [reaction] = fake.requests_to("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me")
    assert reaction.path == f"/channels/{world.lounge.id}/messages/{said.id}/reactions/🍵/@me"
    assert reaction.bot is hana
    assert said.reactions == {"🍵": [hana]}
    assert [(r.user_id, str(r.emoji), r.message_id) for r in watcher.reactions] == [(hana.id, "🍵", said.id)]
    assert [t.user_id for t in watcher.typing_events] == [hana.id]


async def test_a_reaction_by_name_is_an_unknown_emoji(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        said = await fake.human_says(world.lounge, world.member, "hi")
        await fake.wait_until(lambda: client.messages)
        with pytest.raises(discord.HTTPException) as raised:
            await client.messages[0].add_reaction(":thumbsup:")

    assert raised.value.code == 10014
    assert said.reactions == {}


async def test_edits_and_deletions_arrive_as_events(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)

    async with running(client, fake.add_bot("hana").token):
        said = await fake.human_says(world.lounge, world.member, "teh tea")
        await fake.wait_until(lambda: client.messages)
        await fake.edit(said, "the tea")
        await fake.wait_until(lambda: client.edits)
        await fake.delete(said)
        await fake.wait_until(lambda: client.deletions)

    [(before, after)] = client.edits
    assert (before.content, after.content) == ("teh tea", "the tea")
    assert after.edited_at is not None
    [deleted] = client.deletions
    assert (deleted.message_id, deleted.channel_id) == (said.id, world.lounge.id)
    assert deleted.cached_message is not None
    assert said.edits == ["teh tea"]
    assert world.lounge.messages == []


async def test_a_bot_edits_and_deletes_its_own_message_but_not_a_humans(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)

    async with running(client, fake.add_bot("hana").token):
        human = await fake.human_says(world.lounge, world.member, "mine")
        await fake.wait_until(lambda: client.messages)
        own = await text_channel(client, world.lounge.id).send("draft")
        await own.edit(content="final")
        with pytest.raises(discord.Forbidden) as raised:
            await client.messages[0].edit(content="hacked")
        await own.delete()

    assert raised.value.code == 50005
    assert human.content == "mine"
    assert [m.content for m in world.lounge.messages] == ["mine"]
    assert [m.content for m in world.lounge.history] == ["mine", "final"]


async def test_a_reply_pings_its_author_unless_told_not_to(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)

    async with running(client, fake.add_bot("hana").token):
        asked = await fake.human_says(world.lounge, world.member, "tea?")
        await fake.wait_until(lambda: client.messages)
        await client.messages[0].reply("yes please")
        await client.messages[0].reply("quietly", mention_author=False)

    loud, quiet = world.lounge.messages[1:]
    assert loud.reference is asked
    assert loud.mentions == [world.member]
    assert quiet.reference is asked
    assert quiet.mentions == []


async def test_history_reads_the_channel_in_order(fake: FakeDiscord, world: World) -> None:
    client = RecordingClient(intents=CONTENT)
    for word in ("one", "two", "three"):
        await fake.human_says(world.lounge, world.member, word)

    async with running(client, fake.add_bot("hana").token):
        channel = text_channel(client, world.lounge.id)
        newest_first = [m.content async for m in channel.history(limit=10)]
        oldest_first = [m.content async for m in channel.history(limit=2, oldest_first=True)]

    assert newest_first == ["three", "two", "one"]
    assert oldest_first == ["one", "two"]


async def test_a_channel_the_bot_may_not_post_in_refuses_with_missing_permissions(
    fake: FakeDiscord, world: World
) -> None:
    hana = fake.add_bot("hana")
    quiet = fake.add_channel(world.guild, "quiet", overwrites=[Overwrite(target=hana, deny=Perm.SEND_MESSAGES)])
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        with pytest.raises(discord.Forbidden) as raised:
            await text_channel(client, quiet.id).send("hello?")

    assert (raised.value.status, raised.value.code) == (403, 50013)
    assert quiet.messages == []


async def test_a_thread_is_a_channel_with_its_parents_permissions_and_a_permission_of_its_own_to_post(
    fake: FakeDiscord, world: World
) -> None:
    talker, mute = fake.add_bot("hana"), fake.add_bot("kai")
    world.lounge.overwrites.append(Overwrite(target=mute, deny=Perm.SEND_MESSAGES_IN_THREADS))
    client, other = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)
    async with running(client, talker.token), running(other, mute.token):
        thread = await fake.add_thread(world.lounge, "plans", owner=world.member)
        await fake.wait_until(lambda: client.get_channel(thread.id) is not None)
        said = await fake.human_says(thread, world.member, "in the thread")
        await fake.wait_until(lambda: client.messages)
        seen = client.get_channel(thread.id)
        posted = await client.get_partial_messageable(thread.id).send("me too")
        with pytest.raises(discord.Forbidden):
            await other.get_partial_messageable(thread.id).send("and me")  # Send Messages, but not in threads

    assert isinstance(seen, discord.Thread)
    assert (seen.parent_id, seen.name) == (world.lounge.id, "plans")
    assert seen.permissions_for(seen.guild.me).send_messages_in_threads
    message = client.messages[0]  # (then its own post)
    assert (message.id, message.channel.id, message.content) == (said.id, thread.id, "in the thread")
    assert [m.id for m in thread.messages] == [said.id, posted.id]
    assert world.lounge.messages == []
