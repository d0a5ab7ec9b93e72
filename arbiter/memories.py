"""The personas' dialogue states ("memory"): each persona's notes on a channel's conversation, stored with the speech
or the release that ends its turn, read back when a persona (re)joins, shown to moderators and reset by them."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.core.errors import ConflictError, InvalidRequest
from arbiter.core.models import Memory
from arbiter.service_core import ServiceCore
from arbiter.views import memory_view

if TYPE_CHECKING:
    from arbiter.core.models import ChannelState
    from arbiter.storage.port import StepTx

__all__ = ("PersonaMemory",)

_log = logging.getLogger(__name__)


class PersonaMemory(ServiceCore):
    @staticmethod
    def _check_memory(state: ChannelState, update: wire.MemoryUpdate | None) -> None:
        """Refuse a state that claims to take in messages the history does not have (before anything is applied)."""
        if update is not None and update.seq > state.last_seq:
            raise InvalidRequest(
                f"memory.seq {update.seq} is ahead of the history (last seq {state.last_seq})", field="memory.seq"
            )

    @staticmethod
    def _check_not_cleared(state: ChannelState, update: wire.MemoryUpdate | None) -> None:
        """Refuse notes on a conversation cleared since: they would bring back what a moderator had forgotten
        (before anything is applied)."""
        if update is not None and 0 < update.seq <= state.cleared_seq:
            raise ConflictError(
                f"memory.seq {update.seq} is about a history cleared since (up to seq {state.cleared_seq}); notes on it"
                " are not kept",
                field="memory.seq",
                code="history_cleared",
            )

    def _store_memory(self, tx: StepTx, channel_id: str, persona_id: str, update: wire.MemoryUpdate | None) -> None:
        """Store the persona's new state in the turn's transaction, unless a newer one is stored already."""
        if update is None:
            return
        memory = Memory(channel_id, persona_id, update.seq, update.state.model_dump(mode="json"), tx.now())
        if tx.save_memory(memory):
            # The event shows the state as validated when it came in: its stored dump is not validated back.
            view = memory_view(memory, update.state)
            tx.emit(wire.MemoryEvent(channel_id=channel_id, persona=persona_id, memory=view))
        else:
            _log.debug("persona=%s channel=%s: kept a newer memory than seq %d", persona_id, channel_id, update.seq)

    async def memories(self, channel_id: str, persona_id: str | None = None) -> wire.MemoryList:
        """The channel's dialogue states, by persona (or only ``persona_id``'s: none until it has one)."""
        await self._read_state(channel_id, self.now())
        found = await self._reads.memories(channel_id, persona_id)
        return wire.MemoryList(memories=[memory_view(memory) for memory in found])

    async def reset_memory(self, channel_id: str, persona_id: str | None = None) -> list[str]:
        """Forget the channel's dialogue states (or only ``persona_id``'s): the personas then start from the recent
        messages alone. Returns whose states were deleted."""
        if persona_id is not None:
            self.registry.require(persona_id)

        def step(tx: StepTx, _state: ChannelState) -> list[str]:
            deleted = tx.delete_memories(channel_id, persona_id)
            tx.emit(*(wire.MemoryEvent(channel_id=channel_id, persona=pid, memory=None) for pid in deleted))
            return deleted

        return await self._change(channel_id, step)
