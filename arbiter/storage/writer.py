"""The single writer: every change to a channel runs here, in batches, one transaction per batch.

Why batches: concurrent requests queue up while a transaction commits; the next transaction takes all of
them at once, so BEGIN/COMMIT and the trip to the database are shared. Each operation still sees the state
left by the one before it, and its caller hears back only after the commit: nothing is acknowledged that a
crash could lose. Writes are staged and flushed with one ``executemany`` per table at the end of the batch.
One operation cannot fail the others it was batched with: a step that raises fails alone, leaving no trace
(``arbiter.storage.staging``), and a batch whose write the database refuses is tried again in halves until only
the operation at fault fails (``arbiter.storage.settle``, one loop for both drivers).

Why it is safe across processes: on PostgreSQL a batch on channels this process remembers runs on that memory and
is committed by one statement that checks each channel's version is still the one remembered (``OptimisticTx``,
``arbiter.storage.pg_commit``); otherwise, or when that statement is refused (another process changed a channel),
the batch runs under the channels' row locks (``LockedTx``: SELECT ... FOR UPDATE, in id order), their state read
inside them. On SQLite one process owns the file (``arbiter.storage.lock``), so the writer keeps each channel's
committed state in memory and skips the reads; its transactions begin with BEGIN IMMEDIATE all the same.

Steps are synchronous functions of a ``StepTx`` (``arbiter.storage.port``); this is the SQL side of the port's
``StorageWriter``. On SQLite the whole
batch runs on the database's writer thread, so a step must not touch the event loop: it reads, decides (the pure
core), applies, and returns a value; events it emits are published on the loop after the commit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from arbiter.core.errors import ArbiterError
from arbiter.storage import repository as repo
from arbiter.storage.database import HeldConnection, PostgresDatabase, SqliteDatabase
from arbiter.storage.errors import StorageError
from arbiter.storage.gathering import Gathering
from arbiter.storage.locked import LockedTx
from arbiter.storage.optimistic import OptimisticTx
from arbiter.storage.port import Step, StepTx
from arbiter.storage.remembered import Remembered, without_expired
from arbiter.storage.settle import Attempt, Committed, Op, drive, drive_async, run_steps, settle
from arbiter.storage.transaction import NOTIFY_CHANNEL, pg_notify

if TYPE_CHECKING:
    from collections.abc import Awaitable, Mapping, Sequence

    from sqlalchemy import Connection

    from arbiter.core.models import ChannelState
    from arbiter.events import Event
    from arbiter.storage.database import Database
    from arbiter.storage.settle import Notifier, Outcomes, Settled

__all__ = ("NOTIFY_CHANNEL", "BatchWriter", "Clock", "Step", "WriteTx", "pg_notify")

_log = logging.getLogger(__name__)

R = TypeVar("R")
Clock = Callable[[], float]
# What the steps are typed against (the two transactions, LockedTx and OptimisticTx, are both one): the port's.
WriteTx = StepTx

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
        self._memory = Remembered(owned=owns_database)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        # SQLite: a thread and a thread-safe queue. PostgreSQL: a task and the operations gathering for its next batch.
        self._thread: threading.Thread | None = None
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._task: asyncio.Task[None] | None = None
        self._gathering = Gathering(max_batch)
        self._wake = asyncio.Event()
        self._held: HeldConnection | None = None  # PostgreSQL: the connection of the one-statement commits
        # PostgreSQL: once every notification committed before the call is heard (the relay's), True; False when
        # that cannot be known (not listening).
        self.caught_up: Callable[[], Awaitable[bool]] | None = None

    def cached(self, channel_id: str) -> ChannelState | None:
        """The channel's last committed state, if this process owns the database and has it in memory."""
        if not self._memory.owned:
            return None
        state = self._memory.states.get(channel_id)
        return None if state is None else without_expired(state, self._clock())

    async def remembered(self, channel_id: str) -> ChannelState | None:
        """The channel's last committed state if this process has it and it is still current, counting every
        commit acknowledged before the call, another process's too: at once when the process owns the database;
        when it hears of every other process's change (its relay listens: a channel changed elsewhere is forgotten
        when the notification comes), once it has heard every notification committed before the call
        (``caught_up``: one round trip, shared by the reads waiting at the time); else when the channel's version
        is still the one this process committed (one small query, instead of the channel's row and every active
        spend)."""
        if self._memory.owned:
            return self.cached(channel_id)
        if channel_id not in self._memory.states:
            return None
        if not (self._memory.heard and self.caught_up is not None and await self.caught_up()):
            version = self._memory.versions.get(channel_id)
            if version is None or await self._database.read(repo.channel_version, channel_id) != version:
                return None
        state = self._memory.states.get(channel_id)  # what was heard meanwhile may have made it forget the channel
        return None if state is None else without_expired(state, self._clock())

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
        op = Op(step, future, channel_ids)
        if self._thread is not None:
            self._inbox.put(op)
        else:
            self._gathering.add(op)
            self._wake.set()
        return await future

    # --- SQLite: the writer's own thread ---------------------------------------------------------------

    def _drive_thread(self) -> None:
        assert isinstance(self._database, SqliteDatabase) and self._loop is not None
        database = self._database
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
                pending = [op for op in batch if not op.future.done()]
                outcomes, events = drive(
                    settle(pending, self._memory, optimistic=False),
                    lambda attempt: database.write_blocking(self._locked, attempt.ops),
                )
            except Exception as error:
                # As on PostgreSQL: this batch's callers hear of it, and the thread lives on for the next.
                outcomes, events = self._failed(batch, error)
            self._loop.call_soon_threadsafe(self._deliver, outcomes, events)

    # --- PostgreSQL: an asyncio task -------------------------------------------------------------------

    async def _drive_task(self) -> None:
        optimistic = isinstance(self._database, PostgresDatabase)
        gathering = self._gathering
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            while gathering.pending:
                # A commit costs about the same for one operation as for ten: let the batch gather (arbiter.storage
                # .gathering says for how long).
                await gathering.gather(closing=self._closing)
                batch = gathering.take()
                started = loop.time()
                try:
                    pending = [op for op in batch if not op.future.done()]
                    outcomes, events = await drive_async(
                        settle(pending, self._memory, optimistic=optimistic), self._attempt
                    )
                except Exception as error:
                    # Whatever went wrong, this batch's callers must hear of it and the writer must go on.
                    outcomes, events = self._failed(batch, error)
                gathering.committed(len(batch), loop.time() - started)
                self._deliver(outcomes, events)
            if self._closing:
                return

    async def _attempt(self, attempt: Attempt) -> Committed:
        if not attempt.optimistic:
            return await self._database.write(self._locked, attempt.ops)
        assert isinstance(self._database, PostgresDatabase)
        if self._held is None:
            self._held = self._database.held()
        held = self._held
        done, (statement, parameters) = await held.run_sync(self._optimistic, attempt.ops)
        await held.fetch(statement, *parameters)
        return done

    # --- both ------------------------------------------------------------------------------------------

    def _deliver(self, outcomes: Outcomes, events: list[Event]) -> None:
        """On the event loop: publish what the batch did, then answer its callers."""
        self._publish(events)
        for op, outcome in outcomes:
            if op.future.done():
                continue
            if isinstance(outcome, ArbiterError):
                op.future.set_exception(outcome)
            else:
                op.future.set_result(outcome)

    def _failed(self, batch: list[Op[Any]], error: Exception) -> Settled:
        _log.error("writer batch failed", exc_info=error)
        # After a failure nobody expected, the memory may not be what was committed: start over from the database.
        self._memory.clear()
        failure = StorageError(f"internal error: {type(error).__name__}")
        return [(op, failure) for op in batch], []

    def _locked(self, conn: Connection, ops: list[Op[Any]]) -> Committed:
        """Runs inside one database transaction: on the writer thread (SQLite) or in run_sync (PostgreSQL)."""
        tx = LockedTx(conn, self._clock, self._memory)
        outcomes = run_steps(tx, ops, self.notifier)
        return Committed(outcomes, tx.events, tx.states, tx.committed_versions())

    def _optimistic(self, conn: Connection, ops: list[Op[Any]]) -> tuple[Committed, tuple[str, tuple[Any, ...]]]:
        """The batch's steps on the channels as remembered, in run_sync on a connection in autocommit; with the
        statement that commits what they wrote, for the writer to send."""
        tx = OptimisticTx(conn, self._clock, self._memory)
        outcomes = run_steps(tx, ops, self.notifier)
        assert tx.commit is not None
        return Committed(outcomes, tx.events, tx.states, tx.committed_versions()), tx.commit
