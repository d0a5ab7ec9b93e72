"""The ledger keeps ordinary spends sorted by refund time and claims apart, whatever order changes come in."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter.core import ledger
from arbiter.core.models import Spend, SpendState, Tier

# Few distinct times, so ties in refund_at (the tricky case for bisection) are common.
_TIMES = st.sampled_from([0.0, 1.0, 2.5, 5.0, 7.0])
_STATES = st.sampled_from(list(SpendState))
# Derandomized so a run is reproducible; no example database, so runs do not depend on earlier ones.
_PROPERTY = settings(derandomize=True, database=None, max_examples=300)


def _spend(spend_id: str, refund_at: float, state: SpendState = SpendState.SPOKEN, cost: int = 5) -> Spend:
    return Spend(spend_id, "hana", Tier.AIZUCHI, cost, state, created_at=0.0, refund_at=refund_at)


def _check_invariants(spends: tuple[Spend, ...], claims: tuple[Spend, ...], expected: dict[str, Spend]) -> None:
    assert [s.refund_at for s in spends] == sorted(s.refund_at for s in spends)
    assert all(s.state is not SpendState.HELD for s in spends)
    assert all(c.state is SpendState.HELD for c in claims)
    ids = [s.id for s in (*spends, *claims)]
    assert sorted(ids) == sorted(expected)  # every spend exactly once
    assert {s.id: s for s in (*spends, *claims)} == expected


def _check_totals(spends: tuple[Spend, ...], claims: tuple[Spend, ...]) -> None:
    for now in (-1.0, 0.0, 1.0, 2.5, 4.0, 5.0, 7.0, 8.0):
        assert ledger.active(spends, now) == tuple(s for s in spends if s.refund_at > now)
        expected = sum(s.cost for s in (*spends, *claims) if s.refund_at > now)
        assert ledger.held_total(spends, claims, now) == expected


# An operation: add a new spend, or replace the n-th known one with a new version (new state and time).
_OPERATIONS = st.lists(st.tuples(st.booleans(), st.integers(0, 30), _TIMES, _STATES, st.integers(1, 100)), max_size=40)


@_PROPERTY
@given(_OPERATIONS)
def test_place_keeps_spends_sorted_and_claims_apart(operations: list[tuple[bool, int, float, SpendState, int]]) -> None:
    spends: tuple[Spend, ...] = ()
    claims: tuple[Spend, ...] = ()
    expected: dict[str, Spend] = {}
    for index, (is_new, pick, refund_at, state, cost) in enumerate(operations):
        if is_new or not expected:
            spend = _spend(f"s{index}", refund_at, state, cost)
            previous = None
        else:
            previous = list(expected.values())[pick % len(expected)]
            spend = replace(previous, state=state, refund_at=refund_at)
        spends, claims = ledger.place(spends, claims, spend, previous)
        expected[spend.id] = spend
        _check_invariants(spends, claims, expected)
    _check_totals(spends, claims)


@_PROPERTY
@given(st.lists(st.tuples(_TIMES, _STATES, st.integers(1, 100)), max_size=30))
def test_split_sorts_ordinary_spends_and_keeps_claims_in_order(items: list[tuple[float, SpendState, int]]) -> None:
    given_spends = [_spend(f"s{i}", at, state, cost) for i, (at, state, cost) in enumerate(items)]
    spends, claims = ledger.split(given_spends)
    _check_invariants(spends, claims, {s.id: s for s in given_spends})
    assert claims == tuple(s for s in given_spends if s.state is SpendState.HELD)
    _check_totals(spends, claims)


def test_a_spend_is_refunded_exactly_at_its_refund_time() -> None:
    claim = _spend("c", 5.0, SpendState.HELD)
    assert (claim.active(4.999), claim.held(4.999)) == (True, True)
    assert (claim.active(5.0), claim.held(5.0)) == (False, False)
    assert _spend("s", 5.0).active(4.0)
    assert not _spend("s", 5.0).held(4.0)  # only a claim is held


def test_active_drops_spends_refunded_exactly_now() -> None:
    spends = ledger.sort_spends([_spend("a", 1.0), _spend("b", 2.0), _spend("c", 2.0), _spend("d", 3.0)])
    assert [s.id for s in ledger.active(spends, 2.0)] == ["d"]
    assert [s.id for s in ledger.active(spends, 1.999)] == ["b", "c", "d"]


def test_held_total_ignores_expired_claims() -> None:
    claims = (_spend("live", 5.0, SpendState.HELD, 60), _spend("gone", 1.0, SpendState.HELD, 80))
    assert ledger.held_total((), claims, 2.0) == 60


def test_place_replaces_the_right_spend_among_equal_refund_times() -> None:
    spends = ledger.sort_spends([_spend("a", 2.0), _spend("b", 2.0), _spend("c", 2.0)])
    spends, claims = ledger.place(spends, (), replace(spends[1], refund_at=0.5), spends[1])
    assert [(s.id, s.refund_at) for s in spends] == [("b", 0.5), ("a", 2.0), ("c", 2.0)]
    assert claims == ()


def test_place_moves_a_spoken_claim_into_the_sorted_spends() -> None:
    held = _spend("c1", 30.0, SpendState.HELD)
    spends, claims = ledger.place(
        (_spend("a", 4.0),), (held,), replace(held, state=SpendState.SPOKEN, refund_at=2.0), held
    )
    assert [s.id for s in spends] == ["c1", "a"]
    assert claims == ()
