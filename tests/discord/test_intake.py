"""The arbiter's bot records the enabled channels' messages: who said what, once each, and what became of them
(edits, deletions, bulk deletions). Other channels and direct messages leave the arbiter untouched.

The arbiter runs on the fake clock (tests.conftest's ``arbiter``); people and other bots speak in the local
Discord, and the test waits until the arbiter's history shows the result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord
import pytest

from arbiter.contract import AuthorKind
from arbiter.core.errors import NotFound
from tests.discord.conftest import arbiter_bot
from tests.support.eventually import eventually
from tests.support.fake_discord import RecordingClient, running

if TYPE_CHECKING:
    from arbiter.contract import MessageView
    from arbiter.server import Arbiter
    from tests.discord.conftest import World

pytestmark = pytest.mark.usefixtures("bot")


@pytest.fixture
async def lounge(arbiter: Arbiter, world: World) -> str:
    await arbiter.service.ensure_channel(str(world.lounge.id))
    return str(world.lounge.id)


async def history(arbiter: Arbiter, channel_id: str) -> list[MessageView]:
    return list((await arbiter.service.history(channel_id, limit=200)).messages)


async def recorded(arbiter: Arbiter, channel_id: str, count: int) -> list[MessageView]:
    """The history once it holds ``count`` messages."""

    async def enough() -> bool:
        return len(await history(arbiter, channel_id)) >= count

    await eventually(enough, what=f"{count} messages in the history")
    return await history(arbiter, channel_id)


async def barrier(arbiter: Arbiter, world: World, lounge: str) -> MessageView:
    """Someone speaks in the lounge, and it is recorded: events sent before it have reached the arbiter's bot."""
    said = await world.fake.human_says(world.lounge, world.mod, "(anyone here?)")

    async def seen() -> list[MessageView]:
        return [m for m in await history(arbiter, lounge) if m.platform_message_id == str(said.id)]

    await eventually(seen, what="the barrier message recorded")
    [message] = await seen()
    return message


def ids(messages: list[MessageView]) -> list[str | None]:
    return [m.platform_message_id for m in messages]


# --- recording ------------------------------------------------------------------------------------------


async def test_each_message_is_recorded_once_with_its_author_and_discord_id(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    hana = world.personas["hana"]
    first = await world.fake.human_says(world.lounge, world.member, "hello there")
    second = await world.fake.human_says(world.lounge, world.mod, "what do you think?", mentions=[hana])
    embed_only = await world.fake.human_says(world.lounge, world.member, "", embeds=[{"title": "a link"}])

    messages = await recorded(arbiter, lounge, 3)

    assert [(m.author_kind, m.author_id, m.author_name, m.text) for m in messages] == [
        (AuthorKind.HUMAN, str(world.member.id), "bob", "hello there"),
        (AuthorKind.HUMAN, str(world.mod.id), "ann", "@Hana what do you think?"),
        (AuthorKind.HUMAN, str(world.member.id), "bob", "[an embed or a sticker]"),
    ]
    assert ids(messages) == [str(first.id), str(second.id), str(embed_only.id)]
    assert [m.addressed for m in messages] == [[], ["hana"], []]


async def test_an_at_mention_of_a_registered_persona_addresses_it_whatever_its_name(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    # The bot account's name says nothing about the persona: only the registration ties them together.
    kai = world.personas["kai"]
    await arbiter.service.register_persona("kai", "Kaito", platform_user_id=str(kai.id))

    await world.fake.human_says(world.lounge, world.member, "your turn", mentions=[kai])

    [message] = await recorded(arbiter, lounge, 1)
    assert message.addressed == ["kai"]


async def test_a_reply_to_a_personas_message_addresses_that_persona_without_a_ping(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    kai = world.personas["kai"]
    await arbiter.service.register_persona("kai", "Kaito", platform_user_id=str(kai.id))
    client = RecordingClient(intents=discord.Intents.none())
    async with running(client, kai.token):
        said = await client.get_partial_messageable(world.lounge.id).send("Tea is better than coffee.")
    [kais] = world.lounge.messages

    # A reply that does not ping the author (Discord's "@ off"): the reply itself says whom it answers.
    await world.fake.human_says(world.lounge, world.member, "really? why?", reply_to=kais, ping_reply=False)

    messages = await recorded(arbiter, lounge, 2)
    assert said.id == kais.id
    assert [(m.author_id, m.addressed) for m in messages] == [("kai", []), (str(world.member.id), ["kai"])]


async def test_another_bots_message_is_recorded_as_a_bots(arbiter: Arbiter, world: World, lounge: str) -> None:
    weather = world.fake.add_bot("weather")
    client = RecordingClient(intents=discord.Intents.none())
    async with running(client, weather.token):
        await client.get_partial_messageable(world.lounge.id).send("Rain at noon.")

    [message] = await recorded(arbiter, lounge, 1)
    assert (message.author_kind, message.author_id, message.text) == (AuthorKind.BOT, str(weather.id), "Rain at noon.")


async def test_a_message_seen_by_two_arbiter_bots_is_recorded_once(arbiter: Arbiter, world: World, lounge: str) -> None:
    # Two arbiter processes on one database, each with its own bot account: both see every message.
    second = world.fake.add_bot("arbiter-2")
    other = arbiter_bot(arbiter, world)
    async with running(other, second.token):
        said = [await world.fake.human_says(world.lounge, world.member, f"line {n}") for n in range(3)]
        await barrier(arbiter, world, lounge)
        await barrier(arbiter, world, lounge)

    messages = await history(arbiter, lounge)
    assert ids(messages)[:3] == [str(m.id) for m in said]
    assert len(messages) == 5
    assert len(set(ids(messages))) == 5


async def test_messages_said_while_the_arbiters_connection_was_down_are_recorded_once(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    await world.fake.human_says(world.lounge, world.member, "before")
    await recorded(arbiter, lounge, 1)

    await world.fake.drop(world.arbiter)
    await world.fake.human_says(world.lounge, world.member, "while it was away")
    await world.fake.human_says(world.lounge, world.member, "still away")
    await world.fake.wait_connected(world.arbiter)
    await barrier(arbiter, world, lounge)

    texts = [m.text for m in await history(arbiter, lounge)]
    assert texts == ["before", "while it was away", "still away", "(anyone here?)"]


# --- what becomes of a message ------------------------------------------------------------------------------


async def test_an_edit_reaches_the_history(arbiter: Arbiter, world: World, lounge: str) -> None:
    said = await world.fake.human_says(world.lounge, world.member, "I like sobe")
    await recorded(arbiter, lounge, 1)

    await world.fake.edit(said, "I like soba")

    async def edited() -> bool:
        return [m.text for m in await history(arbiter, lounge)] == ["I like soba"]

    await eventually(edited, what="the edit in the history")
    [message] = await history(arbiter, lounge)
    assert message.platform_message_id == str(said.id)


async def test_a_deletion_takes_the_message_out_of_the_history(arbiter: Arbiter, world: World, lounge: str) -> None:
    kept = await world.fake.human_says(world.lounge, world.member, "keep this")
    gone = await world.fake.human_says(world.lounge, world.member, "oops, wrong channel")
    await recorded(arbiter, lounge, 2)

    await world.fake.delete(gone)

    async def deleted() -> bool:
        return ids(await history(arbiter, lounge)) == [str(kept.id)]

    await eventually(deleted, what="the deletion in the history")


async def test_a_bulk_deletion_takes_every_message_out(arbiter: Arbiter, world: World, lounge: str) -> None:
    said = [await world.fake.human_says(world.lounge, world.member, f"spam {n}") for n in range(4)]
    kept = await world.fake.human_says(world.lounge, world.mod, "please stop")
    await recorded(arbiter, lounge, 5)

    await world.fake.bulk_delete(said)

    async def deleted() -> bool:
        return ids(await history(arbiter, lounge)) == [str(kept.id)]

    await eventually(deleted, what="the bulk deletion in the history")


async def test_changes_to_messages_the_arbiter_never_recorded_are_ignored(
    arbiter: Arbiter, world: World, lounge: str, caplog: pytest.LogCaptureFixture
) -> None:
    await arbiter.service.update_settings(lounge, {"enabled": False})
    old = await world.fake.human_says(world.lounge, world.member, "said before the fleet came")
    await arbiter.service.update_settings(lounge, {"enabled": True})
    elsewhere = await world.fake.human_says(world.backroom, world.member, "in the backroom")

    await world.fake.edit(old, "edited later")
    await world.fake.delete(elsewhere)
    await world.fake.bulk_delete([old])
    last = await barrier(arbiter, world, lounge)

    assert [m.platform_message_id for m in await history(arbiter, lounge)] == [last.platform_message_id]
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]


# --- what is not recorded -----------------------------------------------------------------------------------

# Notices Discord writes itself (discord.MessageType), with the content it gives them.
NOTICES = {
    "a pin": (6, ""),
    "a member joining": (7, ""),
    "a boost": (8, ""),
    "a call": (3, ""),
    "a channel renamed": (4, "lounge-2"),
    "a thread created": (18, "plans for friday"),
    "a thread's starter message": (21, ""),
    "a poll's result": (46, ""),
    "an automod alert": (24, ""),
}


@pytest.mark.parametrize("notice", NOTICES)
async def test_a_notice_discord_writes_is_not_speech(arbiter: Arbiter, world: World, lounge: str, notice: str) -> None:
    kind, content = NOTICES[notice]
    said = await world.fake.human_says(world.lounge, world.member, "look at this")
    await world.fake.system_message(world.lounge, world.mod, kind, content=content, about=said)
    reply = await world.fake.human_says(world.lounge, world.mod, "nice", reply_to=said)
    await barrier(arbiter, world, lounge)

    assert ids(await history(arbiter, lounge))[:2] == [str(said.id), str(reply.id)]
    assert len(await history(arbiter, lounge)) == 3


async def test_notices_said_while_the_arbiter_was_away_are_not_read_back(
    arbiter: Arbiter, world: World, lounge: str
) -> None:
    await world.fake.human_says(world.lounge, world.member, "before")
    await recorded(arbiter, lounge, 1)

    await world.fake.drop(world.arbiter, code=1001)  # a new session: what it missed is read back from the channel
    said = await world.fake.human_says(world.lounge, world.member, "pin this")
    for kind, content in NOTICES.values():
        await world.fake.system_message(world.lounge, world.mod, kind, content=content, about=said)
    await world.fake.wait_connected(world.arbiter)
    await barrier(arbiter, world, lounge)

    assert [m.text for m in await history(arbiter, lounge)] == ["before", "pin this", "(anyone here?)"]


async def test_a_channel_without_the_fleet_is_not_recorded(arbiter: Arbiter, world: World, lounge: str) -> None:
    await world.fake.human_says(world.backroom, world.member, "just us here")
    await barrier(arbiter, world, lounge)

    with pytest.raises(NotFound):
        await arbiter.service.history(str(world.backroom.id))
    assert [c.channel_id for c in (await arbiter.service.channels()).channels] == [lounge]


async def test_a_disabled_channel_is_not_recorded(arbiter: Arbiter, world: World, lounge: str) -> None:
    backroom = str(world.backroom.id)
    await arbiter.service.ensure_channel(backroom)
    await world.fake.human_says(world.lounge, world.member, "on")
    await recorded(arbiter, lounge, 1)
    await world.fake.invoke(world.mod, world.lounge, "aizuchi disable")

    await world.fake.human_says(world.lounge, world.member, "off")
    await world.fake.human_says(world.backroom, world.member, "elsewhere")
    await recorded(arbiter, backroom, 1)

    assert [m.text for m in await history(arbiter, lounge)] == ["on"]


async def test_direct_messages_are_not_recorded(arbiter: Arbiter, world: World, lounge: str) -> None:
    # A bot that asks for DMs gets them: so the fake did send the DM the arbiter's bot must not take in.
    listener = world.fake.add_bot("listener")
    client = RecordingClient(intents=discord.Intents(dm_messages=True, guilds=True))
    async with running(client, listener.token):
        await world.fake.human_dms(world.member, listener, "psst")
        await world.fake.human_dms(world.member, world.arbiter, "psst, arbiter")
        await world.fake.wait_until(lambda: client.messages)
        await barrier(arbiter, world, lounge)

    assert client.contents() == ["psst"]
    assert [c.channel_id for c in (await arbiter.service.channels()).channels] == [lounge]
    assert [m.text for m in await history(arbiter, lounge)] == ["(anyone here?)"]


# --- images ------------------------------------------------------------------------------------------------


async def test_an_image_attachments_reference_reaches_the_history(arbiter: Arbiter, world: World, lounge: str) -> None:
    photo = world.fake.image_attachment("cat.png", size=48_213, width=800, height=600, expires_in_s=86_400)
    notes = {**world.fake.image_attachment("notes.txt"), "content_type": "text/plain; charset=utf-8"}
    linked = {
        "type": "image",
        "url": "https://example.org/dog.webp",
        "thumbnail": {"url": "https://example.org/dog.webp", "width": 640, "height": 480},
    }
    said = await world.fake.human_says(world.lounge, world.member, "look", attachments=[photo, notes], embeds=[linked])

    [message] = await recorded(arbiter, lounge, 1)

    assert message.platform_message_id == str(said.id)
    assert message.text == "look [attached: cat.png, notes.txt]"
    first, second = message.images
    assert (first.url, first.content_type, first.size, first.width, first.height) == (
        photo["url"],
        "image/png",
        48_213,
        800,
        600,
    )
    assert first.expires_at == pytest.approx(said.created_at + 86_400, abs=1)
    assert (second.url, second.content_type, second.size, second.width, second.expires_at) == (
        "https://example.org/dog.webp",
        "image/webp",
        None,
        640,
        None,
    )


async def test_images_over_the_bounds_are_not_kept(arbiter: Arbiter, world: World, lounge: str) -> None:
    bounds = arbiter.service.image_bounds
    big = world.fake.image_attachment("huge.jpg", content_type="image/jpeg", size=bounds.max_bytes + 1)
    svg = world.fake.image_attachment("icon.svg", content_type="image/svg+xml")
    many = [world.fake.image_attachment(f"p{n}.gif", content_type="image/gif") for n in range(bounds.per_message + 2)]
    await world.fake.human_says(world.lounge, world.member, "", attachments=[big, svg, *many])

    [message] = await recorded(arbiter, lounge, 1)

    assert [image.url for image in message.images] == [m["url"] for m in many[: bounds.per_message]]
