"""Whether to take a turn, and which tier to claim: decided before any LLM call, from the arbiter's status,
the recent messages and the persona's traits. Pure (randomness passed in), so its tests are plain tables.

Why here and not in the model: every LLM call should end in a message. Letting every persona ask its model
"should I speak?" on every message is what made the reference design spend several calls per utterance.
The model still chooses the words, and may still pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from bots.kinds import asks_for_explanation, is_question

if TYPE_CHECKING:
    import random
    from collections.abc import Sequence

    from arbiter.contract import MessageView, StatusView
    from bots.persona import Persona

__all__ = ("STALE_AFTER_S", "Plan", "anchor", "blocked", "plan_turn", "stale", "wait_for")

_ORDER = (Tier.AIZUCHI, Tier.REMARK, Tier.LONG)

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


def wait_for(status: StatusView, cost: int) -> float | None:
    """Seconds until the pool holds ``cost`` by the refunds the status lists; None if they are not enough."""
    level = status.level
    if level >= cost:
        return 0.0
    for refund in status.refunds:
        level += refund.amount
        if level >= cost:
            return max(0.0, refund.at - status.now)
    return None


def blocked(status: StatusView) -> str | None:
    """Why nobody may speak (or this persona may not), whatever it would say; None when nothing is in the way."""
    you = status.you
    if not status.enabled or (you is not None and not you.enabled):
        return "not enabled here"
    if you is not None and you.muted:
        return "muted"
    if status.paused:
        return "paused"
    # As the arbiter counts: bot turns taken, and those others are about to take.
    in_flight = sum(status.claims_held.values()) - (1 if status.claim is not None else 0)
    if status.bot_streak + in_flight >= status.idle_cap:
        return "idle cap reached: waiting for a human"
    if status.daily_token_budget is not None and status.tokens_today >= status.daily_token_budget:
        return "token budget spent"
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


def _room_to_nod(status: StatusView, window: Sequence[MessageView]) -> bool:
    """One nod per message: none to a nod, none while another is on its way (the arbiter refuses both too).
    Nor while someone is about to make a remark: the nod would be about a message no longer the latest."""
    held = status.claims_held
    return window[-1].tier is not Tier.AIZUCHI and not any(held.get(tier, 0) for tier in Tier)


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
    nod = _nod_chance(persona, status, window) if _room_to_nod(status, window) else 0.0
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
    why = blocked(status)
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
    if status.priority and persona.id not in status.priority:
        # Someone else was asked: they answer first, and a nod before the answer would read as one. Look again
        # when their floor ends (their answer, a message, wakes everyone before that).
        until = status.priority_until if status.priority_until is not None else status.now
        names = ", ".join(status.priority)
        return Plan(None, retry_after=max(0.0, until - status.now), why=f"{names} has the floor", floor=True)
    wanted = intent or _wanted(persona, status, window, rng, second_look=second_look)
    if wanted is None:
        return Plan(None, why="stays quiet this time", quiet=True)
    if status.tiers[wanted].affordable:
        return Plan(wanted, why=f"wants a {wanted}")
    retry = wait_for(status, status.tiers[wanted].cost)
    if persona.id in status.priority:
        # Addressed: the floor is kept for this persona, so the pool will refill for it. Answer, do not just nod.
        return Plan(None, retry_after=retry, why=f"addressed; waits for the pool to afford a {wanted}", wanted=wanted)
    # Not affordable now: a smaller tier that is, or come back when the refunds allow it.
    smaller = [tier for tier in _ORDER[: _ORDER.index(wanted)] if status.tiers[tier].affordable]
    if wanted is Tier.LONG and Tier.REMARK in smaller:
        return Plan(Tier.REMARK, why="a long remark is too dear; a remark will do")
    nod = 0.5 * persona.big_five.agreeableness * _nods_enough(window)
    if smaller and _room_to_nod(status, window) and rng.random() < nod:
        return Plan(Tier.AIZUCHI, why=f"nods while the pool refills for a {wanted}")
    return Plan(None, retry_after=retry, why=f"waits for the pool to afford a {wanted}", wanted=wanted)
