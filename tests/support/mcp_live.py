"""An arbiter in the test's process on a real socket, for MCP clients (the SDKs' own, or other processes): two
agents, ``aya`` and ``natsu``, and the channel ``lobby`` made."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from arbiter.server import Arbiter, open_arbiter, serving
from tests.conftest import make_settings
from tests.support.arbiters import Api
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("AGENTS", "CHANNEL", "INITIALIZE", "Live", "live_arbiter")

AGENTS = {"aya": "aya-token-0123456789abcdef", "natsu": "natsu-token-0123456789abcdef"}
CHANNEL = "lobby"
# The 2025 protocol's handshake, as a client sends it.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
}


@dataclass(frozen=True, slots=True)
class Live:
    arbiter: Arbiter
    url: str
    api: Api
    http: aiohttp.ClientSession


@contextlib.asynccontextmanager
async def live_arbiter(database_url: str | None = None, **settings: Any) -> AsyncIterator[Live]:
    """``settings`` add to the tests' (``make_settings``); the clock is a fake one. ``database_url`` None: on the
    in-memory twin of the storage."""
    opened = open_arbiter(
        make_settings(database_url, agent_tokens=AGENTS, **settings), clock=FakeClock(), in_memory=database_url is None
    )
    async with (
        opened as arbiter,
        serving(arbiter.app, "127.0.0.1", 0) as url,
        aiohttp.ClientSession() as http,
    ):
        api = Api(http, AGENTS, base=url)
        await api.create_channel(CHANNEL)
        yield Live(arbiter, url, api, http)
