"""Running personas: build each one's provider, runtime and platform from the settings, start and stop them."""

from __future__ import annotations

import contextlib
import logging
import os
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bots.arbiter_client import ArbiterClient
from bots.llm.profiles import create_provider, load_profiles
from bots.persona import Persona, load_personas
from bots.runtime import PersonaRuntime, RuntimeConfig
from bots.tool_loop import ToolLoopRuntime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    import aiohttp

    from bots.platforms.base import Platform
    from bots.settings import BotsSettings

__all__ = ("Fleet", "open_fleet", "select_personas")

_log = logging.getLogger(__name__)


@dataclass
class Fleet:
    runtimes: dict[str, PersonaRuntime] = field(default_factory=dict)

    def join(self, channel_id: str) -> None:
        """Every persona takes part in ``channel_id`` (from now on)."""
        for runtime in self.runtimes.values():
            runtime.join(channel_id)

    async def close(self) -> None:
        for runtime in self.runtimes.values():
            await runtime.close()
            await runtime.provider.aclose()


def select_personas(settings: BotsSettings, only: list[str] | None = None) -> list[Persona]:
    return load_personas(settings.personas_dir, only or settings.personas or None)


@contextlib.asynccontextmanager
async def open_fleet(
    settings: BotsSettings,
    personas: list[Persona],
    *,
    session: aiohttp.ClientSession,
    arbiter_url: str,
    tokens: Mapping[str, str],
    platform: Callable[[Persona], Platform],
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[Fleet]:
    """Build one runtime per persona; stop them all on the way out, which releases any claim still held.
    Call each runtime's ``start()`` once the arbiter can be reached (and, on Discord, once the persona's
    account is known), then ``join`` channels."""
    env = os.environ if env is None else env
    profiles = load_profiles(settings.profiles_file if settings.profiles_file.exists() else None)
    fleet = Fleet()
    try:
        for index, persona in enumerate(personas):
            name = settings.profile or persona.provider
            if name not in profiles:
                raise KeyError(f"persona {persona.id}: no provider profile named {name!r}")
            profile = profiles[name]
            provider = create_provider(
                profile, env, aizuchi=persona.samples.aizuchi, remarks=persona.samples.remarks, seed=index
            )
            kind = ToolLoopRuntime if settings.mode == "tool-loop" else PersonaRuntime
            runtime = kind(
                persona,
                provider,
                ArbiterClient(session, arbiter_url, tokens[persona.id]),
                platform(persona),
                config=RuntimeConfig(max_tokens=profile.max_tokens),
                rng=random.Random(),
            )
            fleet.runtimes[persona.id] = runtime
            _log.info("persona %s (%s) runs on profile %s", persona.id, persona.display_name, profile.name)
        yield fleet
    finally:
        await fleet.close()
