"""A channel's ledger: ordinary spends sorted by refund time, and live claims kept apart.

Why the shape: a channel with a large pool can have hundreds of spends in flight and these run on every
request. Sorted spends let the rules find the active ones with a bisection and sum them in C, and let the
storage layer drop the expired ones by looking at the front only. Claims are few (at most one per persona)
and are what most lookups are after, so they sit in their own short tuple.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from operator import attrgetter
from typing import TYPE_CHECKING

from arbiter.core.models import Spend, SpendState

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("active", "held_total", "place", "sort_spends", "split", "wait_seconds")

_REFUND_AT = attrgetter("refund_at")
_COST = attrgetter("cost")


def wait_seconds(moment: float, now: float) -> float:
    """The wait from ``now`` until ``moment``, in whole milliseconds rounded up: a client that tries again after it
    is never early (the rules' ``retry_after``, and a persona's own wait for a refund it knows of)."""
    return math.ceil(max(0.0, moment - now) * 1000) / 1000


def sort_spends(spends: Iterable[Spend]) -> tuple[Spend, ...]:
    return tuple(sorted(spends, key=_REFUND_AT))


def split(spends: Iterable[Spend]) -> tuple[tuple[Spend, ...], tuple[Spend, ...]]:
    """(ordinary spends sorted by refund time, claims)."""
    ordinary: list[Spend] = []
    claims: list[Spend] = []
    for spend in spends:
        (claims if spend.state is SpendState.HELD else ordinary).append(spend)
    return sort_spends(ordinary), tuple(claims)


def active(spends: tuple[Spend, ...], now: float) -> tuple[Spend, ...]:
    """The (sorted) spends whose refund time is still ahead, soonest first."""
    return spends[bisect_right(spends, now, key=_REFUND_AT) :]


def held_total(spends: tuple[Spend, ...], claims: tuple[Spend, ...], now: float) -> int:
    ordinary: int = sum(map(_COST, active(spends, now)))
    return ordinary + sum(claim.cost for claim in claims if claim.refund_at > now)


def place(
    spends: tuple[Spend, ...], claims: tuple[Spend, ...], spend: Spend, previous: Spend | None
) -> tuple[tuple[Spend, ...], tuple[Spend, ...]]:
    """The ledger with ``spend`` in its place; ``previous`` is the version it replaces, if any."""
    if previous is not None:
        if previous.state is SpendState.HELD:
            claims = tuple(claim for claim in claims if claim.id != previous.id)
        else:
            spends = _without(spends, previous)
    if spend.state is SpendState.HELD:
        return spends, (*claims, spend)
    items = list(spends)
    insort(items, spend, key=_REFUND_AT)
    return tuple(items), claims


def _without(spends: tuple[Spend, ...], spend: Spend) -> tuple[Spend, ...]:
    start = bisect_left(spends, spend.refund_at, key=_REFUND_AT)
    for index in range(start, len(spends)):
        if spends[index].id == spend.id:
            return spends[:index] + spends[index + 1 :]
    return tuple(item for item in spends if item.id != spend.id)
