"""What a worker's step asks of the world, as values ``bots.worker.channel`` carries out.

``Instant`` actions are done at once, whatever the worker is doing (start the looks, stop the model, set a timer,
count, log). ``Awaited`` ones take time and are done one after another by the looks' task; most answer with an
event (``bots.worker.events``) that is stepped in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from arbiter import contract as wire
    from arbiter.contract import Tier

__all__ = (
    "Action",
    "Arrived",
    "AskStatus",
    "Awaited",
    "CancelLook",
    "Carried",
    "Claim",
    "Count",
    "CountPost",
    "Decide",
    "Instant",
    "Link",
    "Log",
    "LookPlanned",
    "Pause",
    "Post",
    "Release",
    "ReportPlan",
    "Retract",
    "ScheduleLook",
    "Speak",
    "StartLooking",
    "StopWriting",
    "TellStanding",
)

# The counters of ``bots.runtime.RuntimeStats`` a step moves.
Counter = Literal["claims", "refused_claims", "passes", "wasted", "overtaken", "given_back", "looks"]


@dataclass(frozen=True, slots=True)
class LookPlanned:
    """A look's plan, as it is made (``PersonaRuntime``'s ``on_decision`` hook, for measuring)."""

    channel_id: str
    seq: int  # the newest message it had seen
    tier: Tier | None  # what it is about to claim, or None for no claim now
    due: float  # when the look was meant to be (the runtime's clock): once the persona's pause was over
    pause: float  # that pause: the moment it took on purpose, as a person reads before answering


# --- done at once -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StartLooking:
    """Start the task that runs the looks (it steps ``Free`` for each)."""


@dataclass(frozen=True, slots=True)
class StopWriting:
    """Stop the model's call under way: the arbiter would refuse its answer."""


@dataclass(frozen=True, slots=True)
class ScheduleLook:
    """Wake the worker after ``seconds`` (``TimerFired``), instead of any look scheduled before."""

    seconds: float


@dataclass(frozen=True, slots=True)
class CancelLook:
    """Forget the look scheduled."""


@dataclass(frozen=True, slots=True)
class Arrived:
    """The recent history is in: let those waiting for it go, and say whether it can post here (``CanPost``)."""


@dataclass(frozen=True, slots=True)
class ReportPlan:
    """A look's plan, for the runtime's ``on_decision`` hook: a ``LookPlanned`` once the shell adds its channel (a
    step knows none: the persona's workers share what it reads besides the state)."""

    seq: int
    tier: Tier | None
    due: float
    pause: float


@dataclass(frozen=True, slots=True)
class Count:
    counter: Counter


@dataclass(frozen=True, slots=True)
class CountPost:
    tier: Tier


@dataclass(frozen=True, slots=True)
class Log:
    """A line for the log, after the persona and the channel: ``message % args``, made only if it is logged."""

    level: int
    message: str
    args: tuple[object, ...] = ()


# --- done in turn -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pause:
    """A person's moment of reading before a look (``PauseOver``)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class TellStanding:
    """Tell the arbiter whether it can post here (``Stood``)."""

    cannot_post: str | None


@dataclass(frozen=True, slots=True)
class AskStatus:
    """The status to plan from, once the arbiter has recorded what the persona's account saw said (``StatusRead``)."""


@dataclass(frozen=True, slots=True)
class Claim:
    request: wire.ClaimRequest  # (``ClaimAnswered``)


@dataclass(frozen=True, slots=True)
class Decide:
    """One model call on the claim (``Decided``): what the model is offered and shown."""

    status: wire.StatusView
    claim: wire.ClaimView
    shown: tuple[wire.MessageView, ...]
    actions: tuple[str, ...]
    lengths: dict[str, int]
    time_left: float | None
    allow_pass: bool
    memory: wire.MemoryUpdate | None
    own_lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Speak:
    """Speak on the claim (``SpeakAnswered``). Once sent, the speech is seen through: posted or retracted."""

    claim_id: str
    tier: Tier
    text: str
    based_on: int
    memory: wire.MemoryUpdate | None


@dataclass(frozen=True, slots=True)
class Post:
    """Post the granted message ``seq`` (``Posted`` or ``PostFailed``); a nod in emoji may be a reaction to
    ``react_to`` instead. ``seen``: the newest message a person said here, as the account saw it, that the check of
    the message's place in the history covered (``SawBeforePosting`` when the account has seen a newer one since)."""

    tier: Tier
    text: str
    seq: int
    react_to: str | None = None
    seen: int = 0


@dataclass(frozen=True, slots=True)
class Retract:
    """Take granted message ``seq`` back out of the history, unposted."""

    seq: int


@dataclass(frozen=True, slots=True)
class Link:
    """Tie message ``seq`` to the platform's message."""

    seq: int
    platform_message_id: str


@dataclass(frozen=True, slots=True)
class Release:
    """Give the claim back with the turn's notes (``Released``). Once sent, seen through."""

    claim_id: str
    memory: wire.MemoryUpdate | None


Instant = StartLooking | StopWriting | ScheduleLook | CancelLook | Arrived | ReportPlan | Count | CountPost | Log
# What takes time besides the pause, which the shell sleeps through in place (``ChannelWorker._run``).
Carried = TellStanding | AskStatus | Claim | Decide | Speak | Post | Retract | Link | Release
Awaited = Pause | Carried
Action = Instant | Awaited
