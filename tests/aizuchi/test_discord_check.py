"""``aizuchi discord check`` as a server owner runs it: a process in a directory of its own, configured by its
``.env`` (tests.support.owner), against the local Discord. It names each bot, says each problem on a line with what
to do (an invite URL with exactly the permissions a missing bot needs), and ends with status 1 if there is any."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import pytest

from arbiter.server import open_arbiter
from arbiter.settings import ArbiterSettings
from tests.support.fake_discord import FakeDiscord, Overwrite, Perm
from tests.support.owner import write_dotenv
from tests.support.process import Aizuchi
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from pathlib import Path

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeChannel

# What the invite URLs must grant, added up here from Discord's permission bits (not from the code under test).
PERSONA_INVITE = (
    Perm.VIEW_CHANNEL
    | Perm.SEND_MESSAGES
    | Perm.SEND_MESSAGES_IN_THREADS
    | Perm.ADD_REACTIONS
    | Perm.READ_MESSAGE_HISTORY
)
ARBITER_INVITE = Perm.VIEW_CHANNEL | Perm.READ_MESSAGE_HISTORY


async def check(workdir: Path) -> tuple[int, list[str], list[str]]:
    """``aizuchi discord check`` run to its end: its status, its stdout and its stderr lines."""
    async with Aizuchi.start(workdir, "discord", "check") as process:
        status = await process.ended()
    return status, process.lines["stdout"], process.lines["stderr"]


async def enable(workdir: Path, *channels: FakeChannel) -> None:
    """A moderator has enabled the fleet in ``channels`` (as /aizuchi enable leaves it in the arbiter's database)."""
    settings = ArbiterSettings(_env_file=None, database_url=f"sqlite:///{workdir / 'aizuchi.db'}")
    async with open_arbiter(settings) as arbiter:
        for channel in channels:
            await arbiter.service.ensure_channel(str(channel.id), {"enabled": True})


def invite_of(line: str) -> dict[str, list[str]]:
    found = re.search(r"https://discord\.com/oauth2/authorize\?\S+", line)
    assert found is not None, line
    return parse_qs(urlsplit(found.group()).query)


@pytest.mark.parametrize("channels", ["none enabled yet", "lounge enabled"])
async def test_a_setup_that_is_right_is_one_summary_line_and_status_0(
    tmp_path: Path, fake: FakeDiscord, world: World, channels: str
) -> None:
    if channels == "lounge enabled":
        await enable(tmp_path, world.lounge)
    write_dotenv(tmp_path, fake, world)

    status, out, err = await check(tmp_path)

    assert (status, err) == (0, [])
    checked = "1 enabled channel" if channels == "lounge enabled" else "0 enabled channels"
    assert out[-1] == f"the Discord setup is ready: 4 bots in 1 server, {checked} checked"
    assert out[0] == (
        f"the arbiter's bot (ARBITER_DISCORD_TOKEN): arbiter (id {world.arbiter.id}), application 'arbiter' "
        f"(id {world.arbiter.application_id}), in 1 server, Message Content intent on"
    )
    for persona_id in ROOM_PERSONAS:
        bot = world.personas[persona_id]
        assert (
            f"{persona_id}'s bot ({persona_id.upper()}_DISCORD_TOKEN): {bot.name} (id {bot.id}), application "
            f"'{bot.name}' (id {bot.application_id}), in 1 server"
        ) in out
    assert not fake.unknown_requests
    # Nothing is written to the arbiter's database: it is read, read-only (and not made when there is none).
    assert (tmp_path / "aizuchi.db").exists() == (channels == "lounge enabled")


async def test_a_refused_token_is_named_by_its_variable_and_the_others_are_still_checked(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    write_dotenv(tmp_path, fake, world, THEO_DISCORD_TOKEN="not-theos-token")

    status, out, err = await check(tmp_path)

    assert status == 1
    assert err == [
        "problem: Discord refused theo's bot's token (THEO_DISCORD_TOKEN): copy it again from the Developer Portal "
        "(Bot > Reset Token) into .env"
    ]
    assert out[-1] == "1 problem(s) with the Discord setup (3 bots in 1 server, 0 enabled channels checked)"
    assert any(line.startswith("rin's bot (RIN_DISCORD_TOKEN): Rin") for line in out)
    assert "not-theos-token" not in "\n".join(out + err)


async def test_the_arbiters_message_content_intent_off_is_a_problem(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    strict = fake.add_bot("strict", message_content=False)
    write_dotenv(tmp_path, fake, world, ARBITER_DISCORD_TOKEN=strict.token)

    status, _, err = await check(tmp_path)

    assert status == 1
    assert err == [
        f"problem: the Message Content intent is off for the arbiter's application ('strict', id "
        f"{strict.application_id}): switch it on in the Developer Portal (Bot > Privileged Gateway Intents) for the "
        "application of ARBITER_DISCORD_TOKEN"
    ]


async def test_an_unverified_apps_message_content_switch_counts_as_on(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    """A self-hosted (unverified) app's switch shows as GATEWAY_MESSAGE_CONTENT_LIMITED; a verified one's as
    GATEWAY_MESSAGE_CONTENT. Either is on."""
    verified = fake.add_bot("verified", verified=True)
    write_dotenv(tmp_path, fake, world, ARBITER_DISCORD_TOKEN=verified.token)

    status, out, err = await check(tmp_path)

    assert (status, err) == (0, [])
    assert out[0].endswith("Message Content intent on")


async def test_a_persona_bot_not_in_the_server_gets_its_invite_url_with_exactly_what_it_needs(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    rin = world.personas["rin"]
    fake.leave(rin, world.guild)
    write_dotenv(tmp_path, fake, world)

    status, out, err = await check(tmp_path)

    assert status == 1
    [line] = err
    assert line.startswith(f"problem: rin's bot is not in server 'tea house' ({world.guild.id}): invite it with ")
    assert invite_of(line) == {
        "client_id": [str(rin.application_id)],
        "scope": ["bot"],
        "permissions": [str(PERSONA_INVITE)],
        "guild_id": [str(world.guild.id)],
    }
    assert PERSONA_INVITE == 274877975616
    assert out[-1] == "1 problem(s) with the Discord setup (4 bots in 1 server, 0 enabled channels checked)"


async def test_the_arbiter_missing_from_a_configured_server_gets_its_invite_url_with_the_commands_scope(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    other = fake.add_guild("another server")  # nobody was invited there
    fake.join(world.personas["rin"], other)
    write_dotenv(tmp_path, fake, world, ARBITER_DISCORD_GUILDS=json.dumps([world.guild.id, other.id]))

    status, _, err = await check(tmp_path)

    assert status == 1
    arbiter_line = next(line for line in err if line.startswith("problem: the arbiter's bot"))
    assert arbiter_line.startswith(
        f"problem: the arbiter's bot is not in server 'another server' ({other.id}) (ARBITER_DISCORD_GUILDS): invite "
        "it with "
    )
    assert invite_of(arbiter_line) == {
        "client_id": [str(world.arbiter.application_id)],
        "scope": ["bot applications.commands"],
        "permissions": [str(ARBITER_INVITE)],
        "guild_id": [str(other.id)],
    }
    assert ARBITER_INVITE == 66560
    # The other personas are missing there too; rin, who is there, is not named.
    assert sorted(line.split(" is not in ")[0] for line in err) == [
        "problem: juno's bot",
        "problem: the arbiter's bot",
        "problem: theo's bot",
    ]


async def test_a_persona_lacking_send_messages_in_an_enabled_channel_is_a_problem_naming_the_channel(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    theo = world.personas["theo"]
    await fake.set_overwrites(world.lounge, [Overwrite(target=theo, deny=Perm.SEND_MESSAGES)])
    await fake.set_overwrites(world.backroom, [Overwrite(target=theo, deny=Perm.SEND_MESSAGES)])  # never enabled
    await enable(tmp_path, world.lounge)
    write_dotenv(tmp_path, fake, world)

    status, out, err = await check(tmp_path)

    assert status == 1
    assert err == [
        f"problem: theo's bot lacks Send Messages in #lounge ({world.lounge.id}) of server 'tea house' "
        f"({world.guild.id}): allow it for its role in #lounge (Edit Channel > Permissions)"
    ]
    assert out[-1] == "1 problem(s) with the Discord setup (4 bots in 1 server, 1 enabled channel checked)"


async def test_a_persona_whose_roles_lack_a_permission_everywhere_is_a_problem_before_any_channel_is_enabled(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    juno = world.personas["juno"]
    managed = next(role for role in world.guild.roles.values() if role.managed_by is juno)
    managed.permissions &= ~Perm.ADD_REACTIONS
    world.guild.everyone.permissions &= ~Perm.ADD_REACTIONS
    write_dotenv(tmp_path, fake, world)

    status, _, err = await check(tmp_path)

    assert status == 1
    assert err == [
        f"problem: juno's bot lacks Add Reactions in server 'tea house' ({world.guild.id}) (its roles grant it nowhere,"
        " and no channel is enabled there yet to check): give it to its role 'Juno' (Server Settings > Roles)"
    ]


async def test_the_check_reads_the_enabled_channels_while_the_fleet_runs(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    """A running arbiter holds its SQLite file's lock: the check reads the database read-only beside it."""
    from tests.support.owner import enabled

    write_dotenv(tmp_path, fake, world)
    async with Aizuchi.start(tmp_path, "run") as fleet:
        await enabled(fleet, fake, world)
        await fake.set_overwrites(world.lounge, [Overwrite(target=world.arbiter, deny=Perm.READ_MESSAGE_HISTORY)])

        status, out, err = await check(tmp_path)
        assert await fleet.stop() == 0

    assert status == 1
    assert err == [
        f"problem: the arbiter's bot lacks Read Message History in #lounge ({world.lounge.id}) of server 'tea house' "
        f"({world.guild.id}): allow it for its role in #lounge (Edit Channel > Permissions)"
    ]
    assert out[-1].endswith("(4 bots in 1 server, 1 enabled channel checked)")


async def test_an_enabled_thread_takes_send_messages_in_threads_and_a_persona_kept_out_of_a_channel_is_a_note(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    theo, juno = world.personas["theo"], world.personas["juno"]
    thread = await fake.add_thread(world.lounge, "plans", owner=world.member)
    await fake.set_overwrites(world.lounge, [Overwrite(target=theo, deny=Perm.SEND_MESSAGES_IN_THREADS)])
    await fake.set_overwrites(world.backroom, [Overwrite(target=juno, deny=Perm.VIEW_CHANNEL)])
    gone = fake.add_channel(world.guild, "gone")
    await enable(tmp_path, thread, world.backroom, gone)
    del world.guild.channels[gone.id]  # deleted on Discord since
    write_dotenv(tmp_path, fake, world)

    status, out, err = await check(tmp_path)

    assert status == 1
    # Posting in the thread takes Send Messages in Threads, which theo lacks; Send Messages, which he has, is not
    # what a thread needs.
    assert err == [
        f"problem: theo's bot lacks Send Messages in Threads in thread 'plans' ({thread.id}) of #lounge of server "
        f"'tea house' ({world.guild.id}): allow it for its role in #lounge (Edit Channel > Permissions)"
    ]
    assert (
        f"note: juno's bot does not see #backroom ({world.backroom.id}) of server 'tea house' ({world.guild.id}):"
        " it takes no part there" in out
    )
    assert f"note: enabled channel {gone.id} is not on Discord (404 Unknown Channel): deleted?" in out
    assert out[-1] == "1 problem(s) with the Discord setup (4 bots in 1 server, 2 enabled channels checked)"


async def test_one_application_mode_asks_manage_webhooks_of_the_arbiter_and_no_persona_bot(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    await enable(tmp_path, world.lounge)
    # Only the arbiter's bot: no persona token, and its roles lack Manage Webhooks (the fake's default bot role).
    write_dotenv(
        tmp_path,
        fake,
        world,
        AIZUCHI_WEBHOOKS="true",
        **{f"{pid.upper()}_DISCORD_TOKEN": None for pid in world.personas},
    )

    status, out, err = await check(tmp_path)

    assert status == 1
    assert err == [
        f"problem: the arbiter's bot lacks Manage Webhooks in #lounge ({world.lounge.id}) of server 'tea house' "
        f"({world.guild.id}): allow it for its role in #lounge (Edit Channel > Permissions)"
    ]
    assert [line for line in out if "webhooks" in line] == [
        f"{pid} posts through the channels' webhooks of the arbiter's bot (one-application mode)"
        for pid in ROOM_PERSONAS
    ]
