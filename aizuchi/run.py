"""The three ways to run: the arbiter alone, persona bots alone, or everything in one process.

``aizuchi run`` puts the fleet on Discord when the arbiter has a Discord token, and otherwise opens the local
room on 127.0.0.1 with the personas' own providers (offline, scripted ones by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from typing import TYPE_CHECKING

import aiohttp

from aizuchi.fleet import open_fleet, select_personas
from aizuchi.logs import acting_as
from arbiter.core.errors import ArbiterError
from arbiter.server import open_arbiter, serving
from bots.platforms.room import RoomPlatform

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from aizuchi.fleet import Fleet
    from arbiter.server import Arbiter
    from arbiter.settings import ArbiterSettings
    from bots.persona import Persona
    from bots.settings import BotsSettings

__all__ = ("run_all", "run_arbiter", "run_bots", "run_room")

_log = logging.getLogger(__name__)


class SetupError(ArbiterError):
    """The settings cannot work; the message says what to change."""

    code = "setup"


def _say(text: str) -> None:
    print(text, flush=True)


@contextlib.asynccontextmanager
async def _arbiter_bot(arbiter: Arbiter, settings: ArbiterSettings) -> AsyncIterator[None]:
    """The arbiter's own Discord bot, while the block runs (if it has a token)."""
    if settings.discord_token is None:
        yield
        return
    from arbiter.discord_bot import ArbiterBot

    bot = ArbiterBot(arbiter.service, guilds=settings.discord_guilds, moderator_role=settings.moderator_role)
    task = asyncio.create_task(acting_as("arbiter-bot", bot.start(settings.discord_token.get_secret_value())))
    task.add_done_callback(_report_stop)
    try:
        yield
    finally:
        await bot.close()
        await asyncio.gather(task, return_exceptions=True)


def _report_stop(task: asyncio.Task[None]) -> None:
    """discord.py reconnects by itself; its client only stops on what it cannot fix (a refused token, an intent
    not switched on for the application). Without this the arbiter would go on serving, deaf to Discord."""
    if not task.cancelled() and task.exception() is not None:
        _log.error("the arbiter's Discord bot stopped: %s", task.exception())


async def run_arbiter(settings: ArbiterSettings) -> None:
    """The API, and the arbiter's Discord bot when it has a token, until cancelled."""
    async with open_arbiter(settings) as arbiter, _arbiter_bot(arbiter, settings):
        _warn_about(settings)
        async with serving(arbiter.app, settings.host, settings.port) as url:
            _say(f"arbiter listening on {url}")
            await asyncio.Event().wait()


def _warn_about(settings: ArbiterSettings) -> None:
    if not settings.persona_tokens:
        _log.warning("no persona tokens configured (ARBITER_PERSONA_TOKENS): no persona can speak yet")
    if settings.admin_token is None:
        _log.warning("no admin token configured (ARBITER_ADMIN_TOKEN): the admin endpoints are off")


def _tokens(
    personas: list[Persona], configured: dict[str, str], *, may_generate: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """Every persona's arbiter token: (all of them, the ones made up here). Made-up tokens only work for an
    arbiter in this same process."""
    missing = [p.id for p in personas if p.id not in configured]
    if missing and not may_generate:
        raise SetupError(
            f"no arbiter token for {', '.join(missing)}: add them to ARBITER_PERSONA_TOKENS (the same value the "
            "arbiter has)"
        )
    generated = {persona_id: secrets.token_urlsafe(24) for persona_id in missing}
    return {**configured, **generated}, generated


async def run_bots(bots: BotsSettings, only: list[str] | None = None) -> None:
    """The personas' Discord bots, talking to an arbiter elsewhere (AIZUCHI_ARBITER_URL), until cancelled."""
    personas = select_personas(bots, only)
    configured = {pid: token.get_secret_value() for pid, token in bots.persona_tokens.items()}
    tokens, _ = _tokens(personas, configured, may_generate=False)
    await _discord_personas(bots, personas, tokens, bots.arbiter_url)


async def _discord_personas(
    bots: BotsSettings, personas: list[Persona], tokens: dict[str, str], arbiter_url: str
) -> None:
    from bots.discord_client import PersonaClient
    from bots.platforms.discord import DiscordPlatform

    discord_tokens = {p.id: os.environ.get(p.discord_token_env or "", "").strip() for p in personas}
    ready = [p for p in personas if discord_tokens[p.id]]
    for persona in personas:
        if persona not in ready:
            _log.warning(
                "persona %s has no Discord token (%s is not set): it stays offline",
                persona.id,
                persona.discord_token_env,
            )
    if not ready:
        raise SetupError("no persona has a Discord token: set each persona's discord_token_env variable in .env")
    clients = {p.id: PersonaClient() for p in ready}
    async with (
        aiohttp.ClientSession() as session,
        open_fleet(
            bots,
            ready,
            session=session,
            arbiter_url=arbiter_url,
            tokens=tokens,
            platform=lambda persona: DiscordPlatform(clients[persona.id]),
        ) as fleet,
    ):
        tasks = []
        for persona in ready:
            client = clients[persona.id]
            client.runtime = fleet.runtimes[persona.id]
            tasks.append(asyncio.create_task(acting_as(persona.id, client.start(discord_tokens[persona.id]))))
        try:
            # Until cancelled, or until every client has stopped (a bad token, say): then say why.
            results = await asyncio.gather(*tasks, return_exceptions=True)
            for persona, result in zip(ready, results, strict=True):
                if isinstance(result, BaseException):
                    _log.error("persona %s stopped: %s", persona.id, result)
        finally:
            for client in clients.values():
                await client.close()
            await asyncio.gather(*tasks, return_exceptions=True)


class _Joiner:
    """Has the personas join each room opened in the page - once they are up (the page may come first)."""

    def __init__(self) -> None:
        self._fleet: Fleet | None = None
        self._ready = asyncio.Event()

    def attach(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._ready.set()

    async def __call__(self, channel_id: str) -> None:
        await self._ready.wait()
        assert self._fleet is not None
        self._fleet.join(channel_id)


async def run_room(settings: ArbiterSettings, bots: BotsSettings) -> None:
    """The arbiter, the local room and every persona in this process, until cancelled."""
    from arbiter.room import add_room, is_loopback_host

    if not settings.room:
        raise SetupError("the local room is off (ARBITER_ROOM=false) and there is no Discord token: nothing to run")
    if not is_loopback_host(settings.host):
        raise SetupError(
            f"the local room has no login, so it only listens on a loopback address; ARBITER_HOST is {settings.host}"
        )
    personas = select_personas(bots)
    configured = {pid: token.get_secret_value() for pid, token in settings.persona_tokens.items()}
    tokens, generated = _tokens(personas, configured, may_generate=True)
    async with open_arbiter(settings, extra_personas=generated) as arbiter:
        joiner = _Joiner()
        add_room(arbiter.app, on_open=joiner)
        async with (
            serving(arbiter.app, settings.host, settings.port) as url,
            aiohttp.ClientSession() as session,
            open_fleet(
                bots,
                personas,
                session=session,
                arbiter_url=url,
                tokens=tokens,
                platform=lambda persona: RoomPlatform(persona.id),
            ) as fleet,
        ):
            for runtime in fleet.runtimes.values():
                await runtime.start()
            for channel in (await arbiter.service.channels()).channels:
                fleet.join(channel.channel_id)
            joiner.attach(fleet)
            names = ", ".join(p.display_name for p in personas)
            _say(f"aizuchi local room: open {url}/room/lobby  (personas: {names}; Ctrl-C stops)")
            await asyncio.Event().wait()


async def run_all(settings: ArbiterSettings, bots: BotsSettings) -> None:
    """Everything in one process: on Discord when the arbiter has a token, otherwise the local room."""
    if settings.discord_token is None:
        await run_room(settings, bots)
        return
    personas = select_personas(bots)
    configured = {pid: token.get_secret_value() for pid, token in settings.persona_tokens.items()}
    tokens, generated = _tokens(personas, configured, may_generate=True)
    async with (
        open_arbiter(settings, extra_personas=generated) as arbiter,
        _arbiter_bot(arbiter, settings),
        serving(arbiter.app, settings.host, settings.port) as url,
    ):
        _say(f"arbiter listening on {url}; the fleet is on Discord (Ctrl-C stops)")
        await _discord_personas(bots, personas, tokens, url)
