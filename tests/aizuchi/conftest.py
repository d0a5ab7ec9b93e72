"""The local Discord the fleet's process talks to, for the tests that run ``aizuchi`` on it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

from tests.discord.conftest import build_world
from tests.support.fake_discord import FakeDiscord
from tests.support.room import ROOM_PERSONAS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.discord.conftest import World


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """The local Discord on the real clock, as the fleet's process is: its messages' times are real times."""
    async with FakeDiscord(clock=time.time) as server:
        yield server


@pytest.fixture
def world(fake: FakeDiscord) -> World:
    """The room's personas (rin, theo, juno) and the arbiter as bots of one server, beside its people."""
    return build_world(fake, ROOM_PERSONAS)
