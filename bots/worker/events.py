"""What happens to a worker, as values ``bots.worker.step`` takes: a frame of its channel's stream, a timer, and the
answers to what it asked for (a status, a claim, the model's decision, a speech, a post, a release)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arbiter import contract as wire
    from arbiter.contract import Tier
    from bots.llm.base import Decision
    from bots.worker.actions import Post

__all__ = (
    "Answer",
    "CanPost",
    "ClaimAnswered",
    "Close",
    "Dealt",
    "Decided",
    "Event",
    "Failed",
    "Frame",
    "Free",
    "Opened",
    "Overtaken",
    "PauseOver",
    "PostFailed",
    "Posted",
    "Released",
    "SawBeforePosting",
    "SpeakAnswered",
    "StatusRead",
    "Stood",
    "Stopped",
    "TimerFired",
    "TurnFailed",
    "Unusable",
    "Wake",
)


@dataclass(frozen=True, slots=True)
class Frame:
    """A frame of the channel's event stream."""

    frame: wire.ArbiterEvent


@dataclass(frozen=True, slots=True)
class CanPost:
    """Whether the platform would take its post here now (answering ``Arrived``)."""

    cannot_post: str | None


@dataclass(frozen=True, slots=True)
class Opened:
    """The channel was opened for the persona when its history ended at ``seq`` (a room a person opened while the
    personas were still coming up): what the stream brings after it is to answer, even in the replay on arrival."""

    seq: int


@dataclass(frozen=True, slots=True)
class Wake:
    """Something to look at, from outside the stream: its permissions changed, its model refused its key."""


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A look it scheduled (``ScheduleLook``) is due."""


@dataclass(frozen=True, slots=True)
class Free:
    """The looks' task is free: a look is over (or the task just started); the next one, if any."""


@dataclass(frozen=True, slots=True)
class PauseOver:
    """The pause before a look is over; what the runtime says about posting and its provider then."""

    cannot_post: str | None
    backoff: float  # seconds left of a provider's back-off


@dataclass(frozen=True, slots=True)
class Stood:
    """The arbiter was told whether the persona can post here (``told``: it heard)."""

    cannot_post: str | None
    told: bool


@dataclass(frozen=True, slots=True)
class StatusRead:
    status: wire.StatusView
    read_at: float  # the runtime's clock as it was read


@dataclass(frozen=True, slots=True)
class ClaimAnswered:
    result: wire.ClaimResult


@dataclass(frozen=True, slots=True)
class Overtaken:
    """The model's call was stopped: a message came that the answer could no longer be posted after."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The provider failed (the runtime backs off, or stops calling); nothing to say."""


@dataclass(frozen=True, slots=True)
class Unusable:
    """The model answered something no decision could be read from."""


@dataclass(frozen=True, slots=True)
class Answer:
    decision: Decision


@dataclass(frozen=True, slots=True)
class Decided:
    outcome: Overtaken | Failed | Unusable | Answer


@dataclass(frozen=True, slots=True)
class SpeakAnswered:
    """The arbiter's answer to a speech; and the newest message a person said that the persona's account had seen on
    the platform before it was sent (``said_before``) and now (``seen``)."""

    result: wire.SpeakResult
    said_before: int
    seen: int


@dataclass(frozen=True, slots=True)
class Posted:
    """Message ``seq``, in ``tier``, is on the platform as ``platform_message_id``."""

    tier: Tier
    seq: int
    platform_message_id: str


@dataclass(frozen=True, slots=True)
class SawBeforePosting:
    """The account saw a person say ``seen`` after ``post`` was checked and before it was sent: checked again,
    it is posted or retracted."""

    post: Post
    seen: int


@dataclass(frozen=True, slots=True)
class PostFailed:
    seq: int
    error: str
    cannot_post: str | None  # why the platform refuses it now, if it says


@dataclass(frozen=True, slots=True)
class Released:
    """A claim given back; the notes the arbiter kept with it (None: none given, or none taken)."""

    kept: wire.MemoryUpdate | None


@dataclass(frozen=True, slots=True)
class TurnFailed:
    """An error cut the look short (the arbiter unreachable, say); the shell has said what."""


@dataclass(frozen=True, slots=True)
class Dealt:
    """A turn taken some other way (the tool loop) dealt with everything up to ``seq``."""

    seq: int


@dataclass(frozen=True, slots=True)
class Close:
    """The worker is closing: no new looks."""


@dataclass(frozen=True, slots=True)
class Stopped:
    """The looks are stopped and what was under way is settled: what it still holds is given back."""


Event = (
    Frame
    | CanPost
    | Wake
    | Opened
    | TimerFired
    | Free
    | PauseOver
    | Stood
    | StatusRead
    | ClaimAnswered
    | Decided
    | SpeakAnswered
    | Posted
    | SawBeforePosting
    | PostFailed
    | Released
    | TurnFailed
    | Dealt
    | Close
    | Stopped
)
