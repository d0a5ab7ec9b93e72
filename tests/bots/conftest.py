from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.support.fleet import live_arbiter
from tests.support.llm_server import FakeLLMServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from tests.support.fleet import Live

CHANNEL = "lounge"


@pytest.fixture
async def live() -> AsyncIterator[Live]:
    """The arbiter served on a real localhost port (on the in-memory twin), with a fast channel ``CHANNEL``; runtimes
    closed at the end."""
    async with live_arbiter() as served:
        await served.channel(CHANNEL)
        yield served


@pytest.fixture
async def fake_llm() -> AsyncIterator[FakeLLMServer]:
    """A server speaking the Anthropic and OpenAI wire formats; every request must have been scripted."""
    async with FakeLLMServer() as server:
        yield server
        assert server.unscripted == 0, "a request arrived that the test did not script a reply for"
        # The runtime turns a provider's error into a skipped turn, so a refused request would pass unnoticed.
        assert server.refusals == [], f"the real API would refuse: {server.refusals}"
