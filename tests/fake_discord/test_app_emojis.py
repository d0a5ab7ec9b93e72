"""Application emojis as Discord answers them, through discord.py: listed, uploaded, refused with Discord's codes,
and usable in a reaction by their own application's bot only."""

from __future__ import annotations

from typing import TYPE_CHECKING

import discord
import pytest

from tests.bots.test_nod_emojis import tiny_png
from tests.support.fake_discord import RecordingClient, running
from tests.support.fake_discord.emojis import MAX_APP_EMOJIS, AppEmoji

if TYPE_CHECKING:
    from tests.fake_discord.conftest import World
    from tests.support.fake_discord import FakeDiscord

CONTENT = discord.Intents.default() | discord.Intents(message_content=True)


async def test_an_uploaded_emoji_is_listed_and_reacts_by_name_and_id(fake: FakeDiscord, world: World) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        before = await client.fetch_application_emojis()
        made = await client.create_application_emoji(name="hana_nod", image=tiny_png())
        listed = await client.fetch_application_emojis()
        said = await fake.human_says(world.lounge, world.member, "hi")
        await fake.wait_until(lambda: client.messages)
        await client.messages[0].add_reaction(made)

    assert before == []
    assert [(e.id, e.name, e.animated) for e in listed] == [(made.id, "hana_nod", False)]
    [emoji] = fake.app_emojis[hana.application_id]
    assert (emoji.name, emoji.image, emoji.kind, emoji.uploader) == ("hana_nod", tiny_png(), "png", hana)
    assert said.reactions == {f"hana_nod:{made.id}": [hana]}


@pytest.mark.parametrize(
    ("name", "image", "field", "code"),
    [
        pytest.param("x", tiny_png(), "name", "STRING_TYPE_REGEX", id="name-too-short"),
        pytest.param("hana-nod", tiny_png(), "name", "STRING_TYPE_REGEX", id="name-hyphen"),
        pytest.param("hana_nod", tiny_png() + bytes(256 * 1024), "image", "BINARY_TYPE_MAX_SIZE", id="too-big"),
    ],
)
async def test_a_bad_name_or_image_is_an_invalid_form_body(
    fake: FakeDiscord, name: str, image: bytes, field: str, code: str
) -> None:
    client = RecordingClient(intents=CONTENT)

    async with running(client, fake.add_bot("hana").token):
        with pytest.raises(discord.HTTPException) as raised:
            await client.create_application_emoji(name=name, image=image)

    assert (raised.value.status, raised.value.code) == (400, 50035)
    [request] = fake.requests_to("POST", "/applications/{application_id}/emojis")
    assert request.response["errors"][field]["_errors"][0]["code"] == code
    assert fake.app_emojis.get(request.bot.application_id if request.bot else 0, []) == []


async def test_a_taken_name_and_the_2001st_emoji_are_refused(fake: FakeDiscord) -> None:
    hana = fake.add_bot("hana")
    client = RecordingClient(intents=CONTENT)

    async with running(client, hana.token):
        await client.create_application_emoji(name="hana_nod", image=tiny_png())
        with pytest.raises(discord.HTTPException) as taken:
            await client.create_application_emoji(name="hana_nod", image=tiny_png())
        owned = fake.app_emojis[hana.application_id]
        owned += [AppEmoji(fake.snowflake(), f"e{n}", b"", "png", hana) for n in range(MAX_APP_EMOJIS - 1)]
        with pytest.raises(discord.HTTPException) as full:
            await client.create_application_emoji(name="one_more", image=tiny_png())

    assert (taken.value.code, full.value.code) == (50035, 30008)
    assert len(fake.app_emojis[hana.application_id]) == MAX_APP_EMOJIS


async def test_a_reaction_with_an_emoji_the_bot_cannot_use_is_unknown(fake: FakeDiscord, world: World) -> None:
    hana, kai = fake.add_bot("hana"), fake.add_bot("kai")
    owner, other = RecordingClient(intents=CONTENT), RecordingClient(intents=CONTENT)

    async with running(owner, hana.token), running(other, kai.token):
        made = await owner.create_application_emoji(name="hana_nod", image=tiny_png())
        said = await fake.human_says(world.lounge, world.member, "hi")
        await fake.wait_until(lambda: other.messages)
        refused = []
        for emoji in (f"hana_nod:{made.id}", "hana_nod:123"):  # another app's emoji; one that does not exist
            with pytest.raises(discord.HTTPException) as raised:
                await other.messages[0].add_reaction(emoji)
            refused.append(raised.value.code)

    assert refused == [10014, 10014]
    assert said.reactions == {}
