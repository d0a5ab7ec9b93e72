"""The storage port: what the service asks of storage, whatever holds the data.

Three parts. :class:`StepTx` is what a step may call inside the writer's transaction (it reads, asks the pure core,
then applies); :class:`StorageWriter` runs the steps, in batches, and answers each caller once its batch is
committed; :class:`StorageReads` are the reads the service makes outside the writer. Beside them,
:class:`SessionStore` keeps the MCP sessions' subscriptions (``arbiter.mcp.kept``).

Two sides stand behind the port: SQL on SQLite or PostgreSQL (``arbiter.storage.writer``,
``arbiter.storage.sql_port``) and the in-memory twin (``arbiter.storage.memory``, ``arbiter.storage.memory_sessions``),
held to the same behaviour by one contract suite (``tests/arbiter/storage/test_port_behaviour.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias, TypeVar

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from arbiter.core.models import ChannelState, Memory, Message, PersonaInfo
    from arbiter.core.rules import Transition
    from arbiter.events import Event

__all__ = ("ChannelSummary", "SessionStore", "Step", "StepTx", "StorageReads", "StorageWriter", "Usage")

R = TypeVar("R")

ChannelSummary: TypeAlias = tuple[str, bool, int]  # id, enabled, last_seq
# Per persona: prompt tokens (every input token), completion tokens, requests, and of the prompt tokens those read from
# and written to the provider's prompt cache.
Usage: TypeAlias = dict[str, tuple[int, int, int, int, int]]


class StepTx(Protocol):
    """What a step may do in the batch's transaction (the service's steps are typed against this). Whatever a step
    changes here is kept if it returns and leaves no trace if it raises."""

    def now(self) -> float: ...

    def channel(self, channel_id: str, *, spend_ids: Iterable[str] = ()) -> ChannelState | None:
        """The channel's current state, locked for the rest of the batch; None if it does not exist. ``spend_ids``:
        spends to include even if they were refunded already."""
        ...

    def message(self, channel_id: str, seq: int) -> Message | None: ...

    def message_by_platform_id(self, channel_id: str, platform_message_id: str) -> Message | None: ...

    def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        """The channel's last ``limit`` visible messages, oldest first."""
        ...

    def said_by(self, channel_id: str, author_id: str, limit: int) -> list[Message]:
        """The last ``limit`` messages ``author_id`` said in the channel (deleted ones too, not retracted ones), oldest
        first."""
        ...

    def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        """The channel's notes by persona id (or only ``persona_id``'s)."""
        ...

    def require_lock(self) -> None:
        """Before a step writes what the one-statement commit does not: the batch runs under the row locks."""
        ...

    def delete_history(self, channel_id: str) -> int:
        """Delete the channel's messages, including any staged earlier in this batch; how many there were."""
        ...

    def delete_memories(self, channel_id: str, persona_id: str | None = None) -> list[str]:
        """Forget the channel's notes (or only ``persona_id``'s); whose notes were deleted, sorted."""
        ...

    def create_channel(self, state: ChannelState) -> ChannelState:
        """Create the channel, or return the one another process created a moment ago."""
        ...

    def save_memory(self, memory: Memory) -> bool:
        """Store a persona's notes unless newer ones are stored; whether they were."""
        ...

    def save_persona(self, info: PersonaInfo) -> None:
        """Store how a persona presents itself (replacing what was stored)."""
        ...

    def add_usage(self, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]) -> None:
        """Count a request's tokens (prompt, completion, cache read, cache write) to the persona's usage of the day."""
        ...

    def apply(self, transition: Transition) -> None:
        """Stage what a transition changed; everything is written at the end of the batch."""
        ...

    def replace_state(self, state: ChannelState) -> None: ...

    def emit(self, *events: Event) -> None:
        """Events to publish once the batch is committed (none, if this step fails)."""
        ...


Step: TypeAlias = Callable[[StepTx], R]


class StorageWriter(Protocol):
    """Runs every change to a channel: steps in batches, each caller answered once its batch is committed, the
    batch's events published first. A step that raises fails alone and leaves no trace."""

    async def start(self) -> None: ...

    async def close(self) -> None:
        """Finish what was queued, then stop; later steps are refused (``StorageError``, ``shutting_down``)."""
        ...

    async def run(self, step: Step[R], channel_ids: Sequence[str] = ()) -> R:
        """Run ``step`` in the next batch; its result once committed (its error, if it raised).
        ``channel_ids``: the channels the step will touch."""
        ...

    async def remembered(self, channel_id: str) -> ChannelState | None:
        """The channel's last committed state if the writer has it at hand and knows it current, else None (then
        read it with :meth:`StorageReads.channel`)."""
        ...


class StorageReads(Protocol):
    """What the service reads outside the writer: what was committed."""

    async def channel(self, channel_id: str, now: float) -> ChannelState | None:
        """The channel's state with its spends not yet refunded at ``now``; None if it does not exist."""
        ...

    async def version(self, channel_id: str) -> int | None:
        """How many batches changed the channel since it was created (0 at first); None if it does not exist."""
        ...

    async def channel_ids(self) -> list[ChannelSummary]:
        """Every channel, by id."""
        ...

    async def history(self, channel_id: str, after: int, limit: int) -> list[Message]:
        """Visible messages after seq ``after``, oldest first."""
        ...

    async def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        """The last ``limit`` visible messages, oldest first."""
        ...

    async def recent_platform_ids(self, channel_id: str, limit: int) -> list[str]:
        """The platform ids of the last ``limit`` messages that have one (deleted ones too), newest first."""
        ...

    async def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]: ...

    async def usage(self, channel_id: str, day: int) -> Usage: ...

    async def persona_infos(self) -> list[PersonaInfo]:
        """The personas stored, by id."""
        ...


class SessionStore(Protocol):
    """MCP sessions' subscriptions to channel histories, each with its member (``""``: the administrator) and when
    the session was last used. Not the conversation's state: nothing here goes through the writer."""

    async def subscribe(self, session_id: str, channel_id: str, member: str, now: float, *, keep: int) -> list[str]:
        """Keep the subscription (the session used ``now``), then forget the member's least recently used sessions
        past the ``keep`` most recent; their ids."""
        ...

    async def unsubscribe(self, session_id: str, channel_id: str) -> None: ...

    async def channels_of(self, session_id: str) -> list[str]: ...

    async def touch(self, session_id: str, now: float) -> None: ...

    async def forget(self, session_id: str) -> None: ...

    async def expire(self, before: float) -> int:
        """Forget the subscriptions of sessions not used since ``before``; how many went."""
        ...
