"""The turn-taking rules, called directly: time is a plain float the tests move forward by hand."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter.core import rules
from arbiter.core.errors import ConflictError, InvalidRequest, NotFound, PermissionDenied
from arbiter.core.models import AuthorKind, ChannelState, Message, Priority, RefusalReason, SpendState, Tier
from arbiter.core.rules import Author, ClaimGranted, Released
from tests.arbiter.core.builders import (
    DISTINCT_RECOVERY,
    HANA,
    HUMAN,
    KAI,
    MIO,
    OTHER_BOT,
    RULE_KNOBS,
    T0,
    channel,
    hear,
    hold,
    let_go,
    moved,
    new_id,
    passed,
    refusal,
    said,
    say,
    speech,
    with_policy,
    with_settings,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.support.clock import FakeClock

R = RefusalReason


def _utc(moment: str) -> float:
    """POSIX seconds of an ISO date and time in UTC."""
    return dt.datetime.fromisoformat(moment).replace(tzinfo=dt.UTC).timestamp()


def _consume(
    state: ChannelState, tier: Tier, now: float, text: str = "ok", *, based_on_seq: int | None = None
) -> rules.Transition:
    return rules.consume(state, HANA, text, now, spend_id=new_id(), tier=tier, based_on_seq=based_on_seq)


# --- the pool level ---------------------------------------------------------------------------------------


def test_level_starts_at_capacity() -> None:
    assert rules.level(channel(capacity=70), T0) == 70


@pytest.mark.parametrize(
    ("at", "expected"),
    [
        (2.0, 35),  # the remark and the nod are spent
        (4.999, 35),
        (5.0, 95),  # exactly at its refund time the remark is back
        (6.999, 95),
        (7.0, 100),
        (60.0, 100),
    ],
)
def test_level_is_capacity_minus_unexpired_spends(at: float, expected: int) -> None:
    state = said(channel(), HANA, Tier.REMARK, T0)
    state = said(state, KAI, Tier.AIZUCHI, T0 + 2)
    assert rules.level(state, T0 + at) == expected


def test_level_counts_a_live_claim_until_it_expires() -> None:
    state, _ = hold(channel(claim_ttl_s=30), "hana", Tier.LONG, T0)
    assert rules.level(state, T0) == 20
    assert rules.level(state, T0 + 29.9) == 20
    assert rules.level(state, T0 + 30) == 100


def test_level_never_drops_below_zero_when_capacity_is_lowered() -> None:
    state = said(channel(), HANA, Tier.LONG, T0)
    lowered = with_settings(state, capacity=50)
    assert rules.level(lowered, T0 + 1) == 0
    assert rules.level(lowered, T0 + 5) == 50


def test_refund_schedule_lists_pending_refunds_soonest_first() -> None:
    state = channel(capacity=200, tiers=DISTINCT_RECOVERY, claim_ttl_s=2)
    state = said(state, HANA, Tier.LONG, T0)  # back at T0 + 10
    # The nod before the claim: while another persona is about to speak, nobody nods.
    state = said(state, MIO, Tier.AIZUCHI, T0 + 1)  # back at T0 + 3
    state, _ = hold(state, "kai", Tier.REMARK, T0 + 1)  # expires at T0 + 3
    assert rules.refund_schedule(state, T0 + 1) == [(T0 + 3, 5), (T0 + 3, 60), (T0 + 10, 80)]
    state = hear(state, T0 + 4)  # a new message to nod to: one nod per message
    state = said(state, MIO, Tier.AIZUCHI, T0 + 4)  # back at T0 + 6
    assert rules.refund_schedule(state, T0 + 4) == [(T0 + 6, 5), (T0 + 10, 80)]


# --- every refusal reason ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefusalCase:
    """A channel built step by step, a request at ``now``, and the refusal it must get."""

    build: Callable[[], ChannelState]
    now: float
    tier: Tier
    reason: RefusalReason
    retry_after: float | None
    text: str = "ok"
    based_on_seq: int | None = None


def _pool_short_by_one_refund() -> ChannelState:
    return said(channel(), KAI, Tier.LONG, T0)  # 20 left, 80 back at T0 + 5


def _pool_short_by_two_refunds() -> ChannelState:
    state = said(channel(), KAI, Tier.AIZUCHI, T0)  # 5 back at T0 + 5
    return said(state, MIO, Tier.LONG, T0 + 1)  # 15 left, 80 back at T0 + 6


def _two_humans_spoke_since_seq_1() -> ChannelState:
    state = hear(channel(), T0)
    state = hear(state, T0 + 1)
    return hear(state, T0 + 2)


def _two_bot_turns() -> ChannelState:
    state = said(channel(idle_cap=2), KAI, Tier.AIZUCHI, T0)
    return hear(state, T0 + 1, author=OTHER_BOT)


def _budget_spent() -> ChannelState:
    return rules.record_usage(channel(daily_token_budget=1_000), 1_000, _utc("2026-07-25T12:00:00")).state


def _kai_addressed() -> ChannelState:
    return hear(channel(priority_window_s=20), T0, addressed=("kai",))


def _human_just_spoke() -> ChannelState:
    return hear(channel(human_hold_s=3), T0)


def _kai_nodded() -> ChannelState:
    return said(hear(channel(), T0), KAI, Tier.AIZUCHI, T0)


def _kai_is_nodding() -> ChannelState:
    return hold(hear(channel(claim_ttl_s=30), T0), "kai", Tier.AIZUCHI, T0)[0]  # held until T0 + 30


def _kai_is_about_to_speak() -> ChannelState:
    return hold(hear(channel(claim_ttl_s=30), T0), "kai", Tier.REMARK, T0)[0]  # held until T0 + 30


def _a_human_spoke_since_seq_1() -> ChannelState:
    return hear(hear(channel(), T0), T0 + 1)


REFUSALS = [
    pytest.param(RefusalCase(_pool_short_by_one_refund, T0 + 1, Tier.REMARK, R.INSUFFICIENT, 4.0), id="insufficient"),
    pytest.param(
        RefusalCase(_pool_short_by_two_refunds, T0 + 2, Tier.REMARK, R.INSUFFICIENT, 4.0), id="insufficient-two-refunds"
    ),
    pytest.param(RefusalCase(lambda: channel(paused=True), T0, Tier.AIZUCHI, R.PAUSED, None), id="paused"),
    pytest.param(
        RefusalCase(lambda: with_policy(channel(), "hana", muted=True), T0, Tier.AIZUCHI, R.MUTED, None), id="muted"
    ),
    pytest.param(
        RefusalCase(lambda: channel(enabled=False), T0, Tier.AIZUCHI, R.NOT_ENABLED, None), id="channel-not-enabled"
    ),
    pytest.param(
        RefusalCase(lambda: with_policy(channel(), "hana", enabled=False), T0, Tier.AIZUCHI, R.NOT_ENABLED, None),
        id="persona-not-enabled",
    ),
    pytest.param(
        RefusalCase(lambda: channel(personas_enabled_by_default=False), T0, Tier.AIZUCHI, R.NOT_ENABLED, None),
        id="persona-not-enabled-by-default",
    ),
    pytest.param(RefusalCase(channel, T0, Tier.AIZUCHI, R.TOO_LONG, None, text="x" * 25), id="too-long-latin"),
    pytest.param(RefusalCase(channel, T0, Tier.AIZUCHI, R.TOO_LONG, None, text="あ" * 13), id="too-long-japanese"),
    pytest.param(
        RefusalCase(_two_humans_spoke_since_seq_1, T0 + 3, Tier.REMARK, R.STALE, 0.0, based_on_seq=1), id="stale"
    ),
    pytest.param(RefusalCase(_two_bot_turns, T0 + 2, Tier.AIZUCHI, R.IDLE_CAP, None), id="idle-cap"),
    # Noon UTC: the budget comes back at midnight, twelve hours later.
    pytest.param(
        RefusalCase(_budget_spent, _utc("2026-07-25T12:00:00"), Tier.AIZUCHI, R.BUDGET, 12 * 3600.0), id="budget"
    ),
    pytest.param(RefusalCase(_kai_addressed, T0 + 5, Tier.REMARK, R.PRIORITY, 15.0), id="priority-addressed"),
    pytest.param(RefusalCase(_human_just_spoke, T0 + 1, Tier.REMARK, R.PRIORITY, 2.0), id="priority-human-hold"),
    # Not even a nod while another persona has the floor.
    pytest.param(RefusalCase(_kai_addressed, T0 + 5, Tier.AIZUCHI, R.PRIORITY, 15.0), id="priority-addressed-nod"),
    # One nod per message: none to a nod, none while another persona's nod is on its way.
    pytest.param(RefusalCase(_kai_nodded, T0 + 1, Tier.AIZUCHI, R.NODDED, None), id="nodded-to-a-nod"),
    pytest.param(RefusalCase(_kai_is_nodding, T0 + 1, Tier.AIZUCHI, R.NODDED, 29.0), id="nodded-nod-on-its-way"),
    # Nor while another persona is about to speak: the nod would be about a message no longer the latest.
    pytest.param(
        RefusalCase(_kai_is_about_to_speak, T0 + 1, Tier.AIZUCHI, R.NODDED, 29.0), id="nodded-remark-on-its-way"
    ),
    # A nod claimed a moment ago goes first: a remark waits for it (NOD_FIRST_S after the claim).
    pytest.param(
        RefusalCase(_kai_is_nodding, T0 + 1, Tier.REMARK, R.NODDED, rules.NOD_FIRST_S - 1), id="nodded-remark-waits"
    ),
    # A nod is for the latest message: no tolerance.
    pytest.param(
        RefusalCase(_a_human_spoke_since_seq_1, T0 + 2, Tier.AIZUCHI, R.STALE, 0.0, based_on_seq=1), id="stale-nod"
    ),
]


@pytest.mark.parametrize("case", REFUSALS)
def test_consume_is_refused(case: RefusalCase) -> None:
    state = case.build()
    transition = _consume(state, case.tier, case.now, case.text, based_on_seq=case.based_on_seq)
    found = refusal(transition)
    assert (found.reason, found.retry_after) == (case.reason, case.retry_after)
    assert found.detail
    # A refusal is a normal answer that changes nothing.
    assert transition.state is state
    assert not transition.changed


@pytest.mark.parametrize("case", [p for p in REFUSALS if "too-long" not in str(p.id)])
def test_claim_is_refused_for_the_same_reasons(case: RefusalCase) -> None:
    state = case.build()
    transition = rules.claim(state, "hana", case.tier, case.now, claim_id=new_id(), based_on_seq=case.based_on_seq)
    found = refusal(transition)
    assert (found.reason, found.retry_after) == (case.reason, case.retry_after)
    assert transition.state is state


NOD_REFUSALS = [p for p in REFUSALS if isinstance(p.values[0], RefusalCase) and p.values[0].tier is Tier.AIZUCHI]


@pytest.mark.parametrize("case", NOD_REFUSALS)
def test_a_nod_bought_by_amount_is_refused_for_the_same_reasons(case: RefusalCase) -> None:
    state = case.build()
    # 30 covers a nod (5) but not a remark (60): it buys a nod, checked as any nod is.
    transition = rules.consume(
        state, HANA, case.text, case.now, spend_id=new_id(), amount=30, based_on_seq=case.based_on_seq
    )
    found = refusal(transition)
    assert (found.reason, found.retry_after) == (case.reason, case.retry_after)
    assert transition.state is state


def test_every_refusal_reason_has_a_table_row() -> None:
    covered = {case.reason for param in REFUSALS for case in param.values if isinstance(case, RefusalCase)}
    assert covered == set(RefusalReason)


def test_text_exactly_at_the_tier_limit_is_granted() -> None:
    speech(_consume(channel(), Tier.AIZUCHI, T0, "x" * 24))
    speech(_consume(channel(), Tier.AIZUCHI, T0, "あ" * 12))


def test_persona_enabled_explicitly_may_speak_where_personas_are_off_by_default() -> None:
    state = with_policy(channel(personas_enabled_by_default=False), "hana", enabled=True)
    speech(_consume(state, Tier.AIZUCHI, T0))


def _everything_wrong() -> ChannelState:
    """A channel where every reason applies to hana's too-long, stale remark at T0 + 2."""
    state = hear(channel(idle_cap=2, priority_window_s=20), T0)  # seq 1
    state = said(state, KAI, Tier.LONG, T0 + 0.5)  # seq 2; the pool is down to 20
    state = hear(state, T0 + 1, addressed=("mio",))  # seq 3: mio has the floor
    state = hear(state, T0 + 1.2, author=OTHER_BOT)
    state = hear(state, T0 + 1.4, author=OTHER_BOT)  # two bot turns: the idle cap
    state = rules.record_usage(state, 1_000, T0).state
    state = with_settings(state, enabled=False, paused=True, daily_token_budget=1_000)
    return with_policy(state, "hana", enabled=False, muted=True)


def _fix_channel(state: ChannelState) -> ChannelState:
    return with_settings(state, enabled=True)


def _fix_persona(state: ChannelState) -> ChannelState:
    return with_policy(state, "hana", enabled=True, muted=True)


def _unmute(state: ChannelState) -> ChannelState:
    return with_policy(state, "hana", enabled=True, muted=False)


def _unpause(state: ChannelState) -> ChannelState:
    return with_settings(state, paused=False)


def _no_budget(state: ChannelState) -> ChannelState:
    return with_settings(state, daily_token_budget=None)


def _no_idle_cap(state: ChannelState) -> ChannelState:
    return with_settings(state, idle_cap=100)


def _no_priority(state: ChannelState) -> ChannelState:
    return replace(state, priority=None)


# Each step removes the reason that was reported, revealing the next one in the fixed order.
PRECEDENCE: list[tuple[Callable[[ChannelState], ChannelState] | None, RefusalReason]] = [
    (None, R.NOT_ENABLED),  # the channel
    (_fix_channel, R.NOT_ENABLED),  # the persona
    (_fix_persona, R.MUTED),
    (_unmute, R.PAUSED),
    (_unpause, R.BUDGET),
    (_no_budget, R.IDLE_CAP),
    (_no_idle_cap, R.PRIORITY),
    (_no_priority, R.TOO_LONG),
]


def test_refusal_reasons_come_in_a_fixed_order() -> None:
    state = _everything_wrong()
    reported: list[RefusalReason] = []
    for fix, _ in PRECEDENCE:
        state = fix(state) if fix is not None else state
        reported.append(refusal(_consume(state, Tier.REMARK, T0 + 2, "x" * 121, based_on_seq=1)).reason)
    reported.append(refusal(_consume(state, Tier.REMARK, T0 + 2, "short", based_on_seq=1)).reason)
    reported.append(refusal(_consume(state, Tier.REMARK, T0 + 2, "short", based_on_seq=3)).reason)
    assert reported == [*(reason for _, reason in PRECEDENCE), R.STALE, R.INSUFFICIENT]
    granted = _consume(with_settings(state, capacity=1_000), Tier.REMARK, T0 + 2, "short", based_on_seq=3)
    speech(granted)


def test_a_nods_refusal_reasons_come_in_a_fixed_order() -> None:
    """The floor, then the nod the latest message already has, then the text, its staleness and the pool."""
    state = hear(channel(), T0)  # seq 1
    state = said(state, KAI, Tier.LONG, T0 + 0.5)  # seq 2
    state = said(state, MIO, Tier.AIZUCHI, T0 + 1)  # seq 3: the latest message is a nod
    state = with_settings(state, capacity=85)  # nothing left in the pool until T0 + 5.5
    state = replace(state, priority=Priority(frozenset({"mio"}), T0 + 20, 3))  # mio has the floor
    reported: list[RefusalReason] = []
    for fix, text, based_on_seq in [
        (None, "x" * 25, 1),
        (_no_priority, "x" * 25, 1),
        (lambda s: replace(s, recent_said=tuple((q, False) for q, _ in s.recent_said)), "x" * 25, 1),  # no nod
        (None, "short", 1),
        (None, "short", 3),
    ]:
        state = fix(state) if fix is not None else state
        reported.append(refusal(_consume(state, Tier.AIZUCHI, T0 + 2, text, based_on_seq=based_on_seq)).reason)
    assert reported == [R.PRIORITY, R.NODDED, R.TOO_LONG, R.STALE, R.INSUFFICIENT]
    speech(_consume(with_settings(state, capacity=1_000), Tier.AIZUCHI, T0 + 2, "short", based_on_seq=3))


# --- consume ----------------------------------------------------------------------------------------------


def test_consume_by_tier_spends_its_cost_and_records_the_message() -> None:
    state = channel(tiers=DISTINCT_RECOVERY)
    transition = rules.consume(state, HANA, "そうだね", T0, spend_id="s-1", tier=Tier.REMARK)
    granted = speech(transition)
    assert rules.level(transition.state, T0) == 40
    assert (granted.spend.id, granted.spend.cost, granted.spend.state) == ("s-1", 60, SpendState.SPOKEN)
    assert granted.spend.refund_at == T0 + 5.0
    message = granted.message
    assert (message.seq, message.author_id, message.author_kind, message.text) == (
        1,
        "hana",
        AuthorKind.PERSONA,
        "そうだね",
    )
    assert (message.tier, message.cost, message.spend_id) == (Tier.REMARK, 60, "s-1")
    assert granted.spend.message_seq == 1
    assert transition.new_spends == (granted.spend,)
    assert transition.new_messages == (message,)
    assert transition.state.last_seq == 1


@pytest.mark.parametrize(
    ("amount", "tier"),
    [(5, Tier.AIZUCHI), (59, Tier.AIZUCHI), (60, Tier.REMARK), (79, Tier.REMARK), (80, Tier.LONG), (100, Tier.LONG)],
)
def test_consume_by_amount_buys_the_most_expensive_tier_it_covers(amount: int, tier: Tier) -> None:
    transition = rules.consume(channel(), HANA, "ok", T0, spend_id=new_id(), amount=amount)
    granted = speech(transition)
    assert granted.message.tier is tier
    # The reference design's consume(amount) takes the amount itself from the pool.
    assert granted.spend.cost == amount
    assert rules.level(transition.state, T0) == 100 - amount


def test_amount_limits_the_text_to_its_tier() -> None:
    transition = rules.consume(channel(), HANA, "x" * 25, T0, spend_id=new_id(), amount=59)
    assert refusal(transition).reason is R.TOO_LONG


def test_amount_the_pool_cannot_cover_yet_is_refused_with_a_wait() -> None:
    state = said(channel(), KAI, Tier.LONG, T0)
    transition = rules.consume(state, HANA, "ok", T0 + 2, spend_id=new_id(), amount=30)
    assert (refusal(transition).reason, refusal(transition).retry_after) == (R.INSUFFICIENT, 3.0)


@pytest.mark.parametrize("amount", [4, 0, -5, 101])
def test_amount_outside_the_cheapest_tier_and_capacity_is_invalid(amount: int) -> None:
    with pytest.raises(InvalidRequest) as raised:
        rules.consume(channel(), HANA, "ok", T0, spend_id=new_id(), amount=amount)
    assert raised.value.field == "amount"


@pytest.mark.parametrize(("tier", "amount"), [(Tier.REMARK, 60), (None, None)])
def test_consume_needs_exactly_one_of_tier_or_amount(tier: Tier | None, amount: int | None) -> None:
    with pytest.raises(InvalidRequest) as raised:
        rules.consume(channel(), HANA, "ok", T0, spend_id=new_id(), tier=tier, amount=amount)
    assert raised.value.field in {"tier", "amount"}


# --- claim, speak, release --------------------------------------------------------------------------------


def test_claim_holds_the_tier_cost_until_its_ttl() -> None:
    transition = rules.claim(channel(claim_ttl_s=30), "hana", Tier.REMARK, T0, claim_id="c-1")
    assert isinstance(transition.outcome, ClaimGranted)
    held = transition.outcome.spend
    assert (held.id, held.cost, held.state, held.refund_at) == ("c-1", 60, SpendState.HELD, T0 + 30)
    assert transition.new_spends == (held,)
    assert rules.level(transition.state, T0) == 40


def test_speak_in_the_claimed_tier_refunds_nothing_early() -> None:
    state, held = hold(channel(tiers=DISTINCT_RECOVERY), "hana", Tier.REMARK, T0)
    transition = rules.speak(state, HANA, held.id, "I agree with that.", T0 + 2)
    granted = speech(transition)
    assert granted.refunded == 0
    assert (granted.spend.id, granted.spend.state, granted.spend.cost) == (held.id, SpendState.SPOKEN, 60)
    assert granted.spend.refund_at == T0 + 2 + 5.0
    assert granted.message.tier is Tier.REMARK
    assert transition.changed_spends == (granted.spend,)
    assert rules.level(transition.state, T0 + 6.9) == 40
    assert rules.level(transition.state, T0 + 7) == 100


def test_speak_in_a_cheaper_tier_refunds_the_difference_at_once() -> None:
    state, held = hold(channel(tiers=DISTINCT_RECOVERY), "hana", Tier.LONG, T0)
    transition = rules.speak(state, HANA, held.id, "うん", T0 + 1, tier=Tier.AIZUCHI)
    granted = speech(transition)
    assert granted.refunded == 75
    assert (granted.spend.tier, granted.spend.cost) == (Tier.AIZUCHI, 5)
    assert granted.message.tier is Tier.AIZUCHI
    assert rules.level(transition.state, T0 + 1) == 95
    # The rest comes back after the spoken tier's recovery (aizuchi: 2 s), not the claimed one's (10 s).
    assert granted.spend.refund_at == T0 + 1 + 2.0
    assert rules.level(transition.state, T0 + 3) == 100


def test_speak_in_a_dearer_tier_than_claimed_is_invalid() -> None:
    state, held = hold(channel(), "hana", Tier.REMARK, T0)
    with pytest.raises(InvalidRequest) as raised:
        rules.speak(state, HANA, held.id, "a long story", T0 + 1, tier=Tier.LONG)
    assert raised.value.field == "tier"


def test_release_refunds_the_claim_in_full_at_once() -> None:
    state, held = hold(channel(), "hana", Tier.LONG, T0)
    transition = rules.release(state, "hana", held.id, T0 + 1)
    assert isinstance(transition.outcome, Released)
    assert transition.outcome.spend.state is SpendState.RELEASED
    assert transition.changed_spends == (transition.outcome.spend,)
    assert rules.level(transition.state, T0 + 1) == 100
    assert transition.state.claim_of("hana", T0 + 1) is None


def test_releasing_twice_is_harmless() -> None:
    state, held = hold(channel(), "hana", Tier.LONG, T0)
    state = let_go(state, "hana", held.id, T0 + 1)
    again = rules.release(state, "hana", held.id, T0 + 2)
    assert isinstance(again.outcome, Released)
    assert again.state is state
    assert not again.changed


def test_speak_after_release_is_a_conflict() -> None:
    state, held = hold(channel(), "hana", Tier.REMARK, T0)
    state = let_go(state, "hana", held.id, T0 + 1)
    with pytest.raises(ConflictError):
        rules.speak(state, HANA, held.id, "too late", T0 + 2)


def test_speak_twice_on_one_claim_is_a_conflict() -> None:
    state, held = hold(channel(), "hana", Tier.REMARK, T0)
    state = rules.speak(state, HANA, held.id, "once", T0 + 1).state
    with pytest.raises(ConflictError):
        rules.speak(state, HANA, held.id, "twice", T0 + 2)
    with pytest.raises(ConflictError):
        rules.release(state, "hana", held.id, T0 + 2)


def test_another_personas_claim_cannot_be_spoken_or_released() -> None:
    state, held = hold(channel(), "kai", Tier.REMARK, T0)
    with pytest.raises(PermissionDenied):
        rules.speak(state, HANA, held.id, "mine now", T0 + 1)
    with pytest.raises(PermissionDenied):
        rules.release(state, "hana", held.id, T0 + 1)


def test_unknown_claim_is_not_found() -> None:
    with pytest.raises(NotFound) as raised:
        rules.speak(channel(), HANA, "nope", "hello", T0)
    assert raised.value.field == "claim_id"
    with pytest.raises(NotFound):
        rules.release(channel(), "hana", "nope", T0)


def test_a_new_claim_replaces_the_personas_old_one() -> None:
    state, first = hold(channel(), "hana", Tier.LONG, T0)  # 20 left
    # The old claim is given back first, so the new one is affordable.
    transition = rules.claim(state, "hana", Tier.REMARK, T0 + 1, claim_id="second")
    assert isinstance(transition.outcome, ClaimGranted)
    (released,) = transition.changed_spends
    assert (released.id, released.state) == (first.id, SpendState.RELEASED)
    assert rules.level(transition.state, T0 + 1) == 40
    assert transition.state.claim_of("hana", T0 + 1) == transition.outcome.spend
    with pytest.raises(ConflictError):
        rules.speak(transition.state, HANA, first.id, "old claim", T0 + 2)


def test_a_refused_new_claim_keeps_the_old_one() -> None:
    state = said(channel(), KAI, Tier.LONG, T0)
    state, first = hold(state, "hana", Tier.AIZUCHI, T0)  # 15 left
    transition = rules.claim(state, "hana", Tier.REMARK, T0 + 1, claim_id=new_id())
    assert refusal(transition).reason is R.INSUFFICIENT
    assert transition.state.claim_of("hana", T0 + 1) == first


def test_claims_expire_after_their_ttl(clock: FakeClock) -> None:
    state, held = hold(channel(claim_ttl_s=30), "hana", Tier.LONG, clock())
    clock.advance(29.999)
    assert rules.level(state, clock()) == 20
    assert state.claim_of("hana", clock()) == held
    clock.advance(0.001)
    assert rules.level(state, clock()) == 100
    assert state.claim_of("hana", clock()) is None


def test_speaking_on_an_expired_claim_is_granted_when_affordable(clock: FakeClock) -> None:
    state, held = hold(channel(claim_ttl_s=30), "hana", Tier.LONG, clock())
    clock.advance(31)
    transition = rules.speak(state, HANA, held.id, "sorry, I was thinking", clock(), tier=Tier.REMARK)
    granted = speech(transition)
    # The expired claim held nothing any more, so there is nothing to give back: the remark is paid afresh.
    assert granted.refunded == 0
    assert rules.level(transition.state, clock()) == 40


def test_speaking_on_an_expired_claim_is_refused_when_the_pool_moved_on(clock: FakeClock) -> None:
    state, held = hold(channel(claim_ttl_s=30), "hana", Tier.REMARK, clock())
    clock.advance(31)
    state = said(state, KAI, Tier.LONG, clock())  # 20 left until 5 s from now
    clock.advance(1)
    transition = rules.speak(state, HANA, held.id, "as I was saying", clock())
    assert (refusal(transition).reason, refusal(transition).retry_after) == (R.INSUFFICIENT, 4.0)


def test_speaking_on_an_expired_claim_is_checked_for_priority_afresh(clock: FakeClock) -> None:
    state, held = hold(channel(claim_ttl_s=30, priority_window_s=60), "hana", Tier.REMARK, clock())
    clock.advance(31)
    state = hear(state, clock(), addressed=("kai",))
    assert refusal(rules.speak(state, HANA, held.id, "me too", clock() + 1)).reason is R.PRIORITY


def _claimed_remark() -> tuple[ChannelState, str]:
    state = hear(channel(idle_cap=2, daily_token_budget=1_000, priority_window_s=20), T0)
    state, held = hold(state, "hana", Tier.REMARK, T0 + 1, based_on_seq=1)
    return state, held.id


def _others_took_the_idle_cap(state: ChannelState) -> ChannelState:
    return hear(hear(state, T0 + 2, author=OTHER_BOT), T0 + 2, author=OTHER_BOT)


def _budget_spent_meanwhile(state: ChannelState) -> ChannelState:
    return rules.record_usage(state, 1_000, T0 + 2).state


def _pool_shrank(state: ChannelState) -> ChannelState:
    return with_settings(state, capacity=10, tiers={t: replace(r, cost=5) for t, r in state.settings.tiers.items()})


def _kai_addressed_meanwhile(state: ChannelState) -> ChannelState:
    return hear(state, T0 + 2, addressed=("kai",))


@pytest.mark.parametrize(
    "meanwhile",
    [_others_took_the_idle_cap, _budget_spent_meanwhile, _pool_shrank],
    ids=["idle_cap", "budget", "insufficient"],
)
def test_a_live_claim_is_not_refused_for_what_was_settled_when_it_was_granted(
    meanwhile: Callable[[ChannelState], ChannelState],
) -> None:
    state, claim_id = _claimed_remark()
    state = meanwhile(state)
    speech(rules.speak(state, HANA, claim_id, "as I was saying", T0 + 3))


def _paused_meanwhile(state: ChannelState) -> ChannelState:
    return with_settings(state, paused=True)


def _muted_meanwhile(state: ChannelState) -> ChannelState:
    return with_policy(state, "hana", muted=True)


def _disabled_meanwhile(state: ChannelState) -> ChannelState:
    return with_settings(state, enabled=False)


def _two_humans_meanwhile(state: ChannelState) -> ChannelState:
    return hear(hear(state, T0 + 2), T0 + 2.5)


@pytest.mark.parametrize(
    ("meanwhile", "text", "reason"),
    [
        (_paused_meanwhile, "ok", R.PAUSED),
        (_muted_meanwhile, "ok", R.MUTED),
        (_disabled_meanwhile, "ok", R.NOT_ENABLED),
        (lambda state: state, "x" * 121, R.TOO_LONG),
        (_two_humans_meanwhile, "ok", R.STALE),
        # Claimed before kai was asked something: what hana wrote must not come before kai's answer.
        (_kai_addressed_meanwhile, "ok", R.PRIORITY),
    ],
    ids=["paused", "muted", "not_enabled", "too_long", "stale", "priority"],
)
def test_a_live_claims_speech_is_still_refused_for_what_can_change(
    meanwhile: Callable[[ChannelState], ChannelState], text: str, reason: RefusalReason
) -> None:
    state, claim_id = _claimed_remark()
    state = meanwhile(state)
    transition = rules.speak(state, HANA, claim_id, text, T0 + 3, based_on_seq=1)
    assert refusal(transition).reason is reason
    # The claim survives the refusal: the persona may fix the text, or release.
    assert transition.state.claim_of("hana", T0 + 3) is not None


# --- the idle cap -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bot_turns", "refused"),
    [
        ((), False),
        ((KAI,), False),
        ((KAI, MIO), False),
        ((KAI, MIO, HANA), True),
        ((KAI, OTHER_BOT, MIO), True),  # bots that are not ours count too
        ((OTHER_BOT, OTHER_BOT, OTHER_BOT), True),
    ],
)
def test_idle_cap_counts_consecutive_bot_turns(bot_turns: tuple[rules.Author, ...], refused: bool) -> None:
    state = hear(channel(capacity=1_000, idle_cap=3), T0)
    for offset, author in enumerate(bot_turns, start=1):
        if author.kind is AuthorKind.BOT:
            state = hear(state, T0 + offset, author=author)
        else:
            # Nods and remarks both count as turns; they alternate, since a nod to a nod is refused.
            state = said(state, author, Tier.AIZUCHI if offset % 2 else Tier.REMARK, T0 + offset * 2)
    transition = _consume(state, Tier.REMARK, T0 + 10)
    if refused:
        assert refusal(transition).reason is R.IDLE_CAP
    else:
        speech(transition)


def test_a_human_message_resets_the_idle_streak() -> None:
    state = said(channel(idle_cap=2), KAI, Tier.AIZUCHI, T0)
    state = said(state, MIO, Tier.REMARK, T0)
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 1)).reason is R.IDLE_CAP
    state = hear(state, T0 + 2)
    assert state.bot_streak == 0
    speech(_consume(state, Tier.AIZUCHI, T0 + 3))


def test_live_claims_of_other_personas_count_toward_the_idle_cap() -> None:
    state = said(channel(idle_cap=2), KAI, Tier.REMARK, T0)
    state, _ = hold(state, "mio", Tier.AIZUCHI, T0 + 1)
    # The idle cap comes before the nod on its way.
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 2)).reason is R.IDLE_CAP


def test_a_personas_own_claim_does_not_count_toward_its_idle_cap() -> None:
    state = said(channel(capacity=200, idle_cap=2), KAI, Tier.REMARK, T0)
    state, _ = hold(state, "hana", Tier.AIZUCHI, T0 + 1)
    hold(state, "hana", Tier.REMARK, T0 + 2)  # replaces its claim: still one turn in flight


def test_a_personas_own_claim_does_not_hold_back_its_one_step_speech() -> None:
    # Neither as a turn in flight nor as a nod on its way.
    state = said(channel(idle_cap=2), KAI, Tier.REMARK, T0)
    state, _ = hold(state, "hana", Tier.AIZUCHI, T0 + 1)
    speech(_consume(state, Tier.AIZUCHI, T0 + 2))


def test_an_expired_claim_no_longer_counts_toward_the_idle_cap() -> None:
    state = said(channel(idle_cap=2, claim_ttl_s=10), KAI, Tier.REMARK, T0)
    state, _ = hold(state, "mio", Tier.AIZUCHI, T0)
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 9)).reason is R.IDLE_CAP
    speech(_consume(state, Tier.AIZUCHI, T0 + 10))


def test_retracting_a_message_in_the_current_streak_gives_the_turn_back() -> None:
    state = said(channel(idle_cap=2), KAI, Tier.REMARK, T0)
    state, granted = say(state, MIO, Tier.AIZUCHI, T0)
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 1)).reason is R.IDLE_CAP
    state = rules.retract(state, "mio", granted.message, T0 + 1).state
    assert state.bot_streak == 1
    speech(_consume(state, Tier.AIZUCHI, T0 + 1))


def test_retracting_a_message_from_before_the_last_human_message_leaves_the_streak() -> None:
    state, granted = say(channel(), KAI, Tier.AIZUCHI, T0)
    state = hear(state, T0 + 1)
    state = said(state, MIO, Tier.AIZUCHI, T0 + 2)
    assert rules.retract(state, "kai", granted.message, T0 + 3).state.bot_streak == 1


# --- priority ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "tier", "allowed"),
    [
        ("kai", Tier.AIZUCHI, True),
        ("kai", Tier.REMARK, True),
        ("kai", Tier.LONG, True),
        ("hana", Tier.AIZUCHI, False),  # not even a nod: it would read as an answer to what kai was asked
        ("hana", Tier.REMARK, False),
        ("hana", Tier.LONG, False),
    ],
)
def test_an_addressed_persona_has_the_floor_and_the_others_wait(persona: str, tier: Tier, allowed: bool) -> None:
    state = hear(channel(priority_window_s=20), T0, text="Kai, what do you think?", addressed=("kai",))
    transition = rules.claim(state, persona, tier, T0 + 1, claim_id=new_id())
    if allowed:
        assert isinstance(transition.outcome, ClaimGranted)
    else:
        assert (refusal(transition).reason, refusal(transition).retry_after) == (R.PRIORITY, 19.0)


def test_priority_ends_when_the_addressed_persona_speaks() -> None:
    state = hear(channel(capacity=200, priority_window_s=20), T0, addressed=("kai",))
    state = said(state, KAI, Tier.REMARK, T0 + 1)
    assert state.priority is None
    speech(_consume(state, Tier.REMARK, T0 + 2))


def test_a_first_release_keeps_the_addressed_personas_floor() -> None:
    # A claim may be given back because the model failed or the process stopped: that is no answer, only a try.
    state = hear(channel(priority_window_s=20), T0, addressed=("kai",))
    state, held = hold(state, "kai", Tier.REMARK, T0 + 1)
    assert refusal(_consume(state, Tier.REMARK, T0 + 2)).reason is R.PRIORITY
    state = let_go(state, "kai", held.id, T0 + 3)
    assert state.priority == Priority(frozenset({"kai"}), T0 + 20, 1, tried=frozenset({"kai"}), since_at=T0)
    assert refusal(_consume(state, Tier.REMARK, T0 + 4)).reason is R.PRIORITY
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 4)).reason is R.PRIORITY
    speech(_consume(state, Tier.REMARK, T0 + 20))  # until the window passes


def test_a_claim_from_before_the_question_given_back_is_no_try() -> None:
    # kai was nodding at what came before when it was asked: the nod is refused as stale and given back, and kai
    # still has both its tries to answer (a second would give the floor up, and others would answer first).
    state, nod = hold(channel(priority_window_s=20), "kai", Tier.AIZUCHI, T0)
    state = hear(state, T0 + 1, addressed=("kai",))
    assert refusal(rules.speak(state, KAI, nod.id, "Mm.", T0 + 2, based_on_seq=0)).reason is R.STALE
    state = let_go(state, "kai", nod.id, T0 + 2)
    assert state.priority == Priority(frozenset({"kai"}), T0 + 21, 1, since_at=T0 + 1)
    state, held = hold(state, "kai", Tier.REMARK, T0 + 3)
    state = let_go(state, "kai", held.id, T0 + 4)  # a pass of the question: one try
    assert state.priority == Priority(frozenset({"kai"}), T0 + 21, 1, frozenset({"kai"}), T0 + 1)
    assert refusal(_consume(state, Tier.REMARK, T0 + 5)).reason is R.PRIORITY


@dataclass(frozen=True)
class FloorCase:
    """Who a human addressed at T0, what they did next (one step a second), and whose floor is left."""

    addressed: tuple[str, ...]
    steps: tuple[tuple[str, str], ...]  # (persona, "pass" | "answer" | "nod" | "replace")
    floor: frozenset[str] | None  # the personas who still have the floor; None when it is open
    tried: frozenset[str] = frozenset()  # of those, the ones that passed once


def _step(state: ChannelState, persona_id: str, action: str, now: float) -> ChannelState:
    author = next(a for a in (HANA, KAI, MIO) if a.id == persona_id)
    if action == "pass":  # a claim given back (replacing any claim the persona still holds)
        return passed(state, persona_id, now)
    if action == "replace":  # a claim, then another that replaces it: no pass
        state, _ = hold(state, persona_id, Tier.AIZUCHI, now)
        return hold(state, persona_id, Tier.REMARK, now + 0.5)[0]
    tier = {"answer": Tier.REMARK, "nod": Tier.AIZUCHI}[action]
    return say(state, author, tier, now, based_on_seq=state.last_seq)[0]


KAI_PASS, KAI_ANSWER, MIO_PASS = ("kai", "pass"), ("kai", "answer"), ("mio", "pass")
KAI_MIO = frozenset({"kai", "mio"})

FLOORS = [
    pytest.param(FloorCase(("kai",), (), frozenset({"kai"})), id="addressed"),
    pytest.param(FloorCase(("kai",), (KAI_PASS,), frozenset({"kai"}), frozenset({"kai"})), id="first-pass-a-try"),
    pytest.param(FloorCase(("kai",), (KAI_PASS, KAI_PASS), None), id="second-pass-gives-it-up"),
    pytest.param(FloorCase(("kai",), (KAI_PASS, KAI_ANSWER), None), id="answer-after-a-try"),
    pytest.param(FloorCase(("kai",), (KAI_ANSWER,), None), id="answered"),
    # A nod answers nothing; a claim replaced by another is no pass.
    pytest.param(FloorCase(("kai",), (("kai", "nod"), KAI_PASS), frozenset({"kai"}), frozenset({"kai"})), id="nod"),
    pytest.param(
        FloorCase(("kai",), (("kai", "replace"), KAI_PASS), frozenset({"kai"}), frozenset({"kai"})), id="replace"
    ),
    pytest.param(FloorCase(("kai", "mio"), (KAI_PASS,), KAI_MIO, frozenset({"kai"})), id="two-one-tried"),
    pytest.param(FloorCase(("kai", "mio"), (KAI_PASS, MIO_PASS), KAI_MIO, KAI_MIO), id="two-both-tried"),
    # One giving up leaves the other's floor, tries and all.
    pytest.param(FloorCase(("kai", "mio"), (KAI_PASS, KAI_PASS), frozenset({"mio"})), id="two-one-gave-up"),
    pytest.param(
        FloorCase(("kai", "mio"), (MIO_PASS, KAI_PASS, KAI_PASS), frozenset({"mio"}), frozenset({"mio"})),
        id="two-one-gave-up-after-the-other-tried",
    ),
    pytest.param(FloorCase(("kai", "mio"), (KAI_PASS, KAI_PASS, MIO_PASS, MIO_PASS), None), id="two-both-gave-up"),
    pytest.param(FloorCase(("kai", "mio"), (KAI_PASS, KAI_PASS, ("mio", "answer")), None), id="two-one-answered"),
]


@pytest.mark.parametrize("case", FLOORS)
def test_an_addressed_personas_pass_is_one_try(case: FloorCase) -> None:
    state = hear(channel(capacity=1_000, priority_window_s=20), T0, addressed=case.addressed)
    for offset, (persona_id, action) in enumerate(case.steps, start=1):
        state = _step(state, persona_id, action, T0 + offset)
    now = T0 + 10
    if case.floor is None:
        assert state.priority is None
    else:
        assert state.priority is not None
        assert (state.priority.persona_ids, state.priority.tried & state.priority.persona_ids) == (
            case.floor,
            case.tried,
        )
    # Whoever is not on the floor waits, for every tier; whoever is may claim any (but a nod to a nod).
    nodded = state.latest_is_nod
    for persona_id in ("hana", "kai", "mio"):
        for tier in Tier:
            transition = rules.claim(state, persona_id, tier, now, claim_id=new_id())
            if case.floor is None or persona_id in case.floor:
                if nodded and tier is Tier.AIZUCHI:
                    assert refusal(transition).reason is R.NODDED
                else:
                    assert isinstance(transition.outcome, ClaimGranted), (persona_id, tier, transition.outcome)
            else:
                assert (refusal(transition).reason, refusal(transition).retry_after) == (R.PRIORITY, 10.0)


@pytest.mark.parametrize(
    ("at", "addressed", "expected"),
    [
        # A message that asks nobody leaves the floor as it was (tries included).
        (5.0, (), Priority(frozenset({"kai"}), T0 + 20, 1, frozenset({"kai"}), T0)),
        # Those asked join those still waiting to answer; the floor lasts a window from the latest question.
        (5.0, ("mio",), Priority(frozenset({"kai", "mio"}), T0 + 25, 1, frozenset({"kai"}), T0)),
        (5.0, ("kai",), Priority(frozenset({"kai"}), T0 + 25, 1, since_at=T0)),  # asked again: its tries back
        # After the window, a new floor, or none.
        (20.0, ("mio",), Priority(frozenset({"mio"}), T0 + 40, 3, since_at=T0 + 20)),
        (20.0, (), None),
    ],
    ids=["asks-nobody", "asks-another", "asks-again", "new-floor", "lapsed"],
)
def test_a_human_message_while_someone_has_the_floor(
    at: float, addressed: tuple[str, ...], expected: Priority | None
) -> None:
    state = hear(channel(capacity=1_000, priority_window_s=20), T0, addressed=("kai",))  # seq 1
    state = passed(state, "kai", T0 + 1)  # kai tried once
    state = hear(state, T0 + 2, author=OTHER_BOT)  # seq 2
    state = hear(state, T0 + at, addressed=addressed)  # seq 3
    assert state.priority == expected


def test_a_pass_by_a_persona_not_addressed_is_no_try() -> None:
    state, held = hold(channel(priority_window_s=20), "hana", Tier.REMARK, T0)  # before the question
    state = hear(state, T0 + 1, addressed=("kai",))
    floor = state.priority
    state = let_go(state, "hana", held.id, T0 + 2)
    assert state.priority == floor == Priority(frozenset({"kai"}), T0 + 21, 1, since_at=T0 + 1)


def test_a_floor_past_its_window_no_longer_blocks(clock: FakeClock) -> None:
    state = hear(channel(priority_window_s=20), clock(), addressed=("kai",))
    clock.advance(1)
    state = passed(state, "kai", clock())  # one try left
    clock.advance(18.999)
    for tier in Tier:
        found = refusal(rules.claim(state, "hana", tier, clock(), claim_id=new_id()))
        assert (found.reason, found.retry_after) == (R.PRIORITY, 0.001)
    clock.advance(0.001)
    floor = state.priority
    state = passed(state, "kai", clock())  # a pass after the window is no try: nothing is left to give up
    assert state.priority == floor
    for tier in Tier:
        assert isinstance(rules.claim(state, "hana", tier, clock(), claim_id=new_id()).outcome, ClaimGranted)
    speech(_consume(state, Tier.AIZUCHI, clock()))


@pytest.mark.parametrize(("based_on_seq", "answered"), [(None, True), (1, True), (0, False)])
def test_only_a_reply_written_after_the_question_answers_it(based_on_seq: int | None, answered: bool) -> None:
    state = hear(channel(capacity=200, priority_window_s=20), T0, addressed=("kai",))  # seq 1
    state, _ = say(state, KAI, Tier.REMARK, T0 + 1, based_on_seq=based_on_seq)
    assert (state.priority is None) is answered


def test_a_nod_from_the_addressed_persona_does_not_end_its_priority() -> None:
    # The nod may answer an earlier message; the floor stays with the persona until it really answers.
    state = hear(channel(priority_window_s=20), T0, addressed=("kai",))
    state = said(state, KAI, Tier.AIZUCHI, T0 + 1)
    assert state.priority == Priority(frozenset({"kai"}), T0 + 20, 1, since_at=T0)
    assert refusal(_consume(state, Tier.REMARK, T0 + 2)).reason is R.PRIORITY
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 2)).reason is R.PRIORITY  # the floor comes before the nod
    speech(rules.speak(*_held_remark(state, "kai", T0 + 3), "my answer", T0 + 4))


def _held_remark(state: ChannelState, persona_id: str, now: float) -> tuple[ChannelState, rules.Author, str]:
    state, held = hold(state, persona_id, Tier.REMARK, now)
    return state, next(a for a in (HANA, KAI, MIO) if a.id == persona_id), held.id


def test_priority_with_several_addressed_ends_when_each_has_answered() -> None:
    state = hear(channel(capacity=1_000, priority_window_s=20), T0, addressed=("kai", "mio"))
    state = said(state, KAI, Tier.REMARK, T0 + 1)
    assert refusal(_consume(state, Tier.REMARK, T0 + 2)).reason is R.PRIORITY
    state = said(state, MIO, Tier.REMARK, T0 + 2)
    speech(_consume(state, Tier.REMARK, T0 + 3))


@pytest.mark.parametrize("tier", [Tier.AIZUCHI, Tier.REMARK])
@pytest.mark.parametrize(("after", "allowed"), [(19.999, False), (20.0, True), (25.0, True)])
@pytest.mark.parametrize("kai_tried", [False, True], ids=["untried", "tried"])
def test_priority_ends_when_the_window_passes(tier: Tier, after: float, allowed: bool, kai_tried: bool) -> None:
    state = hear(channel(priority_window_s=20), T0, addressed=("kai",))
    if kai_tried:
        state = _step(state, "kai", "pass", T0 + 1)
    transition = _consume(state, tier, T0 + after)
    if allowed:
        speech(transition)
    else:
        assert refusal(transition).reason is R.PRIORITY


def test_no_priority_when_the_window_is_zero() -> None:
    state = hear(channel(priority_window_s=0), T0, addressed=("kai",))
    speech(_consume(state, Tier.REMARK, T0))


def test_a_persona_that_cannot_post_hands_its_floor_back_at_once() -> None:
    state = hear(channel(priority_window_s=20), T0, text="Kai and Mio, thoughts?", addressed=("kai", "mio"))

    kai_out = rules.stand(state, "kai", "it lacks the Send Messages permission there")

    assert kai_out.state.priority is not None and kai_out.state.priority.persona_ids == {"mio"}
    assert kai_out.state.settings.policy("kai").cannot_post == "it lacks the Send Messages permission there"
    both_out = rules.stand(kai_out.state, "mio", "it lacks the View Channel permission there").state
    assert both_out.priority is None
    speech(_consume(both_out, Tier.REMARK, T0 + 1))  # hana answers at once, not 20 s later
    assert not rules.stand(both_out, "mio", "it lacks the View Channel permission there").changed
    assert rules.stand(both_out, "mio", "it lacks the View Channel permission there").state is both_out


def test_asking_a_persona_that_cannot_post_gives_it_no_floor_until_it_can_again() -> None:
    state = rules.stand(channel(priority_window_s=20), "kai", "it lacks the Send Messages permission there").state

    asked = hear(state, T0, text="Kai, thoughts?", addressed=("kai",))
    assert asked.priority is None
    speech(_consume(asked, Tier.REMARK, T0 + 1))

    back = rules.stand(asked, "kai", None).state
    assert back.settings.policy("kai").cannot_post is None
    assert hear(back, T0 + 2, text="Kai?", addressed=("kai",)).priority is not None


def test_another_bot_addressing_a_persona_gives_no_priority() -> None:
    state = hear(channel(priority_window_s=20), T0, author=OTHER_BOT, addressed=("kai",))
    assert state.priority is None
    speech(_consume(state, Tier.REMARK, T0 + 1))


@pytest.mark.parametrize(
    ("addressed", "persona", "tier", "after", "retry_after"),
    [
        ((), "hana", Tier.AIZUCHI, 0.5, None),
        ((), "hana", Tier.REMARK, 0.5, 2.5),
        ((), "hana", Tier.REMARK, 2.999, 0.001),
        ((), "hana", Tier.REMARK, 3.0, None),
        (("kai",), "hana", Tier.REMARK, 2.5, 17.5),  # the floor is kai's for the whole window
        (("kai",), "hana", Tier.AIZUCHI, 0.5, 19.5),  # and nobody else may even nod
        (("kai",), "hana", Tier.AIZUCHI, 3.0, 17.0),
        (("kai",), "kai", Tier.REMARK, 0.5, None),  # addressed personas are not held back
        (("kai",), "kai", Tier.AIZUCHI, 0.5, None),
    ],
)
def test_human_hold_makes_everyone_but_the_addressed_nod_only_briefly(
    addressed: tuple[str, ...], persona: str, tier: Tier, after: float, retry_after: float | None
) -> None:
    """``retry_after`` None means the claim is granted."""
    state = hear(channel(human_hold_s=3, priority_window_s=20), T0, addressed=addressed)
    transition = rules.claim(state, persona, tier, T0 + after, claim_id=new_id())
    if retry_after is None:
        assert isinstance(transition.outcome, ClaimGranted)
    else:
        assert (refusal(transition).reason, refusal(transition).retry_after) == (R.PRIORITY, retry_after)


def test_human_hold_applies_after_a_message_that_addresses_no_one() -> None:
    state = hear(channel(human_hold_s=3), T0)
    assert refusal(_consume(state, Tier.REMARK, T0 + 1)).reason is R.PRIORITY
    speech(_consume(state, Tier.REMARK, T0 + 3))


# --- one nod per message ---------------------------------------------------------------------------------

NOD_AT = T0 + 10  # when hana asks to nod, after the steps below (each at T0 + 1 .. T0 + 5)


def _asked() -> ChannelState:
    return hear(channel(capacity=1_000, claim_ttl_s=30), T0)  # seq 1, a human message


def _kai_claimed(tier: Tier, state: ChannelState | None = None) -> tuple[ChannelState, str]:
    state, held = hold(state if state is not None else _asked(), "kai", tier, T0 + 1)
    return state, held.id


def _nod_retracted() -> ChannelState:
    state, granted = say(_asked(), KAI, Tier.AIZUCHI, T0 + 1)
    return rules.retract(state, "kai", granted.message, T0 + 2).state


def _nod_deleted() -> ChannelState:
    state, granted = say(_asked(), KAI, Tier.AIZUCHI, T0 + 1)
    return rules.delete(state, granted.message).state


def _older_nod_retracted() -> ChannelState:
    state, granted = say(_asked(), KAI, Tier.AIZUCHI, T0 + 1)
    state = said(hear(state, T0 + 2), MIO, Tier.AIZUCHI, T0 + 3)  # the latest message is still a nod
    return rules.retract(state, "kai", granted.message, T0 + 4).state


def _nod_claim_released() -> ChannelState:
    state, claim_id = _kai_claimed(Tier.AIZUCHI)
    return let_go(state, "kai", claim_id, T0 + 2)


def _remark_spoken_as_a_nod() -> ChannelState:
    state, claim_id = _kai_claimed(Tier.REMARK)
    return rules.speak(state, KAI, claim_id, "うん", T0 + 2, tier=Tier.AIZUCHI).state


def _nod_claim_spoken() -> ChannelState:
    state, claim_id = _kai_claimed(Tier.AIZUCHI)
    return rules.speak(state, KAI, claim_id, "うん", T0 + 2).state


def _amount_bought_a_nod() -> ChannelState:
    # consume(amount) buys the dearest tier the amount covers: 30 buys a nod, and that is a nod like any other.
    return rules.consume(_asked(), KAI, "うん", T0 + 1, spend_id=new_id(), amount=30).state


@dataclass(frozen=True)
class NodCase:
    build: Callable[[], ChannelState]
    reason: RefusalReason | None  # None: hana may nod
    retry_after: float | None = None


NODS = [
    pytest.param(NodCase(_asked, None), id="to-a-human-message"),
    pytest.param(NodCase(lambda: said(_asked(), KAI, Tier.REMARK, T0 + 1), None), id="to-a-remark"),
    pytest.param(NodCase(lambda: said(_asked(), KAI, Tier.AIZUCHI, T0 + 1), R.NODDED), id="to-a-nod"),
    pytest.param(NodCase(lambda: said(_asked(), HANA, Tier.AIZUCHI, T0 + 1), R.NODDED), id="to-its-own-nod"),
    pytest.param(NodCase(_remark_spoken_as_a_nod, R.NODDED), id="to-a-remark-claim-spoken-as-a-nod"),
    pytest.param(NodCase(_amount_bought_a_nod, R.NODDED), id="to-a-nod-bought-by-amount"),
    pytest.param(
        NodCase(lambda: hear(said(_asked(), KAI, Tier.AIZUCHI, T0 + 1), T0 + 2), None), id="to-a-human-after-a-nod"
    ),
    pytest.param(
        NodCase(lambda: hear(said(_asked(), KAI, Tier.AIZUCHI, T0 + 1), T0 + 2, author=OTHER_BOT), None),
        id="to-another-bot-after-a-nod",
    ),
    # Another persona's nod on its way (a live aizuchi claim) or any other message on its way (a live claim
    # of any tier: it would come first, and the nod would be about a message no longer the latest): refused until
    # it is settled or lapses (at T0 + 31).
    pytest.param(NodCase(lambda: _kai_claimed(Tier.AIZUCHI)[0], R.NODDED, 21.0), id="nod-on-its-way"),
    pytest.param(NodCase(lambda: _kai_claimed(Tier.REMARK)[0], R.NODDED, 21.0), id="remark-on-its-way"),
    pytest.param(NodCase(lambda: _kai_claimed(Tier.LONG)[0], R.NODDED, 21.0), id="long-on-its-way"),
    pytest.param(NodCase(_nod_claim_released, None), id="nod-claim-released"),
    pytest.param(
        NodCase(lambda: _kai_claimed(Tier.AIZUCHI, with_settings(_asked(), claim_ttl_s=5))[0], None),
        id="nod-claim-lapsed",
    ),
    pytest.param(NodCase(_nod_claim_spoken, R.NODDED), id="nod-claim-spoken"),
    pytest.param(NodCase(lambda: hear(_nod_claim_spoken(), T0 + 3), None), id="nod-claim-spoken-then-a-human"),
    pytest.param(NodCase(lambda: hold(_asked(), "hana", Tier.AIZUCHI, T0 + 1)[0], None), id="own-nod-claim"),
    # Taking the latest nod back, or the platform deleting it, reopens the latest message to a nod.
    pytest.param(NodCase(_nod_retracted, None), id="nod-retracted"),
    pytest.param(NodCase(_nod_deleted, None), id="nod-deleted"),
    pytest.param(NodCase(_older_nod_retracted, R.NODDED), id="older-nod-retracted"),
    pytest.param(
        NodCase(lambda: rules.clear_history(said(_asked(), KAI, Tier.AIZUCHI, T0 + 1), T0 + 2).state, None),
        id="history-cleared",
    ),
]


@pytest.mark.parametrize("case", NODS)
def test_one_nod_per_message(case: NodCase) -> None:
    state = case.build()
    nods = [
        rules.claim(state, "hana", Tier.AIZUCHI, NOD_AT, claim_id=new_id()),
        _consume(state, Tier.AIZUCHI, NOD_AT),
        rules.consume(state, HANA, "うん", NOD_AT, spend_id=new_id(), amount=30),
    ]
    for transition in nods:
        if case.reason is None:
            assert isinstance(transition.outcome, ClaimGranted | rules.SpeechGranted), transition.outcome
        else:
            assert (refusal(transition).reason, refusal(transition).retry_after) == (case.reason, case.retry_after)
            assert transition.state is state
    # Only nods are limited: a remark is welcome after a nod.
    speech(_consume(state, Tier.REMARK, NOD_AT))


@dataclass(frozen=True)
class SpokenAsNodCase:
    """hana holds a remark claim (made at T0 + 4, based on seq 1); then something happens, and hana speaks its
    claim as ``tier`` at T0 + 6. With ``kai_first``, kai claimed a nod at T0 + 0.5, before hana's claim."""

    meanwhile: Callable[[ChannelState], ChannelState]
    tier: Tier
    based_on_seq: int | None
    reason: RefusalReason | None  # None: granted
    kai_first: bool = False


def _nothing(state: ChannelState) -> ChannelState:
    return state


def _kai_speaks_its_nod(state: ChannelState) -> ChannelState:
    held = state.claim_of("kai", T0 + 5)
    assert held is not None
    return rules.speak(state, KAI, held.id, "うん", T0 + 5).state


def _a_human_speaks(state: ChannelState) -> ChannelState:
    return hear(state, T0 + 5)  # seq 2


SPOKEN_AS_NOD = [
    pytest.param(SpokenAsNodCase(_nothing, Tier.AIZUCHI, 1, None), id="nod"),
    pytest.param(SpokenAsNodCase(_kai_speaks_its_nod, Tier.AIZUCHI, None, R.NODDED, kai_first=True), id="to-a-nod"),
    pytest.param(
        SpokenAsNodCase(_kai_speaks_its_nod, Tier.REMARK, None, None, kai_first=True), id="remark-after-a-nod"
    ),
    # A claim already granted is checked against the history only: kai's nod, claimed first but not yet spoken,
    # does not hold hana's back (whichever is spoken first is the nod; the other then finds a nod).
    pytest.param(SpokenAsNodCase(_nothing, Tier.AIZUCHI, None, None, kai_first=True), id="nod-while-one-is-held"),
    # A nod has no tolerance; a remark keeps stale_tolerance (1).
    pytest.param(SpokenAsNodCase(_a_human_speaks, Tier.AIZUCHI, 1, R.STALE), id="stale-nod"),
    pytest.param(SpokenAsNodCase(_a_human_speaks, Tier.AIZUCHI, 2, None), id="fresh-nod"),
    pytest.param(SpokenAsNodCase(_a_human_speaks, Tier.REMARK, 1, None), id="remark-within-tolerance"),
]


@pytest.mark.parametrize("case", SPOKEN_AS_NOD)
def test_a_claim_spoken_as_a_nod_is_checked_against_the_nod_rule(case: SpokenAsNodCase) -> None:
    state = _asked()
    if case.kai_first:
        state, _ = hold(state, "kai", Tier.AIZUCHI, T0 + 0.5)
    # After the nod's moment to go first: a remark claimed sooner would wait.
    assert T0 + 4 >= T0 + 0.5 + rules.NOD_FIRST_S
    state, held = hold(state, "hana", Tier.REMARK, T0 + 4, based_on_seq=1)
    state = case.meanwhile(state)
    transition = rules.speak(state, HANA, held.id, "うん", T0 + 6, tier=case.tier, based_on_seq=case.based_on_seq)
    if case.reason is None:
        assert speech(transition).message.tier is case.tier
        # The latest message is a nod exactly when the claim was spoken as one.
        assert transition.state.latest_is_nod is (case.tier is Tier.AIZUCHI)
        if case.kai_first and case.tier is Tier.AIZUCHI:  # kai's nod comes too late now
            kai = transition.state.claim_of("kai", T0 + 7)
            assert kai is not None
            assert refusal(rules.speak(transition.state, KAI, kai.id, "うん", T0 + 7)).reason is R.NODDED
    else:
        assert refusal(transition).reason is case.reason
        # The claim survives: hana may still speak it as a remark.
        assert transition.state.claim_of("hana", T0 + 6) == held
        speech(rules.speak(state, HANA, held.id, "I see what you mean.", T0 + 6, based_on_seq=state.last_seq))


def _kai_nodding_since_t0(**settings: Any) -> ChannelState:
    return hold(hear(channel(**settings), T0), "kai", Tier.AIZUCHI, T0)[0]


def _kai_nodding_hana_asked() -> ChannelState:
    # kai claimed its nod before the question to hana came.
    state, _ = hold(hear(channel(), T0 - 1), "kai", Tier.AIZUCHI, T0 - 0.5)
    return hear(state, T0, addressed=("hana",))


def _kai_nodded_at_once() -> ChannelState:
    state = _kai_nodding_since_t0()
    held = state.claim_of("kai", T0)
    assert held is not None
    return rules.speak(state, KAI, held.id, "うん", T0 + 0.5).state


def _kai_passed_at_once() -> ChannelState:
    state = _kai_nodding_since_t0()
    held = state.claim_of("kai", T0)
    assert held is not None
    return let_go(state, "kai", held.id, T0 + 0.5)


@pytest.mark.parametrize(
    ("build", "persona", "at", "retry_after"),
    [
        (_kai_nodding_since_t0, "hana", 0.0, rules.NOD_FIRST_S),
        (_kai_nodding_since_t0, "hana", rules.NOD_FIRST_S - 0.5, 0.5),
        (_kai_nodding_since_t0, "hana", rules.NOD_FIRST_S, None),  # kai's nod is late now, no longer first
        (_kai_nodding_since_t0, "kai", 0.5, None),  # its own nod does not hold a persona back
        (lambda: _kai_nodding_since_t0(claim_ttl_s=1), "hana", 1.0, None),  # lapsed
        (_kai_passed_at_once, "hana", 1.0, None),
        (_kai_nodded_at_once, "hana", 1.0, None),
        (_kai_nodding_hana_asked, "hana", 0.5, None),  # an answer does not wait for a nod to the question
    ],
    ids=["at-once", "a-moment-later", "after-nod-first-s", "own", "lapsed", "released", "spoken", "addressed"],
)
def test_a_remark_waits_a_moment_for_a_nod_claimed_just_before(
    build: Callable[[], ChannelState], persona: str, at: float, retry_after: float | None
) -> None:
    """``retry_after`` None means a remark (claimed, or consumed in one step) is granted."""
    state = build()
    for tier in (Tier.REMARK, Tier.LONG):
        transitions = [
            rules.claim(state, persona, tier, T0 + at, claim_id=new_id()),
            rules.consume(
                state, next(a for a in (HANA, KAI) if a.id == persona), "ok", T0 + at, spend_id=new_id(), tier=tier
            ),
        ]
        for transition in transitions:
            if retry_after is None:
                assert isinstance(transition.outcome, ClaimGranted | rules.SpeechGranted), transition.outcome
            else:
                assert (refusal(transition).reason, refusal(transition).retry_after) == (R.NODDED, retry_after)


@pytest.mark.parametrize(
    ("tier", "based_on_seq", "stale"),
    [
        (Tier.AIZUCHI, 1, True),  # one message since: a nod would nod at the wrong thing
        (Tier.AIZUCHI, 2, False),
        (Tier.REMARK, 1, False),  # within stale_tolerance (1)
        (Tier.LONG, 1, False),
        (Tier.AIZUCHI, None, False),
    ],
)
def test_a_nod_claimed_on_an_older_seq_is_stale_where_a_remark_is_not(
    tier: Tier, based_on_seq: int | None, stale: bool
) -> None:
    state = hear(hear(channel(stale_tolerance=1), T0), T0 + 1)  # seqs 1 and 2
    transition = rules.claim(state, "hana", tier, T0 + 2, claim_id=new_id(), based_on_seq=based_on_seq)
    if stale:
        assert (refusal(transition).reason, refusal(transition).retry_after) == (R.STALE, 0.0)
    else:
        assert isinstance(transition.outcome, ClaimGranted)


def test_what_is_still_in_the_history_decides_whether_the_latest_message_is_a_nod() -> None:
    state, first = say(_asked(), KAI, Tier.AIZUCHI, T0 + 1)
    assert state.latest_is_nod and state.last_seq == 2
    state = hear(state, T0 + 2)
    assert not state.latest_is_nod  # a nod, but no longer the latest message
    state, second = say(state, MIO, Tier.AIZUCHI, T0 + 3)
    assert state.latest_is_nod and state.said_after(2) == 2
    assert rules.retract(state, "kai", first.message, T0 + 4).state.latest_is_nod  # not the latest nod
    # The latest nod taken back: the message before it (a person's) is the latest again, nods are for it...
    without = rules.retract(state, "mio", second.message, T0 + 4).state
    assert not without.latest_is_nod and without.said_after(3) == 0
    assert not rules.delete(state, second.message).state.latest_is_nod
    assert rules.delete(state, first.message).state.latest_is_nod
    assert rules.clear_history(state, T0 + 4).state.recent_said == ()


def test_taking_back_the_latest_message_makes_the_one_before_it_the_latest_again() -> None:
    state, _ = say(_asked(), KAI, Tier.AIZUCHI, T0 + 1)  # seq 2, a nod to the person's message
    state, remark = say(state, MIO, Tier.REMARK, T0 + 2)  # seq 3
    state = rules.delete(state, remark.message).state

    # A nod now would be a nod to kai's nod; and a nod written against seq 2 is not stale.
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 3)).reason is R.NODDED
    assert state.said_after(2) == 0


# --- staleness --------------------------------------------------------------------------------------------


def _after(seq_1_then: tuple[str, ...]) -> ChannelState:
    """seq 1 is a human message; then 'human', 'bot' (another bot's), 'aizuchi', 'remark' or 'long' messages
    follow."""
    state = hear(channel(capacity=1_000), T0)
    for index, kind in enumerate(seq_1_then, start=1):
        if kind in {"human", "bot"}:
            state = hear(state, T0 + index, author=HUMAN if kind == "human" else OTHER_BOT)
        else:
            state = said(state, KAI, Tier(kind), T0 + index)
    return state


@pytest.mark.parametrize(
    ("tolerance", "since", "tier", "stale"),
    [
        (1, (), Tier.REMARK, False),
        (1, ("human",), Tier.REMARK, False),
        (1, ("human", "human"), Tier.REMARK, True),
        (1, ("human", "remark"), Tier.LONG, True),
        (1, ("remark", "long"), Tier.REMARK, True),
        # Nods (and other bots' messages) do not move the conversation.
        (1, ("aizuchi", "bot", "aizuchi", "bot", "aizuchi"), Tier.REMARK, False),
        (1, ("human", "aizuchi", "bot", "aizuchi"), Tier.REMARK, False),
        (1, ("aizuchi", "human", "aizuchi", "remark", "aizuchi"), Tier.REMARK, True),
        (0, ("human",), Tier.REMARK, True),
        (0, ("aizuchi",), Tier.REMARK, False),
        (2, ("human", "remark"), Tier.REMARK, False),
        (2, ("human", "remark", "human"), Tier.REMARK, True),
        # A nod is for the latest message, whatever the tolerance: anything said after its seq makes it stale.
        (0, (), Tier.AIZUCHI, False),
        (5, (), Tier.AIZUCHI, False),
        (0, ("human",), Tier.AIZUCHI, True),
        (5, ("human",), Tier.AIZUCHI, True),
        (5, ("remark",), Tier.AIZUCHI, True),
        (5, ("bot",), Tier.AIZUCHI, True),
        (5, ("aizuchi", "bot"), Tier.AIZUCHI, True),
    ],
)
def test_stale_counts_newer_substantive_messages(
    tolerance: int, since: tuple[str, ...], tier: Tier, stale: bool
) -> None:
    state = with_settings(_after(since), stale_tolerance=tolerance)
    transition = _consume(state, tier, T0 + 20, based_on_seq=1)
    if stale:
        assert (refusal(transition).reason, refusal(transition).retry_after) == (R.STALE, 0.0)
    else:
        speech(transition)


def test_no_based_on_seq_is_never_stale() -> None:
    speech(_consume(_after(("human", "human", "human")), Tier.REMARK, T0 + 20))


def test_based_on_seq_ahead_of_the_history_is_invalid() -> None:
    state = _after(("human",))
    with pytest.raises(InvalidRequest) as raised:
        _consume(state, Tier.REMARK, T0 + 20, based_on_seq=3)
    assert raised.value.field == "based_on_seq"
    with pytest.raises(InvalidRequest):
        rules.claim(state, "hana", Tier.REMARK, T0 + 20, claim_id=new_id(), based_on_seq=3)


def test_based_on_the_latest_seq_is_fresh() -> None:
    state = _after(("human", "human"))
    speech(_consume(state, Tier.REMARK, T0 + 20, based_on_seq=state.last_seq))


def test_a_retracted_remark_no_longer_makes_replies_stale() -> None:
    state = hear(channel(), T0)
    state = hear(state, T0 + 1)
    state, granted = say(state, KAI, Tier.REMARK, T0 + 2)
    assert refusal(_consume(state, Tier.LONG, T0 + 8, based_on_seq=1)).reason is R.STALE
    state = rules.retract(state, "kai", granted.message, T0 + 8).state
    speech(_consume(state, Tier.LONG, T0 + 8, based_on_seq=1))


# --- the daily token budget -------------------------------------------------------------------------------


def test_record_usage_accumulates_within_a_utc_day() -> None:
    state = channel()
    state = rules.record_usage(state, 300, _utc("2026-07-25T00:00:01")).state
    state = rules.record_usage(state, 200, _utc("2026-07-25T23:59:59")).state
    assert rules.tokens_today(state, _utc("2026-07-25T23:59:59")) == 500


@pytest.mark.parametrize(("used", "refused"), [(0, False), (999, False), (1_000, True), (5_000, True)])
def test_budget_refuses_once_the_days_tokens_are_spent(used: int, refused: bool) -> None:
    state = rules.record_usage(channel(daily_token_budget=1_000), used, T0).state
    transition = _consume(state, Tier.AIZUCHI, T0)
    assert (isinstance(transition.outcome, rules.Refusal) and transition.outcome.reason is R.BUDGET) is refused


def test_no_budget_never_refuses() -> None:
    state = rules.record_usage(channel(daily_token_budget=None), 10_000_000, T0).state
    speech(_consume(state, Tier.AIZUCHI, T0))


def test_budget_resets_on_the_next_utc_day() -> None:
    late = _utc("2026-07-25T23:59:59") + 0.5
    state = rules.record_usage(channel(daily_token_budget=1_000), 1_000, late).state
    found = refusal(_consume(state, Tier.AIZUCHI, late))
    assert (found.reason, found.retry_after) == (R.BUDGET, 0.5)
    midnight = _utc("2026-07-26T00:00:00")
    assert rules.tokens_today(state, midnight) == 0
    speech(_consume(state, Tier.AIZUCHI, midnight))
    next_day = rules.record_usage(state, 10, midnight + 1).state
    assert rules.tokens_today(next_day, midnight + 1) == 10


# --- humans never pay -------------------------------------------------------------------------------------


@pytest.mark.parametrize("author", [HUMAN, OTHER_BOT], ids=["human", "other-bot"])
def test_observed_messages_cost_nothing(author: rules.Author) -> None:
    state = said(channel(), KAI, Tier.REMARK, T0)
    transition = rules.observe(state, author, "a long message " * 20, T0 + 1, platform_message_id="p-1")
    assert isinstance(transition.outcome, Message)
    assert (transition.outcome.cost, transition.outcome.tier, transition.outcome.spend_id) == (0, None, None)
    assert transition.new_spends == ()
    assert transition.state.spends == state.spends
    assert rules.level(transition.state, T0 + 1) == rules.level(state, T0 + 1) == 40
    assert transition.outcome.seq == state.last_seq + 1


def test_a_human_message_records_whom_it_addresses() -> None:
    transition = rules.observe(channel(), HUMAN, "Kai?", T0, addressed=("kai",))
    assert isinstance(transition.outcome, Message)
    assert transition.outcome.addressed == ("kai",)
    assert transition.state.last_human_seq == 1
    assert transition.state.last_human_at == T0


# --- messages recorded late (read back from the platform after a restart) ---------------------------------


def _late(state: ChannelState, at: float, now: float, **fields: Any) -> tuple[ChannelState, Message]:
    transition = rules.observe(state, fields.pop("author", HUMAN), "Kai, are you there?", now, at=at, **fields)
    assert isinstance(transition.outcome, Message)
    return transition.state, transition.outcome


@pytest.mark.parametrize(
    ("ago", "floor"),
    [(20 * 60.0, False), (20.0, False), (19.5, True), (0.0, True)],
    ids=["twenty-minutes", "the-whole-window", "half-a-second-left", "just-now"],
)
def test_a_late_question_gives_the_floor_only_for_what_is_left_of_its_window(ago: float, floor: bool) -> None:
    now = T0 + 3_600
    state, message = _late(channel(priority_window_s=20), now - ago, now, addressed=("kai",))
    assert message.created_at == now - ago
    assert message.addressed == ("kai",)  # who it addressed is still part of the history
    assert (state.priority is not None) is floor
    if floor:
        assert state.priority == Priority(frozenset({"kai"}), now - ago + 20, message.seq, since_at=now)
        assert refusal(_consume(state, Tier.REMARK, now)).reason is R.PRIORITY
    else:
        speech(_consume(state, Tier.REMARK, now))


def test_a_late_human_message_holds_nobody_back_once_its_hold_has_passed() -> None:
    now = T0 + 3_600
    state, _ = _late(channel(human_hold_s=3), now - 60, now)
    assert state.last_human_at == now - 60
    speech(_consume(state, Tier.REMARK, now))


def test_a_late_message_counts_as_any_message_otherwise() -> None:
    state = said(said(channel(capacity=1_000), KAI, Tier.REMARK, T0), MIO, Tier.REMARK, T0 + 1)
    state, message = _late(state, T0 + 0.5, T0 + 600)
    assert (message.seq, state.last_seq, state.last_human_seq, state.bot_streak) == (3, 3, 3, 0)
    assert state.recent_substantive[-1] == 3
    later, bot_message = _late(state, T0 + 1, T0 + 600, author=OTHER_BOT)
    assert (bot_message.seq, later.bot_streak) == (4, 1)
    assert rules.level(later, T0 + 600) == 1_000  # nobody paid, and the refunds went by the clock, not ``at``


def test_a_late_message_is_never_dated_after_now() -> None:
    state, message = _late(channel(priority_window_s=20), T0 + 5, T0, addressed=("kai",))
    assert message.created_at == T0
    assert state.priority is not None and state.priority.until == T0 + 20


# --- retract and link -------------------------------------------------------------------------------------


def test_retract_refunds_at_once_and_marks_the_message() -> None:
    state, granted = say(channel(), HANA, Tier.LONG, T0)
    transition = rules.retract(state, "hana", granted.message, T0 + 1)
    assert isinstance(transition.outcome, Message)
    assert transition.outcome.retracted
    assert transition.changed_messages == (transition.outcome,)
    (spend,) = transition.changed_spends
    assert (spend.id, spend.state) == (granted.spend.id, SpendState.RETRACTED)
    assert rules.level(transition.state, T0 + 1) == 100


def test_retract_of_a_spoken_claim_refunds_it() -> None:
    state, held = hold(channel(), "hana", Tier.LONG, T0)
    spoken = rules.speak(state, HANA, held.id, "hello", T0 + 1)
    transition = rules.retract(spoken.state, "hana", speech(spoken).message, T0 + 2)
    (refunded,) = transition.changed_spends
    assert (refunded.id, refunded.state) == (held.id, SpendState.RETRACTED)
    assert rules.level(transition.state, T0 + 2) == 100


def test_only_the_author_persona_may_retract() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    with pytest.raises(PermissionDenied):
        rules.retract(state, "kai", granted.message, T0 + 1)


def test_a_human_message_cannot_be_retracted() -> None:
    transition = rules.observe(channel(), HUMAN, "hi", T0)
    assert isinstance(transition.outcome, Message)
    with pytest.raises(PermissionDenied):
        rules.retract(transition.state, HUMAN.id, transition.outcome, T0 + 1)


def test_a_posted_message_cannot_be_retracted() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    linked = rules.link_platform_id(state, "hana", granted.message, "p-1").outcome
    assert isinstance(linked, Message)
    with pytest.raises(ConflictError):
        rules.retract(state, "hana", linked, T0 + 1)


def test_retracting_twice_is_harmless() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    first = rules.retract(state, "hana", granted.message, T0 + 1)
    assert isinstance(first.outcome, Message)
    again = rules.retract(first.state, "hana", first.outcome, T0 + 2)
    assert again.state is first.state
    assert not again.changed


def test_link_attaches_the_platform_id_once() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    transition = rules.link_platform_id(state, "hana", granted.message, "p-1")
    assert isinstance(transition.outcome, Message)
    assert transition.outcome.platform_message_id == "p-1"
    assert transition.changed_messages == (transition.outcome,)
    again = rules.link_platform_id(state, "hana", transition.outcome, "p-1")
    assert not again.changed
    with pytest.raises(ConflictError) as raised:
        rules.link_platform_id(state, "hana", transition.outcome, "p-2")
    assert raised.value.field == "platform_message_id"


def test_only_the_author_may_link_a_message() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    with pytest.raises(PermissionDenied):
        rules.link_platform_id(state, "kai", granted.message, "p-1")


def test_a_retracted_message_cannot_be_linked() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    retracted = rules.retract(state, "hana", granted.message, T0 + 1)
    assert isinstance(retracted.outcome, Message)
    with pytest.raises(ConflictError):
        rules.link_platform_id(retracted.state, "hana", retracted.outcome, "p-1")


# --- clearing the history ---------------------------------------------------------------------------------


def test_clear_history_forgets_the_conversation_but_not_the_sequence() -> None:
    state = hear(channel(capacity=200, idle_cap=3, priority_window_s=20), T0, addressed=("kai",))
    state = said(state, KAI, Tier.REMARK, T0 + 1)
    state = said(state, MIO, Tier.AIZUCHI, T0 + 1)  # the latest message is a nod
    assert refusal(_consume(state, Tier.AIZUCHI, T0 + 2)).reason is R.NODDED
    cleared = rules.clear_history(state, T0 + 2).state
    assert (cleared.bot_streak, cleared.priority, cleared.recent_substantive) == (0, None, ())
    assert cleared.recent_said == ()
    assert cleared.last_seq == 3
    assert cleared.history_since == T0 + 2  # a catch-up after a restart reads nothing said before
    assert cleared.cleared_seq == 3
    state, granted = say(cleared, HANA, Tier.AIZUCHI, T0 + 2)
    assert granted.message.seq == 4


def test_clearing_the_history_closes_the_claims_under_way_and_refunds_them() -> None:
    state = hear(channel(capacity=200), T0)
    state, kai = hold(state, "kai", Tier.REMARK, T0, based_on_seq=1)
    state, mio = hold(state, "mio", Tier.LONG, T0, based_on_seq=1)
    assert rules.level(state, T0 + 1) == 60

    transition = rules.clear_history(state, T0 + 1)

    closed = {spend.id: spend for spend in transition.changed_spends}
    assert set(closed) == {kai.id, mio.id}
    assert {spend.state for spend in closed.values()} == {SpendState.CLEARED}
    assert rules.level(transition.state, T0 + 1) == 200
    assert not [claim for claim in transition.state.claims if claim.held(T0 + 1)]


def test_a_claim_taken_before_a_clear_is_refused_as_stale_and_its_release_changes_nothing() -> None:
    state = hear(channel(), T0)
    state, held = hold(state, "kai", Tier.REMARK, T0, based_on_seq=1)
    cleared = rules.clear_history(state, T0 + 1).state
    cleared = hear(cleared, T0 + 2, text="a new start")

    spoken = rules.speak(cleared, KAI, held.id, "about what was cleared", T0 + 3, based_on_seq=1)
    assert refusal(spoken).reason is R.STALE
    assert spoken.state == cleared
    released = rules.release(cleared, "kai", held.id, T0 + 3)
    assert isinstance(released.outcome, Released) and not released.changed


@pytest.mark.parametrize("tier", list(Tier))
def test_nothing_may_be_based_on_a_cleared_message(tier: Tier) -> None:
    state = hear(hear(channel(), T0), T0, text="more")
    cleared = hear(rules.clear_history(state, T0 + 1).state, T0 + 2, text="a new start")

    for based_on in (1, 2):
        assert refusal(_consume(cleared, tier, T0 + 3, based_on_seq=based_on)).reason is R.STALE
        claimed = rules.claim(cleared, "kai", tier, T0 + 3, claim_id="c-x", based_on_seq=based_on)
        assert refusal(claimed).reason is R.STALE
    assert isinstance(rules.claim(cleared, "kai", tier, T0 + 3, claim_id="c-y", based_on_seq=3).outcome, ClaimGranted)


def test_a_message_the_platform_shows_after_one_heard_late_moves_to_the_end_of_the_history() -> None:
    # Kai's remark was granted (seq 2), then a person asked something (seq 3, heard late): on the platform the
    # question came first. Kai's remark moves after it, linked to its post.
    state = hear(channel(capacity=200), T0, text="hello")
    state, granted = say(state, KAI, Tier.REMARK, T0 + 1, "About the first thing...")
    state = hear(state, T0 + 2, text="Mio, a question for you?", addressed=("mio",))
    spend = state.spend(granted.spend.id)
    assert spend is not None and state.bot_streak == 0

    transition = rules.move_to_end(state, granted.message, platform_message_id="900", said_at=T0 + 2)

    assert isinstance(transition.outcome, Message)
    moved, [left] = transition.outcome, transition.changed_messages
    assert (moved.seq, moved.text, moved.platform_message_id, moved.created_at) == (
        4,
        granted.message.text,
        "900",
        T0 + 2,
    )
    assert (left.seq, left.visible, left.platform_message_id) == (2, False, None)
    after = transition.state
    assert (after.last_seq, after.bot_streak, after.recent_substantive) == (4, 1, (1, 3, 4))
    assert [s for s, _nod in after.recent_said] == [1, 3, 4]
    assert after.spend(spend.id) == replace(spend, message_seq=4)
    assert rules.level(after, T0 + 2) == rules.level(state, T0 + 2)  # said all the same: nothing refunded
    assert after.priority == state.priority  # the question's floor is the question's


def test_a_moved_message_with_no_human_since_is_still_one_bot_turn() -> None:
    state = hear(channel(capacity=200), T0)
    state, first = say(state, KAI, Tier.REMARK, T0 + 1, "one")
    state = said(state, MIO, Tier.AIZUCHI, T0 + 2)
    moved = rules.move_to_end(state, first.message, platform_message_id="7", said_at=T0 + 2).state
    assert (moved.bot_streak, [s for s, _ in moved.recent_said]) == (2, [1, 3, 4])


# --- edits and deletions on the platform -------------------------------------------------------------------


def test_an_edit_replaces_the_text_and_notes_when() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0, "helo")
    transition = rules.edit(state, granted.message, "hello", T0 + 2)
    assert isinstance(transition.outcome, Message)
    assert (transition.outcome.text, transition.outcome.edited_at) == ("hello", T0 + 2)
    assert transition.changed_messages == (transition.outcome,)
    assert transition.state == state  # the pool and the counters do not move


def test_an_edit_to_the_same_text_changes_nothing() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0, "hello")
    assert not rules.edit(state, granted.message, "hello", T0 + 2).changed


def test_a_deletion_hides_the_message_keeps_its_cost_and_forgets_it_for_staleness() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0, "a remark")
    transition = rules.delete(state, granted.message)
    assert isinstance(transition.outcome, Message)
    assert transition.outcome.deleted and not transition.outcome.visible
    assert transition.state.recent_substantive == ()
    assert rules.level(transition.state, T0 + 1) == rules.level(state, T0 + 1) == 40
    assert transition.state.bot_streak == state.bot_streak


def test_a_deleted_message_cannot_be_edited_linked_or_deleted_again() -> None:
    state, granted = say(channel(), HANA, Tier.REMARK, T0)
    deleted = rules.delete(state, granted.message)
    assert isinstance(deleted.outcome, Message)
    with pytest.raises(ConflictError):
        rules.edit(deleted.state, deleted.outcome, "new", T0 + 1)
    with pytest.raises(ConflictError):
        rules.link_platform_id(deleted.state, "hana", deleted.outcome, "p-1")
    assert not rules.delete(deleted.state, deleted.outcome).changed


@pytest.mark.parametrize(
    "moment",
    [
        "1970-01-01T00:00:00",
        "1999-12-31T23:59:59.999",
        "2026-07-25T00:00:00",
        "2026-07-25T23:59:59.5",
        "2100-03-01T00:00:00",
    ],
)
def test_utc_day_is_the_calendar_day_in_utc(moment: str) -> None:
    assert rules.utc_day(_utc(moment)) == dt.datetime.fromisoformat(moment).date().toordinal()


# --- a status's verdicts: check_turn for every tier, made at once ----------------------------------------------

_PEOPLE = (HANA, KAI, MIO)
_MOVES = st.lists(
    st.tuples(
        st.sampled_from(["hear", "ask", "nod", "remark", "long", "claim nod", "claim remark", "pass", "speak"]),
        st.sampled_from(_PEOPLE),
        st.floats(min_value=0.0, max_value=6.0),
    ),
    max_size=14,
)
_SETTINGS = st.fixed_dictionaries(RULE_KNOBS)


@settings(max_examples=300, deadline=None)
@given(moves=_MOVES, knobs=_SETTINGS, tokens=st.sampled_from([0, 5_000]), muted=st.sampled_from([None, *_PEOPLE]))
def test_a_statuss_verdicts_are_check_turn_for_each_tier(
    moves: list[tuple[str, Author, float]], knobs: dict[str, Any], tokens: int, muted: Author | None
) -> None:
    state, now = channel(**knobs), T0
    if muted is not None:
        state = with_policy(state, muted.id, muted=True)
    for move in moves:
        now += move[2]
        state = moved(state, move, now)
    state = rules.record_usage(state, tokens, now).state if tokens else state
    for later in (now, now + 1.5, now + 7.0):
        for persona in _PEOPLE:
            found = rules.verdicts(state, persona.id, later)
            expected = {
                tier: rules.check_turn(state, persona.id, tier, rule.cost, later)
                for tier, rule in state.settings.tiers.items()
            }
            assert found == expected, (persona.id, later)
