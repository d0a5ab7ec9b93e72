"""Whether to take a turn, and which tier to claim: decided before any LLM call, from the arbiter's status,
the recent messages and the persona's traits. Pure (randomness passed in), so its tests are plain tables.

Why here and not in the model: every LLM call should end in a message. Letting every persona ask its model
"should I speak?" on every message is what made the reference design spend several calls per utterance.
The model still chooses the words, and may still pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, RefusalReason, Tier
from bots.language.kinds import asks_for_explanation, is_question

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

    from arbiter.contract import MessageView, StatusView
    from bots.persona import Persona

__all__ = ("STALE_AFTER_S", "Plan", "anchor", "plan_turn", "refused_outright", "stale")

# What the arbiter refuses every tier for, and only a message, a moderator or the next day lifts: no turn now.
_OUTRIGHT = frozenset(
    {RefusalReason.NOT_ENABLED, RefusalReason.MUTED, RefusalReason.PAUSED, RefusalReason.IDLE_CAP, RefusalReason.BUDGET}
)

# A message from others that is older than this when the persona looks is context, not a cue: no turn for it.
# That is what the arbiter reads back after a restart (recorded with the time it was said): a question asked
# twenty minutes ago is not answered as if it had just been asked.
STALE_AFTER_S = 120.0


@dataclass(frozen=True, slots=True)
class Plan:
    tier: Tier | None  # claim this tier (the largest the persona might use); None: no LLM call now
    retry_after: float | None = None  # look again after this many seconds (the pool or the floor will allow more)
    why: str = ""
    quiet: bool = False  # chose silence (not blocked): a later look, after a pause, may decide otherwise
    wanted: Tier | None = None  # what it waits for the pool to afford; pass back as ``intent`` to follow through
    floor: bool = False  # waits while another persona has the floor (a release can open it before retry_after)

    @property
    def final(self) -> bool:
        """Nothing more to do for the messages seen so far."""
        return self.tier is None and self.retry_after is None


def refused_outright(status: StatusView) -> str | None:
    """Why the arbiter would refuse this persona any turn now, whatever it would say (as the status it read
    reports it); None when that is not so."""
    nod = status.tiers[Tier.AIZUCHI]
    if nod.reason in _OUTRIGHT:
        return f"{nod.reason}: {nod.detail}"
    return None


def stale(persona: Persona, status: StatusView, window: Sequence[MessageView]) -> str | None:
    """Why the newest message is too old to answer now, or None. Its age is read on the arbiter's clock (the
    status's ``now``; each message's ``at``). An addressed persona the arbiter still keeps the floor for answers
    whatever the age: the floor runs from when the question was asked, so an old one never has it."""
    if not window or persona.id in status.priority:
        return None
    age = status.now - window[-1].at
    if age <= STALE_AFTER_S:
        return None
    return f"the newest message is stale ({age:.0f}s old): context, not a cue"


def _dominating(persona: Persona, window: Sequence[MessageView]) -> bool:
    """Has this persona made most of the recent substantive moves? Then it leaves the floor to others."""
    substantive = [m for m in window if m.author_kind is AuthorKind.HUMAN or m.tier in (Tier.REMARK, Tier.LONG)]
    recent = substantive[-4:]
    return sum(1 for m in recent if m.author_id == persona.id) >= 2


def anchor(window: Sequence[MessageView]) -> MessageView:
    """The message a reply would answer: the newest human message or remark (nods do not move a thread)."""
    for message in reversed(window):
        if message.author_kind is AuthorKind.HUMAN or message.tier in (Tier.REMARK, Tier.LONG):
            return message
    return window[-1]


def _room_to_nod(status: StatusView) -> bool:
    """Whether the arbiter would take a nod now: one per message, none to a nod, none while another persona's
    message is on its way."""
    return bool(status.tiers[Tier.AIZUCHI].may_claim)


def _nod_chance(persona: Persona, status: StatusView, window: Sequence[MessageView]) -> float:
    traits = persona.big_five
    if window[-1].author_kind is AuthorKind.HUMAN:
        chance = 0.6 * traits.agreeableness
    else:
        chance = 0.35 * traits.agreeableness * (0.5 + traits.extraversion)
    return chance * _nods_enough(window)


def _nods_enough(window: Sequence[MessageView]) -> float:
    """Nods are seasoning: when they already make up much of what was said lately, fewer (the more personas,
    the more there are to nod, so this keeps the share steady whatever their number)."""
    recent = window[-8:]
    return 0.3 if sum(1 for m in recent if m.tier is Tier.AIZUCHI) >= 0.35 * len(recent) else 1.0


def _open_question(thread: MessageView, window: Sequence[MessageView]) -> bool:
    """A person's question to everyone that no persona has answered yet (nods do not answer)."""
    if thread.author_kind is not AuthorKind.HUMAN or thread.addressed or not is_question(thread.text):
        return False
    return not any(
        m.seq > thread.seq and m.author_kind is AuthorKind.PERSONA and m.tier is not Tier.AIZUCHI for m in window
    )


def _wanted(
    persona: Persona, status: StatusView, window: Sequence[MessageView], rng: random.Random, *, second_look: bool
) -> Tier | None:
    thread = anchor(window)
    traits = persona.big_five
    talk = persona.talkativeness
    if persona.id in status.priority:
        # Addressed: answer - at length when asked to explain, and now and then anyway if the pool allows.
        asked = next((m for m in reversed(window) if persona.id in m.addressed), thread)
        if asks_for_explanation(asked.text):
            return Tier.LONG
        return Tier.LONG if rng.random() < 0.25 * traits.openness else Tier.REMARK
    fading = 1.0 - status.bot_streak / max(1, status.idle_cap)  # bots talk less the longer no human speaks
    if thread.author_id == persona.id or _dominating(persona, window):
        speak = 0.0  # never answer oneself; leave the floor to others for a while
    elif _open_question(thread, window):
        # A question to everyone gets an answer: likely at once, and certainly after a silence.
        speak = 1.0 if second_look else 0.55 + 0.4 * talk
    elif thread.author_kind is AuthorKind.HUMAN:
        speak = 0.35 + 0.45 * talk
    else:
        speak = (0.3 + 0.5 * talk) * fading
    nod = _nod_chance(persona, status, window) if _room_to_nod(status) else 0.0
    roll = rng.random()
    if roll < speak:
        if thread.author_kind is AuthorKind.HUMAN and asks_for_explanation(thread.text):
            return Tier.LONG
        fresh = sum(1 for m in window if m.author_kind is not AuthorKind.HUMAN) < 3
        return Tier.LONG if fresh and rng.random() < 0.4 * traits.openness else Tier.REMARK
    if roll < speak + (1.0 - speak) * nod:
        return Tier.AIZUCHI
    return None


def plan_turn(
    persona: Persona,
    status: StatusView,
    window: Sequence[MessageView],
    rng: random.Random,
    *,
    intent: Tier | None = None,
    second_look: bool = False,
) -> Plan:
    """Decide the next move for the newest message in ``window`` (oldest first).

    ``intent``: the tier an earlier plan for the same thread waited for; the persona follows through instead of
    making up its mind again. ``second_look``: the persona chose silence for this same message a moment ago and
    looks once more (nobody spoke meanwhile; a question to everyone still unanswered is answered now).
    """
    why = refused_outright(status)
    if why is not None:
        return Plan(None, why=why)
    if not window or (window[-1].author_id == persona.id and persona.id not in status.priority):
        # Its own message is the newest - unless it was asked something while it was writing that: answer it.
        return Plan(None, why="nothing new from others")
    too_old = None if intent is not None else stale(persona, status, window)
    if too_old is not None:
        # (An intent comes from a look at the thread while it was fresh: the persona follows through.)
        return Plan(None, why=too_old)
    if status.claim is not None:
        return Plan(None, why="already holding a claim")
    nod = status.tiers[Tier.AIZUCHI]
    if nod.reason is RefusalReason.PRIORITY:
        # Someone else was asked: they answer first, and a nod before the answer would read as one. Look again
        # when their floor ends (their answer, a message, wakes everyone before that).
        return Plan(None, retry_after=nod.retry_after or 0.0, why=f"priority: {nod.detail}", floor=True)
    wanted = intent or _wanted(persona, status, window, rng, second_look=second_look)
    if wanted is None:
        return Plan(None, why="stays quiet this time", quiet=True)
    verdict = status.tiers[wanted]
    if verdict.may_claim:
        return Plan(wanted, why=f"wants a {wanted}")
    retry = verdict.retry_after
    if persona.id in status.priority:
        # Addressed: the floor is kept for this persona, so the pool will refill for it. Answer, do not just nod.
        return Plan(
            None, retry_after=retry, why=f"addressed; waits to claim a {wanted} ({verdict.reason})", wanted=wanted
        )
    # Not now: a smaller tier the arbiter would take, or come back when it says to.
    smaller = [tier for tier in Tier if tier.rank < wanted.rank and status.tiers[tier].may_claim]
    if wanted is Tier.LONG and Tier.REMARK in smaller:
        return Plan(Tier.REMARK, why="a long remark is not possible now; a remark will do")
    chance = 0.5 * persona.big_five.agreeableness * _nods_enough(window)
    if Tier.AIZUCHI in smaller and rng.random() < chance:
        return Plan(Tier.AIZUCHI, why=f"nods while it waits to claim a {wanted}")
    return Plan(None, retry_after=retry, why=f"waits to claim a {wanted} ({verdict.reason})", wanted=wanted)
