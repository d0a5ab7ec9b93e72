"""Events between arbiter processes that share one PostgreSQL database: NOTIFY in the writer's transaction
(delivered at commit, never for a rollback), LISTEN on a dedicated connection in every process.

Every process hears every other's events, a transaction's together in one notification (or as few as fit); each
event names its channel, so a process parses only those of the channels someone watches there (``watching``), and
persona events (channel ""), which its registry needs.
An event of a channel no one watches here is one no one here would have been sent: a stream that subscribes
later starts from the history, as it would in one process.

A notification comes a moment after its commit; a read that must see every commit acknowledged before it (a status
read on one process right after a write on another) first waits for ``caught_up``: one round trip on the listening
connection, shared by the reads waiting at the time, which PostgreSQL answers only after the notifications
committed before it was sent."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import TYPE_CHECKING, Any

import asyncpg

from arbiter.events import parse_any_event
from arbiter.storage.liveness import Liveness, connection_gone
from arbiter.storage.writer import NOTIFY_CHANNEL

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping, Sequence

    from sqlalchemy.ext.asyncio import AsyncEngine

    from arbiter.events import Event

__all__ = ("LISTENER_NAME", "PostgresRelay")

_log = logging.getLogger(__name__)

# PostgreSQL refuses NOTIFY payloads of 8000 bytes or more (and fails the transaction that sent one).
_MAX_PAYLOAD = 7_900
# Characters of a larger event's JSON per notification: even at 4 bytes each, or 2 for a JSON escape, a part
# stays under the limit with its envelope.
_PART = 1_500
LISTENER_NAME = "aizuchi listener"  # the listening connection's application_name
# Channels' versions per notification: ids are at most 64 characters (ASCII), versions at most 19 digits, so these
# take under half of one.
_VERSIONS_PER_NOTIFICATION = 40
LIVENESS = Liveness()  # how a listening connection that died silently is noticed (a test makes it quicker)


class PostgresRelay:
    def __init__(
        self,
        engine: AsyncEngine,
        publish: Callable[[Sequence[Event]], None],
        watching: Callable[[str], bool] = lambda _channel_id: True,
        *,
        changed: Callable[[Mapping[str, int]], None] = lambda _versions: None,
        hearing: Callable[[bool], None] = lambda _listening: None,
        liveness: Liveness | None = None,
    ) -> None:
        """``watching(channel_id)``: whether anyone in this process follows the channel's events. ``changed``: told
        the versions another process saved channels at; ``hearing``: told when the listening connection is up (and
        so every change is heard from then on) and when it is lost. ``liveness``: how a connection that died
        silently is noticed, and how soon it is replaced (``LIVENESS`` by default)."""
        # The listening connection is made from the engine's URL, outside its pool (see ``_listen_once``).
        self._dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        self._publish = publish
        self._watching = watching
        self._changed = changed
        self._hearing = hearing
        self.origin = uuid.uuid4().hex[:12]
        self._own = f'{{"origin": "{self.origin}"'  # how each notification of this process's begins
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._parts: dict[str, list[str]] = {}  # a large event's parts received so far, by its key
        self._skipped: set[str] = set()  # the keys of large events whose parts are being skipped
        # Reads waiting for the next round trip on the listening connection (see ``caught_up``), and that round
        # trip's wake-up; the connection while it listens.
        self._waiting: list[asyncio.Future[bool]] = []
        self._round_wanted = asyncio.Event()
        self._listening: asyncpg.Connection | None = None
        self._liveness = liveness or LIVENESS
        self._lost_because = ""
        # Called (as a task) each time it listens again after a loss: the events other processes committed meanwhile
        # were never heard here, so the streams must read them from the database.
        self.heard_again: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._catching_up: set[asyncio.Task[None]] = set()

    def payloads(self, events: Sequence[Event], versions: Mapping[str, int]) -> list[str]:
        """A transaction's events, and the versions it saved its channels at, in as few notifications as fit: each
        notification costs the listeners (and the server) about as much to deliver as the events in it cost to
        read, so a batch's events travel together. Each names its channel, so a listener reads only the ones it
        wants; the versions (with the first) tell every listener which channels changed, events or not."""
        plain = f'{{"origin": "{self.origin}", "events": ['
        *full, head = self._version_heads(versions) or [plain]
        payloads = [start + "]}" for start in full]  # versions alone, when there are too many to share one
        entries: list[str] = []
        size = len(head) + 2
        for event in events:
            raw = event.model_dump_json()
            entry = json.dumps([event.channel_id, raw], ensure_ascii=False)
            length = len(entry.encode()) + 1
            if entries and size + length >= _MAX_PAYLOAD:
                payloads.append(head + ",".join(entries) + "]}")
                entries, head, size = [], plain, len(plain) + 2
            if size + length < _MAX_PAYLOAD:
                entries.append(entry)
                size += length
                continue
            payloads += self._parts_of(event.channel_id, raw)
        if entries or head is not plain:
            payloads.append(head + ",".join(entries) + "]}")
        return payloads

    def _version_heads(self, versions: Mapping[str, int]) -> list[str]:
        """Envelope heads carrying ``versions``, as many as they need (a few hundred channels fit in one)."""
        items = sorted(versions.items())
        heads = []
        for first in range(0, len(items), _VERSIONS_PER_NOTIFICATION):
            saved = json.dumps(dict(items[first : first + _VERSIONS_PER_NOTIFICATION]), ensure_ascii=False)
            heads.append(f'{{"origin": "{self.origin}", "versions": {saved}, "events": [')
        return heads

    def _parts_of(self, channel: str, raw: str) -> list[str]:
        # Too big for one notification (a long message, the settings of a large fleet): sent in parts.
        # PostgreSQL delivers one transaction's notifications in order and never interleaves two transactions',
        # so the parts arrive one after another and the listener joins them.
        parts = [raw[start : start + _PART] for start in range(0, len(raw), _PART)]
        key = uuid.uuid4().hex[:12]
        return [
            json.dumps(
                {"origin": self.origin, "channel": channel, "part": [key, index, len(parts)], "text": part},
                ensure_ascii=False,
            )
            for index, part in enumerate(parts)
        ]

    async def caught_up(self) -> bool:
        """Once every notification committed before this call has been handled here: True. False at once when
        not listening (or when the connection is lost meanwhile): then the caller must read what it needs.

        Why one round trip is enough (PostgreSQL's ``commands/async.c``): a committing session signals every
        listening one before its commit is acknowledged, and a listening session sends the notifications it was
        signalled about before it answers the next command (at once if idle, else just before it next goes
        idle). So the answer to a command sent after a commit was acknowledged comes after that commit's
        notifications; asyncpg hands each to the listener (``call_soon``) before it wakes the command's caller.
        The reads waiting when a round trip starts share it; those that come during it wait for the next."""
        if self._listening is None:
            return False
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        self._round_wanted.set()
        return await waiter

    async def _rounds(self, driver: asyncpg.Connection, lost: asyncio.Event) -> None:
        """The round trips ``caught_up`` waits for, one at a time, on the listening connection; and, when none was
        asked for a while, one as a probe (``Liveness``). One that fails because the connection is gone (or goes
        unanswered: the link died silently) sets ``lost``, and ends this task."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._round_wanted.wait(), self._liveness.probe_every_s)
            self._round_wanted.clear()
            waiting, self._waiting = self._waiting, []
            try:
                # As cheap a command as the server answers (asyncpg fails on an empty query).
                await driver.execute("SELECT 1", timeout=self._liveness.timeout_s)
            except BaseException as error:
                # Whatever it was, the reads waiting must not wait forever: they read what they need instead.
                self._answer(waiting, caught_up=False)
                if not isinstance(error, (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)):
                    raise  # (TimeoutError is an OSError)
                if connection_gone(error):
                    self._lost_because = f"no answer to a round trip: {error!r}"
                    lost.set()
                    return
                _log.info("no round trip on the listening connection (%s): reads check versions", error)
                continue
            self._answer(waiting, caught_up=True)

    @staticmethod
    def _answer(waiting: list[asyncio.Future[bool]], *, caught_up: bool) -> None:
        for waiter in waiting:
            if not waiter.done():  # its reader may have gone (cancelled)
                waiter.set_result(caught_up)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="aizuchi-pg-listen")
        await asyncio.wait_for(self._connected.wait(), timeout=30)

    async def close(self) -> None:
        for task in [self._task, *self._catching_up]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload.startswith(self._own):
            return  # our own (every listener hears every notification): published locally when it committed
        try:
            envelope = json.loads(payload)
            if envelope.get("versions"):
                self._changed(envelope["versions"])
            if "events" in envelope:
                wanted = [raw for channel, raw in envelope["events"] if not channel or self._watching(channel)]
                if wanted:
                    self._publish([parse_any_event(raw) for raw in wanted])
                return
            if "event" in envelope:  # one event alone, as an older process sends them
                raw = envelope["event"] if self._wanted(envelope) else None
            else:
                raw = self._joined(envelope)
            if raw is not None:
                self._publish([parse_any_event(raw)])
        except (ValueError, KeyError, TypeError) as error:
            _log.warning("ignoring a malformed notification: %s", error)

    def _wanted(self, envelope: dict[str, Any]) -> bool:
        """Whether to parse and publish the event: a persona's (channel ""), or one of a channel someone here
        watches. (An envelope without a channel, from an older process, is parsed as before.)"""
        channel = envelope.get("channel")
        return not channel or self._watching(channel)

    def _joined(self, envelope: dict[str, Any]) -> str | None:
        """The large event once its last part is in, else None (also when it is skipped: decided at its first
        part, so a stream that subscribes between two parts gets the next event whole, not half of this one)."""
        key, index, count = envelope["part"]
        if index == 0 and not self._wanted(envelope):
            self._skipped.add(key)
        if key in self._skipped:
            if index == count - 1:
                self._skipped.discard(key)
            return None
        parts = self._parts.setdefault(key, [])
        if index != len(parts):
            del self._parts[key]
            raise ValueError(f"part {index} of event {key} arrived after {len(parts)} parts")
        parts.append(envelope["text"])
        if len(parts) < count:
            return None
        del self._parts[key]
        return "".join(parts)

    async def _listen_forever(self) -> None:
        delay = self._liveness.retry_first_s
        deaf_since: float | None = None  # when the last listening connection was lost (None: never was)
        while True:
            try:
                since = await self._listen_once(deaf_since)
                deaf_since = time.monotonic()
                delay = self._liveness.retry_first_s
                _log.warning(
                    "lost the PostgreSQL listening connection after %.1fs (%s): not hearing other arbiter processes'"
                    " events; reads check versions; listening again in %.1fs",
                    deaf_since - since,
                    self._lost_because,
                    delay,
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:
                # repr: a timeout's str is empty.
                _log.warning("cannot listen for events (%r); retrying in %.1fs", error, delay)
            await asyncio.sleep(delay)
            delay = self._liveness.next_retry(delay)

    async def _listen_once(self, deaf_since: float | None) -> float:
        """Connect, listen until the connection is lost (then return when it began listening), and drop it.

        The connection is the relay's own, not one of the engine's pool: a checkout there waits behind the writer's
        connections (up to 30 s, saying nothing, while each waits out its statement's bound on a cut link) and may
        hand out an idle one whose link died; and one given up must be dropped, never reset or returned to a pool.
        Each step of setting it up is bounded by the driver, and the whole by ``_set_up_bound_s`` whatever the
        driver does inside: an attempt over a cut link fails within seconds, says so, and the next one is made."""
        # Parts that came before a lost connection will never be completed.
        self._parts.clear()
        self._skipped.clear()
        driver: asyncpg.Connection | None = None
        try:
            async with asyncio.timeout(self._set_up_bound_s()):
                driver = await asyncpg.connect(
                    self._dsn,
                    timeout=self._liveness.timeout_s,
                    command_timeout=self._liveness.timeout_s,  # any statement the driver sends, ours or its own
                    # Named in pg_stat_activity, where its last query (the round trips' SELECT 1) no longer says it
                    # listens: an operator, or a test cutting this one connection, finds it by this name.
                    server_settings={"application_name": LISTENER_NAME},
                )
                # The server gives it up too if the link dies (``Liveness.server_side``): one round trip.
                await driver.execute("; ".join(self._liveness.server_side()), timeout=self._liveness.timeout_s)
                await driver.add_listener(NOTIFY_CHANNEL, self._on_notify)
            return await self._listen_on(driver, deaf_since)
        except asyncio.CancelledError:
            if driver is not None:  # closing: a goodbye to the server (bounded), then dropped all the same
                with contextlib.suppress(Exception):
                    await driver.close(timeout=self._liveness.timeout_s)
            raise
        finally:
            if driver is not None:
                driver.terminate()  # no wait: gone whether it answers or not

    def _set_up_bound_s(self) -> float:
        # Connecting, the settings and LISTEN take one bound each at most (the driver's); a second to spare.
        return 3 * self._liveness.timeout_s + 1

    async def _listen_on(self, driver: asyncpg.Connection, deaf_since: float | None) -> float:
        """Listen on ``driver`` until it is lost (then return when it began listening), or until cancelled."""
        lost = asyncio.Event()
        self._lost_because = "the server or the network closed it"
        driver.add_termination_listener(lambda _c: lost.set())
        if driver.is_closed():
            lost.set()  # (before it was listened to)
        rounds: asyncio.Task[None] | None = None
        since = time.monotonic()
        try:
            self._hearing(True)
            self._listening = driver
            rounds = asyncio.create_task(self._rounds(driver, lost), name="aizuchi-pg-rounds")
            since = time.monotonic()
            self._connected.set()
            if deaf_since is None:
                _log.debug("listening for events from other arbiter processes")
            else:
                # Warned of as its loss was: an operator who saw that one sees it end.
                _log.warning(
                    "listening again for other arbiter processes' events, after %.1fs deaf; streams catch up from"
                    " the database",
                    since - deaf_since,
                )
                self._catch_up()
            await lost.wait()
        finally:
            self._listening = None
            if rounds is not None:
                rounds.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await rounds
            self._answer(self._waiting, caught_up=False)
            self._waiting = []
            self._hearing(False)  # what comes until it listens again goes unheard
        return since

    def _catch_up(self) -> None:
        """Events of other processes were missed while not listening: the streams read them from the database."""
        if self.heard_again is None:
            return
        task = asyncio.create_task(self.heard_again(), name="aizuchi-pg-catch-up")
        self._catching_up.add(task)
        task.add_done_callback(self._caught)

    def _caught(self, task: asyncio.Task[None]) -> None:
        self._catching_up.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("streams could not catch up after listening again", exc_info=task.exception())
