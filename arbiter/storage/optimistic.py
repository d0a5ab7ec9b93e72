"""The optimistic transaction (PostgreSQL): a batch on the channels as this process remembers them, on a connection
in autocommit, that writes nothing as it runs. What it changed is gathered in one statement (``commit``,
``arbiter.storage.pg_commit``) that the writer sends, and that commits only if no other process changed the
channels meanwhile. What that statement cannot write, the transaction refuses (:class:`NeedsLock`): the batch then
runs again as a :class:`~arbiter.storage.locked.LockedTx`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arbiter.storage.pg_commit import BatchWrites, commit_statement
from arbiter.storage.remembered import without_expired
from arbiter.storage.transaction import NOTIFY_CHANNEL, BatchTx, NeedsLock

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from sqlalchemy import Connection

    from arbiter.core.models import ChannelState, Memory
    from arbiter.storage.remembered import Remembered

__all__ = ("OptimisticTx",)


class OptimisticTx(BatchTx):
    def __init__(self, conn: Connection, clock: Callable[[], float], memory: Remembered) -> None:
        super().__init__(conn, clock, memory)
        self._memories: dict[tuple[str, str], Memory] = {}  # notes to store, by (channel, persona)
        # Tokens to add, by (channel, persona, day): prompt, completion, requests.
        self._usage: dict[tuple[str, str, int], tuple[int, int, int, int, int]] = {}
        self.commit: tuple[str, tuple[Any, ...]] | None = None  # the statement that commits the batch, once finished

    def prefetch(self, channel_ids: Iterable[str]) -> None:
        """Each channel as this process committed it last (its commit checks that no other process changed it); if
        it does not know one, the batch runs under the row locks, which read it."""
        for channel_id in set(channel_ids):
            if channel_id in self.states:
                continue
            state = self._memory.states.get(channel_id)
            version = self._memory.versions.get(channel_id)
            if state is None or version is None:
                raise NeedsLock
            self.states[channel_id] = without_expired(state, self._loaded_at)
            self.versions[channel_id] = version

    def _load(self, channel_id: str, spend_ids: Sequence[str]) -> ChannelState | None:
        raise NeedsLock  # a channel the batch did not say it would touch: read it under its lock

    def require_lock(self) -> None:
        raise NeedsLock

    def delete_history(self, channel_id: str) -> int:
        raise NeedsLock

    def create_channel(self, state: ChannelState) -> ChannelState:
        raise NeedsLock

    def save_memory(self, memory: Memory) -> bool:
        """Stored with the batch's commit, which fails whole when newer notes are stored, for the locked way to
        tell."""
        key = (memory.channel_id, memory.persona_id)
        if key in self._memories:
            raise NeedsLock  # twice in one batch: which one stays is for the locked way to tell
        self.journal.put(self._memories, key, memory)
        return True

    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]) -> None:
        prompt, completion, read, written = tokens
        before = self._usage.get((channel_id, persona_id, day), (0, 0, 0, 0, 0))
        added = (before[0] + prompt, before[1] + completion, before[2] + 1, before[3] + read, before[4] + written)
        self.journal.put(self._usage, (channel_id, persona_id, day), added)

    def finish(self, notifications: list[str]) -> None:
        """Gather the batch's writes in ``commit`` (which also checks the channels it only read)."""
        staged = self._staged
        self.commit = commit_statement(
            BatchWrites(
                channels=[(self.states[channel_id], self.versions[channel_id]) for channel_id in sorted(self._dirty)],
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
