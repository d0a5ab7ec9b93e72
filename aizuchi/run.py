"""The three ways to run: the arbiter alone, persona bots alone, or everything in one process.

``aizuchi run`` puts the fleet on Discord when the arbiter has a Discord token, and otherwise opens the local
room on 127.0.0.1 with the personas' own providers (offline, scripted ones by default).

Everything that can be checked before starting is checked first (personas, profiles, keys, tokens), so a setup
mistake ends the command before a port is bound or a bot logs in. Once running, the fleet never runs deaf: if
the arbiter's Discord bot stops for good, or every persona bot has, the command ends with the reason
(:class:`FleetStopped`) so that a supervisor restarts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import secrets
from typing import TYPE_CHECKING

import aiohttp

from aizuchi.errors import FleetError, FleetStopped, SetupError
from aizuchi.fleet import Cast, cast_personas, offline_notice, open_fleet
from aizuchi.keys import check_keys
from aizuchi.logs import acting_as
from arbiter.storage.errors import StorageError
from bots.platforms.room import RoomPlatform

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    import discord
    from aiohttp import web

    from aizuchi.fleet import Fleet
    from aizuchi.settings import DiscordEndpoints, DiscordReconnects
    from arbiter.server import Arbiter
    from arbiter.service import ArbiterService
    from arbiter.settings import ArbiterSettings
    from bots.persona import Persona
    from bots.platforms.base import Platform
    from bots.settings import BotsSettings
    from bots.webhook_client import WebhookPersonas

__all__ = ("run_all", "run_arbiter", "run_bots", "run_room")

_log = logging.getLogger(__name__)


def _say(text: str) -> None:
    print(text, flush=True)


# --- the arbiter: its database, its port, its Discord bot ------------------------------------------------


async def _open(
    stack: contextlib.AsyncExitStack, settings: ArbiterSettings, extra_personas: dict[str, str] | None = None
) -> Arbiter:
    # The arbiter's code (its API and storage, SQLAlchemy: half of what this command imports, some 0.7 s of CPU) is
    # imported here, once every check that can end the command before the arbiter opens has passed.
    from arbiter.server import open_arbiter

    try:
        return await stack.enter_async_context(open_arbiter(settings, extra_personas=extra_personas))
    except StorageError as error:
        raise SetupError(f"{error.message} (check ARBITER_DATABASE_URL)") from None


async def _listen(stack: contextlib.AsyncExitStack, app: web.Application, settings: ArbiterSettings) -> str:
    from arbiter.server import serving  # imported by _open already

    try:
        return await stack.enter_async_context(serving(app, settings.host, settings.port))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise SetupError(
                f"port {settings.port} on {settings.host} is already in use (is another aizuchi running?): set "
                "ARBITER_PORT in .env to a free port, or pass --port"
            ) from None
        raise SetupError(
            f"cannot listen on {settings.host}:{settings.port}: {error.strerror or error} (check ARBITER_HOST and "
            "ARBITER_PORT)"
        ) from None


@contextlib.asynccontextmanager
async def _arbiter_bot(
    arbiter: Arbiter, settings: ArbiterSettings, reconnects: DiscordReconnects | None, endpoints: DiscordEndpoints
) -> AsyncIterator[asyncio.Task[None] | None]:
    """The arbiter's own Discord bot, kept connected while the block runs (if it has a token): yields its task,
    which ends only if Discord turns the bot away for good (or gives it no working session within
    ``reconnects``)."""
    if settings.discord_token is None:
        yield None
        return
    from aizuchi.connection import Account, stay_connected
    from arbiter.discord_bot import ArbiterBot

    bot = ArbiterBot(
        arbiter.service,
        guilds=settings.discord_guilds,
        moderator_role=settings.moderator_role,
        guild_ready_timeout=endpoints.ready_s,
    )
    account = Account("the arbiter's bot", "ARBITER_DISCORD_TOKEN", intents_hint="the Message Content intent")
    token = settings.discord_token.get_secret_value()
    work = stay_connected(bot, token, account, reconnects=reconnects)
    task = asyncio.create_task(acting_as("arbiter-bot", work))
    try:
        yield task
    finally:
        await _disconnect({task: bot})


async def _disconnect(connections: Mapping[asyncio.Task[None], discord.Client]) -> None:
    """Stop keeping each client connected, then close it. Cancelling first: discord.py's sharded client, closed
    while a shard is still connecting, retries that shard forever (and never returns from ``connect``). Closing
    before waiting: a cancellation that lands just as the shard connects can be lost (``asyncio.wait_for`` on
    3.11), and then only closing ends ``connect``."""
    for task in connections:
        task.cancel()
    for client in connections.values():
        await client.close()
    await asyncio.gather(*connections, return_exceptions=True)


async def _until_stopped(*tasks: asyncio.Task[None] | None) -> None:
    """Until cancelled; or until one of ``tasks`` ends, which only happens when its part stopped for good."""
    running = [task for task in tasks if task is not None]
    if not running:
        await asyncio.Event().wait()
    done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()  # raises the reason it stopped
    raise FleetStopped("a Discord client stopped without saying why")


def _warn_about(settings: ArbiterSettings) -> None:
    if not settings.persona_tokens:
        _log.warning("no persona tokens configured (ARBITER_PERSONA_TOKENS): no persona can speak yet")
    if settings.admin_token is None:
        _log.warning("no admin token configured (ARBITER_ADMIN_TOKEN): the admin endpoints are off")


async def run_arbiter(
    settings: ArbiterSettings, endpoints: DiscordEndpoints, *, reconnects: DiscordReconnects | None = None
) -> None:
    """The API, and the arbiter's Discord bot when it has a token, until cancelled or the bot stops for good.
    ``reconnects`` bounds the bots' tries for a working session (None: the defaults)."""
    if settings.discord_token is not None:
        from aizuchi.connection import use_discord

        use_discord(endpoints)
    async with contextlib.AsyncExitStack() as stack:
        arbiter = await _open(stack, settings)
        bot = await stack.enter_async_context(_arbiter_bot(arbiter, settings, reconnects, endpoints))
        _warn_about(settings)
        url = await _listen(stack, arbiter.app, settings)
        _say(f"arbiter listening on {url}")
        await _until_stopped(bot)


# --- the personas ----------------------------------------------------------------------------------------


def _tokens(
    personas: list[Persona], configured: Mapping[str, str], *, may_generate: bool
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


def _discord_tokens(personas: list[Persona], env: Mapping[str, str], *, webhooks: bool) -> dict[str, str]:
    """Each persona's Discord token, from the variable its file names; personas without one stay offline, or with
    ``webhooks`` (one-application mode) post through the channels' webhooks."""
    found: dict[str, str] = {}
    for persona in personas:
        token = env.get(persona.discord_token_env or "", "").strip()
        if token:
            found[persona.id] = token
        elif webhooks:
            _log.info("persona %s has no Discord bot of its own: it posts through the channels' webhooks", persona.id)
        else:
            _log.warning(
                "persona %s has no Discord token (%s is not set): it stays offline",
                persona.id,
                persona.discord_token_env or "its persona file names no discord_token_env",
            )
    if not found and not webhooks:
        variables = ", ".join(p.discord_token_env for p in personas if p.discord_token_env) or "discord_token_env"
        raise SetupError(f"no persona has a Discord token: set {variables} in .env")
    return found


async def run_bots(
    bots: BotsSettings,
    env: Mapping[str, str],
    endpoints: DiscordEndpoints,
    only: list[str] | None = None,
    *,
    reconnects: DiscordReconnects | None = None,
) -> None:
    """The personas' Discord bots, talking to an arbiter elsewhere (AIZUCHI_ARBITER_URL), until cancelled or
    every one of them has stopped for good."""
    cast = cast_personas(bots, env, only)
    if bots.check_keys:
        await check_keys(cast, env)
    configured = {pid: token.get_secret_value() for pid, token in bots.persona_tokens.items()}
    tokens, _ = _tokens(cast.personas, configured, may_generate=False)
    discord_tokens = _discord_tokens(cast.personas, env, webhooks=bots.webhooks)
    webhook_token = None
    if bots.webhooks and len(discord_tokens) < len(cast.personas):
        if bots.arbiter_discord_token is None:
            raise SetupError(
                "one-application mode (AIZUCHI_WEBHOOKS=true) posts through webhooks of the arbiter's bot: set "
                "ARBITER_DISCORD_TOKEN for the personas too"
            )
        webhook_token = bots.arbiter_discord_token.get_secret_value()
    from aizuchi.connection import use_discord

    use_discord(endpoints)
    await _discord_personas(
        bots,
        cast,
        env=env,
        tokens=tokens,
        discord_tokens=discord_tokens,
        webhook_token=webhook_token,
        arbiter_url=bots.arbiter_url,
        reconnects=reconnects,
        endpoints=endpoints,
    )


async def _discord_personas(
    bots: BotsSettings,
    cast: Cast,
    *,
    env: Mapping[str, str],
    tokens: Mapping[str, str],
    discord_tokens: Mapping[str, str],
    arbiter_url: str,
    reconnects: DiscordReconnects | None,
    endpoints: DiscordEndpoints,
    webhook_token: str | None = None,
) -> None:
    """Every persona that has a Discord token, on Discord, until cancelled; and with ``webhook_token`` (the arbiter
    bot's: one-application mode) every other persona too, posting through the channels' webhooks. Raises
    FleetStopped once all of them have stopped for good. One that stops alone is logged, and the others go on."""
    import discord

    from aizuchi.connection import Account, stay_connected
    from bots.affinity import ChannelShare
    from bots.discord_client import PersonaClient
    from bots.platforms.discord import DiscordPlatform
    from bots.platforms.webhook import ChannelHooks, WebhookPlatform
    from bots.webhook_client import WebhookPersonas

    ready = Cast([p for p in cast.personas if p.id in discord_tokens or webhook_token], cast.profiles)
    share = ChannelShare.parse(bots.channel_share) if bots.channel_share else None
    if share is not None:
        _log.info("this process takes part in share %s of the channels", share)
    clients: dict[str, discord.Client] = {
        p.id: PersonaClient(share=share, guild_ready_timeout=endpoints.ready_s)
        for p in ready.personas
        if p.id in discord_tokens
    }
    hooked = [p for p in ready.personas if p.id not in discord_tokens]
    hooks_client = discord.Client(intents=discord.Intents.none(), allowed_mentions=discord.AllowedMentions.none())
    hooks = ChannelHooks(hooks_client)

    def platform(persona: Persona) -> Platform:
        client = clients.get(persona.id)
        return WebhookPlatform(persona, hooks) if client is None else DiscordPlatform(client)

    async with (
        aiohttp.ClientSession() as session,
        open_fleet(
            bots, ready, env=env, session=session, arbiter_url=arbiter_url, tokens=tokens, platform=platform
        ) as fleet,
    ):
        tasks: dict[asyncio.Task[None], list[Persona]] = {}
        connections: dict[asyncio.Task[None], discord.Client] = {}
        for persona in ready.personas:
            client = clients.get(persona.id)
            if not isinstance(client, PersonaClient):
                continue
            client.runtime = fleet.runtimes[persona.id]
            account = Account(f"{persona.id}'s bot", persona.discord_token_env or "its token variable")
            work = stay_connected(client, discord_tokens[persona.id], account, reconnects=reconnects)
            task = asyncio.create_task(acting_as(persona.id, work))
            tasks[task], connections[task] = [persona], client
        if hooked and webhook_token is not None:
            through = WebhookPersonas([fleet.runtimes[p.id] for p in hooked], hooks_client, hooks, share=share)
            task = asyncio.create_task(acting_as("webhooks", _posting_through_webhooks(through, webhook_token)))
            tasks[task], connections[task] = hooked, hooks_client
        try:
            reasons = await _until_all_stop(tasks, fleet)
        finally:
            try:
                # The personas stop first, while their bots are still on Discord: a speech the arbiter granted is
                # posted (a bot closed first would leave it unsaid), and every claim is given back.
                for runtime in fleet.runtimes.values():
                    await runtime.close()
            finally:
                await _disconnect(connections)
        raise FleetStopped(f"every persona bot has stopped ({'; '.join(reasons)})")


async def _posting_through_webhooks(personas: WebhookPersonas, token: str) -> None:
    """The webhook personas, until cancelled; ends with the reason if Discord refuses the arbiter's bot's token."""
    import discord

    try:
        await personas.run(token)
    except discord.LoginFailure:
        raise FleetStopped(
            "Discord refused the arbiter's bot's token (ARBITER_DISCORD_TOKEN), which the webhook personas post "
            "through: put the token from the Developer Portal (Bot > Reset Token) in .env"
        ) from None
    except discord.HTTPException as error:
        raise FleetStopped(
            f"the webhook personas cannot log in as the arbiter's bot: Discord answered {error.status} {error.text}"
        ) from None


async def _until_all_stop(tasks: dict[asyncio.Task[None], list[Persona]], fleet: Fleet) -> list[str]:
    reasons: list[str] = []
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            error = task.exception()
            if error is None:
                reason = "its Discord client closed"
            else:
                reason = str(error) if isinstance(error, FleetError) else f"{type(error).__name__}: {error}"
            for persona in tasks[task]:
                _log.error("persona %s stopped: %s", persona.id, reason)
                await fleet.runtimes[persona.id].close()  # gives back any claim it held; it hears nothing more
            reasons.append(reason)
    return reasons


# --- the local room --------------------------------------------------------------------------------------


class _Joiner:
    """Has the personas join each room opened in the page - once they are up (the page may come first)."""

    def __init__(self, service: ArbiterService) -> None:
        self._service = service
        self._fleet: Fleet | None = None
        self._ready = asyncio.Event()

    def attach(self, fleet: Fleet) -> None:
        self._fleet = fleet
        self._ready.set()

    async def __call__(self, channel_id: str) -> None:
        # Where the room's history ends now: the person's first line, said once this returns, is a cue even for a
        # persona that follows the room only later (``follow`` waits for them at most 10 s, not to hold the person).
        last = await self._service.recent(channel_id, 1)
        await self._ready.wait()
        assert self._fleet is not None
        await self._fleet.follow(channel_id, opened_at=last[-1].seq if last else 0)


async def run_room(settings: ArbiterSettings, bots: BotsSettings, env: Mapping[str, str]) -> None:
    """The arbiter, the local room and every persona in this process, until cancelled."""
    from arbiter.room import add_room, is_loopback_host

    if not settings.room:
        raise SetupError("the local room is off (ARBITER_ROOM=false) and there is no Discord token: nothing to run")
    if not is_loopback_host(settings.host):
        raise SetupError(
            f"the local room has no login, so it only listens on a loopback address; ARBITER_HOST is {settings.host}"
        )
    cast = cast_personas(bots, env)
    if bots.check_keys:
        await check_keys(cast, env)
    configured = {pid: token.get_secret_value() for pid, token in settings.persona_tokens.items()}
    tokens, generated = _tokens(cast.personas, configured, may_generate=True)
    notice = offline_notice(cast)
    async with contextlib.AsyncExitStack() as stack:
        arbiter = await _open(stack, settings, extra_personas=generated)
        joiner = _Joiner(arbiter.service)
        add_room(arbiter.app, on_open=joiner, notice=notice)
        url = await _listen(stack, arbiter.app, settings)
        session = await stack.enter_async_context(aiohttp.ClientSession())
        fleet = await stack.enter_async_context(
            open_fleet(
                bots,
                cast,
                env=env,
                session=session,
                arbiter_url=url,
                tokens=tokens,
                platform=lambda persona: RoomPlatform(persona.id),
            )
        )
        for runtime in fleet.runtimes.values():
            await runtime.start()
        for channel in (await arbiter.service.channels()).channels:
            fleet.join(channel.channel_id)
        joiner.attach(fleet)
        names = ", ".join(p.display_name for p in cast.personas)
        _say(f"aizuchi local room: open {url}/room/lobby  (personas: {names}; Ctrl-C stops)")
        # After the setup, so that a setup mistake is still the one line on stderr.
        if notice is not None:
            _log.info("%s", notice)
        await asyncio.Event().wait()


# --- everything ------------------------------------------------------------------------------------------


async def run_all(
    settings: ArbiterSettings,
    bots: BotsSettings,
    env: Mapping[str, str],
    endpoints: DiscordEndpoints,
    *,
    reconnects: DiscordReconnects | None = None,
) -> None:
    """Everything in one process: on Discord when the arbiter has a token, otherwise the local room."""
    if settings.discord_token is None:
        await run_room(settings, bots, env)
        return
    cast = cast_personas(bots, env)
    if bots.check_keys:
        await check_keys(cast, env)
    configured = {pid: token.get_secret_value() for pid, token in settings.persona_tokens.items()}
    tokens, generated = _tokens(cast.personas, configured, may_generate=True)
    discord_tokens = _discord_tokens(cast.personas, env, webhooks=bots.webhooks)
    webhook_token = settings.discord_token.get_secret_value() if bots.webhooks else None
    from aizuchi.connection import use_discord

    use_discord(endpoints)
    async with contextlib.AsyncExitStack() as stack:
        arbiter = await _open(stack, settings, extra_personas=generated)
        # What is missing on Discord (a bot not in a server, a permission in an enabled channel) is said before
        # the bots log in; the fleet runs without it.
        from aizuchi.discord_check import check_at_start

        channels = await arbiter.service.channels()
        await check_at_start(settings, cast.personas, discord_tokens, channels, webhooks=bots.webhooks)
        bot = await stack.enter_async_context(_arbiter_bot(arbiter, settings, reconnects, endpoints))
        url = await _listen(stack, arbiter.app, settings)
        _say(f"arbiter listening on {url}; the fleet is on Discord (Ctrl-C stops)")
        if (notice := offline_notice(cast)) is not None:
            _log.info("%s", notice)
        personas = asyncio.create_task(
            _discord_personas(
                bots,
                cast,
                env=env,
                tokens=tokens,
                discord_tokens=discord_tokens,
                webhook_token=webhook_token,
                arbiter_url=url,
                reconnects=reconnects,
                endpoints=endpoints,
            )
        )
        # Stopped before the arbiter closes, so the claims the personas hold are given back to it.
        stack.push_async_callback(_cancelled, personas)
        await _until_stopped(bot, personas)


async def _cancelled(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
