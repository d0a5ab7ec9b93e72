"""A persona's own emojis on Discord: uploaded once as its application's emojis (and never again, however often it
starts), offered to its model as nods, and given as reactions; when the upload fails, one line says so and the
persona nods as it would without them. The fleet runs in process (tests.discord.fleet) on the local Discord, with
the real discord.py clients."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from arbiter.contract import Tier
from bots.persona import NodEmoji
from bots.platforms.discord import DiscordPlatform
from tests.bots.test_persona import SHIPPED
from tests.discord.fleet import discord_fleet, scripted
from tests.support.eventually import eventually
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    import pytest

    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.discord.fleet import DiscordFleet
    from tests.support.fake_discord import FakeDiscord
    from tests.support.fleet import Live

UPLOADS = "/applications/{application_id}/emojis"
# discord_fleet seeds each persona's choices; with this seed the listener below nods to the news.
SEED_THAT_NODS = 0
# And the stand-in's seed with which that nod is its emoji (which it is now and then, as its choice).
SEED_THAT_PICKS_ITS_EMOJI = 4


def listener(*, emoji: bool = True) -> Persona:
    """Mio as a listener more than a talker (to a person's news it nods), with an emoji of her own."""
    mio = make_persona("mio", talkativeness=0.0, agreeableness=1.0, extraversion=1.0)
    own = [NodEmoji(name="mio_nod", image=SHIPPED / "emoji" / "juno_wow.png")] if emoji else []
    return mio.model_copy(update={"react_with_emoji": True, "nod_emojis": own})


def platform(fleet: DiscordFleet, persona_id: str) -> DiscordPlatform:
    used = fleet.runtimes[persona_id].platform
    assert isinstance(used, DiscordPlatform)
    return used


async def test_an_emoji_is_uploaded_once_and_found_again_after_a_restart(
    fake: FakeDiscord, world: World, live: Live
) -> None:
    account = world.personas["mio"]
    offered = []
    for _ in range(2):  # the persona starts, stops and starts again on the same Discord
        async with discord_fleet(world, live, [listener()]) as fleet:
            offered.append(platform(fleet, "mio").emoji_nods())

    [emoji] = fake.app_emojis[account.application_id]
    assert emoji.name == "mio_nod" and emoji.image == (SHIPPED / "emoji" / "juno_wow.png").read_bytes()
    assert offered == [(":mio_nod:",), (":mio_nod:",)]
    assert [r.status for r in fake.requests_to("POST", UPLOADS, bot=account)] == [201]  # once, ever
    assert [r.status for r in fake.requests_to("GET", UPLOADS, bot=account)] == [200, 200]  # once per start


async def test_a_persona_nods_with_its_own_emoji_as_a_reaction(fake: FakeDiscord, world: World, live: Live) -> None:
    mio = listener()
    stand_in = {"mio": scripted(mio, seed=SEED_THAT_PICKS_ITS_EMOJI)}
    async with discord_fleet(
        world, live, [mio], channel={"idle_cap": 2}, seed=SEED_THAT_NODS, providers=stand_in
    ) as fleet:
        told = await fake.human_says(world.lounge, world.member, "I'm off to the mountains this weekend.")
        await eventually(lambda: told.reactions or fleet.posted_by("mio"), what="mio reacts")
        await fleet.settled()
        lines = await fleet.persona_lines()
        asked = fleet.providers["mio"].decisions

    [emoji] = fake.app_emojis[world.personas["mio"].application_id]
    [nod] = [m for m in lines if m.author_id == "mio"]
    assert nod.tier is Tier.AIZUCHI and nod.text == ":mio_nod:"
    assert told.reactions == {f"mio_nod:{emoji.id}": [world.personas["mio"]]}
    assert nod.platform_message_id is not None and nod.platform_message_id.startswith(f"reaction-{told.id}-")
    assert fleet.posted_by("mio") == []
    # Its model was told it may nod with it, and the stand-in was handed it as a nod of its own.
    assert asked and all(r.scene is not None and r.scene.emoji_nods == (":mio_nod:",) for r in asked)
    assert ":mio_nod:" in asked[0].system


async def test_a_failed_upload_is_one_line_and_the_persona_nods_without_it(
    fake: FakeDiscord, world: World, live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    account = world.personas["mio"]
    fake.fail_next(
        "POST", UPLOADS, 400, bot=account, body={"code": 30008, "message": "Maximum number of emojis reached"}
    )
    caplog.set_level(logging.WARNING, logger="bots.app_emojis")
    mio = listener()
    stand_in = {"mio": scripted(mio, seed=SEED_THAT_PICKS_ITS_EMOJI)}
    async with discord_fleet(
        world, live, [mio], channel={"idle_cap": 2}, seed=SEED_THAT_NODS, providers=stand_in
    ) as fleet:
        told = await fake.human_says(world.lounge, world.member, "I'm off to the mountains this weekend.")
        await eventually(lambda: fleet.runtimes["mio"].stats.looks, what="mio looks")
        await fleet.settled()
        lines = await fleet.persona_lines()
        asked = fleet.providers["mio"].decisions
        offered = platform(fleet, "mio").emoji_nods()
        # Its emoji by name, had its model said it anyway: no reaction Discord would refuse; the nod goes as text.
        by_name = await platform(fleet, "mio").react(fleet.channel_id, str(told.id), ":mio_nod:")

    [warning] = [r for r in caplog.records if r.name == "bots.app_emojis"]
    assert "could not upload its emoji mio_nod" in warning.getMessage()
    assert "Maximum number of emojis reached" in warning.getMessage()
    assert (offered, by_name, fake.app_emojis.get(account.application_id, [])) == ((), False, [])
    assert all(r.scene is not None and r.scene.emoji_nods == () for r in asked)
    assert all(":mio_nod:" not in r.system for r in asked)
    assert all(m.text != ":mio_nod:" for m in lines)
    assert told.reactions == {}
    assert fake.requests_to("PUT", "/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me") == []
