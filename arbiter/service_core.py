"""The plumbing every part of ``ArbiterService`` shares: a step on a channel's locked state in the writer, a
transition committed with the events it makes, and reading a channel's state."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from arbiter.core import rules
from arbiter.core.errors import NotFound
from arbiter.core.images import ImageBounds
from arbiter.core.models import ChannelSettings
from arbiter.core.validation import validate_settings
from arbiter.registry import PersonaRegistry
from arbiter.views import transition_events

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from arbiter.core.models import ChannelState, Message
    from arbiter.core.rules import Transition
    from arbiter.storage.port import StepTx, StorageReads, StorageWriter

__all__ = ("ServiceCore", "platform_place")

# How far after a persona's message, when it is linked, a message said before it on the platform is looked for (it was
# granted a moment before being posted: a few messages at most).
_LOOK_AHEAD = 50

T = TypeVar("T")


def platform_place(message: Message | None) -> int | None:
    """Where the platform shows a message still in the history: its id there, when that is a number that orders (a
    Discord snowflake); None otherwise."""
    if message is None or not message.visible or message.platform_message_id is None:
        return None
    return int(message.platform_message_id) if message.platform_message_id.isdigit() else None


class ServiceCore:
    """What every part of the service shares: the storage (its writer and its reads, ``arbiter.storage.port``), the
    clock, the personas, the defaults; running a step on a channel's locked state, and committing a transition with
    its events."""

    def __init__(
        self,
        reads: StorageReads,
        writer: StorageWriter,
        *,
        clock: Callable[[], float],
        new_id: Callable[[], str],
        personas: Collection[str] = (),
        agents: Collection[str] = (),
        default_settings: ChannelSettings | None = None,
        wants_events: Callable[[str], bool] | None = None,
        image_bounds: ImageBounds | None = None,
    ) -> None:
        """``wants_events(channel_id)``: whether anyone will hear that channel's events; building them is skipped
        when no one will (the common case on one SQLite process with no open streams). None: always build them
        (other arbiter processes may be listening). ``agents``: the external agents' ids (members like the
        personas; see ``arbiter.registry``)."""
        self._reads = reads
        self._writer = writer
        self._clock = clock
        self._new_id = new_id
        self._wants_events = wants_events
        self.registry = PersonaRegistry(personas, agents)
        self._defaults = default_settings or ChannelSettings()
        self.image_bounds = image_bounds or ImageBounds()
        validate_settings(self._defaults)

    def now(self) -> float:
        return self._clock()

    # --- plumbing ---------------------------------------------------------------------------------------

    async def _change(
        self, channel_id: str, step: Callable[[StepTx, ChannelState], T], spend_ids: Sequence[str] = ()
    ) -> T:
        """Run ``step`` on the channel's locked state in the writer. Steps are synchronous (see storage.writer)."""

        def run(tx: StepTx) -> T:
            state = tx.channel(channel_id, spend_ids=spend_ids)
            if state is None:
                raise NotFound(f"unknown channel {channel_id}", field="channel_id", code="unknown_channel")
            return step(tx, state)

        return await self._writer.run(run, (channel_id,))

    def _commit(self, tx: StepTx, before: ChannelState, transition: Transition) -> None:
        if transition.changed:
            tx.apply(transition)
            if self._heard(before.channel_id):
                tx.emit(*transition_events(transition, before, tx.now()))

    def _heard(self, channel_id: str) -> bool:
        """Whether anyone will hear the channel's events (see ``wants_events``)."""
        return self._wants_events is None or self._wants_events(channel_id)

    async def _read_state(self, channel_id: str, now: float) -> ChannelState:
        state = await self._writer.remembered(channel_id)
        if state is not None:
            return state
        state = await self._reads.channel(channel_id, now)
        if state is None:
            raise NotFound(f"unknown channel {channel_id}", field="channel_id", code="unknown_channel")
        return state

    @staticmethod
    def _newest_time(tx: StepTx, state: ChannelState) -> float:
        """When the channel's newest message was said (-inf when its history is empty)."""
        newest = tx.message(state.channel_id, state.last_seq) if state.last_seq else None
        return float("-inf") if newest is None else newest.created_at

    def _linked(
        self, tx: StepTx, state: ChannelState, persona_id: str, message: Message, platform_message_id: str
    ) -> Transition:
        """A persona's granted message linked to the platform's id for it, in the place the platform shows it: after a
        message recorded after it but said before it there (heard late, while it was on its way), it moves to the
        end of the history (``rules.move_to_end``)."""
        linked = rules.link_platform_id(state, persona_id, message, platform_message_id)
        if not linked.changed or not platform_message_id.isdigit():
            return linked
        posted = int(platform_message_id)
        for seq in range(message.seq + 1, min(state.last_seq, message.seq + _LOOK_AHEAD) + 1):
            said = platform_place(tx.message(state.channel_id, seq))
            if said is not None and said < posted:
                tx.require_lock()  # its old place is written before its new one: the locked way does that in order
                return rules.move_to_end(
                    state, message, platform_message_id=platform_message_id, said_at=self._newest_time(tx, state)
                )
        return linked

    def _message(self, tx: StepTx, channel_id: str, seq: int) -> Message:
        message = tx.message(channel_id, seq)
        if message is None:
            raise NotFound(f"no message {seq} in channel {channel_id}", field="seq", code="unknown_message")
        return message
