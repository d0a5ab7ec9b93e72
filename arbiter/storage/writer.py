"""The single writer: every change to a channel runs here, in batches, one transaction per batch.

Why batches: concurrent requests queue up while a transaction commits; the next transaction takes all of
them at once, so BEGIN/COMMIT and the trip to the database are shared. Each operation still sees the state
left by the one before it, and its caller hears back only after the commit: nothing is acknowledged that a
crash could lose. Writes are staged and flushed with one ``executemany`` per table at the end of the batch.
One operation cannot fail the others it was batched with: a step that raises fails alone, and a batch whose
write the database refuses is tried again in halves until only the operation at fault fails.

Why it is safe across processes: on PostgreSQL a batch on channels this process remembers runs on that memory and
is committed by one statement that checks each channel's version is still the one remembered (optimistic,
``arbiter.storage.pg_commit``); otherwise, or when that statement is refused (another process changed a channel),
the batch runs under the channels' row locks (SELECT ... FOR UPDATE, in id order), their state read inside them.
On SQLite one process owns the file (``arbiter.storage.lock``), so the writer keeps each channel's committed state
in memory and skips the reads; its transactions begin with BEGIN IMMEDIATE all the same.

Steps are synchronous functions of a :class:`WriteTx`. On SQLite the whole batch runs on the database's
writer thread, so a step must not touch the event loop: it reads, decides (the pure core), applies, and
returns a value; events it emits are published on the loop after the commit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError, DisconnectionError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from arbiter.core.errors import ArbiterError
from arbiter.core.ledger import active, split
from arbiter.events import Event
from arbiter.storage import repository as repo
from arbiter.storage.database import Database, HeldConnection, PostgresDatabase, SqliteDatabase
from arbiter.storage.errors import StorageError
from arbiter.storage.pg_commit import BatchWrites, commit_statement

if TYPE_CHECKING:
    from arbiter.core.models import ChannelState, Memory, Message, Spend
    from arbiter.core.rules import Transition

__all__ = ("NOTIFY_CHANNEL", "BatchWriter", "Clock", "WriteTx", "pg_notify")

_log = logging.getLogger(__name__)

R = TypeVar("R")
Clock = Callable[[], float]
# A transaction's events, and the versions it saves its channels at, as the payloads of its notifications to the
# other processes (PostgreSQL).
Notifier = Callable[[Sequence[Event], Mapping[str, int]], list[str]]
Step = Callable[["WriteTx"], R]

NOTIFY_CHANNEL = "aizuchi_events"  # what every arbiter process on a shared database LISTENs to


class _NeedsLock(Exception):
    """A step needs the batch written under the channels' row locks (it writes what the one-statement commit does
    not: a new channel, a cleared history, settings...): the batch runs again that way."""


class _Staged:
    """Writes of one batch, merged so each row is written once."""

    def __init__(self) -> None:
        self.new_spends: dict[str, tuple[str, Spend]] = {}
        self.changed_spends: dict[str, tuple[str, Spend]] = {}  # by id: (channel id, spend)
        self.new_messages: dict[tuple[str, int], Message] = {}
        self.changed_messages: dict[tuple[str, int], Message] = {}
        self.by_platform_id: dict[tuple[str, str], Message] = {}

    def add(self, transition: Transition) -> None:
        channel_id = transition.state.channel_id
        for spend in transition.new_spends:
            self.new_spends[spend.id] = (channel_id, spend)
        for spend in transition.changed_spends:
            if spend.id in self.new_spends:
                self.new_spends[spend.id] = (channel_id, spend)
            else:
                self.changed_spends[spend.id] = (channel_id, spend)
        for message in transition.new_messages:
            self._index(message)
            self.new_messages[(message.channel_id, message.seq)] = message
        for message in transition.changed_messages:
            self._index(message)
            key = (message.channel_id, message.seq)
            if key in self.new_messages:
                self.new_messages[key] = message
            else:
                self.changed_messages[key] = message

    def _index(self, message: Message) -> None:
        if message.platform_message_id is not None:
            self.by_platform_id[(message.channel_id, message.platform_message_id)] = message

    def message(self, channel_id: str, seq: int) -> Message | None:
        key = (channel_id, seq)
        return self.changed_messages.get(key) or self.new_messages.get(key)

    def drop_messages(self, channel_id: str) -> None:
        for table in (self.new_messages, self.changed_messages):
            for seq_key in [key for key in table if key[0] == channel_id]:
                del table[seq_key]
        for platform_key in [key for key in self.by_platform_id if key[0] == channel_id]:
            del self.by_platform_id[platform_key]

    def flush(self, conn: Connection) -> None:
        repo.insert_spends(conn, list(self.new_spends.values()))
        repo.update_spends(conn, [spend for _, spend in self.changed_spends.values()])
        # Changed before new: a message moved to the history's end (rules.move_to_end) hands its platform id on.
        repo.update_messages(conn, list(self.changed_messages.values()))
        repo.insert_messages(conn, list(self.new_messages.values()))


class WriteTx:
    """The open transaction as one step sees it: the channel's current state, lookups, and apply.

    A step reads what it needs, decides (the pure core), then calls :meth:`apply` once. Raising an
    ``ArbiterError`` before apply leaves no trace in the batch.
    """

    def __init__(self, conn: Connection, clock: Clock, memory: _Memory, *, optimistic: bool = False) -> None:
        """``optimistic`` (a shared database): the channels are as this process remembers them, and the batch is
        committed by one statement, only if their versions are still the ones remembered (``arbiter.storage.
        pg_commit``); the connection is in autocommit, so every write waits for that statement."""
        self.conn = conn
        self._clock = clock
        self._loaded_at = clock()
        self._memory = memory
        self.optimistic = optimistic
        self._memories: dict[tuple[str, str], Memory] = {}  # optimistic: notes to store, by (channel, persona)
        # Optimistic: tokens to add, by (channel, persona, day): prompt, completion, requests.
        self._usage: dict[tuple[str, str, int], tuple[int, int, int]] = {}
        self.commit: tuple[str, tuple[Any, ...]] | None = None  # optimistic: the statement that commits the batch
        self.states: dict[str, ChannelState] = {}
        self.versions: dict[str, int] = {}  # as read under the row lock, or remembered (shared database only)
        self._dirty: set[str] = set()
        self._settings_dirty: set[str] = set()
        self._staged = _Staged()
        self.events: list[Event] = []
        self._step_events: list[Event] = []

    def now(self) -> float:
        return self._clock()

    def _prefetch(self, channel_ids: Iterable[str]) -> None:
        """Lock and load, in one go and in id order, the channels the batch's steps said they will touch.
        Optimistic: each as this process remembers it (its commit checks that no other process changed it)."""
        missing = [cid for cid in set(channel_ids) if cid not in self.states]
        if not missing:
            return
        if self.optimistic:
            for channel_id in missing:
                self._remembered(channel_id)
            return
        if not self._memory.owned:
            self._lock_and_load(missing)
            return
        for channel_id in list(missing):
            cached = self._memory.states.get(channel_id)
            if cached is not None:
                self.states[channel_id] = without_expired(cached, self._loaded_at)
                missing.remove(channel_id)
        if missing:
            self.states.update(repo.load_channels(self.conn, missing, self._loaded_at, lock=True))

    def _remembered(self, channel_id: str) -> None:
        """Optimistic: the channel as this process committed it last; if it does not know it, the batch runs under
        the row locks, which read it."""
        state = self._memory.states.get(channel_id)
        version = self._memory.versions.get(channel_id)
        if state is None or version is None:
            raise _NeedsLock
        self.states[channel_id] = without_expired(state, self._loaded_at)
        self.versions[channel_id] = version

    def _lock_and_load(self, channel_ids: Sequence[str], spend_ids: Sequence[str] = ()) -> None:
        """Shared database: lock the rows (one statement, in id order, so processes cannot deadlock), reuse the
        state this process committed last for each channel whose version is still the one it wrote, bring the
        ones another process changed since up to date (their rows, and the spends written since), and load the
        others. The version is read under the lock, so no other process can change it before this one commits."""
        memory = self._memory
        if not any(channel_id in memory.states for channel_id in channel_ids):
            loaded = repo.load_versioned(self.conn, channel_ids, self._loaded_at, lock=True, spend_ids=spend_ids)
        else:
            unknown: list[str] = []
            changed: dict[str, tuple[int, ChannelState]] = {}
            for channel_id, version in repo.lock_versions(self.conn, channel_ids).items():
                cached = memory.states.get(channel_id)
                known = memory.versions.get(channel_id)
                if cached is None or known is None:
                    unknown.append(channel_id)
                elif known == version:
                    self.states[channel_id] = without_expired(cached, self._loaded_at)
                    self.versions[channel_id] = version
                else:
                    changed[channel_id] = (known, cached)
            loaded = repo.load_versioned(self.conn, unknown, self._loaded_at, spend_ids=spend_ids) if unknown else {}
            if changed:
                for channel_id, (version, state) in repo.load_since(self.conn, changed).items():
                    loaded[channel_id] = (version, without_expired(state, self._loaded_at))
        for channel_id, (version, state) in loaded.items():
            self.states[channel_id] = state
            self.versions[channel_id] = version

    def channel(self, channel_id: str, *, spend_ids: Iterable[str] = ()) -> ChannelState | None:
        """The channel's current state, locked for the rest of the batch; None if it does not exist."""
        wanted = [spend_id for spend_id in spend_ids if spend_id]
        state = self.states.get(channel_id)
        if state is None and self.optimistic:
            raise _NeedsLock  # a channel the batch did not say it would touch: read it under its lock
        if state is None and not self._memory.owned:
            self._lock_and_load([channel_id], wanted)
            state = self.states.get(channel_id)
        elif state is None:
            cached = self._memory.states.get(channel_id)
            state = None if cached is None else without_expired(cached, self._loaded_at)
            if state is None:
                state = repo.load_channel(self.conn, channel_id, self._loaded_at, lock=True, spend_ids=wanted)
        if state is None:
            return None
        missing = [spend_id for spend_id in wanted if state.spend(spend_id) is None]
        if missing:
            spends, claims = split([*state.spends, *state.claims, *repo.spends_by_id(self.conn, channel_id, missing)])
            state = replace(state, spends=spends, claims=claims)
        self.states[channel_id] = state
        return state

    def message(self, channel_id: str, seq: int) -> Message | None:
        staged = self._staged.message(channel_id, seq)
        return staged if staged is not None else repo.message(self.conn, channel_id, seq)

    def message_by_platform_id(self, channel_id: str, platform_message_id: str) -> Message | None:
        staged = self._staged.by_platform_id.get((channel_id, platform_message_id))
        if staged is not None:
            return staged
        return repo.message_by_platform_id(self.conn, channel_id, platform_message_id)

    def require_lock(self) -> None:
        """Before a step writes what the one-statement commit does not: the batch runs under the row locks."""
        if self.optimistic:
            raise _NeedsLock

    def delete_history(self, channel_id: str) -> int:
        """Delete the channel's messages, including any staged earlier in this batch."""
        self.require_lock()
        self._staged.drop_messages(channel_id)
        return repo.delete_history(self.conn, channel_id)

    def create_channel(self, state: ChannelState) -> ChannelState:
        """Create the channel, or return the one another process created a moment ago."""
        self.require_lock()
        if repo.insert_channel(self.conn, state, self.now()):
            self.states[state.channel_id] = state
            self.versions[state.channel_id] = 0
            return state
        existing = self.channel(state.channel_id)
        assert existing is not None
        return existing

    def save_memory(self, memory: Memory) -> bool:
        """Store a persona's notes unless newer ones are stored; whether they were. (Optimistic: with the batch's
        commit, which fails whole when newer ones are stored, for the locked way to tell.)"""
        if not self.optimistic:
            return repo.save_memory(self.conn, memory)
        key = (memory.channel_id, memory.persona_id)
        if key in self._memories:
            raise _NeedsLock  # twice in one batch: which one stays is for the locked way to tell
        self._memories[key] = memory
        return True

    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int]) -> None:
        """Count a request's tokens (prompt, completion) to the persona's usage of the day."""
        if not self.optimistic:
            repo.add_usage(self.conn, channel_id, persona_id, day=day, tokens=tokens)
            return
        prompt, completion = tokens
        before = self._usage.get((channel_id, persona_id, day), (0, 0, 0))
        self._usage[(channel_id, persona_id, day)] = (before[0] + prompt, before[1] + completion, before[2] + 1)

    def apply(self, transition: Transition) -> None:
        """Stage what a transition changed; everything is written at the end of the batch."""
        self._staged.add(transition)
        self.replace_state(transition.state)

    def replace_state(self, state: ChannelState) -> None:
        previous = self.states.get(state.channel_id)
        if previous is None or previous.settings is not state.settings:
            self.require_lock()  # the one-statement commit writes a channel's state, not its settings
            self._settings_dirty.add(state.channel_id)
        self.states[state.channel_id] = state
        self._dirty.add(state.channel_id)

    def emit(self, *events: Event) -> None:
        self._step_events.extend(events)

    def _end_step(self, *, keep: bool) -> None:
        if keep:
            self.events.extend(self._step_events)
        self._step_events.clear()

    def _finish(self, notifications: list[str]) -> None:
        """Write what the batch changed, and queue its notifications (PostgreSQL). Optimistic: only gather them, in
        ``commit``, for the writer to send as one statement (which also checks the channels it only read)."""
        if self.optimistic:
            staged = self._staged
            self.commit = commit_statement(
                BatchWrites(
                    channels=[
                        (self.states[channel_id], self.versions[channel_id]) for channel_id in sorted(self._dirty)
                    ],
                    unchanged=[(cid, version) for cid, version in self.versions.items() if cid not in self._dirty],
                    new_spends=list(staged.new_spends.values()),
                    changed_spends=list(staged.changed_spends.values()),
                    new_messages=list(staged.new_messages.values()),
                    changed_messages=list(staged.changed_messages.values()),
                    memories=list(self._memories.values()),
                    usage=[(*key, *added) for key, added in self._usage.items()],
                ),
                now=self.now(),
                notify_channel=NOTIFY_CHANNEL,
                notifications=notifications,
            )
            return
        self._staged.flush(self.conn)
        dirty = [self.states[channel_id] for channel_id in sorted(self._dirty)]
        repo.save_channels(self.conn, dirty, self.now(), with_settings=self._settings_dirty)
        pg_notify(self.conn, NOTIFY_CHANNEL, notifications)

    def _saved_versions(self) -> dict[str, int]:
        """The version each channel the batch changed is saved at (shared database)."""
        return {cid: version for cid, version in self._committed_versions().items() if cid in self._dirty}

    def _committed_versions(self) -> dict[str, int]:
        """Each channel's version once this transaction commits (saving a channel counts one more)."""
        return {channel_id: version + (channel_id in self._dirty) for channel_id, version in self.versions.items()}


class _Memory:
    """The channels' states as this process last committed them. ``owned``: no other process writes the database
    (SQLite), so they are current as they are; else (PostgreSQL) each is current only while the channel's version
    is the one in ``versions``: a channel another process changed is forgotten when this one hears of it, and
    ``heard`` says whether it hears of every such change (its relay listens)."""

    def __init__(self, *, owned: bool) -> None:
        self.owned = owned
        self.states: dict[str, ChannelState] = {}
        self.versions: dict[str, int] = {}
        self.heard = False
        # Channels another process saved at a version newer than the one remembered, heard of while a batch of this
        # one's was on its way: the state that batch committed is out of date when it comes back.
        self._newer: dict[str, int] = {}

    def remember(self, states: dict[str, ChannelState], versions: dict[str, int]) -> None:
        if self.owned:
            self.states.update(states)
            return
        for channel_id, version in versions.items():
            if self._newer.get(channel_id, -1) > version:
                continue
            self._newer.pop(channel_id, None)
            self.states[channel_id] = states[channel_id]
            self.versions[channel_id] = version

    def changed_elsewhere(self, versions: Mapping[str, int]) -> None:
        """Another process saved these channels at these versions."""
        for channel_id, version in versions.items():
            if self.versions.get(channel_id, -1) < version:
                self.states.pop(channel_id, None)
                self.versions.pop(channel_id, None)
                self._newer[channel_id] = max(version, self._newer.get(channel_id, -1))

    def clear(self) -> None:
        self.states.clear()
        self.versions.clear()
        self._newer.clear()


def without_expired(state: ChannelState, now: float) -> ChannelState:
    """Drop what was refunded by ``now`` (spends are sorted, so a look at the front says whether any are)."""
    spends_expired = bool(state.spends) and state.spends[0].refund_at <= now
    claims_expired = any(claim.refund_at <= now for claim in state.claims)
    if not spends_expired and not claims_expired:
        return state
    return replace(
        state,
        spends=active(state.spends, now) if spends_expired else state.spends,
        claims=tuple(claim for claim in state.claims if claim.refund_at > now) if claims_expired else state.claims,
    )


class _Op(Generic[R]):
    __slots__ = ("channel_ids", "future", "step")

    def __init__(self, step: Step[R], future: asyncio.Future[R], channel_ids: Sequence[str]) -> None:
        self.step = step
        self.future = future
        self.channel_ids = channel_ids


class _StepFailed(Exception):
    def __init__(self, index: int, error: ArbiterError) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


_Outcomes = list[tuple[_Op[Any], Any]]
_STOP = object()


class BatchWriter:
    """Runs steps in batches. On SQLite a thread of its own drives the batches back to back, so the database
    never waits for the event loop between two transactions; on PostgreSQL an asyncio task does."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        publish: Callable[[Sequence[Event]], None],
        *,
        notifier: Notifier | None = None,
        owns_database: bool = False,
        max_batch: int = 256,
    ) -> None:
        """``owns_database``: no other process writes this database, so committed states may be reused as they are;
        else each is reused only while the channel's version says no other process changed it."""
        self._database = database
        self._clock = clock
        self._publish = publish
        self.notifier = notifier
        self._max_batch = max_batch
        self._memory = _Memory(owned=owns_database)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        # SQLite: a thread and a thread-safe queue. PostgreSQL: a task and a list.
        self._thread: threading.Thread | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._task: asyncio.Task[None] | None = None
        self._pending: list[_Op[Any]] = []
        self._wake = asyncio.Event()
        self._held: HeldConnection | None = None  # PostgreSQL: the connection of the one-statement commits

    def cached(self, channel_id: str) -> ChannelState | None:
        """The channel's last committed state, if this process owns the database and has it in memory."""
        if not self._memory.owned:
            return None
        state = self._memory.states.get(channel_id)
        return None if state is None else without_expired(state, self._clock())

    async def remembered(self, channel_id: str) -> ChannelState | None:
        """The channel's last committed state if this process has it and it is still current: at once when the
        process owns the database, or when it hears of every other process's change (its relay listens: a
        channel changed elsewhere is forgotten as soon as the notification comes, a moment after that commit);
        else when the channel's version is still the one this process committed (one small query, instead of
        the channel's row and every active spend)."""
        if self._memory.owned:
            return self.cached(channel_id)
        state = self._memory.states.get(channel_id)
        version = self._memory.versions.get(channel_id)
        if state is None or version is None:
            return None
        if not self._memory.heard and await self._database.read(repo.channel_version, channel_id) != version:
            return None
        return without_expired(state, self._clock())

    def changed_elsewhere(self, versions: Mapping[str, int]) -> None:
        """Another process saved these channels at these versions (its notification said so)."""
        self._memory.changed_elsewhere(versions)

    def hearing(self, listening: bool) -> None:
        """Whether this process hears every other's change from now on (its relay's listening connection is up).
        A listener that starts again may have missed some: what was remembered is forgotten."""
        if listening:
            self._memory.clear()
        self._memory.heard = listening

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if isinstance(self._database, SqliteDatabase):
            self._thread = threading.Thread(target=self._drive_thread, name="aizuchi-writer", daemon=True)
            self._thread.start()
        else:
            self._task = asyncio.create_task(self._drive_task(), name="aizuchi-writer")

    async def close(self) -> None:
        """Finish what was queued, then stop."""
        self._closing = True
        if self._thread is not None:
            self._inbox.put(_STOP)
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
            self._thread = None
        if self._task is not None:
            self._wake.set()
            await self._task
            self._task = None
        if self._held is not None:
            await self._held.close()
            self._held = None

    async def run(self, step: Step[R], channel_ids: Sequence[str] = ()) -> R:
        """Run ``step`` inside the next batch's transaction; return its result once committed.

        ``channel_ids``: the channels the step will touch, locked before any step of the batch runs.
        """
        if self._closing or self._loop is None:
            raise StorageError("the arbiter is shutting down", code="shutting_down")
        future: asyncio.Future[R] = self._loop.create_future()
        op = _Op(step, future, channel_ids)
        if self._thread is not None:
            self._inbox.put(op)
        else:
            self._pending.append(op)
            self._wake.set()
        return await future

    # --- SQLite: the writer's own thread ---------------------------------------------------------------

    def _drive_thread(self) -> None:
        assert isinstance(self._database, SqliteDatabase) and self._loop is not None
        while True:
            first = self._inbox.get()
            if first is _STOP:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    self._inbox.put(_STOP)
                    break
                batch.append(item)
            try:
                outcomes, events = self._settle(batch, self._database.write_blocking)
            except Exception as error:
                # As on PostgreSQL: this batch's callers hear of it, and the thread lives on for the next.
                _log.exception("writer batch failed")
                self._forget()
                failure = StorageError(f"internal error: {type(error).__name__}")
                outcomes, events = [(op, failure) for op in batch], []
            self._loop.call_soon_threadsafe(self._deliver, outcomes, events)

    def _settle(self, batch: list[_Op[Any]], write: Callable[..., Any]) -> tuple[_Outcomes, list[Event]]:
        """Run a batch to the end, failing only what must fail. Called on the writer thread."""
        pending = [op for op in batch if not op.future.done()]
        failed: _Outcomes = []
        while pending:
            try:
                outcomes, events, (states, versions) = write(self._transaction, pending)
            except _StepFailed as error:
                # A step hit something unexpected and the transaction rolled back. That step fails alone; the
                # others run again in a fresh transaction (steps write only through it, so this is safe).
                self._forget()
                failed.append((pending.pop(error.index), error.error))
                continue
            except (SQLAlchemyError, OSError) as error:
                self._forget()
                if _one_write_refused(error, len(pending)):
                    _log.debug("the database refused a batch of %d operations; writing it in halves", len(pending))
                    middle = len(pending) // 2
                    first, first_events = self._settle(pending[:middle], write)
                    second, second_events = self._settle(pending[middle:], write)
                    return [*failed, *first, *second], [*first_events, *second_events]
                return [*failed, *_database_failed(pending, error)], []
            self._memory.remember(states, versions)
            return [*failed, *zip(pending, outcomes, strict=True)], events
        return failed, []

    # --- PostgreSQL: an asyncio task -------------------------------------------------------------------

    async def _drive_task(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                # Let the requests that have come in meanwhile (their bytes already read) join this batch: a commit
                # costs about the same for one operation as for ten.
                waiting = len(self._pending)
                await asyncio.sleep(0)
                while len(self._pending) > waiting and len(self._pending) < self._max_batch:
                    waiting = len(self._pending)
                    await asyncio.sleep(0)
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                try:
                    outcomes, events = await self._settle_async(batch)
                except Exception as error:
                    # Whatever went wrong, this batch's callers must hear of it and the writer must go on.
                    _log.exception("writer batch failed")
                    failure = StorageError(f"internal error: {type(error).__name__}")
                    outcomes, events = [(op, failure) for op in batch], []
                self._deliver(outcomes, events)
            if self._closing:
                return

    async def _settle_async(self, batch: list[_Op[Any]]) -> tuple[_Outcomes, list[Event]]:
        pending = [op for op in batch if not op.future.done()]
        if pending and isinstance(self._database, PostgresDatabase):
            settled = await self._settle_optimistic(self._database, pending)
            if settled is not None:
                return settled
        failed: _Outcomes = []
        while pending:
            try:
                outcomes, events, (states, versions) = await self._database.write(self._transaction, pending)
            except _StepFailed as error:
                failed.append((pending.pop(error.index), error.error))
                continue
            except (SQLAlchemyError, OSError) as error:
                if _one_write_refused(error, len(pending)):
                    _log.debug("the database refused a batch of %d operations; writing it in halves", len(pending))
                    middle = len(pending) // 2
                    first, first_events = await self._settle_async(pending[:middle])
                    second, second_events = await self._settle_async(pending[middle:])
                    return [*failed, *first, *second], [*first_events, *second_events]
                return [*failed, *_database_failed(pending, error)], []
            # Remembered only once committed; a commit whose outcome never arrived left the version moved on.
            self._memory.remember(states, versions)
            return [*failed, *zip(pending, outcomes, strict=True)], events
        return failed, []

    async def _settle_optimistic(
        self, database: PostgresDatabase, pending: list[_Op[Any]]
    ) -> tuple[_Outcomes, list[Event]] | None:
        """The batch committed by one statement (``WriteTx``'s optimistic way, ``arbiter.storage.pg_commit``); None
        when it must run under the row locks instead: a step needs them, a channel is not as this process
        remembers it, a step failed (the locked way fails it alone), or the statement was refused (a channel changed
        in another process meanwhile, newer notes are stored, a write the database would not take). A refused
        statement left nothing behind; a connection lost on the way may have, so that fails the batch as it would
        the locked way."""
        if self._held is None:
            self._held = database.held()
        held = self._held
        try:
            outcomes, events, (states, committed), commit = await held.run_sync(self._optimistic_steps, pending)
            assert commit is not None
            statement, parameters = commit
            await held.fetch(statement, *parameters)
        except (_NeedsLock, _StepFailed):
            return None
        except DBAPIError as error:
            if not _statement_refused(error):
                return _database_failed(pending, error), []
            _log.debug("a batch of %d operations runs again under the row locks: %s", len(pending), error.orig)
            return None
        except (SQLAlchemyError, OSError) as error:
            return _database_failed(pending, error), []
        self._memory.remember(states, committed)
        return list(zip(pending, outcomes, strict=True)), events

    # --- both ------------------------------------------------------------------------------------------

    def _deliver(self, outcomes: _Outcomes, events: list[Event]) -> None:
        """On the event loop: publish what the batch did, then answer its callers."""
        self._publish(events)
        for op, outcome in outcomes:
            if op.future.done():
                continue
            if isinstance(outcome, ArbiterError):
                op.future.set_exception(outcome)
            else:
                op.future.set_result(outcome)

    def _forget(self) -> None:
        # After a rollback the cache may hold states that were never committed: start over from the database.
        self._memory.clear()

    def _transaction(
        self, conn: Connection, ops: list[_Op[Any]]
    ) -> tuple[list[Any], list[Event], tuple[dict[str, ChannelState], dict[str, int]]]:
        """Runs inside one database transaction: on the writer thread (SQLite) or in run_sync (PostgreSQL)."""
        tx = WriteTx(conn, self._clock, self._memory)
        return self._steps(tx, ops), tx.events, (tx.states, tx._committed_versions())

    def _optimistic_steps(self, conn: Connection, ops: list[_Op[Any]]) -> tuple[Any, ...]:
        """The batch's steps on the channels as remembered, in run_sync on a connection in autocommit; what they wrote
        is left in ``tx.commit`` for the writer to send."""
        tx = WriteTx(conn, self._clock, self._memory, optimistic=True)
        return self._steps(tx, ops), tx.events, (tx.states, tx._committed_versions()), tx.commit

    def _steps(self, tx: WriteTx, ops: list[_Op[Any]]) -> list[Any]:
        """The batch's channels loaded, its steps run and its writes finished (or gathered: optimistic)."""
        tx._prefetch(channel_id for op in ops for channel_id in op.channel_ids)
        outcomes: list[Any] = []
        for index, op in enumerate(ops):
            try:
                outcomes.append(op.step(tx))
                tx._end_step(keep=True)
            except ArbiterError as error:
                # Steps raise before they apply anything, so only their events need undoing.
                tx._end_step(keep=False)
                outcomes.append(error)
            except (SQLAlchemyError, OSError, _NeedsLock):
                raise
            except Exception as error:
                _log.exception("operation failed inside the writer")
                raise _StepFailed(index, StorageError(f"internal error: {type(error).__name__}")) from error
        changed = tx._saved_versions()
        notifier = self.notifier
        tx._finish(notifier(tx.events, changed) if notifier is not None and (tx.events or changed) else [])
        return outcomes


def _one_write_refused(error: BaseException, operations: int) -> bool:
    """Whether a batch that failed with ``error`` should be tried again in halves, to fail only its culprit.

    The database refusing what was written (a value it cannot store, a constraint, a trigger) is about one
    operation's data, and must not fail the other operations batched with it - other personas' turns, in other
    channels. Halving finds the culprit in about 2 log2(n) transactions; the operations before it are committed
    first, so each still sees the state the one before it left. A database that cannot be reached or is out of
    order (a lost connection, a locked or full file) fails every operation alike: trying again in halves would
    only fail more slowly."""
    if operations < 2 or isinstance(
        error, OSError | OperationalError | InterfaceError | DisconnectionError | PoolTimeout
    ):
        return False
    return not (isinstance(error, DBAPIError) and error.connection_invalidated)


def _statement_refused(error: DBAPIError) -> bool:
    """Whether the server refused the statement (and so rolled it back whole): it says why with an SQLSTATE, and
    the connection is fine. Not so for a lost connection, when the commit may or may not have happened."""
    state = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return bool(state) and not str(state).startswith("08") and not error.connection_invalidated


def _database_failed(pending: list[_Op[Any]], error: BaseException) -> _Outcomes:
    _log.error("database error; %d operations failed: %s", len(pending), error)
    storage_error = StorageError(f"database error: {type(error).__name__}")
    return [(op, storage_error) for op in pending]


# One statement for any number of notifications, so the driver prepares it once per connection; a function scan
# of unnest yields the array's elements in order, and PostgreSQL delivers one transaction's notifications in the
# order they were sent.
_NOTIFY = text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload")


def pg_notify(conn: Connection, channel: str, payloads: Sequence[str]) -> None:
    """Queue NOTIFYs in the open transaction; PostgreSQL delivers them at commit, or never if it rolls back."""
    if payloads:
        conn.execute(_NOTIFY, {"channel": channel, "payloads": list(payloads)})
