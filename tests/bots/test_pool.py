"""``bots.pool``: a pushed status rolled forward along its refunds, and moved by the level events since, against the
arbiter's own rules (``arbiter.core.rules`` and ``arbiter.views``, the code that answers a claim): what the persona
would plan from never claims what the arbiter would refuse for the pool, and the wait it computes ends when the
arbiter would grant."""

from __future__ import annotations

from typing import TypeAlias

from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter.contract import RefundView, StatusView, TierView
from arbiter.core.models import ChannelState, RefusalReason, Tier
from arbiter.core.rules import Author
from arbiter.views import level_event, status_view
from bots.pool import moved_on, wait_for
from tests.arbiter.core.builders import DISTINCT_RECOVERY, HANA, KAI, MIO, T0, channel, hear, hold, said

Step: TypeAlias = tuple[Author, Tier, float, bool]  # who, what, how long after the step before, a claim (not a message)

OBSERVER = "obs"  # the persona whose status is pushed; it never speaks here
AUTHORS = (HANA, KAI, MIO)

_steps = st.lists(
    st.tuples(st.sampled_from(AUTHORS), st.sampled_from(list(Tier)), st.floats(0.0, 4.0), st.booleans()),
    max_size=8,
)


def _spent(steps: list[Step], start: float, state: ChannelState | None = None) -> tuple[ChannelState, float]:
    """Messages (and a claim or two) by other personas, as far as the arbiter lets them; the channel and the time."""
    state = state or channel(capacity=100, idle_cap=1_000, tiers=DISTINCT_RECOVERY)
    now = start
    for author, tier, gap, claims in steps:
        now += gap
        if not status_view(state, now, persona_id=author.id).tiers[tier].may_claim:
            continue
        if claims and state.claim_of(author.id, now) is None:
            state = hold(state, author.id, tier, now)[0]
        else:
            state = said(state, author, tier, now)
    return state, now


def _pool_decided(view: TierView) -> bool:
    return bool(view.may_claim) or view.reason is RefusalReason.INSUFFICIENT


def _check(
    pushed_state: ChannelState, pushed_at: float, state: ChannelState, at: float, moved: StatusView | None
) -> None:
    truth = status_view(state, at, persona_id=OBSERVER)
    pushed = status_view(pushed_state, pushed_at, persona_id=OBSERVER)
    if moved is None:
        # Only when the refunds listed (the next ten) end before the pool holds some tier's cost.
        assert len(pushed.refunds) == 10 or len(level_event(state, at).refunds) == 10
        return
    assert moved.level <= truth.level
    for tier in Tier:
        ours, theirs = moved.tiers[tier], truth.tiers[tier]
        if not (_pool_decided(pushed.tiers[tier]) and _pool_decided(theirs)):
            continue  # something besides the pool decides it (a nod under way, a floor): a fresh status comes then
        assert not ours.may_claim or theirs.may_claim, (tier, ours, theirs)
        if ours.reason is RefusalReason.INSUFFICIENT:
            assert ours.retry_after is not None
            later = status_view(state, at + ours.retry_after, persona_id=OBSERVER).tiers[tier]
            assert later.may_claim or not _pool_decided(later), (tier, ours, later)


@settings(max_examples=200, deadline=None)
@given(steps=_steps, after=st.floats(0.0, 12.0))
def test_a_status_rolled_forward_agrees_with_the_arbiter_on_the_pool(steps: list[Step], after: float) -> None:
    state, pushed_at = _spent(steps, T0)
    pushed = status_view(state, pushed_at, persona_id=OBSERVER)
    _check(state, pushed_at, state, pushed_at + after, moved_on(pushed, pushed_at + after))


@settings(max_examples=200, deadline=None)
@given(steps=_steps, more=_steps, after=st.floats(0.0, 12.0))
def test_a_status_moved_by_a_later_level_event_agrees_with_the_arbiter_on_the_pool(
    steps: list[Step], more: list[Step], after: float
) -> None:
    before, pushed_at = _spent(steps, T0)
    pushed = status_view(before, pushed_at, persona_id=OBSERVER)
    # Others spend after the push (no status comes for that): the persona hears the level events.
    state, moved_at = _spent(more, pushed_at, before)
    latest = level_event(state, moved_at)
    _check(before, pushed_at, state, moved_at + after, moved_on(pushed, moved_at + after, latest))


def test_an_unchanged_pool_is_the_status_as_pushed() -> None:
    state = said(channel(tiers=DISTINCT_RECOVERY), HANA, Tier.REMARK, T0)  # 40 left until T0 + 5
    pushed = status_view(state, T0 + 1, persona_id=OBSERVER)
    assert moved_on(pushed, T0 + 2) is pushed  # nothing came back yet, and nothing moved it
    rolled = moved_on(pushed, T0 + 5)
    assert rolled is not None
    assert (rolled.level, rolled.refunds, rolled.tiers[Tier.REMARK].may_claim) == (100, [], True)


def test_a_level_event_older_than_the_status_is_ignored() -> None:
    state = said(channel(tiers=DISTINCT_RECOVERY), HANA, Tier.REMARK, T0)
    stale = level_event(channel(tiers=DISTINCT_RECOVERY), T0 - 1)  # the full pool, before the remark
    pushed = status_view(state, T0, persona_id=OBSERVER)
    assert moved_on(pushed, T0 + 1, stale) is pushed


def test_the_wait_is_for_the_refund_that_brings_the_cost() -> None:
    refunds = [RefundView(at=10.0, amount=5), RefundView(at=12.0, amount=60), RefundView(at=20.0, amount=30)]
    assert wait_for(35, 100, refunds, 60, now=9.0) == 3.0  # 35 + 5 is short; + 60 is enough
    assert wait_for(35, 100, refunds, 5, now=9.0) == 0.0
    assert wait_for(35, 100, refunds[:1], 60, now=9.0) is None  # not within the refunds listed
    assert wait_for(35, 50, refunds, 60, now=9.0) is None  # more than the pool ever holds


def test_a_wait_past_the_refunds_listed_is_not_guessed() -> None:
    state, now = channel(capacity=130, tiers=DISTINCT_RECOVERY), T0
    for index in range(11):  # eleven nods, back by T0 + 3.5; then a remark, back at T0 + 6.6
        now = T0 + index * 0.15
        state = said(hear(state, now), AUTHORS[index % 3], Tier.AIZUCHI, now)  # a nod to each person's message
    state = said(state, KAI, Tier.REMARK, now + 0.1)
    pushed = status_view(state, now + 0.1, persona_id=OBSERVER)
    assert (pushed.level, len(pushed.refunds)) == (15, 10)  # the last nod and the remark are not listed
    assert pushed.tiers[Tier.LONG].retry_after is not None  # the arbiter knows when 80 will be back
    # Once the first nod is back, the ten listed bring the pool to 65 at most: when 80 is back, only a read tells.
    assert moved_on(pushed, T0 + 2.05) is None
