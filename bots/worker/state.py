"""What a persona's worker in one channel knows, as one immutable value: the window of messages it read, how far it
has dealt with them, the look under way, the claim it holds, what it waits for. ``bots.worker.step`` makes the next
value from it; nothing else changes it."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from arbiter import contract as wire

if TYPE_CHECKING:
    from arbiter.contract import ClaimView, MessageView, StatusView, Tier
    from bots.worker.overtaking import Overtaking

__all__ = ("Turn", "WorkerState", "kept_notes")


class Turn(NamedTuple):
    """One look, from the end of the persona's pause to the end of whatever came of it."""

    due: float  # when the look was meant to be (the runtime's clock): once the pause was over
    pause: float  # that pause
    cannot_post: str | None = None  # why the platform would not take its post, as the look began
    backoff: float = 0.0  # seconds left of a provider's back-off, as the look began
    begun: bool = False  # past the checks: it asks its status, plans, perhaps claims (a look that counts)
    status: StatusView | None = None  # what it planned from
    read_at: float = 0.0  # when it read that status (the runtime's clock)
    window: tuple[MessageView, ...] = ()  # the window it planned from
    claimed: Tier | None = None  # the tier it claimed
    asked_notes: bool = False  # its claim asked for its notes
    claim: ClaimView | None = None  # granted
    addressed_by: int | None = None  # the seq of the message that asked it, if it has the floor
    second_try: bool = False  # asked, and its first try said nothing: no pass offered this time
    shown: tuple[MessageView, ...] = ()  # what the model was shown of the window
    speech: tuple[Tier, str] | None = None  # what it is saying
    spoke: bool = False  # the arbiter granted a message (posted, or retracted when the post failed)
    failed: bool = False  # an error cut the turn short

    @property
    def newest(self) -> int:
        return self.window[-1].seq if self.window else 0


class WorkerState(NamedTuple):
    """Everything a worker knows. A named tuple (a step makes a new one with ``_replace``, several times faster than a
    dataclass's ``replace``), its messages in tuples trimmed as they grow: a persona process keeps one per persona and
    channel, six thousand for six personas in a thousand channels."""

    window: tuple[MessageView, ...] = ()
    last_seq: int = 0
    answered: int = 0  # the newest seq by someone else this persona has dealt with
    own: tuple[MessageView, ...] = ()  # what it said here lately, oldest first
    # Its own last lines as the arbiter keeps them come with its first granted claim here: the recent history it reads
    # on arrival may not reach back to them (others said more since, or it was away).
    own_read: bool = False
    arrived: bool = False  # the recent history is in (the stream's replay ended with the level)
    cues_after: int | None = None  # on arrival, what came after this seq is to answer, not context (``Opened``)
    closed: bool = False
    woken: bool = False  # something to look at: a look after the pause
    looking: bool = False  # a task runs the looks (a worker in a quiet channel holds none)
    timer: bool = False  # a look is scheduled (a retry, a second look)
    turn: Turn | None = None  # the look under way
    held: str | None = None  # claim id while one is held
    writing: Overtaking | None = None  # while the model writes: what would make its answer unpostable
    second_look: int | None = None  # seq a quiet persona will look at once more after a pause
    intent: tuple[int, Tier] | None = None  # (thread's seq, tier) it waits for the pool to afford
    floor_wait: bool = False  # waiting while another persona has the floor
    # What it had answered before a look the arbiter refused outright (a pause, a mute, the idle cap): a settings
    # change can lift that with no new message, so the settings event has it look again from there.
    blocked: int | None = None
    # The addressing message's seq after a first try that said nothing (a pass, a failure): one more look, with no
    # pass offered, before the floor is given up.
    must_answer: int | None = None
    # Its notes on this channel (its dialogue state) as the arbiter keeps them, as (seq, the state's JSON): a third of
    # the parsed value's size. And the update of the turn under way, given with its speech or its release.
    notes: tuple[int, str] | None = None
    memory_read: bool = False  # given with its first granted claim here (or heard of before)
    new_memory: wire.MemoryUpdate | None = None
    said_heard: int = 0  # the newest message a person said here that the stream brought (a platform id)
    standing: str | None = None  # why it last told the arbiter it cannot post here (None: it has not)
    replanned: int = -1  # the seq a refused claim was planned again for, at once (once per message)

    @property
    def memory(self) -> wire.MemoryUpdate | None:
        """Its notes, parsed."""
        if self.notes is None:
            return None
        seq, state = self.notes
        return wire.MemoryUpdate(
            seq=seq, state=wire.DialogueState.model_validate_json(state, context=wire.FROM_THE_ARBITER)
        )

    @property
    def idle(self) -> bool:
        """Nothing under way and nothing scheduled: no turn running, no wake-up and no look pending."""
        return not (self.turn is not None and self.turn.begun) and not self.woken and not self.timer


def kept_notes(memory: wire.MemoryUpdate | None) -> tuple[int, str] | None:
    """Notes as a state keeps them."""
    return None if memory is None else (memory.seq, memory.state.model_dump_json())
