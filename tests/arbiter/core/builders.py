"""Small builders for the core tests: channels, authors, and transitions that must succeed.

The helpers assert on the outcome they expect, so a scenario that goes wrong fails at the step that broke,
not several steps later.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from arbiter.core import rules
from arbiter.core.models import (
    AuthorKind,
    ChannelSettings,
    ChannelState,
    Message,
    PersonaPolicy,
    Spend,
    Tier,
    TierRule,
)
from arbiter.core.rules import Author, ClaimGranted, Refusal, Released, SpeechGranted, Transition
from tests.support.clock import FakeClock

# A fixed, ordinary moment (the fake clock's start): far from midnight UTC, so the daily budget never rolls over.
T0 = FakeClock().value

# The channel settings the turn-taking rules read, as Hypothesis strategies: the rules' property test draws these,
# the status test these and the settings only a status shows.
RULE_KNOBS = {
    "capacity": st.sampled_from([60, 100, 250]),
    "idle_cap": st.integers(1, 6),
    "human_hold_s": st.sampled_from([0.0, 2.0]),
    "priority_window_s": st.sampled_from([0.0, 10.0]),
    "paused": st.sampled_from([False, False, False, True]),
    "daily_token_budget": st.sampled_from([None, 1, 10_000]),
}

HANA = Author("hana", "Hana")
KAI = Author("kai", "Kai")
MIO = Author("mio", "Mio")
HUMAN = Author("u-1", "Yuki", AuthorKind.HUMAN)
OTHER_BOT = Author("b-1", "Helper", AuthorKind.BOT)

# Recovery delays that differ per tier, so a test can tell which tier's delay a refund used.
DISTINCT_RECOVERY = {
    Tier.AIZUCHI: TierRule(cost=5, max_length=24, recovery_s=2.0),
    Tier.REMARK: TierRule(cost=60, max_length=120, recovery_s=5.0),
    Tier.LONG: TierRule(cost=80, max_length=240, recovery_s=10.0),
}

_ids = itertools.count(1)


def new_id(prefix: str = "s") -> str:
    return f"{prefix}{next(_ids)}"


def channel(**settings: Any) -> ChannelState:
    return ChannelState("c1", ChannelSettings(**settings))


def with_settings(state: ChannelState, **settings: Any) -> ChannelState:
    return replace(state, settings=replace(state.settings, **settings))


def with_policy(state: ChannelState, persona_id: str, **policy: Any) -> ChannelState:
    return replace(state, settings=state.settings.with_policy(persona_id, PersonaPolicy(**policy)))


def refusal(transition: Transition) -> Refusal:
    assert isinstance(transition.outcome, Refusal), transition.outcome
    return transition.outcome


def speech(transition: Transition) -> SpeechGranted:
    assert isinstance(transition.outcome, SpeechGranted), transition.outcome
    return transition.outcome


def say(
    state: ChannelState,
    author: Author,
    tier: Tier,
    now: float,
    text: str = "",
    *,
    based_on_seq: int | None = None,
) -> tuple[ChannelState, SpeechGranted]:
    """A one-step consume that must be granted."""
    transition = rules.consume(
        state, author, text or f"{author.name} {tier}", now, spend_id=new_id(), tier=tier, based_on_seq=based_on_seq
    )
    return transition.state, speech(transition)


def said(state: ChannelState, author: Author, tier: Tier, now: float, text: str = "") -> ChannelState:
    return say(state, author, tier, now, text)[0]


def hear(
    state: ChannelState, now: float, *, author: Author = HUMAN, text: str = "hello", addressed: tuple[str, ...] = ()
) -> ChannelState:
    """An observed message (a human's unless told otherwise)."""
    transition = rules.observe(state, author, text, now, addressed=addressed)
    assert isinstance(transition.outcome, Message)
    return transition.state


def hold(
    state: ChannelState, persona_id: str, tier: Tier, now: float, *, based_on_seq: int | None = None
) -> tuple[ChannelState, Spend]:
    """A claim that must be granted."""
    transition = rules.claim(state, persona_id, tier, now, claim_id=new_id("c"), based_on_seq=based_on_seq)
    assert isinstance(transition.outcome, ClaimGranted), transition.outcome
    return transition.state, transition.outcome.spend


def let_go(state: ChannelState, persona_id: str, claim_id: str, now: float) -> ChannelState:
    transition = rules.release(state, persona_id, claim_id, now)
    assert isinstance(transition.outcome, Released), transition.outcome
    return transition.state


def passed(state: ChannelState, persona_id: str, now: float, *, tier: Tier = Tier.REMARK) -> ChannelState:
    """A pass: a claim that must be granted, given back at once."""
    state, held = hold(state, persona_id, tier, now)
    return let_go(state, persona_id, held.id, now)


def moved(
    state: ChannelState, move: tuple[str, Author, float], now: float, *, long_claims: bool = False
) -> ChannelState:
    """The state after one generated move (``hear``, ``ask``, ``usage``, ``nod``/``remark``/``long``, ``claim``,
    ``claim nod``, ``pass``, or anything else: the mover speaks on its claim), whatever the rules said to it (a
    refusal leaves it as it was). ``long_claims``: a ``claim`` asks for a long remark rather than a remark."""
    what, who, _ = move
    held = state.claim_of(who.id, now)
    if what in ("hear", "ask"):
        addressed = (who.id,) if what == "ask" else ()
        return rules.observe(state, HUMAN, f"{what} {who.id}", now, addressed=addressed).state
    if what == "usage":
        return rules.record_usage(state, 7_000, now).state
    if what in ("nod", "remark", "long"):
        tier = {"nod": Tier.AIZUCHI, "remark": Tier.REMARK, "long": Tier.LONG}[what]
        return rules.consume(state, who, f"{who.name} {what}", now, spend_id=new_id(), tier=tier).state
    if what.startswith("claim"):
        tier = Tier.AIZUCHI if what.endswith("nod") else (Tier.LONG if long_claims else Tier.REMARK)
        return rules.claim(state, who.id, tier, now, claim_id=new_id("c")).state
    if held is None:
        return state
    if what == "pass":
        return rules.release(state, who.id, held.id, now).state
    return rules.speak(state, who, held.id, f"{who.name} speaks", now).state
