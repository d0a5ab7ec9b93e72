"""The in-memory twin of the storage: the port (``arbiter.storage.port``) on dicts, for the tests that do not test
storage (and for an arbiter that needs nothing kept, ``open_arbiter(in_memory=True)``). It opens no database.

It keeps what matters of the SQL side's behaviour, and the contract suite (``tests/arbiter/storage/
test_port_behaviour.py``) holds it to it, on the twin, SQLite and PostgreSQL alike: steps run in batches on one
writer, each caller answered after its batch, the batch's events published first; a step that raises fails alone and
leaves no trace (its changes go through a ``StepJournal``, undone when it raises); a channel's version counts the
batches that changed it; a spend refunded is gone from the state read (``without_expired``) but may still be named.
It runs the steps on the event loop itself: a step is synchronous and never waits, so nothing else runs meanwhile,
and what a step wrote is at once what the batch's next step reads.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from arbiter.core.errors import ArbiterError
from arbiter.core.ledger import split
from arbiter.storage.errors import StorageError
from arbiter.storage.memory_tables import MemoryTables
from arbiter.storage.staging import StepJournal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from arbiter.core.models import ChannelState, Memory, Message, PersonaInfo
    from arbiter.core.rules import Transition
    from arbiter.events import Event
    from arbiter.storage.port import ChannelSummary, Step, Usage

__all__ = ("MemoryStorage", "MemoryTx")

_log = logging.getLogger(__name__)

R = TypeVar("R")


class MemoryTx:
    """One batch on the twin's tables: a ``StepTx``. Every change goes into the tables at once, through ``journal``
    (kept when the step returns, undone when it raises); the versions are counted when the batch ends."""

    def __init__(self, tables: MemoryTables, clock: Callable[[], float]) -> None:
        self._tables = tables
        self._clock = clock
        self._loaded_at = clock()
        self.journal = StepJournal()
        self.events: list[Event] = []
        self._read: dict[str, ChannelState] = {}  # each channel as the batch read it, or as its steps left it
        self._dirty: set[str] = set()

    def now(self) -> float:
        return self._clock()

    def channel(self, channel_id: str, *, spend_ids: Iterable[str] = ()) -> ChannelState | None:
        state = self._read.get(channel_id)
        if state is None:
            state = self._tables.channel(channel_id, self._loaded_at)
        if state is None:
            return None
        missing = [spend_id for spend_id in spend_ids if spend_id and state.spend(spend_id) is None]
        if missing:
            named = self._tables.spends_by_id(channel_id, missing)
            spends, claims = split([*state.spends, *state.claims, *named])
            state = replace(state, spends=spends, claims=claims)
        self._read[channel_id] = state  # (as the SQL side: the state as read, not a change)
        return state

    def message(self, channel_id: str, seq: int) -> Message | None:
        return self._tables.messages.get((channel_id, seq))

    def message_by_platform_id(self, channel_id: str, platform_message_id: str) -> Message | None:
        return self._tables.message_by_platform_id(channel_id, platform_message_id)

    def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        return self._tables.recent_history(channel_id, limit)

    def said_by(self, channel_id: str, author_id: str, limit: int) -> list[Message]:
        return self._tables.said_by(channel_id, author_id, limit)

    def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        return self._tables.memories_of(channel_id, persona_id)

    def require_lock(self) -> None:
        """Nothing to lock: one writer, on the event loop."""

    def delete_history(self, channel_id: str) -> int:
        return self._tables.delete_history(self.journal, channel_id)

    def delete_memories(self, channel_id: str, persona_id: str | None = None) -> list[str]:
        return self._tables.delete_memories(self.journal, channel_id, persona_id)

    def create_channel(self, state: ChannelState) -> ChannelState:
        existing = self.channel(state.channel_id)
        if existing is not None:
            return existing
        self.journal.put(self._tables.states, state.channel_id, state)
        self.journal.put(self._tables.versions, state.channel_id, 0)
        self.journal.put(self._read, state.channel_id, state)
        return state

    def save_memory(self, memory: Memory) -> bool:
        return self._tables.save_memory(self.journal, memory)

    def save_persona(self, info: PersonaInfo) -> None:
        self.journal.put(self._tables.personas, info.id, info)

    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]) -> None:
        self._tables.add_usage(self.journal, (channel_id, persona_id, day), tokens)

    def apply(self, transition: Transition) -> None:
        channel_id = transition.state.channel_id
        for spend in (*transition.new_spends, *transition.changed_spends):
            self.journal.put(self._tables.spends, spend.id, (channel_id, spend))
        # Changed before new, as the SQL side writes them: a message moved to the end hands its platform id on.
        for message in (*transition.changed_messages, *transition.new_messages):
            self._tables.write_message(self.journal, message)
        self.replace_state(transition.state)

    def replace_state(self, state: ChannelState) -> None:
        self.journal.put(self._read, state.channel_id, state)
        self.journal.put(self._tables.states, state.channel_id, state)
        self.journal.add(self._dirty, state.channel_id)

    def emit(self, *events: Event) -> None:
        self.journal.extend(self.events, events)

    def finish(self) -> None:
        """The batch's steps have run: each channel it changed is one version on."""
        versions = self._tables.versions
        for channel_id in self._dirty:
            versions[channel_id] = versions.get(channel_id, 0) + 1


class _Op:
    __slots__ = ("channel_ids", "future", "step")

    def __init__(self, step: Step[Any], future: asyncio.Future[Any], channel_ids: Sequence[str]) -> None:
        self.step = step
        self.future = future
        self.channel_ids = channel_ids


class MemoryStorage:
    """The twin: a ``StorageWriter`` and ``StorageReads`` on one :class:`MemoryTables`. ``publish`` gets each
    batch's events, on the event loop, before its callers hear back."""

    def __init__(
        self, clock: Callable[[], float], publish: Callable[[Sequence[Event]], None], *, max_batch: int = 256
    ) -> None:
        self.tables = MemoryTables()
        self._clock = clock
        self._publish = publish
        self._max_batch = max_batch
        self._pending: list[_Op] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    # --- the writer -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._drive(), name="aizuchi-memory-writer")

    async def close(self) -> None:
        self._closing = True
        if self._task is not None:
            self._wake.set()
            await self._task
            self._task = None

    async def run(self, step: Step[R], channel_ids: Sequence[str] = ()) -> R:
        if self._closing or self._task is None:
            raise StorageError("the arbiter is shutting down", code="shutting_down")
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._pending.append(_Op(step, future, channel_ids))
        self._wake.set()
        return await future

    async def remembered(self, channel_id: str) -> ChannelState | None:
        return self.tables.channel(channel_id, self._clock())

    async def _drive(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                # As the SQL writer does: let the requests that came in meanwhile join this batch.
                waiting = len(self._pending)
                await asyncio.sleep(0)
                while waiting < len(self._pending) < self._max_batch:
                    waiting = len(self._pending)
                    await asyncio.sleep(0)
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                self._settle([op for op in batch if not op.future.done()])
            if self._closing:
                return

    def _settle(self, ops: list[_Op]) -> None:
        """Run the batch's steps, publish its events, then answer its callers."""
        tx = MemoryTx(self.tables, self._clock)
        outcomes: list[Any] = []
        for op in ops:
            try:
                outcome = op.step(tx)
            except Exception as error:
                tx.journal.undo()
                outcomes.append(error if isinstance(error, ArbiterError) else _internal(error))
            else:
                tx.journal.keep()
                outcomes.append(outcome)
        tx.finish()
        self._publish(tx.events)
        for op, outcome in zip(ops, outcomes, strict=True):
            if op.future.done():
                continue
            if isinstance(outcome, ArbiterError):
                op.future.set_exception(outcome)
            else:
                op.future.set_result(outcome)

    # --- the reads ------------------------------------------------------------------------------------------

    async def channel(self, channel_id: str, now: float) -> ChannelState | None:
        return self.tables.channel(channel_id, now)

    async def version(self, channel_id: str) -> int | None:
        return self.tables.versions.get(channel_id)

    async def channel_ids(self) -> list[ChannelSummary]:
        return self.tables.channel_ids()

    async def history(self, channel_id: str, after: int, limit: int) -> list[Message]:
        return self.tables.history(channel_id, after, limit)

    async def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        return self.tables.recent_history(channel_id, limit)

    async def recent_platform_ids(self, channel_id: str, limit: int) -> list[str]:
        return self.tables.recent_platform_ids(channel_id, limit)

    async def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        return self.tables.memories_of(channel_id, persona_id)

    async def usage(self, channel_id: str, day: int) -> Usage:
        return self.tables.usage_of(channel_id, day)

    async def persona_infos(self) -> list[PersonaInfo]:
        return self.tables.persona_infos()


def _internal(error: Exception) -> StorageError:
    _log.error("operation failed inside the writer", exc_info=error)
    return StorageError(f"internal error: {type(error).__name__}")
