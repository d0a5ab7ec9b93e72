"""``aizuchi run`` on the local Discord as a server owner sets it up: the owner's ``.env`` in a directory of its own,
and the first steps on Discord (a moderator enables a channel, the personas come). For the tests that run it as a
process (``tests.support.process.Aizuchi``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from tests.discord.conftest import CREW_ROLE
from tests.support.process import dotenv
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from pathlib import Path

    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeChannel, FakeDiscord
    from tests.support.process import Aizuchi

__all__ = ("ADMIN", "LISTENING", "enabled", "follows", "write_dotenv")

ADMIN = "admin-token-for-the-owner-0123456789"
LISTENING = r"arbiter listening on (http://127\.0\.0\.1:\d+);"


def write_dotenv(workdir: Path, fake: FakeDiscord, world: World, **overrides: object) -> None:
    """The owner's .env: the Discord settings of docs/discord.md, every token in it, and where Discord is."""
    variables: dict[str, object] = {
        "ARBITER_DATABASE_URL": f"sqlite:///{workdir / 'aizuchi.db'}",
        "ARBITER_PORT": 0,
        "ARBITER_ADMIN_TOKEN": ADMIN,
        "ARBITER_DISCORD_TOKEN": world.arbiter.token,
        "ARBITER_DISCORD_GUILDS": json.dumps([world.guild.id]),
        "ARBITER_MODERATOR_ROLE": CREW_ROLE,
        **{f"{pid.upper()}_DISCORD_TOKEN": bot.token for pid, bot in world.personas.items()},
        "AIZUCHI_PERSONAS": ",".join(ROOM_PERSONAS),
        "AIZUCHI_DISCORD_API_URL": fake.api_base,
        "AIZUCHI_DISCORD_GATEWAY_URL": fake.gateway_url,
        # The local Discord sends its one server with the READY: each bot need not wait discord.py's 2 s for more.
        "AIZUCHI_DISCORD_READY_S": 0.25,
        **overrides,
    }
    (workdir / ".env").write_text(dotenv({name: value for name, value in variables.items() if value is not None}))


async def enabled(fleet: Aizuchi, fake: FakeDiscord, world: World, channel: FakeChannel | None = None) -> None:
    """The fleet is up, a moderator has enabled the channel, and every running persona follows it."""
    channel = channel or world.lounge
    await fleet.wait_for(LISTENING)
    await fake.wait_until(lambda: fake.registered(world.arbiter, world.guild), what="slash commands")
    await fake.wait_connected(world.arbiter)
    answer = await fake.invoke(world.mod, channel, "aizuchi enable")
    assert answer.content == "aizuchi is on in this channel."
    # The personas come to a newly enabled channel when someone speaks there.
    await fake.human_says(channel, world.member, "hello everyone")


async def follows(fleet: Aizuchi, persona_id: str, channel: FakeChannel) -> None:
    await fleet.wait_for(f"persona={persona_id} takes part in channel {channel.id}", "stderr")
