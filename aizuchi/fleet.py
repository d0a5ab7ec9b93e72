"""Running personas: build each one's provider, runtime and platform from the settings, start and stop them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aizuchi.errors import SetupError
from bots.arbiter_client import ArbiterClient
from bots.image_fetch import ImageFetcher
from bots.llm.base import LLMAuthError
from bots.llm.profiles import ProviderProfile, create_provider, load_profiles, required_key
from bots.mcp_host import open_tools
from bots.persona import Persona, load_personas
from bots.runtime import PersonaRuntime, personas_stream
from bots.tool_loop import ToolLoopRuntime
from bots.worker.config import RuntimeConfig

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Mapping

    import aiohttp

    from bots.follower import StreamFollower
    from bots.platforms.base import Platform
    from bots.settings import BotsSettings

__all__ = ("Cast", "Fleet", "cast_personas", "offline_notice", "open_fleet")

_log = logging.getLogger(__name__)


@dataclass
class Fleet:
    runtimes: dict[str, PersonaRuntime] = field(default_factory=dict)
    stream: StreamFollower | None = None  # the personas' one event stream, closed after them

    def join(self, channel_id: str) -> None:
        """Every persona takes part in ``channel_id`` (from now on)."""
        for runtime in self.runtimes.values():
            runtime.join(channel_id)

    async def follow(self, channel_id: str, within: float = 10.0, *, opened_at: int | None = None) -> None:
        """Every persona takes part in ``channel_id``, and follows its events before this returns: what is said
        there next is a cue for each of them, not context they found on arriving. ``opened_at``: the seq the
        channel's history ended at when it was opened for them; what comes after is a cue even for a persona that
        is not following within ``within`` (a busy machine), as it would be for one that was."""
        workers = [runtime.join(channel_id) for runtime in self.runtimes.values()]
        if opened_at is not None:
            for worker in workers:
                worker.opened(opened_at)
        try:
            async with asyncio.timeout(within):
                await asyncio.gather(*(worker.ready() for worker in workers))
        except TimeoutError:
            _log.warning("not every persona follows channel %s yet; they keep trying", channel_id)

    async def close(self) -> None:
        for runtime in self.runtimes.values():
            await runtime.close()
            await runtime.provider.aclose()
        if self.stream is not None:
            await self.stream.close()


@dataclass(frozen=True)
class Cast:
    """The personas to run, each with its provider profile: checked before anything starts, so a setup mistake
    ends the command before a port is bound or a bot logs in."""

    personas: list[Persona]
    profiles: dict[str, ProviderProfile]  # persona id -> its profile


def cast_personas(settings: BotsSettings, env: Mapping[str, str], only: list[str] | None = None) -> Cast:
    """The personas ``settings`` (or ``only``) name, and their profiles; every key a profile needs must be set.

    Raises SetupError naming the persona, the profile and the variable to set.
    """
    personas = load_personas(settings.personas_dir, only or settings.personas or None)
    profiles = load_profiles(settings.profiles_file if settings.profiles_file.exists() else None)
    chosen: dict[str, ProviderProfile] = {}
    for persona in personas:
        name = settings.profile or persona.provider
        if name not in profiles:
            where = "AIZUCHI_PROFILE" if settings.profile else f"the provider of {persona.id}'s persona file"
            raise SetupError(
                f"no provider profile named {name!r} ({where}); known: {', '.join(sorted(profiles))}"
                f" (add one to {settings.profiles_file})"
            )
        profile = chosen[persona.id] = profiles[name]
        try:
            required_key(profile, env)
        except LLMAuthError as error:
            raise SetupError(f"persona {persona.id}: {error.message}") from None
        if persona.mcp_servers and profile.structured_output != "tools":
            # Tool rounds end in a forced decide call, which these profiles are set up to avoid.
            raise SetupError(
                f"persona {persona.id} lists MCP servers, but profile {profile.name!r} decides with structured_output"
                ' = "json_schema"; MCP tools need a profile with structured_output = "tools"'
            )
    return Cast(personas, chosen)


def offline_notice(cast: Cast) -> str | None:
    """What to tell a person when some personas run on the offline stand-in: that they do, and how to switch on
    a real model, a hosted one or one on this machine. None when every persona has a real one."""
    offline = [p.display_name for p in cast.personas if cast.profiles[p.id].provider == "scripted"]
    if not offline:
        return None
    who = offline[0] if len(offline) == 1 else f"{', '.join(offline[:-1])} and {offline[-1]}"
    verb = "is an offline stand-in" if len(offline) == 1 else "are offline stand-ins"
    return (
        f"{who} {verb}: lines from the persona files, no language model. For a real one, put "
        "AIZUCHI_PROFILE=anthropic and ANTHROPIC_API_KEY=... (or openai and OPENAI_API_KEY) in .env and start again."
        " For a model on this machine, put AIZUCHI_PROFILE=ollama with Ollama running: no key needed."
    )


@contextlib.asynccontextmanager
async def open_fleet(
    settings: BotsSettings,
    cast: Cast,
    *,
    env: Mapping[str, str],
    session: aiohttp.ClientSession,
    arbiter_url: str,
    tokens: Mapping[str, str],
    platform: Callable[[Persona], Platform],
) -> AsyncIterator[Fleet]:
    """Build one runtime per persona; stop them all on the way out, which releases any claim still held.
    Call each runtime's ``start()`` once the arbiter can be reached (and, on Discord, once the persona's
    account is known), then ``join`` channels."""
    fleet = Fleet()
    clients = {persona.id: ArbiterClient(session, arbiter_url, tokens[persona.id]) for persona in cast.personas}
    if cast.personas:
        # One event stream for all the personas (they follow the same channels): opened with the first one's token,
        # acting for the others'.
        first, *others = cast.personas
        fleet.stream = personas_stream(clients[first.id], tokens=[tokens[p.id] for p in others])
    # The MCP sessions close after the runtimes stop (the stack unwinds after the finally below).
    images = ImageFetcher(session)  # one for the process's personas: an address checked once serves them all
    async with contextlib.AsyncExitStack() as sessions:
        try:
            for index, persona in enumerate(cast.personas):
                profile = cast.profiles[persona.id]
                provider = create_provider(profile, env, persona=persona, seed=index)
                kind = ToolLoopRuntime if settings.mode == "tool-loop" else PersonaRuntime
                # Tool-loop mode has its own tools (the reference's); MCP tools are for the decision.
                tools = None
                if kind is not ToolLoopRuntime:
                    tools = await sessions.enter_async_context(open_tools(persona, env))
                runtime = kind(
                    persona,
                    provider,
                    clients[persona.id],
                    platform(persona),
                    rng=random.Random(),
                    tools=tools,
                    follower=fleet.stream,
                    images=images,
                    config=RuntimeConfig(
                        image_messages=settings.image_messages,
                        images_per_prompt=settings.images_per_prompt,
                        image_bytes_per_prompt=settings.image_bytes_per_prompt,
                    ),
                )
                fleet.runtimes[persona.id] = runtime
                _log.info("persona %s (%s) runs on profile %s", persona.id, persona.display_name, profile.name)
            yield fleet
        finally:
            await fleet.close()
