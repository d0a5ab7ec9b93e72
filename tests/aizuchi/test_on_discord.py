"""``aizuchi run`` on Discord as a server owner runs it: a process in its own directory, every token only in its
``.env``, talking to the local Discord server (``AIZUCHI_DISCORD_API_URL`` / ``AIZUCHI_DISCORD_GATEWAY_URL``,
the settings for a Discord-compatible server).

The fleet comes up and answers; a refused token, a missing intent or refused slash commands end it with one
line and a failing status; once running it never runs deaf (the arbiter's bot turned away, or every persona
bot, ends it; an event discord.py chokes on only costs a reconnect, but a server on which every new session
fails ends it after a few tries); SIGTERM stops it without an error; a persona that may not post warns once and
asks no model; what was said while it was down is caught up.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.support.eventually import eventually
from tests.support.fake_discord import FakeDiscord, Overwrite, Perm
from tests.support.llm_server import FakeLLMServer
from tests.support.owner import ADMIN, LISTENING, enabled, follows, write_dotenv
from tests.support.process import Aizuchi
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeBot, FakeChannel, FakeMessage


async def answer_from(world: World, persona: str, after: FakeMessage) -> FakeMessage:
    account = world.personas[persona]

    def answers() -> list[FakeMessage]:
        return [m for m in world.lounge.messages if m.author is account and m.id > after.id]

    return (await eventually(answers, what=f"{persona}'s answer after message {after.id}"))[0]


def secrets_of(world: World) -> list[str]:
    return [ADMIN, world.arbiter.token, *(bot.token for bot in world.personas.values())]


def assert_quiet_and_secret(fleet: Aizuchi, world: World) -> None:
    """No traceback, nothing at ERROR, no token anywhere in what it printed."""
    output = fleet.stdout + fleet.stderr
    assert "Traceback" not in output
    assert not fleet.matching(r" ERROR "), fleet.stderr
    assert not [token for token in secrets_of(world) if token in output]


async def test_the_fleet_runs_on_discord_with_every_token_only_in_dotenv(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world)
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        for persona in ROOM_PERSONAS:
            await follows(fleet, persona, world.lounge)
        question = await fake.human_says(world.lounge, world.member, "Theo, what are you working on?")
        answer = await answer_from(world, "theo", question)
        status = await fleet.stop()

    assert status == 0
    assert answer.content
    assert not fake.connected(world.arbiter)
    assert not any(fake.connected(bot) for bot in world.personas.values())
    assert_quiet_and_secret(fleet, world)


@pytest.mark.parametrize(
    "mistake",
    ["refused-token", "message-content-intent-off", "guild-without-the-bot", "no-persona-token"],
)
async def test_a_discord_setup_mistake_is_one_line_and_a_failing_status(
    tmp_path: Path, fake: FakeDiscord, world: World, mistake: str
) -> None:
    other = fake.add_guild("another server")  # the arbiter's bot was never invited there
    strict = fake.add_bot("strict", message_content=False)
    overrides: dict[str, Any] = {
        "refused-token": {"ARBITER_DISCORD_TOKEN": "not-the-token"},
        "message-content-intent-off": {"ARBITER_DISCORD_TOKEN": strict.token},
        "guild-without-the-bot": {"ARBITER_DISCORD_GUILDS": json.dumps([world.guild.id, other.id])},
        "no-persona-token": {f"{pid.upper()}_DISCORD_TOKEN": "" for pid in ROOM_PERSONAS},
    }[mistake]
    says = {
        "refused-token": "aizuchi: Discord refused the arbiter's bot's token (ARBITER_DISCORD_TOKEN): copy it again"
        " from the Developer Portal (Bot > Reset Token) into .env",
        "message-content-intent-off": "aizuchi: Discord refused the arbiter's bot: switch on the Message Content"
        " intent in the Developer Portal (Bot > Privileged Gateway Intents) for the application of"
        " ARBITER_DISCORD_TOKEN",
        "guild-without-the-bot": f"aizuchi: Discord refused the slash commands in server {other.id} (403 Missing"
        " Access): the arbiter's bot is not in that server, or was invited without the applications.commands"
        " scope; check ARBITER_DISCORD_GUILDS, and run aizuchi discord check for its invite URL",
        "no-persona-token": "aizuchi: no persona has a Discord token: set RIN_DISCORD_TOKEN, THEO_DISCORD_TOKEN,"
        " JUNO_DISCORD_TOKEN in .env",
    }[mistake]
    write_dotenv(tmp_path, fake, world, **overrides)

    async with Aizuchi.start(tmp_path, "run") as fleet:
        status = await fleet.ended()

    assert status == 1
    assert fleet.lines["stderr"][-1] == says
    assert "Traceback" not in fleet.stderr


async def test_the_arbiter_bot_turned_away_while_running_ends_the_fleet(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world)
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        await fake.drop(world.arbiter, code=4004)  # the token was reset in the Developer Portal
        status = await fleet.ended()

    assert status == 1
    assert fleet.lines["stderr"][-1] == (
        "aizuchi: Discord closed the arbiter's bot's connection for good (code 4004: the token was refused)"
    )
    assert not any(fake.connected(bot) for bot in world.personas.values())


async def test_the_fleet_goes_on_without_one_persona_and_ends_when_every_persona_has_stopped(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world)
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        for persona in ROOM_PERSONAS:
            await follows(fleet, persona, world.lounge)
        await fake.drop(world.personas["rin"], code=4004)
        await fleet.wait_for(r"persona rin stopped: Discord closed rin's bot's connection for good", "stderr")
        question = await fake.human_says(world.lounge, world.member, "Juno, still there?")
        await answer_from(world, "juno", question)
        assert fleet.process.returncode is None
        for persona in ("theo", "juno"):
            await fake.drop(world.personas[persona], code=4004)
        status = await fleet.ended()

    assert status == 1
    last = fleet.lines["stderr"][-1]
    assert last.startswith("aizuchi: every persona bot has stopped (Discord closed rin's bot's connection for good")
    assert not fake.connected(world.arbiter)


async def test_a_network_drop_or_an_event_discord_py_chokes_on_costs_a_reconnect_not_the_ears(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world, AIZUCHI_PERSONAS="rin")
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        await follows(fleet, "rin", world.lounge)
        await fake.drop(world.arbiter)  # the network fails under the arbiter's bot: discord.py resumes by itself
        await fake.wait_until(lambda: fake.connected(world.arbiter), what="the arbiter's bot back")
        # A channel payload without a field discord.py's parser takes for granted.
        payload = world.lounge.payload()
        del payload["position"]
        await fake.send_raw(world.personas["rin"], "CHANNEL_UPDATE", payload)
        await fleet.wait_for(r"rin's bot lost Discord \(KeyError: 'position'\); connecting again", "stderr")
        await fake.wait_until(lambda: fake.connected(world.personas["rin"]), what="rin back")
        question = await fake.human_says(world.lounge, world.member, "Rin, are you back?")
        await answer_from(world, "rin", question)
        status = await fleet.stop()

    assert status == 0
    assert_quiet_and_secret(fleet, world)


async def test_a_persona_that_may_not_post_warns_once_and_asks_no_model(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    rin: FakeBot = world.personas["rin"]
    quiet = fake.add_channel(world.guild, "quiet", overwrites=[Overwrite(target=rin, deny=Perm.SEND_MESSAGES)])
    async with FakeLLMServer() as llm:  # no reply scripted: a request would be a failure
        (tmp_path / "profiles.toml").write_text(f'[profiles.openai]\nbase_url = "{llm.openai_url}"\n')
        write_dotenv(
            tmp_path, fake, world, AIZUCHI_PERSONAS="rin", AIZUCHI_PROFILE="openai", OPENAI_API_KEY="sk-never-used"
        )
        async with Aizuchi.start(tmp_path, "run") as fleet:
            await enabled(fleet, fake, world, quiet)
            await follows(fleet, "rin", quiet)
            for text in ("Rin?", "Rin, are you there?", "Rin, say something!"):
                await fake.human_says(quiet, world.member, text)
            await asyncio.sleep(2.0)  # a span for her to answer each: she must stay silent, and say why only once
            status = await fleet.stop()

    assert status == 0
    assert len(fleet.matching(f"cannot post in channel {quiet.id}")) == 1
    assert llm.requests == []
    assert [m for m in quiet.messages if m.author is rin] == []


async def admin_history(url: str, channel: FakeChannel) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession(headers={"Authorization": f"Bearer {ADMIN}"}) as session,
        session.get(f"{url}/v1/channels/{channel.id}/history?after=0&limit=200") as response,
    ):
        assert response.status == 200, await response.text()
        return list((await response.json())["messages"])


async def test_what_was_said_while_the_fleet_was_down_is_in_the_history_once_in_order(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world, AIZUCHI_PERSONAS="rin")
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        assert await fleet.stop() == 0

    missed = [await fake.human_says(world.lounge, world.member, f"while you were away {n}") for n in range(3)]

    for _ in range(2):  # and a second start records nothing twice
        async with Aizuchi.start(tmp_path, "run") as fleet:
            url = (await fleet.wait_for(LISTENING)).group(1)
            await fake.wait_connected(world.arbiter)

            async def recorded(url: str = url) -> list[dict[str, Any]]:
                history = await admin_history(url, world.lounge)
                return [m for m in history if m["text"].startswith("while you were away")]

            async def all_of_them(recorded: Callable[[], Awaitable[list[Any]]] = recorded) -> bool:
                return len(await recorded()) >= len(missed)

            await eventually(all_of_them, what="the missed messages recorded")
            caught_up = await recorded()
            assert await fleet.stop() == 0

        assert [m["platform_message_id"] for m in caught_up] == [str(m.id) for m in missed]


async def test_a_server_on_which_no_session_of_the_arbiter_bot_works_ends_the_fleet_with_one_line(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    """As on Spacebar with discord.py 2.7.1: every READY lacks ``shard``, which the sharded client needs. The fleet
    does not reconnect forever, deaf: after its tries (each after discord.py's 5 s and the back-off) it ends."""
    fake.ready_without(world.arbiter, "shard")
    write_dotenv(
        tmp_path,
        fake,
        world,
        AIZUCHI_PERSONAS="rin",
        AIZUCHI_DISCORD_RECONNECT_TRIES=2,
        AIZUCHI_DISCORD_RECONNECT_WITHIN_S=20,
        AIZUCHI_DISCORD_RECONNECT_BACKOFF_S=0.1,
    )
    async with Aizuchi.start(tmp_path, "run") as fleet:
        status = await fleet.ended(within=40.0)

    assert status == 1
    assert re.fullmatch(
        r"aizuchi: the arbiter's bot could not get a working session from the server at 127\.0\.0\.1:\d+ after 2"
        r" tries in \d+\.\d s: every READY lacked 'shard' \(KeyError\) - is this a Discord-compatible server"
        r" discord\.py [\d.]+ supports\?",
        fleet.lines["stderr"][-1],
    ), fleet.stderr
    assert world.arbiter.identified == 2
    assert len(fleet.matching(r"the arbiter's bot lost Discord \(KeyError: 'shard'\); connecting again")) == 1
    assert "Traceback" not in fleet.stderr
    assert not fake.connected(world.arbiter)
    assert not fake.connected(world.personas["rin"])


async def test_a_bot_missing_from_the_server_is_a_warning_at_start_with_its_invite_and_the_fleet_runs_without_it(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    rin = world.personas["rin"]
    fake.leave(rin, world.guild)  # kicked, or never invited
    write_dotenv(tmp_path, fake, world)
    async with Aizuchi.start(tmp_path, "run") as fleet:
        warning = await fleet.wait_for(r"WARNING .* Discord setup: rin's bot is not in server .*", "stderr")
        await enabled(fleet, fake, world)
        for persona in ("theo", "juno"):
            await follows(fleet, persona, world.lounge)
        question = await fake.human_says(world.lounge, world.member, "Juno, still there?")
        await answer_from(world, "juno", question)
        status = await fleet.stop()

    assert status == 0
    assert warning.group().endswith(
        f"Discord setup: rin's bot is not in server 'tea house' ({world.guild.id}): invite it with "
        f"https://discord.com/oauth2/authorize?client_id={rin.application_id}&scope=bot&permissions=274877975616"
        f"&guild_id={world.guild.id}"
    )
    assert len(fleet.matching("Discord setup: ")) == 1  # nothing else is missing
    # Said before any bot logged in on the gateway.
    first_session = next(i for i, line in enumerate(fleet.lines["stderr"]) if "is on Discord as" in line)
    assert fleet.lines["stderr"].index(warning.string) < first_session
    assert_quiet_and_secret(fleet, world)
