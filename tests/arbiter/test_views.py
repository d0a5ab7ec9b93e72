"""The stream's one-pass status (``views.status_event_json``) against the model it stands for: the same bytes as
``StatusEvent.model_dump_json`` of ``status_view``, over channels in many states; and the status's figures against
the rules they are gathered from once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.models import PersonaPolicy, Tier, TierRule
from arbiter.views import status_event_json, status_view, upcoming_refunds
from tests.arbiter.core.builders import HANA, KAI, MIO, RULE_KNOBS, T0, channel, moved

if TYPE_CHECKING:
    from arbiter.core.rules import Author

_PEOPLE = (HANA, KAI, MIO)
_MOVES = st.lists(
    st.tuples(
        st.sampled_from(["hear", "ask", "nod", "remark", "long", "claim nod", "claim long", "pass", "speak", "usage"]),
        st.sampled_from(_PEOPLE),
        # Fractions of a second as well as whole ones: the times are written as floats.
        st.one_of(st.floats(min_value=0.0, max_value=6.0), st.integers(0, 4)),
    ),
    max_size=14,
)
_TIERS = st.fixed_dictionaries(
    {
        tier: st.builds(
            TierRule,
            cost=st.sampled_from([1, 5, 60, 80]),
            max_length=st.sampled_from([24, 120, 2_000]),
            # An int among them: a model's float field writes it as 5.0, and so must the one pass.
            recovery_s=st.sampled_from([0.0, 2.5, 5, 1e-5, 3_600.0]),
        )
        for tier in Tier
    }
)
_SETTINGS = st.fixed_dictionaries(
    {
        **RULE_KNOBS,
        "enabled": st.sampled_from([True, True, False]),
        "stale_tolerance": st.integers(0, 3),
        # Quotes, escapes, control characters and characters beyond ASCII: written as the model writes them.
        "topic": st.text(max_size=12),
        "tiers": _TIERS,
    }
)
_POLICIES = st.dictionaries(
    st.sampled_from([p.id for p in _PEOPLE]),
    st.builds(
        PersonaPolicy,
        enabled=st.booleans(),
        muted=st.booleans(),
        cannot_post=st.sampled_from([None, 'no "send" permission \u2014 \U0001f6ab\n']),
    ),
    max_size=2,
)


@settings(max_examples=200, deadline=None)
@given(
    moves=_MOVES,
    knobs=_SETTINGS,
    policies=_POLICIES,
    start=st.sampled_from([T0, T0 + 0.123456789, 0.0]),
    name=st.sampled_from(["Hana", 'ハナ "h"', ""]),
)
def test_the_one_pass_status_is_the_models_json(
    moves: list[tuple[str, Author, float]],
    knobs: dict[str, Any],
    policies: dict[str, PersonaPolicy],
    start: float,
    name: str,
) -> None:
    state, now = channel(**knobs), start
    state = replace(state, settings=replace(state.settings, personas=policies))
    for move in moves:
        now += move[2]
        state = moved(state, move, now, long_claims=True)
    for later in (now, now + 0.5, now + 7.25, now + 40):
        for persona in _PEOPLE:
            status = status_view(state, later, persona_id=persona.id, display_name=name)
            event = wire.StatusEvent(channel_id="lounge", persona=persona.id, status=status)
            one_pass = status_event_json(state, later, channel_id="lounge", persona_id=persona.id, display_name=name)
            assert one_pass == event.model_dump_json(), (persona.id, later)
            # The figures the status gathers in one go are the rules' own.
            assert status.level == rules.level(state, later)
            schedule = upcoming_refunds(rules.refund_schedule(state, later))
            assert [(refund.at, refund.amount) for refund in status.refunds] == schedule
            verdicts = rules.verdicts(state, persona.id, later)
            assert {tier: view.reason for tier, view in status.tiers.items()} == {
                tier: None if found is None else found.reason for tier, found in verdicts.items()
            }
            held = Counter(claim.tier for claim in state.claims if claim.held(later))
            assert status.claims_held == dict(held)
