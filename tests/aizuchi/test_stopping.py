"""Stopping ``aizuchi run`` on Discord at any moment, as a supervisor or a person at the terminal does: SIGTERM
lands while the personas claim, write, speak or post, and the fleet always ends quietly (status 0, nothing at ERROR,
no traceback) and leaves no claim held in the arbiter's database.

The personas' model is the offline stand-in with a pause per call (a provider profile's ``latency_s``), so that a
signal sent a random moment after a question finds them in every part of a turn.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
import time
from typing import TYPE_CHECKING

import pytest

from tests.support.fake_discord import FakeDiscord
from tests.support.owner import enabled, follows, write_dotenv
from tests.support.process import Aizuchi
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from tests.discord.conftest import World


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """The local Discord on the real clock, letting each bot post once a second in a channel: a persona's next post
    waits, so that a signal often finds one on its way."""
    async with FakeDiscord(clock=time.time, rate_limits={"messages": (1, 1.0)}) as server:
        yield server


QUESTIONS = ("Rin, what are you reading?", "Theo, how is the project?", "Juno, any plans?", "What do you all think?")


def held_claims(database: Path) -> list[tuple[str, str, float]]:
    """(persona, tier, seconds left) of every claim still holding its cost."""
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT persona_id, tier, refund_at FROM spends WHERE state = 'held'").fetchall()
    now = time.time()
    return [(persona, tier, refund_at - now) for persona, tier, refund_at in rows if refund_at > now]


async def test_a_signal_at_any_moment_of_a_conversation_ends_quietly_and_leaves_no_claim_held(
    tmp_path: Path, fake: FakeDiscord, world: World
) -> None:
    rng = random.Random(5)
    (tmp_path / "profiles.toml").write_text('[profiles.thinking]\nprovider = "scripted"\nlatency_s = 0.8\n')
    write_dotenv(tmp_path, fake, world, AIZUCHI_PROFILE="thinking")
    database = tmp_path / "aizuchi.db"
    moments = [rng.uniform(0.0, 2.5) for _ in range(5)]
    for index, moment in enumerate(moments):
        async with Aizuchi.start(tmp_path, "run") as fleet:
            if index == 0:
                await enabled(fleet, fake, world)
            else:
                await fake.wait_connected(world.arbiter)
            for persona in ROOM_PERSONAS:
                await follows(fleet, persona, world.lounge)
            await fake.human_says(world.lounge, world.member, rng.choice(QUESTIONS))
            await fake.human_says(world.lounge, world.mod, "Go on, I'm listening.")
            await asyncio.sleep(moment)
            status = await fleet.stop()

        output = fleet.stdout + "\n" + fleet.stderr
        assert status == 0, fleet.stderr
        assert "Traceback" not in output, output
        assert not fleet.matching(r" ERROR "), fleet.stderr
        assert not fleet.matching(r"could not release claim \S+: $"), fleet.stderr
        assert held_claims(database) == [], f"signalled {moment:.2f} s after a question:\n{fleet.stderr}"
