"""The pool between pushed statuses: a persona plans from the last status the stream pushed, moved on by the level
events since and rolled forward along the refunds it lists (those due within a tenth of a second listed as one, at
the last one's time). A claim that drained the pool and a refund that filled it again then need no status read:
the pool is the last thing the arbiter checks, so while nothing else changed (the stream pushes a fresh status when
something else does) a verdict for the pool follows from the level alone.

Pure: times are on the arbiter's clock, passed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.contract import RefusalReason, wait_seconds

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arbiter.contract import LevelEvent, RefundView, StatusView, Tier, TierView

__all__ = ("moved_on", "wait_for")


def wait_for(level: int, capacity: int, refunds: Sequence[RefundView], cost: int, now: float) -> float | None:
    """Seconds from ``now`` until the pool holds ``cost``, or None if the refunds listed never bring it there (the
    arbiter's own wait, from the schedule a status or a level event lists)."""
    if cost > capacity:
        return None
    available = level
    for refund in refunds:
        if available >= cost:
            break
        available += refund.amount
        if available >= cost:
            return wait_seconds(refund.at, now)
    return 0.0 if available >= cost else None


def moved_on(status: StatusView, now: float, latest: LevelEvent | None = None) -> StatusView | None:
    """``status`` as it stands at ``now``: the pool from ``latest`` when that level event is newer than the status,
    plus every refund due since; each tier the pool decides (one the arbiter would grant, or refused only for the
    pool) granted or refused by that level, with the wait until the pool holds its cost. None when the refunds listed
    (a status lists the next ten) do not say when the pool will hold a tier's cost: read the status then."""
    if latest is not None and latest.at >= status.now:
        level, refunds = latest.level, latest.refunds
    elif not any(refund.at <= now for refund in status.refunds):
        return status  # nothing moved the pool, and nothing came back: as pushed (its waits counted from its ``now``)
    else:
        level, refunds = status.level, status.refunds
    level = min(status.capacity, level + sum(refund.amount for refund in refunds if refund.at <= now))
    upcoming = [refund for refund in refunds if refund.at > now]
    tiers = {
        tier: _verdict(view, tier, level, capacity=status.capacity, refunds=upcoming, now=now)
        for tier, view in status.tiers.items()
    }
    if any(_unknown_wait(view, status.capacity) for view in tiers.values()):
        return None
    return status.model_copy(update={"now": now, "level": level, "refunds": upcoming, "tiers": tiers})


def _unknown_wait(view: TierView, capacity: int) -> bool:
    return view.reason is RefusalReason.INSUFFICIENT and view.retry_after is None and view.cost <= capacity


def _verdict(
    view: TierView, tier: Tier, level: int, *, capacity: int, refunds: list[RefundView], now: float
) -> TierView:
    update: dict[str, object] = {"affordable": view.cost <= level}
    if view.may_claim or view.reason is RefusalReason.INSUFFICIENT:
        if view.cost <= level:
            update |= {"may_claim": True, "reason": None, "detail": None, "retry_after": None}
        else:
            update |= {
                "may_claim": False,
                "reason": RefusalReason.INSUFFICIENT,
                "detail": f"{tier} costs {view.cost}; the pool holds {level}",
                "retry_after": wait_for(level, capacity, refunds, view.cost, now),
            }
    return view.model_copy(update=update)
