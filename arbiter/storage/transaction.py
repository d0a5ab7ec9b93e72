"""A batch's SQL transaction as its steps see it: :class:`BatchTx`, what the two kinds of transaction share
(``arbiter.storage.locked``, ``arbiter.storage.optimistic``); each is a ``StepTx`` (``arbiter.storage.port``), what a
step may call, its queries from ``arbiter.storage.sql_port``.

A step reads what it needs, decides (the pure core), then applies. Everything it changes goes through the
transaction's :class:`~arbiter.storage.staging.StepJournal`, so a step that raises, even after applying, leaves no
trace in the batch: the writer takes its changes back (or, if it wrote rows at once, rolls the transaction back
and runs the batch again without it).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import replace
from typing import TYPE_CHECKING

from sqlalchemy import text

from arbiter.core.ledger import split
from arbiter.storage import repository as repo
from arbiter.storage.sql_port import TxQueries
from arbiter.storage.staging import StagedRows, StepJournal

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from sqlalchemy import Connection

    from arbiter.core.models import ChannelState, Memory, Message
    from arbiter.core.rules import Transition
    from arbiter.events import Event
    from arbiter.storage.remembered import Remembered

__all__ = ("NOTIFY_CHANNEL", "BatchTx", "NeedsLock", "pg_notify")

NOTIFY_CHANNEL = "aizuchi_events"  # what every arbiter process on a shared database LISTENs to


class NeedsLock(Exception):
    """A step needs the batch written under the channels' row locks (it writes what the one-statement commit does
    not: a new channel, a cleared history, settings...): the batch runs again that way."""


class BatchTx(TxQueries, ABC):
    """What both kinds of a batch's transaction share: the channels' states, the staged rows, the events, and the
    journal of the running step's changes (``journal``: the writer keeps or takes them back when the step ends)."""

    def __init__(self, conn: Connection, clock: Callable[[], float], memory: Remembered) -> None:
        self._conn = conn
        self._clock = clock
        self._loaded_at = clock()
        self._memory = memory
        self.journal = StepJournal()
        self.states: dict[str, ChannelState] = {}
        self.versions: dict[str, int] = {}  # as read under the row lock, or remembered (shared database only)
        self._dirty: set[str] = set()
        self._settings_dirty: set[str] = set()
        self._staged = StagedRows(self.journal)
        self.events: list[Event] = []

    @property
    def conn(self) -> Connection:
        return self._conn

    def now(self) -> float:
        return self._clock()

    @abstractmethod
    def prefetch(self, channel_ids: Iterable[str]) -> None:
        """Load, in one go, the channels the batch's steps said they will touch (before any step runs)."""

    @abstractmethod
    def _load(self, channel_id: str, spend_ids: Sequence[str]) -> ChannelState | None:
        """A channel the batch did not load yet (None: it does not exist)."""

    @abstractmethod
    def require_lock(self) -> None: ...

    @abstractmethod
    def delete_history(self, channel_id: str) -> int: ...

    @abstractmethod
    def create_channel(self, state: ChannelState) -> ChannelState: ...

    @abstractmethod
    def save_memory(self, memory: Memory) -> bool: ...

    @abstractmethod
    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]) -> None: ...

    @abstractmethod
    def finish(self, notifications: list[str]) -> None:
        """The batch's steps have run: write what they changed (or gather it), with its notifications."""

    def channel(self, channel_id: str, *, spend_ids: Iterable[str] = ()) -> ChannelState | None:
        wanted = [spend_id for spend_id in spend_ids if spend_id]
        state = self.states.get(channel_id)
        if state is None:
            state = self._load(channel_id, wanted)
        if state is None:
            return None
        missing = [spend_id for spend_id in wanted if state.spend(spend_id) is None]
        if missing:
            spends, claims = split([*state.spends, *state.claims, *repo.spends_by_id(self._conn, channel_id, missing)])
            state = replace(state, spends=spends, claims=claims)
        # Not journaled: the state as read (or as this step changed it, which the journal restores if it fails).
        self.states[channel_id] = state
        return state

    def message(self, channel_id: str, seq: int) -> Message | None:
        staged = self._staged.message(channel_id, seq)
        return staged if staged is not None else repo.message(self._conn, channel_id, seq)

    def message_by_platform_id(self, channel_id: str, platform_message_id: str) -> Message | None:
        staged = self._staged.by_platform_id.get((channel_id, platform_message_id))
        if staged is not None:
            return staged
        return repo.message_by_platform_id(self._conn, channel_id, platform_message_id)

    def apply(self, transition: Transition) -> None:
        self._staged.add(transition)
        self.replace_state(transition.state)

    def replace_state(self, state: ChannelState) -> None:
        previous = self.states.get(state.channel_id)
        if previous is None or previous.settings is not state.settings:
            self.require_lock()  # the one-statement commit writes a channel's state, not its settings
            self.journal.add(self._settings_dirty, state.channel_id)
        self.journal.put(self.states, state.channel_id, state)
        self.journal.add(self._dirty, state.channel_id)

    def emit(self, *events: Event) -> None:
        self.journal.extend(self.events, events)

    def saved_versions(self) -> dict[str, int]:
        """The version each channel the batch changed is saved at (shared database)."""
        return {cid: version for cid, version in self.committed_versions().items() if cid in self._dirty}

    def committed_versions(self) -> dict[str, int]:
        """Each channel's version once this transaction commits (saving a channel counts one more)."""
        return {channel_id: version + (channel_id in self._dirty) for channel_id, version in self.versions.items()}


# One statement for any number of notifications, so the driver prepares it once per connection; a function scan
# of unnest yields the array's elements in order, and PostgreSQL delivers one transaction's notifications in the
# order they were sent.
_NOTIFY = text("SELECT pg_notify(:channel, payload) FROM unnest(CAST(:payloads AS text[])) AS payload")


def pg_notify(conn: Connection, channel: str, payloads: Sequence[str]) -> None:
    """Queue NOTIFYs in the open transaction; PostgreSQL delivers them at commit, or never if it rolls back."""
    if payloads:
        conn.execute(_NOTIFY, {"channel": channel, "payloads": list(payloads)})
