"""Keeping a discord.py client on Discord: what it cannot fix ends it with the reason; the rest reconnects.

discord.py reconnects by itself after network errors and the close codes Discord means to be retried. What
escapes ``Client.connect`` is either final (a refused token, an intent not switched on, a close code Discord
means as final - the client is closed by then) or something discord.py did not expect, such as an event
payload its parsers choke on. The second kind must not leave the bot deaf: the old socket is closed and the
client identifies again, after a back-off. The bots are sharded clients, which would close themselves for good
on such an event: there, only the shard that got it starts a new session (see ``_reconnect_on_bad_events``).
Failures while logging in are final when Discord answered 4xx (the same request would be refused again) and
retried when it answered 5xx or could not be reached.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import discord
from discord.utils import MISSING

from aizuchi.errors import FleetError, FleetStopped
from arbiter.core.errors import ArbiterError
from bots.errors import BotError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from aizuchi.settings import DiscordEndpoints

__all__ = ("Account", "Backoff", "stay_connected", "use_discord")

_log = logging.getLogger(__name__)

# The gateway's close codes that end a session for good (discord.py raises them out of connect()).
FINAL_CLOSE_CODES = {
    4004: "the token was refused",
    4010: "an invalid shard was sent",
    4011: "the bot is in too many servers for one connection (sharding required)",
    4012: "an invalid API version was asked for",
    4013: "invalid intents were asked for",
    4014: "a privileged intent is not switched on for the application",
}


def use_discord(endpoints: DiscordEndpoints) -> None:
    """Set discord.py up for this process, once, before any client is made: where Discord is, and no warnings
    about voice support (no bot here speaks in voice channels, so a server owner has nothing to install)."""
    endpoints.apply()
    discord.VoiceClient.warn_nacl = False
    discord.VoiceClient.warn_dave = False


@dataclass(frozen=True, slots=True)
class Account:
    """Whose connection this is, for the messages: ``the arbiter's bot`` and the variable holding its token."""

    who: str
    token_variable: str
    intents_hint: str = "the privileged intents it asks for"


@dataclass
class Backoff:
    first_s: float = 1.0
    max_s: float = 60.0
    _failures: int = 0

    def next(self, rng: random.Random) -> float:
        delay = min(self.max_s, self.first_s * 2.0**self._failures)
        self._failures += 1
        return delay * rng.uniform(0.8, 1.2)  # several bots cut off together should not come back in step

    def reset(self) -> None:
        self._failures = 0


async def stay_connected(
    client: discord.Client,
    token: str,
    account: Account,
    *,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Log in and keep ``client`` connected until it is closed (then return), or until Discord turns it away
    for good (raises :class:`FleetStopped` with the reason and what to do)."""
    backoff = backoff or Backoff()
    rng = rng or random.Random()
    if isinstance(client, discord.AutoShardedClient):
        _reconnect_on_bad_events(client, account)
    logged_in = False
    loop = asyncio.get_running_loop()
    while not client.is_closed():
        started = loop.time()
        try:
            if not logged_in:
                await client.login(token)
                logged_in = True
            await client.connect(reconnect=True)
            return  # connect() only returns once the client is closed
        except discord.LoginFailure as error:
            raise FleetStopped(
                f"Discord refused {account.who}'s token ({account.token_variable}): copy it again from the "
                "Developer Portal (Bot > Reset Token) into .env"
            ) from error
        except discord.PrivilegedIntentsRequired as error:
            raise FleetStopped(
                f"Discord refused {account.who}: switch on {account.intents_hint} in the Developer Portal "
                "(Bot > Privileged Gateway Intents) for the application of "
                f"{account.token_variable}"
            ) from error
        except FleetError:
            raise
        except Exception as error:
            if client.is_closed() and isinstance(error, discord.ConnectionClosed):
                reason = FINAL_CLOSE_CODES.get(error.code, "a close code discord.py does not retry")
                raise FleetStopped(
                    f"Discord closed {account.who}'s connection for good (code {error.code}: {reason})"
                ) from error
            if client.is_closed():
                return
            if not logged_in and isinstance(error, ArbiterError | BotError):
                raise FleetStopped(str(error)) from error  # ours, from its setup: the message says what to do
            if not logged_in and not _transient(error):
                raise FleetStopped(f"{account.who} could not start on Discord: {_describe(error)}") from error
            if loop.time() - started > backoff.max_s:
                backoff.reset()  # it was up for a good while: this is a new failure, not the same one again
            delay = backoff.next(rng)
            _log.warning(
                "%s lost Discord (%s: %s); %s in %.1fs",
                account.who,
                type(error).__name__,
                error,
                "connecting again" if logged_in else "logging in again",
                delay,
            )
            await _drop_socket(client) if logged_in else await _drop_session(client)
            await sleep(delay)


def _reconnect_on_bad_events(client: discord.AutoShardedClient, account: Account) -> None:
    """discord.py's sharded client closes itself, for good, when a parser raises (its shard worker takes any
    unexpected error as fatal). Guard each parser instead: an event it chokes on costs its shard a new session
    (a fresh copy of its servers), not the bot's ears. discord.py has no hook for this, so the parsers are wrapped
    where its connection state keeps them (once per client)."""
    parsers: dict[str, Callable[[Any], None]] = client._connection.parsers
    if getattr(client, "_aizuchi_guarded", False):
        return
    client._aizuchi_guarded = True  # type: ignore[attr-defined]
    reconnecting: set[asyncio.Task[None]] = set()

    def guard(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
        def guarded(data: Any) -> None:
            try:
                parse(data)
            except Exception as error:
                guild_id = str(data.get("guild_id") or "") if isinstance(data, dict) else ""
                count = client.shard_count or 1
                # A guild's events come on its shard; the rest (DMs, the bot's own user) on shard 0.
                shard_id = (int(guild_id) >> 22) % count if guild_id.isdigit() else 0
                shard = client.get_shard(shard_id)
                _log.warning(
                    "%s lost Discord (%s: %s); connecting again (shard %d, after a %s event it could not read)",
                    account.who,
                    type(error).__name__,
                    error,
                    shard_id,
                    event,
                )
                if shard is not None:
                    task = asyncio.create_task(shard.reconnect(), name=f"reconnect shard {shard_id}")
                    reconnecting.add(task)
                    task.add_done_callback(reconnecting.discard)

        return guarded

    for event, parse in list(parsers.items()):
        parsers[event] = guard(event, parse)


def _transient(error: Exception) -> bool:
    """Worth trying again: Discord failed (5xx, 429) or could not be reached. A 4xx will be refused again."""
    if isinstance(error, discord.HTTPException):
        return error.status >= 500 or error.status == 429
    return isinstance(error, OSError | aiohttp.ClientError | TimeoutError | discord.GatewayNotFound)


def _describe(error: Exception) -> str:
    if isinstance(error, discord.HTTPException):
        return f"Discord answered {error.status} {error.text or error.response.reason}".strip()
    return f"{type(error).__name__}: {error}"


async def _drop_socket(client: discord.Client) -> None:
    """Close the socket a failure left open (its heartbeat too) before identifying on a new one."""
    ws = client.ws
    if ws is not None and ws.open:
        await ws.close(code=4000)  # 4000 leaves the session resumable on Discord's side


async def _drop_session(client: discord.Client) -> None:
    """After a failed login: close its HTTP session so the next login opens a fresh one (discord.py's
    ``static_login`` makes a connector only while it has none, and closing the session closed this one)."""
    await client.http.close()
    client.http.connector = MISSING
