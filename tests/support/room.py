"""The local room served on a real localhost port, with persona runtimes in process, for the room's tests.

The arbiter runs in process (SQLite, the real clock) with the room added; each persona is a real
``PersonaRuntime`` on the scripted provider (its own sample lines, a small latency), reaching the arbiter over
HTTP with its own token, and posting through the room platform (the arbiter already has the message, so a post
only hands back an id). When the page opens a room, every persona joins its channel, and (unless the test keeps
the defaults) the channel's recovery is made short so the gauge visibly falls and recovers within a test.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp.test_utils import TestServer

from arbiter.room import add_room
from arbiter.server import open_arbiter
from arbiter.settings import ArbiterSettings
from bots.arbiter_client import ArbiterClient
from bots.image_fetch import ImageFetcher
from bots.llm.scripted import ScriptedProvider
from bots.persona import load_personas
from bots.platforms.room import RoomPlatform
from bots.runtime import PersonaRuntime, RuntimeConfig
from tests.support.eventually import PATIENCE_S, eventually

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from arbiter.server import Arbiter

__all__ = ("ROOM_PERSONAS", "RoomServer", "room_server")

PERSONAS_DIR = Path(__file__).resolve().parents[2] / "personas"
ROOM_PERSONAS = ("rin", "theo", "juno")  # the English personas shipped in personas/
QUICK = RuntimeConfig(base_delay_s=0.3, backoff_s=0.3, max_backoff_s=2.0, reconnect_s=0.1)


@dataclass
class RoomServer:
    arbiter: Arbiter
    server: TestServer
    runtimes: list[PersonaRuntime] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)  # channels the room opened, in order

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"

    async def settled(self, channel_id: str, *, within: float = PATIENCE_S) -> None:
        """Wait until no persona has anything under way or scheduled in the room and none holds a claim: from then
        on nobody speaks until someone else does. (The personas may talk among themselves up to the idle cap.)"""

        async def quiet() -> bool:
            workers = [runtime.join(channel_id) for runtime in self.runtimes]
            status = await self.arbiter.service.status(channel_id)
            return all(worker.idle for worker in workers) and not status.claims_held

        await eventually(quiet, within=within, what=f"the personas in {channel_id} to settle", every=0.05)


@contextlib.asynccontextmanager
async def room_server(
    database_url: str | None = None,
    *,
    personas: Sequence[str] = ROOM_PERSONAS,
    hands: Sequence[str] = (),
    recovery_s: float | None = 1.0,
    latency_s: float = 0.05,
    config: RuntimeConfig = QUICK,
    notice: str | None = None,
) -> AsyncIterator[RoomServer]:
    """Serve the room with ``personas`` (ids of files in personas/) taking part in every room opened. ``hands`` are
    persona ids with a token but no runtime: the test speaks for them through the service. ``recovery_s`` of None
    keeps the default settings; ``latency_s`` is how long the scripted provider takes to answer; ``notice`` is what
    the page says about the room (as ``make run`` says the personas are offline stand-ins). ``database_url`` None: on
    the in-memory twin of the storage."""
    tokens = {persona_id: f"{persona_id}-room-token-0123456789abcdef" for persona_id in (*personas, *hands)}
    # Only these personas have tokens: the room lists every persona the arbiter knows.
    database = {} if database_url is None else {"database_url": database_url}
    settings = ArbiterSettings(persona_tokens={}, _env_file=None, **database)
    async with (
        open_arbiter(settings, extra_personas=tokens, in_memory=database_url is None) as arbiter,
        aiohttp.ClientSession() as session,
    ):
        runtimes: list[PersonaRuntime] = []
        opened: list[str] = []

        async def on_open(channel_id: str) -> None:
            if recovery_s is not None:
                tiers = {tier: {"recovery_s": recovery_s} for tier in ("aizuchi", "remark", "long")}
                await arbiter.service.update_settings(channel_id, {"tiers": tiers})
            workers = [runtime.join(channel_id) for runtime in runtimes]
            await asyncio.wait_for(asyncio.gather(*(worker.ready() for worker in workers)), 10.0)
            opened.append(channel_id)

        add_room(arbiter.app, on_open=on_open, notice=notice)
        server = TestServer(arbiter.app, host="127.0.0.1")
        # A short shutdown timeout: the page's open event streams must not hold the test's end for a minute.
        await server.start_server(shutdown_timeout=0.2)
        room = RoomServer(arbiter, server, runtimes, opened)
        try:
            images = ImageFetcher(session)  # as the fleet has: the room's pictures fetched and sent inline
            for index, persona in enumerate(load_personas(PERSONAS_DIR, list(personas)) if personas else []):
                provider = ScriptedProvider.for_persona(persona, seed=index, latency_s=latency_s)
                runtime = PersonaRuntime(
                    persona,
                    provider,
                    ArbiterClient(session, room.url, tokens[persona.id], timeout_s=5.0),
                    RoomPlatform(persona.id),
                    config=config,
                    rng=random.Random(index),
                    images=images,
                )
                await runtime.start()
                runtimes.append(runtime)
            yield room
        finally:
            for runtime in runtimes:
                await runtime.close()
                await runtime.provider.aclose()
            arbiter.hub.close_all()
            await server.close()
