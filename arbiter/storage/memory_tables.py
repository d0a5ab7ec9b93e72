"""The in-memory twin's data: what the SQL schema holds (``arbiter.storage.tables``), as dicts of core models, and
the queries over it, as ``arbiter.storage.repository`` makes them. The twin's transaction changes it only through a
``StepJournal``, so a step that fails is taken back."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.storage.remembered import without_expired

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from arbiter.core.models import ChannelState, Memory, Message, PersonaInfo, Spend
    from arbiter.storage.port import ChannelSummary, Usage
    from arbiter.storage.staging import StepJournal

__all__ = ("DuplicatePlatformId", "MemoryTables")


class DuplicatePlatformId(Exception):
    """A platform message id given to a second message of a channel (the schema's unique constraint)."""


class MemoryTables:
    """Every channel's committed state and version, and the rows beside them: every spend ever made (a refunded one
    may still be named), the messages, the platform ids' index, notes, token usage, personas."""

    def __init__(self) -> None:
        self.states: dict[str, ChannelState] = {}
        self.versions: dict[str, int] = {}
        self.spends: dict[str, tuple[str, Spend]] = {}  # by id: (channel id, spend)
        self.messages: dict[tuple[str, int], Message] = {}
        self.platform_ids: dict[tuple[str, str], int] = {}  # (channel id, platform id) -> seq
        self.memories: dict[tuple[str, str], Memory] = {}
        # prompt, completion, requests, cache read, cache write
        self.usage: dict[tuple[str, str, int], tuple[int, int, int, int, int]] = {}
        self.personas: dict[str, PersonaInfo] = {}

    # --- reads ----------------------------------------------------------------------------------------------

    def channel(self, channel_id: str, now: float) -> ChannelState | None:
        state = self.states.get(channel_id)
        return None if state is None else without_expired(state, now)

    def channel_ids(self) -> list[ChannelSummary]:
        return [(cid, state.settings.enabled, state.last_seq) for cid, state in sorted(self.states.items())]

    def spends_by_id(self, channel_id: str, ids: list[str]) -> list[Spend]:
        found = (self.spends.get(spend_id) for spend_id in ids)
        return [spend for owner, spend in filter(None, found) if owner == channel_id]

    def message_by_platform_id(self, channel_id: str, platform_message_id: str) -> Message | None:
        seq = self.platform_ids.get((channel_id, platform_message_id))
        return None if seq is None else self.messages.get((channel_id, seq))

    def _newest_first(self, channel_id: str) -> Iterator[Message]:
        state = self.states.get(channel_id)
        for seq in range(state.last_seq if state is not None else 0, 0, -1):
            message = self.messages.get((channel_id, seq))
            if message is not None:
                yield message

    def history(self, channel_id: str, after: int, limit: int) -> list[Message]:
        state = self.states.get(channel_id)
        page: list[Message] = []
        for seq in range(after + 1, (state.last_seq if state is not None else 0) + 1):
            message = self.messages.get((channel_id, seq))
            if message is not None and message.visible:
                page.append(message)
                if len(page) == limit:
                    break
        return page

    def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        return self._last(channel_id, limit, lambda message: message.visible)

    def said_by(self, channel_id: str, author_id: str, limit: int) -> list[Message]:
        return self._last(channel_id, limit, lambda message: message.author_id == author_id and not message.retracted)

    def _last(self, channel_id: str, limit: int, wanted: Callable[[Message], bool]) -> list[Message]:
        found: list[Message] = []
        if limit <= 0:
            return found
        for message in self._newest_first(channel_id):
            if wanted(message):
                found.append(message)
                if len(found) == limit:
                    break
        return found[::-1]

    def recent_platform_ids(self, channel_id: str, limit: int) -> list[str]:
        found: list[str] = []
        for message in self._newest_first(channel_id):
            if len(found) == limit:
                break
            if message.platform_message_id is not None:
                found.append(message.platform_message_id)
        return found

    def memories_of(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        return [
            memory
            for (cid, pid), memory in sorted(self.memories.items())
            if cid == channel_id and (persona_id is None or pid == persona_id)
        ]

    def usage_of(self, channel_id: str, day: int) -> Usage:
        return {pid: used for (cid, pid, used_day), used in self.usage.items() if cid == channel_id and used_day == day}

    def persona_infos(self) -> list[PersonaInfo]:
        return [info for _, info in sorted(self.personas.items())]

    # --- writes, each through the running step's journal ---------------------------------------------------

    def write_message(self, journal: StepJournal, message: Message) -> None:
        """A new or changed message, its platform id indexed (one message per platform id in a channel)."""
        key = (message.channel_id, message.seq)
        before = self.messages.get(key)
        if before is not None and before.platform_message_id not in (None, message.platform_message_id):
            journal.remove(self.platform_ids, (message.channel_id, before.platform_message_id))
        if message.platform_message_id is not None:
            index = (message.channel_id, message.platform_message_id)
            holder = self.platform_ids.get(index)
            if holder is not None and holder != message.seq:
                raise DuplicatePlatformId(f"platform message {message.platform_message_id} is message {holder}")
            journal.put(self.platform_ids, index, message.seq)
        journal.put(self.messages, key, message)

    def delete_history(self, journal: StepJournal, channel_id: str) -> int:
        doomed = list(self._newest_first(channel_id))
        for message in doomed:
            journal.remove(self.messages, (channel_id, message.seq))
            if message.platform_message_id is not None:
                journal.remove(self.platform_ids, (channel_id, message.platform_message_id))
        return len(doomed)

    def save_memory(self, journal: StepJournal, memory: Memory) -> bool:
        key = (memory.channel_id, memory.persona_id)
        stored = self.memories.get(key)
        if stored is not None and stored.seq > memory.seq:
            return False
        journal.put(self.memories, key, memory)
        return True

    def delete_memories(self, journal: StepJournal, channel_id: str, persona_id: str | None) -> list[str]:
        doomed = [memory.persona_id for memory in self.memories_of(channel_id, persona_id)]
        for pid in doomed:
            journal.remove(self.memories, (channel_id, pid))
        return doomed

    def add_usage(self, journal: StepJournal, key: tuple[str, str, int], tokens: tuple[int, int, int, int]) -> None:
        prompt, completion, requests, read, written = self.usage.get(key, (0, 0, 0, 0, 0))
        added = (prompt + tokens[0], completion + tokens[1], requests + 1, read + tokens[2], written + tokens[3])
        journal.put(self.usage, key, added)
