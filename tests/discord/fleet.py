"""The whole fleet on the fake Discord, in process: the arbiter served on a localhost port (tests.support.fleet's
``live_arbiter``) with its own bot, and one real ``PersonaClient`` per persona, each with its runtime posting
through ``DiscordPlatform``. Every piece is the production one; only Discord is local.

Time is real but short (tests.support.fleet.FAST waits, CHANNEL_DEFAULTS refunds): the personas wait on the
event loop's clock, so a frozen arbiter clock would stall them. Tests assert what must hold whatever the order
of the personas' moves.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from arbiter.contract import AuthorKind
from arbiter.discord_bot import ArbiterBot
from bots.discord_client import PersonaClient
from bots.llm.scripted import ScriptedProvider
from bots.platforms.discord import DiscordPlatform
from bots.runtime import PersonaRuntime, RuntimeConfig
from tests.support.eventually import eventually
from tests.support.fake_discord import FAST_READY, running
from tests.support.fleet import FAST, RecordingProvider, make_persona

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

    from arbiter.contract import MessageView
    from bots.persona import Persona
    from tests.discord.conftest import World
    from tests.support.fake_discord import FakeMessage
    from tests.support.fleet import Live

__all__ = ("SLOW_REFUNDS", "DiscordFleet", "discord_fleet", "eager", "scripted")

# Refunds that take a minute: nothing comes back during a test, so the pool's level shows every spend.
SLOW_REFUNDS = {tier: {"recovery_s": 60.0} for tier in ("aizuchi", "remark", "long")}


def eager(persona_id: str, **overrides: object) -> Persona:
    """A persona that jumps in whenever it may: it nods when another has the floor, and answers when asked."""
    persona = make_persona(persona_id, talkativeness=1.0, extraversion=1.0, agreeableness=1.0)
    return persona.model_copy(update=overrides)


def scripted(persona: Persona, *, seed: int) -> RecordingProvider:
    return RecordingProvider(ScriptedProvider.for_persona(persona, seed=seed))


@dataclass
class DiscordFleet:
    world: World
    live: Live
    bot: ArbiterBot
    clients: dict[str, PersonaClient] = field(default_factory=dict)
    providers: dict[str, RecordingProvider] = field(default_factory=dict)
    runtimes: dict[str, PersonaRuntime] = field(default_factory=dict)

    @property
    def channel_id(self) -> str:
        return str(self.world.lounge.id)

    async def history(self) -> list[MessageView]:
        return await self.live.history(self.channel_id)

    def persona_posts(self) -> list[FakeMessage]:
        """What the persona bots posted in the lounge (and is still there)."""
        return [m for m in self.world.lounge.messages if self.world.persona_of(m.author) is not None]

    def posted_by(self, persona_id: str) -> list[FakeMessage]:
        account = self.world.personas[persona_id]
        return [m for m in self.world.lounge.messages if m.author is account]

    async def persona_lines(self) -> list[MessageView]:
        return [m for m in await self.history() if m.author_kind is AuthorKind.PERSONA]

    async def settled(self, within: float = 10.0) -> None:
        """Every persona idle, caught up and holding no claim; and every message the personas were granted is on
        Discord (posted or given as a reaction) and linked to it."""
        await self.live.settled(self.channel_id, within=within)

        async def linked() -> bool:
            return all(m.platform_message_id for m in await self.persona_lines())

        await eventually(linked, within=within, what="every persona message linked to its Discord message")

    async def status(self, persona_id: str | None = None) -> Any:
        return await self.live.status(self.channel_id, persona_id)


@contextlib.asynccontextmanager
async def discord_fleet(
    world: World,
    live: Live,
    personas: Sequence[Persona],
    *,
    seed: int = 0,
    config: RuntimeConfig = FAST,
    providers: dict[str, RecordingProvider] | None = None,
    channel: dict[str, Any] | None = None,
    client_type: type[PersonaClient] = PersonaClient,
    arbiter_type: type[ArbiterBot] = ArbiterBot,
    refresh_s: float = 60.0,
) -> AsyncIterator[DiscordFleet]:
    """Enable the lounge (with ``channel`` settings over the fast test defaults), start the arbiter's bot (an
    ``arbiter_type``) and one ``client_type`` per persona, and wait until every persona follows the lounge. On the way
    out the runtimes close first (seeing their posts through and giving their claims back), then the clients, as
    ``aizuchi run`` does."""
    await live.channel(str(world.lounge.id), **(channel or {}))
    bot = arbiter_type(live.service, guilds=[world.guild.id], guild_ready_timeout=FAST_READY)
    fleet = DiscordFleet(world, live, bot)
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(running(bot, world.arbiter.token))
        for index, persona in enumerate(personas):
            client = client_type(refresh_s=refresh_s, guild_ready_timeout=FAST_READY)
            provider = (providers or {}).get(persona.id) or scripted(persona, seed=seed + index)
            runtime = PersonaRuntime(
                persona,
                provider,
                live.client(persona.id),
                DiscordPlatform(client),
                config=config,
                rng=random.Random(seed + index),
            )
            client.runtime = runtime
            live.runtimes.append(runtime)  # (live closes it again at its end: a second close does nothing)
            fleet.clients[persona.id] = client
            fleet.providers[persona.id] = provider
            fleet.runtimes[persona.id] = runtime
            await stack.enter_async_context(running(client, world.personas[persona.id].token))
            stack.push_async_callback(runtime.close)  # before its client closes: unwound in reverse
        for runtime in fleet.runtimes.values():
            await eventually(partial(_joined, runtime, fleet.channel_id), what=f"{runtime.persona.id} joins")
            await runtime.join(fleet.channel_id).ready()
        yield fleet


def _joined(runtime: PersonaRuntime, channel_id: str) -> bool:
    return channel_id in runtime.channels
