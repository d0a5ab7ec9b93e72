"""What a batch's steps change, kept so that a step that fails leaves no trace of what it did before it failed.

A step changes the batch only through its transaction, and the transaction records every change in a
:class:`StepJournal`: when the step returns, its changes are kept; when it raises, they are taken back, in reverse,
so the batch is as the step found it (its states, rows to write, notes, tokens and events). What cannot be taken
back in memory, a row written to the database at once, the journal notes (``wrote_rows``): the writer then rolls the
whole transaction back and runs the batch again without the step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from arbiter.storage import repository as repo

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sqlalchemy import Connection

    from arbiter.core.models import Message, Spend
    from arbiter.core.rules import Transition

__all__ = ("StagedRows", "StepJournal")

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")

_MISSING = object()  # the key was not there before
_ADDED = object()  # the item was added to a set
_APPENDED = object()  # the items were appended to a list (the key is its length before)


class StepJournal:
    """The changes the running step made to the batch, to keep or take back when it ends."""

    __slots__ = ("_undo", "wrote_rows")

    def __init__(self) -> None:
        self._undo: list[tuple[dict[Any, Any] | set[Any] | list[Any], Any, Any]] = []
        self.wrote_rows = False  # the step wrote to the database at once: only a rollback takes that back

    def put(self, mapping: dict[K, V], key: K, value: V) -> None:
        self._undo.append((mapping, key, mapping.get(key, _MISSING)))
        mapping[key] = value

    def remove(self, mapping: dict[K, V], key: K) -> None:
        if key in mapping:
            self._undo.append((mapping, key, mapping.pop(key)))

    def add(self, items: set[T], item: T) -> None:
        if item not in items:
            items.add(item)
            self._undo.append((items, item, _ADDED))

    def extend(self, items: list[T], new: Iterable[T]) -> None:
        self._undo.append((items, len(items), _APPENDED))
        items.extend(new)

    def keep(self) -> None:
        """The step returned: its changes are the batch's."""
        self._undo.clear()
        self.wrote_rows = False

    def undo(self) -> None:
        """The step raised: the batch as it was before the step (all but the rows written, see ``wrote_rows``)."""
        for container, key, previous in reversed(self._undo):
            if isinstance(container, dict):
                if previous is _MISSING:
                    del container[key]
                else:
                    container[key] = previous
            elif isinstance(container, set):
                container.discard(key)
            else:
                del container[key:]
        self._undo.clear()
        self.wrote_rows = False


class StagedRows:
    """The history's and the spends' rows a batch writes, merged so each row is written once, at the end."""

    def __init__(self, journal: StepJournal) -> None:
        self._journal = journal
        self.new_spends: dict[str, tuple[str, Spend]] = {}
        self.changed_spends: dict[str, tuple[str, Spend]] = {}  # by id: (channel id, spend)
        self.new_messages: dict[tuple[str, int], Message] = {}
        self.changed_messages: dict[tuple[str, int], Message] = {}
        self.by_platform_id: dict[tuple[str, str], Message] = {}

    def add(self, transition: Transition) -> None:
        put = self._journal.put
        channel_id = transition.state.channel_id
        for spend in transition.new_spends:
            put(self.new_spends, spend.id, (channel_id, spend))
        for spend in transition.changed_spends:
            if spend.id in self.new_spends:
                put(self.new_spends, spend.id, (channel_id, spend))
            else:
                put(self.changed_spends, spend.id, (channel_id, spend))
        for message in transition.new_messages:
            self._index(message)
            put(self.new_messages, (message.channel_id, message.seq), message)
        for message in transition.changed_messages:
            self._index(message)
            key = (message.channel_id, message.seq)
            if key in self.new_messages:
                put(self.new_messages, key, message)
            else:
                put(self.changed_messages, key, message)

    def _index(self, message: Message) -> None:
        if message.platform_message_id is not None:
            self._journal.put(self.by_platform_id, (message.channel_id, message.platform_message_id), message)

    def message(self, channel_id: str, seq: int) -> Message | None:
        key = (channel_id, seq)
        return self.changed_messages.get(key) or self.new_messages.get(key)

    def drop_messages(self, channel_id: str) -> None:
        remove = self._journal.remove
        for table in (self.new_messages, self.changed_messages):
            for seq_key in [key for key in table if key[0] == channel_id]:
                remove(table, seq_key)
        for platform_key in [key for key in self.by_platform_id if key[0] == channel_id]:
            remove(self.by_platform_id, platform_key)

    def flush(self, conn: Connection) -> None:
        repo.insert_spends(conn, list(self.new_spends.values()))
        repo.update_spends(conn, [spend for _, spend in self.changed_spends.values()])
        # Changed before new: a message moved to the history's end (rules.move_to_end) hands its platform id on.
        repo.update_messages(conn, list(self.changed_messages.values()))
        repo.insert_messages(conn, list(self.new_messages.values()))
