from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import pytest

from bots.llm import ChatProvider, create_provider
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, FakeLLMServer, fake_profile

MakeProvider = Callable[..., ChatProvider]


@pytest.fixture
async def llm_server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server
        assert server.unscripted == 0, "a request arrived that the test did not script a reply for"
        # The real API would have refused these: a test must not pass on them (see tests.support.llm_server).
        assert server.refusals == [], f"the real API would refuse: {server.refusals}"


@pytest.fixture
async def make_provider(llm_server: FakeLLMServer) -> AsyncIterator[MakeProvider]:
    """make_provider("openai", timeout_s=0.3, ...) -> a provider on the fake server, closed at the test's end."""
    providers: list[ChatProvider] = []

    def make(api: Literal["anthropic", "openai"], **overrides: Any) -> ChatProvider:
        provider = create_provider(fake_profile(llm_server, api, **overrides), {FAKE_KEY_ENV: FAKE_KEY})
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        await provider.aclose()
