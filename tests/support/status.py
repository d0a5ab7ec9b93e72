"""A channel's status as the arbiter would show it to a persona: built by the arbiter's own view of a core state,
so tests that need "a status" do not write one by hand (and drift from what the arbiter really sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.core.models import ChannelSettings, ChannelState, Priority, Tier, TierRule
from arbiter.views import status_view

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from arbiter.contract import StatusView

__all__ = ("DEFAULT_LENGTHS", "status_for")

DEFAULT_LENGTHS: Mapping[Tier, int] = {tier: rule.max_length for tier, rule in ChannelSettings().tiers.items()}


def status_for(
    persona_id: str,
    *,
    priority: Sequence[str] = (),
    lengths: Mapping[Tier, int] = DEFAULT_LENGTHS,
    now: float = 0.0,
    topic: str = "",
) -> StatusView:
    """A quiet, full channel seen by ``persona_id``, with ``priority`` asked, the tiers' ``lengths`` and a
    ``topic``."""
    tiers = {tier: TierRule(cost=5, max_length=lengths[tier], recovery_s=5.0) for tier in Tier}
    state = ChannelState(
        "lounge",
        ChannelSettings(tiers=tiers, daily_token_budget=None, topic=topic),
        priority=Priority(frozenset(priority), now + 20.0, 1) if priority else None,
    )
    return status_view(state, now, persona_id=persona_id, display_name=persona_id.title())
