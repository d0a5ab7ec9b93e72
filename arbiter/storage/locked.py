"""The locked transaction: a batch on its channels' rows locked and read inside it (SELECT ... FOR UPDATE, in id
order, PostgreSQL), or on the state this process remembers when it owns the database (SQLite). Everything it
changed is written at the end, with its notifications, before the commit."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.storage import repository as repo
from arbiter.storage.remembered import without_expired
from arbiter.storage.transaction import NOTIFY_CHANNEL, BatchTx, pg_notify

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from sqlalchemy import Connection

    from arbiter.core.models import ChannelState, Memory

__all__ = ("LockedTx",)


class LockedTx(BatchTx):
    """A batch in a database transaction of its own: the writes a step makes at once (a new channel, a cleared
    history, notes, tokens, and whatever it does with :attr:`conn`) are marked in the journal (``wrote_rows``), so
    that the writer rolls the transaction back if the step then fails."""

    @property
    def conn(self) -> Connection:
        self.journal.wrote_rows = True  # what a step does with the connection itself cannot be taken back in memory
        return self._conn

    def prefetch(self, channel_ids: Iterable[str]) -> None:
        """Lock and load the channels in one go and in id order."""
        missing = [cid for cid in set(channel_ids) if cid not in self.states]
        if not missing:
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
            self.states.update(repo.load_channels(self._conn, missing, self._loaded_at, lock=True))

    def _load(self, channel_id: str, spend_ids: Sequence[str]) -> ChannelState | None:
        if not self._memory.owned:
            self._lock_and_load([channel_id], spend_ids)
            return self.states.get(channel_id)
        cached = self._memory.states.get(channel_id)
        if cached is not None:
            return without_expired(cached, self._loaded_at)
        return repo.load_channel(self._conn, channel_id, self._loaded_at, lock=True, spend_ids=spend_ids)

    def _lock_and_load(self, channel_ids: Sequence[str], spend_ids: Sequence[str] = ()) -> None:
        """Shared database: lock the rows (one statement, in id order, so processes cannot deadlock), reuse the
        state this process committed last for each channel whose version is still the one it wrote, bring the
        ones another process changed since up to date (their rows, and the spends written since), and load the
        others. The version is read under the lock, so no other process can change it before this one commits."""
        memory = self._memory
        if not any(channel_id in memory.states for channel_id in channel_ids):
            loaded = repo.load_versioned(self._conn, channel_ids, self._loaded_at, lock=True, spend_ids=spend_ids)
        else:
            unknown: list[str] = []
            changed: dict[str, tuple[int, ChannelState]] = {}
            for channel_id, version in repo.lock_versions(self._conn, channel_ids).items():
                cached = memory.states.get(channel_id)
                known = memory.versions.get(channel_id)
                if cached is None or known is None:
                    unknown.append(channel_id)
                elif known == version:
                    self.states[channel_id] = without_expired(cached, self._loaded_at)
                    self.versions[channel_id] = version
                else:
                    changed[channel_id] = (known, cached)
            loaded = repo.load_versioned(self._conn, unknown, self._loaded_at, spend_ids=spend_ids) if unknown else {}
            if changed:
                for channel_id, (version, state) in repo.load_since(self._conn, changed).items():
                    loaded[channel_id] = (version, without_expired(state, self._loaded_at))
        for channel_id, (version, state) in loaded.items():
            self.states[channel_id] = state
            self.versions[channel_id] = version

    def require_lock(self) -> None:
        """The batch holds the row locks already."""

    def delete_history(self, channel_id: str) -> int:
        self.journal.wrote_rows = True
        self._staged.drop_messages(channel_id)
        return repo.delete_history(self._conn, channel_id)

    def create_channel(self, state: ChannelState) -> ChannelState:
        self.journal.wrote_rows = True
        if repo.insert_channel(self._conn, state, self.now()):
            self.journal.put(self.states, state.channel_id, state)
            self.journal.put(self.versions, state.channel_id, 0)
            return state
        existing = self.channel(state.channel_id)
        assert existing is not None
        return existing

    def save_memory(self, memory: Memory) -> bool:
        self.journal.wrote_rows = True
        return repo.save_memory(self._conn, memory)

    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]) -> None:
        self.journal.wrote_rows = True
        repo.add_usage(self._conn, channel_id, persona_id, day=day, tokens=tokens)

    def finish(self, notifications: list[str]) -> None:
        self._staged.flush(self._conn)
        dirty = [self.states[channel_id] for channel_id in sorted(self._dirty)]
        repo.save_channels(self._conn, dirty, self.now(), with_settings=self._settings_dirty)
        pg_notify(self._conn, NOTIFY_CHANNEL, notifications)
