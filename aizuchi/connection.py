"""Keeping a discord.py client on Discord: what it cannot fix ends it with the reason; the rest reconnects, within
bounds.

discord.py reconnects by itself after network errors and the close codes Discord means to be retried. What
escapes ``Client.connect`` is either final (a refused token, an intent not switched on, a close code Discord
means as final - the client is closed by then) or something discord.py did not expect, such as an event
payload its parsers choke on. The second kind must not leave the bot deaf: the old socket is closed and the
client identifies again, after a back-off. The bots are sharded clients, which would close themselves for good
on such an event: there, only the shard that got it starts a new session (see ``_Sessions._guard_parsers``).
Failures while logging in are final when Discord answered 4xx (the same request would be refused again) and
retried when it answered 5xx or could not be reached.

Reconnecting is bounded where trying again cannot help: when every new session fails the same way before it is
ready (an event discord.py cannot read in every READY, a close code discord.py retries forever, an IDENTIFY
refused every time), the bot would otherwise spend Discord's daily session starts in a loop and hear nothing.
``aizuchi.readiness`` counts each shard's failed sessions since it was last ready, says how long to back off before
the next one, and when to give up (``DiscordReconnects``: so many tries, or so long); then the client is closed and
:class:`FleetStopped` says which bot and why. A session that dies after it was ready (a network drop, one
unreadable event) is not a failed try: it just reconnects.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import discord
import yarl
from discord.utils import MISSING

from aizuchi.errors import FleetError, FleetStopped
from aizuchi.readiness import Cause, Kind, ReadinessWatch, Shard, Verdict, give_up_message, unreadable
from aizuchi.settings import DiscordReconnects
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


# --- keeping a client connected --------------------------------------------------------------------------


async def stay_connected(
    client: discord.Client,
    token: str,
    account: Account,
    *,
    reconnects: DiscordReconnects | None = None,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Log in and keep ``client`` connected until it is closed (then return), or until Discord turns it away
    for good or will not give it a working session within ``reconnects`` (raises :class:`FleetStopped` with the
    reason and what to do). ``backoff`` spaces the tries to log in."""
    backoff = backoff or Backoff()
    rng = rng or random.Random()
    sessions = _Sessions.of(client, account, reconnects or DiscordReconnects.model_construct(), rng, sleep)
    logged_in = False
    loop = asyncio.get_running_loop()
    while not client.is_closed():
        started = loop.time()
        try:
            if not logged_in:
                await client.login(token)
                logged_in = True
            await sessions.connect()
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
            # A plain client's session that broke before it was ready (a sharded one's are caught in its parsers)
            # counts as a failed try; anything else is retried as ever.
            verdict = sessions.broke(error) if logged_in else None
            if verdict is not None and verdict.give_up:
                await sessions.give_up(verdict)
            if verdict is not None:
                delay, wait = verdict.delay_s, 0.0  # waited before the next connection opens
            else:
                if loop.time() - started > backoff.max_s:
                    backoff.reset()  # it was up for a good while: this is a new failure, not the same one again
                delay = wait = backoff.next(rng)
            _log.warning(
                "%s lost Discord (%s: %s); %s in %.1fs%s",
                account.who,
                type(error).__name__,
                error,
                "connecting again" if logged_in else "logging in again",
                delay,
                "" if verdict is None else f" (failed session {verdict.tries} of {sessions.watch.tries})",
            )
            await _drop_socket(client) if logged_in else await _drop_session(client)
            await sleep(wait)


class _Sessions:
    """One client's gateway sessions, watched: discord.py tells of each IDENTIFY (``before_identify_hook``), of
    each READY, ready, resume and disconnect (its events), and the parsers' guard of each event it could not read.
    The back-off after a failed session is waited before the next gateway connection opens. When the watch gives
    up, ``connect`` closes the client and raises.

    discord.py has no public hook for most of this; the private names used are those where discord.py keeps
    them (the connection state's parsers and dispatch, the HTTP client's ``ws_connect``, a shard's socket), each
    taken over once per client."""

    def __init__(
        self,
        client: discord.Client,
        account: Account,
        watch: ReadinessWatch,
        rng: random.Random,
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.client = client
        self.account = account
        self.watch = watch
        self._rng = rng
        self._sleep = sleep
        self._loop = asyncio.get_running_loop()
        self._stop: asyncio.Future[Verdict] = self._loop.create_future()
        self._reconnecting: dict[int, asyncio.Task[None]] = {}
        self._sharded = isinstance(client, discord.AutoShardedClient)
        self._choked_on: str | None = None  # a plain client's: the event its parser raised on, until connect() ends
        self._owed_s = 0.0  # the back-off to wait before the next gateway connection opens
        self._shutting: asyncio.Task[None] | None = None  # closing the client, once the watch has given up

    @classmethod
    def of(
        cls,
        client: discord.Client,
        account: Account,
        reconnects: DiscordReconnects,
        rng: random.Random,
        sleep: Callable[[float], Awaitable[None]],
    ) -> _Sessions:
        """The client's watched sessions, made and hooked into discord.py the first time (a client is only
        hooked once, however often it is kept connected)."""
        existing: _Sessions | None = getattr(client, "_aizuchi_sessions", None)
        if existing is not None:
            return existing
        watch = ReadinessWatch(reconnects.tries, reconnects.within_s, reconnects.backoff_s)
        sessions = cls(client, account, watch, rng, sleep)
        client._aizuchi_sessions = sessions  # type: ignore[attr-defined]
        sessions._hook_identify()
        sessions._hook_connections()
        sessions._hook_events()
        sessions._guard_parsers()
        return sessions

    async def connect(self) -> None:
        """``client.connect()`` until it returns (the client was closed) or raises; or, if the watch gives up
        meanwhile, stop it, close the client and raise :class:`FleetStopped`."""
        connecting = asyncio.create_task(self.client.connect(reconnect=True), name=f"connect {self.account.who}")

        def gave_up(_: asyncio.Future[Verdict]) -> None:
            self._stopping(connecting)

        self._stop.add_done_callback(gave_up)
        try:
            # Awaited as such, so that a cancellation of this task reaches connect() at once, before whoever
            # cancelled it closes the client (run.py does both in a row).
            await connecting
        except BaseException:
            if not self._stop.done() or _cancelled_from_outside():
                raise
            # Else it ended because the watch gave up: whatever it ended with, the reason is the watch's.
        finally:
            self._stop.remove_done_callback(gave_up)
        if self._stop.done():
            await self._stopping(connecting)
            raise FleetStopped(self._message(self._stop.result()))

    def broke(self, error: Exception) -> Verdict | None:
        """A plain client's connect() raised ``error``: a failed try if its session was not ready yet."""
        event, self._choked_on = self._choked_on, None
        if event is not None:
            return self.failed(None, unreadable(event, error))
        return self.failed(None, Cause("session", f"broke before it was ready ({_describe(error)})", Kind.LOST))

    def failed(self, shard: Shard, cause: Cause) -> Verdict | None:
        verdict = self.watch.failed(shard, self._loop.time(), cause, self._rng)
        if verdict is not None and verdict.give_up and not self._stop.done():
            self._stop.set_result(verdict)  # connect() stops discord.py, closes the client and raises
        elif verdict is not None:
            self._owed_s = max(self._owed_s, verdict.delay_s)
        return verdict

    async def give_up(self, verdict: Verdict) -> None:
        """After connect() ended: close the client and raise the reason."""
        await self._stopping(None)
        raise FleetStopped(self._message(verdict))

    def _stopping(self, connecting: asyncio.Task[None] | None) -> asyncio.Task[None]:
        """Stop discord.py's own retrying, and ours, and close the client (once): the task doing it."""
        if self._shutting is None:
            # Cancelled before the client is closed: a sharded client closed while a shard connects retries that
            # shard forever.
            tasks = [task for task in (connecting, *self._reconnecting.values()) if task is not None]
            for task in tasks:
                task.cancel()
            self._shutting = asyncio.create_task(self._shut(tasks), name=f"stop {self.account.who}")
        return self._shutting

    async def _shut(self, tasks: list[asyncio.Task[None]]) -> None:
        await self.client.close()
        for task in tasks:
            await _cancelled(task)

    def _message(self, verdict: Verdict) -> str:
        # Where discord.py was pointed (use_discord): Discord itself, or a Discord-compatible server.
        api = yarl.URL(discord.http.Route.BASE)
        server = api.host if api.explicit_port is None else f"{api.host}:{api.explicit_port}"
        on_discord = api.host in ("discord.com", "discordapp.com")
        return give_up_message(
            self.account.who, verdict, server=None if on_discord else server, library=discord.__version__
        )

    def _hook_identify(self) -> None:
        """Tell the watch of each IDENTIFY, after the client's own hook (discord.py's: 5 s between IDENTIFYs,
        Discord's limit; none before the first)."""
        own = self.client.before_identify_hook

        async def before_identify(shard_id: int | None, *, initial: bool = False) -> None:
            await own(shard_id, initial=initial)
            self.watch.identifying(shard_id, self._loop.time())

        self.client.before_identify_hook = before_identify  # type: ignore[method-assign]

    def _hook_connections(self) -> None:
        """Wait the back-off owed by a failed session before the next gateway connection opens (that of the RESUME
        discord.py tries first, or of the IDENTIFY). Not in ``before_identify_hook``: that runs on an open socket
        nobody reads, and discord.py's heartbeat checks take a wait of over 10 s there for a stalled connection.
        discord.py reconnects a sharded client's shards one at a time, so one wait for the client will do."""
        open_socket = self.client.http.ws_connect

        async def ws_connect(url: str, *, compress: int = 0) -> aiohttp.ClientWebSocketResponse:
            delay, self._owed_s = self._owed_s, 0.0
            if delay > 0:
                await self._sleep(delay)
            return await open_socket(url, compress=compress)

        self.client.http.ws_connect = ws_connect  # type: ignore[method-assign]

    def _hook_events(self) -> None:
        """See READY, ready, resumed and disconnect as discord.py dispatches them, before the client's handlers.
        The connection state keeps the dispatch it was made with; shards and sockets take the client's when they
        are made (after this)."""
        dispatch = self.client.dispatch
        prefix = "shard_" if self._sharded else ""
        connected, ready, resumed, lost = (f"{prefix}{name}" for name in ("connect", "ready", "resumed", "disconnect"))

        def watched(event: str, /, *args: Any, **kwargs: Any) -> None:
            if event in (connected, ready, resumed, lost):
                shard: Shard = args[0] if self._sharded and args else None
                if event == connected:
                    self.watch.connected(shard)
                elif event == ready:
                    self.watch.ready(shard)
                elif event == resumed:
                    self.watch.resumed(shard)
                else:
                    self._lost(shard)
            dispatch(event, *args, **kwargs)

        self.client.dispatch = watched  # type: ignore[method-assign]
        self.client._connection.dispatch = watched

    def _lost(self, shard: Shard) -> None:
        verdict = self.failed(shard, self._why_lost(shard))
        if verdict is not None and not verdict.give_up:
            _log.warning(
                "%s: its session %s; connecting again (shard %s; failed session %d of %d, backing off %.1fs)",
                self.account.who,
                verdict.causes[-1].predicate,
                "-" if shard is None else shard,
                verdict.tries,
                self.watch.tries,
                verdict.delay_s,
            )

    def _why_lost(self, shard: Shard) -> Cause:
        """Read off the socket that just went away (discord.py announces the disconnect before replacing it)."""
        try:
            ws = self.client._get_websocket(shard_id=shard) if self._sharded else self.client.ws
        except KeyError:  # a shard whose first connection is still being made
            ws = None
        ours = getattr(ws, "_close_code", None)  # what discord.py closed it with; None if the server closed it
        socket = getattr(ws, "socket", None)
        theirs = getattr(socket, "close_code", None)
        # discord.py closes with 1000 when told INVALID_SESSION (not resumable); its other 1000s (a shard
        # disconnected to start a new session, the client closed) come when no try is under way, and are not counted.
        if ours == 1000:
            return Cause("session", "was refused by the server (INVALID_SESSION)", Kind.REFUSED)
        if ours is None and theirs is not None:
            return Cause("session", f"was closed by the server with code {theirs} before it was ready", Kind.CLOSED)
        how = "the connection was lost" if ours is None else f"discord.py closed it with code {ours}"
        return Cause("session", f"ended before it was ready ({how})", Kind.LOST)

    def _guard_parsers(self) -> None:
        """discord.py's sharded client closes itself, for good, when a parser raises (its shard worker takes any
        unexpected error as fatal). Guard each parser instead: an event it chokes on costs its shard a new session
        (a fresh copy of its servers), not the bot's ears - unless every new session chokes, which the watch
        counts. A plain client's error escapes connect(), where stay_connected starts a new session; the guard
        only notes which event it was. discord.py has no hook for this, so the parsers are wrapped where its
        connection state keeps them."""
        parsers: dict[str, Callable[[Any], None]] = self.client._connection.parsers

        def guard(event: str, parse: Callable[[Any], None]) -> Callable[[Any], None]:
            def guarded(data: Any) -> None:
                try:
                    parse(data)
                except Exception as error:
                    if not self._sharded:
                        self._choked_on = event
                        raise
                    self._unreadable(event, data, error)

            return guarded

        for event, parse in list(parsers.items()):
            parsers[event] = guard(event, parse)

    def _unreadable(self, event: str, data: Any, error: Exception) -> None:
        assert isinstance(self.client, discord.AutoShardedClient)
        shard_id = self._shard_of(event, data)
        verdict = self.failed(shard_id, unreadable(event, error))
        if verdict is not None and verdict.give_up:
            return  # connect() closes the client
        _log.warning(
            "%s lost Discord (%s: %s); connecting again (shard %d, after a %s event it could not read%s)",
            self.account.who,
            type(error).__name__,
            error,
            shard_id,
            event,
            ""
            if verdict is None
            else f"; failed session {verdict.tries} of {self.watch.tries}, backing off {verdict.delay_s:.1f}s",
        )
        shard = self.client.get_shard(shard_id)
        under_way = self._reconnecting.get(shard_id)
        if shard is not None and (under_way is None or under_way.done()):  # one new session at a time
            task = asyncio.create_task(shard.reconnect(), name=f"reconnect shard {shard_id}")
            task.add_done_callback(self._reconnected)
            self._reconnecting[shard_id] = task

    def _reconnected(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and (error := task.exception()) is not None:
            _log.warning("%s could not start a new session (%s: %s)", self.account.who, type(error).__name__, error)

    def _shard_of(self, event: str, data: Any) -> int:
        """The shard an event came on: a guild's on its shard; READY names its own (when it has the field), or it
        is the one identifying; the rest (DMs, the bot's own user) come on shard 0."""
        if isinstance(data, dict):
            shard = data.get("shard")
            if event == "READY" and isinstance(shard, list) and shard and isinstance(shard[0], int):
                return shard[0]
            guild_id = str(data.get("guild_id") or "")
            if guild_id.isdigit():
                return (int(guild_id) >> 22) % (self.client.shard_count or 1)
        identifying = [shard for shard in self.watch.identifying_shards() if shard is not None]
        if event == "READY" and len(identifying) == 1:
            return identifying[0]
        return 0


def _cancelled_from_outside() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _cancelled(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait until it has ended, cancelling it again every second meanwhile: discord.py can lose
    a cancellation. One that lands as a shard's socket opens, while the client is being closed, comes out of
    ``asyncio.wait_for`` (Python 3.11) as the closed session's error, which ``launch_shard`` retries forever."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    if not task.cancelled():
        task.exception()  # retrieved: what it ended with does not matter any more


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
