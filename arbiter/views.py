"""The wire views of the core's records: what the API, the room and the event stream show. Pure.

The status a persona reads carries, per tier, the core's own verdict on a claim by that persona now
(``check_turn``): the personas plan from it and keep no copy of the rules.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.core import rules

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arbiter.core.models import ChannelSettings, ChannelState, Message, PersonaInfo, Spend

__all__ = (
    "claim_view",
    "message_view",
    "next_refund",
    "persona_view",
    "settings_view",
    "status_view",
    "upcoming_refunds",
)


def message_view(message: Message) -> wire.MessageView:
    return wire.MessageView(
        seq=message.seq,
        author_id=message.author_id,
        author_kind=message.author_kind,
        author_name=message.author_name,
        text=message.text,
        at=message.created_at,
        tier=message.tier,
        cost=message.cost,
        platform_message_id=message.platform_message_id,
        addressed=list(message.addressed),
    )


def claim_view(spend: Spend, now: float) -> wire.ClaimView:
    held = spend.held(now)
    return wire.ClaimView(
        claim_id=spend.id,
        persona=spend.persona_id,
        tier=spend.tier,
        cost=spend.cost,
        state=spend.state,
        expires_at=spend.refund_at if held else None,
    )


def settings_view(
    channel_id: str, settings: ChannelSettings, names: Mapping[str, str] | None = None
) -> wire.SettingsView:
    names = names or {}
    personas = {pid: settings.policy(pid) for pid in sorted({*settings.personas, *names})}
    return wire.SettingsView(
        channel_id=channel_id,
        capacity=settings.capacity,
        tiers={
            t: wire.TierSettings(cost=r.cost, max_length=r.max_length, recovery_s=r.recovery_s)
            for t, r in settings.tiers.items()
        },
        enabled=settings.enabled,
        paused=settings.paused,
        idle_cap=settings.idle_cap,
        daily_token_budget=settings.daily_token_budget,
        topic=settings.topic,
        claim_ttl_s=settings.claim_ttl_s,
        priority_window_s=settings.priority_window_s,
        human_hold_s=settings.human_hold_s,
        stale_tolerance=settings.stale_tolerance,
        personas_enabled_by_default=settings.personas_enabled_by_default,
        personas={
            pid: wire.PersonaView(enabled=p.enabled, muted=p.muted, display_name=names.get(pid))
            for pid, p in personas.items()
        },
    )


def persona_view(info: PersonaInfo) -> wire.PersonaInfoView:
    return wire.PersonaInfoView(
        id=info.id,
        display_name=info.display_name,
        aliases=list(info.aliases),
        color=info.color,
        platform_user_id=info.platform_user_id,
    )


def next_refund(state: ChannelState, now: float) -> float | None:
    schedule = rules.refund_schedule(state, now)
    return schedule[0][0] if schedule else None


def upcoming_refunds(state: ChannelState, now: float, limit: int = 10) -> list[tuple[float, int]]:
    """The next refunds, those due within the same tenth of a second merged: enough to plan a turn."""
    merged: list[tuple[float, int]] = []
    for at, amount in rules.refund_schedule(state, now):
        if merged and at - merged[-1][0] < 0.1:
            merged[-1] = (merged[-1][0], merged[-1][1] + amount)
        elif len(merged) == limit:
            break
        else:
            merged.append((at, amount))
    return merged


def status_view(
    state: ChannelState, now: float, *, persona_id: str | None = None, display_name: str | None = None
) -> wire.StatusView:
    """The channel as ``persona_id`` sees it now (or as anyone does, without one): the pool, the floor, and for
    each tier whether a claim would be granted, and if not why and when to try again."""
    settings = state.settings
    level = rules.level(state, now)
    you = claim = None
    if persona_id is not None:
        policy = settings.policy(persona_id)
        you = wire.PersonaView(enabled=policy.enabled, muted=policy.muted, display_name=display_name)
        held = state.claim_of(persona_id, now)
        claim = None if held is None else claim_view(held, now)
    tiers = {}
    for tier, rule in settings.tiers.items():
        verdict = None if persona_id is None else rules.check_turn(state, persona_id, tier, rule.cost, now)
        tiers[tier] = wire.TierView(
            cost=rule.cost,
            max_length=rule.max_length,
            recovery_s=rule.recovery_s,
            affordable=rule.cost <= level,
            may_claim=None if persona_id is None else verdict is None,
            reason=None if verdict is None else verdict.reason,
            detail=None if verdict is None else verdict.detail,
            retry_after=None if verdict is None else verdict.retry_after,
        )
    priority = state.priority if state.priority is not None and now < state.priority.until else None
    return wire.StatusView(
        channel_id=state.channel_id,
        now=now,
        level=level,
        capacity=settings.capacity,
        enabled=settings.enabled,
        paused=settings.paused,
        topic=settings.topic,
        tiers=tiers,
        refunds=[wire.RefundView(at=at, amount=amount) for at, amount in upcoming_refunds(state, now)],
        bot_streak=state.bot_streak,
        idle_cap=settings.idle_cap,
        priority=sorted(priority.persona_ids) if priority else [],
        priority_until=priority.until if priority else None,
        tokens_today=rules.tokens_today(state, now),
        daily_token_budget=settings.daily_token_budget,
        last_seq=state.last_seq,
        stale_tolerance=settings.stale_tolerance,
        claims_held=dict(Counter(claim.tier for claim in state.claims if claim.held(now))),
        you=you,
        claim=claim,
    )
