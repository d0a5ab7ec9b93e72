"""What stops an answer being written: the persona's copy of the arbiter's staleness and floor rules
(``bots/worker/overtaking.py``), in a table, and held to the arbiter's core (``arbiter/core/rules.py``) by a
property: whatever is said while a persona writes, the persona stops its call exactly when the arbiter would refuse
the answer."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from arbiter import contract as wire
from arbiter.contract import AuthorKind, Tier
from arbiter.core import rules as core
from arbiter.core.models import ChannelSettings, ChannelState
from arbiter.core.rules import Author, Refusal
from arbiter.views import message_view, status_view
from bots.worker.overtaking import Overtaking

NOW = 1_785_000_000.0
ME = "aoi"


def _said(
    author: str, *, human: bool = True, addressed: tuple[str, ...] = (), tier: Tier = Tier.REMARK
) -> wire.MessageView:
    return wire.MessageView(
        seq=9,
        author_id=author,
        author_kind=AuthorKind.HUMAN if human else AuthorKind.PERSONA,
        author_name=author.title(),
        text="something",
        at=0.0,
        tier=None if human else tier,
        addressed=list(addressed),
    )


@pytest.mark.parametrize(
    ("messages", "tier", "addressed", "overtaken"),
    [
        # A nod is for the latest message: anything someone else says first leaves it nodding at the wrong one.
        pytest.param([_said("yui")], Tier.AIZUCHI, False, True, id="nod-a-person-speaks"),
        pytest.param([_said("aoi", human=False)], Tier.AIZUCHI, False, True, id="nod-a-persona-speaks"),
        pytest.param([_said("ben", human=False)], Tier.AIZUCHI, False, False, id="nod-its-own-message"),
        # A remark gives way to the floor of someone a person asks, and goes stale after more than the channel's
        # tolerance (here 1) of remarks and human messages; nothing else stops it.
        pytest.param([_said("yui", addressed=("aoi",))], Tier.REMARK, False, True, id="remark-someone-else-asked"),
        pytest.param([_said("yui", addressed=("aoi",))], Tier.LONG, False, True, id="long-someone-else-asked"),
        pytest.param([_said("yui", addressed=("aoi",))], Tier.REMARK, True, False, id="remark-it-has-the-floor-too"),
        pytest.param([_said("yui", addressed=("ben",))], Tier.REMARK, False, False, id="remark-it-is-asked"),
        pytest.param([_said("yui")], Tier.REMARK, False, False, id="remark-a-plain-statement"),
        pytest.param([_said("aoi", human=False, addressed=("cho",))], Tier.REMARK, False, False, id="remark-a-persona"),
        pytest.param([_said("yui"), _said("aoi", human=False)], Tier.REMARK, True, True, id="remark-two-came-after"),
        pytest.param(
            [_said("yui"), *[_said("aoi", human=False, tier=Tier.AIZUCHI)] * 3],
            Tier.REMARK,
            False,
            False,
            id="remark-nods-do-not-count",
        ),
        pytest.param(
            [_said("yui"), _said("ben", human=False)], Tier.REMARK, False, False, id="remark-its-own-count-not"
        ),
    ],
)
def test_what_overtakes_an_answer_being_written(
    messages: list[wire.MessageView], tier: Tier, addressed: bool, overtaken: bool
) -> None:
    overtaking = Overtaking("ben", tier, addressed, tolerance=1)

    assert overtaking.after_all(messages).overtaken is overtaken


# --- the persona and the arbiter agree ---------------------------------------------------------------------

_AOI = Author(ME, "Aoi")
_SAYS = {
    "yui": (Author("yui", "Yui", AuthorKind.HUMAN), ()),
    "yui asks aoi": (Author("yui", "Yui", AuthorKind.HUMAN), ("aoi",)),
    "yui asks ben": (Author("yui", "Yui", AuthorKind.HUMAN), ("ben",)),
    "yui asks ben and aoi": (Author("yui", "Yui", AuthorKind.HUMAN), ("ben", "aoi")),
    "a bot says": (Author("ci", "CI", AuthorKind.BOT), ()),
}
_SPEAKS = {"ben nods": ("ben", Tier.AIZUCHI), "ben remarks": ("ben", Tier.REMARK), "cho remarks": ("cho", Tier.REMARK)}
_MOVES = st.sampled_from(sorted(_SAYS) + sorted(_SPEAKS))
_PAUSE = st.floats(min_value=0.0, max_value=8.0)


def _said(state: ChannelState, move: str, now: float, index: int) -> core.Transition:
    """``move`` run through the core as the arbiter runs it."""
    if move in _SAYS:
        author, addressed = _SAYS[move]
        return core.observe(state, author, f"line {index}", now, addressed=addressed)
    speaker, tier = _SPEAKS[move]
    return core.consume(state, Author(speaker, speaker.title()), f"line {index}", now, spend_id=f"s{index}", tier=tier)


@settings(max_examples=1000, deadline=None)
@given(
    before=st.lists(st.tuples(_MOVES, _PAUSE), min_size=1, max_size=4),
    tier=st.sampled_from(list(Tier)),
    tolerance=st.integers(0, 3),
    during=st.lists(st.tuples(_MOVES, _PAUSE), min_size=1, max_size=6),
)
def test_the_persona_stops_writing_exactly_when_the_arbiter_would_refuse_the_answer(
    before: list[tuple[str, float]], tier: Tier, tolerance: int, during: list[tuple[str, float]]
) -> None:
    # A floor given while the persona writes is taken to outlast the writing (a status does not say how long a floor
    # lasts): here it does, longer than all that is said below. A floor given before it claimed may end meanwhile.
    state, now = (
        ChannelState(
            "lounge", ChannelSettings(stale_tolerance=tolerance, capacity=1000, claim_ttl_s=600, priority_window_s=60)
        ),
        NOW,
    )
    for index, (move, pause) in enumerate(before):
        now += pause
        state = _said(state, move, now, index).state
    # The persona claims what it plans to answer, as the worker does: based on the newest message, its floor and
    # the channel's tolerance read from its status.
    based_on = state.last_seq
    claimed = core.claim(state, ME, tier, now, claim_id="mine", based_on_seq=based_on)
    assume(not isinstance(claimed.outcome, Refusal))
    state = claimed.state
    seen = status_view(state, now, persona_id=ME, display_name="Aoi")
    overtaking = Overtaking.from_status(ME, tier, seen)
    for index, (move, pause) in enumerate(during, start=len(before)):
        now += pause
        transition = _said(state, move, now, index)
        if isinstance(transition.outcome, Refusal):
            continue  # a speaker the arbiter refused said nothing
        state = transition.state
        for message in transition.new_messages:
            overtaking = overtaking.after(message_view(message))
        answer = core.speak(state, _AOI, "mine", "my answer", now, based_on_seq=based_on).outcome
        refused = isinstance(answer, Refusal)
        assert overtaking.overtaken is refused, (move, answer)
        if refused:
            break  # the call is stopped here: what comes after no longer matters
