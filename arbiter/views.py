"""The wire views of the core's records: what the API, the room and the event stream show. Pure.

The status a persona reads carries, per tier, the core's own verdict on a claim by that persona now
(``rules.verdicts``, which is ``check_turn`` for each tier): the personas plan from it and keep no copy of the rules.
"""

from __future__ import annotations

from dataclasses import asdict
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic_core import to_json

from arbiter import contract as wire
from arbiter.core import rules
from arbiter.core.models import SETTINGS, RefusalReason, SpendState, Tier

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arbiter.core.images import ImageRef
    from arbiter.core.models import ChannelSettings, ChannelState, Memory, Message, PersonaInfo, Spend
    from arbiter.core.rules import Outcome, Transition

__all__ = (
    "claim_result",
    "claim_view",
    "level_event",
    "memory_view",
    "message_view",
    "persona_view",
    "release_result",
    "settings_view",
    "speak_result",
    "status_event_json",
    "status_view",
    "transition_events",
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
        images=[image_view(image) for image in message.images],
    )


def image_view(image: ImageRef) -> wire.ImageView:
    return wire.ImageView(
        url=image.url,
        content_type=image.content_type,
        size=image.size,
        width=image.width,
        height=image.height,
        expires_at=image.expires_at,
        local=image.local,
    )


def memory_view(memory: Memory, checked: wire.DialogueState | None = None) -> wire.MemoryView:
    """``checked``: the state as it came in and was validated, when ``memory`` was made from it just now (a speech's or
    a release's notes, stored): not validated again from its stored form, which is its dump."""
    if checked is None:
        # Stored only once checked against the cap, as it came in: not counted again on every read.
        checked = wire.DialogueState.model_validate(memory.state, context=wire.FROM_THE_ARBITER)
    return wire.MemoryView(
        channel_id=memory.channel_id,
        persona=memory.persona_id,
        seq=memory.seq,
        state=checked,
        updated_at=memory.updated_at,
    )


def claim_view(spend: Spend, now: float) -> wire.ClaimView:
    return wire.ClaimView.model_validate(_claim_fields(spend, now))


def settings_view(
    channel_id: str, settings: ChannelSettings, names: Mapping[str, str] | None = None
) -> wire.SettingsView:
    """The settings as the API shows them: every declared setting (``models.SETTINGS``) under its own name, each
    tier's, and each persona's policy with its display name. Built from the declarations, so checked by pydantic
    at run time; a test ties the wire model's fields to them."""
    names = names or {}
    personas = {pid: settings.policy(pid) for pid in sorted({*settings.personas, *names})}
    return wire.SettingsView.model_validate(
        {
            "channel_id": channel_id,
            **{declared.name: getattr(settings, declared.name) for declared in SETTINGS},
            "tiers": {tier: asdict(rule) for tier, rule in settings.tiers.items()},
            "personas": {
                pid: wire.PersonaView(
                    enabled=p.enabled, muted=p.muted, display_name=names.get(pid), cannot_post=p.cannot_post
                )
                for pid, p in personas.items()
            },
        }
    )


def persona_view(info: PersonaInfo, *, kind: wire.MemberKind = "persona") -> wire.PersonaInfoView:
    return wire.PersonaInfoView(
        id=info.id,
        kind=kind,
        display_name=info.display_name,
        aliases=list(info.aliases),
        color=info.color,
        platform_user_id=info.platform_user_id,
        cannot_speak=info.cannot_speak,
    )


def upcoming_refunds(schedule: list[tuple[float, int]], limit: int = 10) -> list[tuple[float, int]]:
    """The next refunds of ``schedule`` (``rules.refund_schedule``), those due within the same tenth of a second
    merged, at the last one's time (by then all of it is back): enough to plan a turn, and to tell the level at any
    moment until the pool moves again."""
    merged: list[tuple[float, float, int]] = []  # (first due, last due, amount)
    for at, amount in schedule:
        if merged and at - merged[-1][0] < 0.1:
            first, _, total = merged[-1]
            merged[-1] = (first, at, total + amount)
        elif len(merged) == limit:
            break
        else:
            merged.append((at, at, amount))
    return [(last, amount) for _, last, amount in merged]


def _refunds(schedule: list[tuple[float, int]]) -> list[wire.RefundView]:
    return [wire.RefundView(at=at, amount=amount) for at, amount in upcoming_refunds(schedule)]


def status_view(
    state: ChannelState, now: float, *, persona_id: str | None = None, display_name: str | None = None
) -> wire.StatusView:
    """The channel as ``persona_id`` sees it now (or as anyone does, without one): the pool, the floor, and for
    each tier whether a claim would be granted, and if not why and when to try again.

    Built as plain values and validated once, not as a model per tier, refund and standing: a status is made at
    every look of every persona, and each model built on its own is a call into pydantic (a dozen per status)."""
    return wire.StatusView.model_validate(_status_fields(state, now, persona_id, display_name))


def status_event_json(state: ChannelState, now: float, *, channel_id: str, persona_id: str, display_name: str) -> str:
    """The ``StatusEvent`` of ``status_view`` as the stream sends it, the very JSON ``model_dump_json`` writes, made
    in one pass: the plain values go to pydantic's own serializer, with no model validated only to be dumped (the
    stream asks for a status at every look of every persona). A test holds the two to the same bytes."""
    event = {
        "type": "status",
        "channel_id": channel_id,
        "persona": persona_id,
        "status": _status_fields(state, now, persona_id, display_name),
    }
    # As a model's float fields are written: an infinity or NaN as null (to_json's own default writes them bare).
    return to_json(event, inf_nan_mode="null").decode()


# Each enum member as its plain string: serialized as an enum, a member's value is read through a Python
# descriptor (a call each); a plain str is copied. Validated into a model, the string is the member again.
_PLAIN: Mapping[str, str] = MappingProxyType(
    {member: member.value for kind in (Tier, RefusalReason, SpendState) for member in kind}
)


def _float(value: float | None) -> float | None:
    # A model's float field turns an int into a float (written 5.0, not 5): the one-pass JSON must too.
    return None if value is None else float(value)


def _status_fields(state: ChannelState, now: float, persona_id: str | None, display_name: str | None) -> dict[str, Any]:
    """``StatusView``'s fields as plain values, in its field order (the order its JSON has them in). The pending
    spends are gathered once, for the level, the refunds and the verdicts alike."""
    settings = state.settings
    pending = rules.pending(state, now)
    level = _level(state, pending)
    you = claim = None
    if persona_id is not None:
        policy = settings.policy(persona_id)
        you = {
            "enabled": policy.enabled,
            "muted": policy.muted,
            "display_name": display_name,
            "cannot_post": policy.cannot_post,
        }
        held = state.claim_of(persona_id, now)
        claim = None if held is None else _claim_fields(held, now)
    found = {} if persona_id is None else rules.verdicts(state, persona_id, now, pending)
    tiers = {}
    for tier, rule in settings.tiers.items():
        verdict = found.get(tier)
        tiers[_PLAIN[tier]] = {
            "cost": rule.cost,
            "max_length": rule.max_length,
            "recovery_s": float(rule.recovery_s),
            "affordable": rule.cost <= level,
            "may_claim": None if persona_id is None else verdict is None,
            "reason": None if verdict is None else _PLAIN[verdict.reason],
            "detail": None if verdict is None else verdict.detail,
            "retry_after": None if verdict is None else _float(verdict.retry_after),
        }
    priority = state.priority if state.priority is not None and now < state.priority.until else None
    refunds = upcoming_refunds([(spend.refund_at, spend.cost) for spend in pending])
    return {
        "channel_id": state.channel_id,
        "now": float(now),
        "level": level,
        "capacity": settings.capacity,
        "enabled": settings.enabled,
        "paused": settings.paused,
        "topic": settings.topic,
        "tiers": tiers,
        "refunds": [{"at": float(at), "amount": amount} for at, amount in refunds],
        "bot_streak": state.bot_streak,
        "idle_cap": settings.idle_cap,
        "priority": sorted(priority.persona_ids) if priority else [],
        "priority_until": float(priority.until) if priority else None,
        "tokens_today": rules.tokens_today(state, now),
        "daily_token_budget": settings.daily_token_budget,
        "last_seq": state.last_seq,
        "stale_tolerance": settings.stale_tolerance,
        "claims_held": _claims_held(state, now),
        "you": you,
        "claim": claim,
    }


def _claim_fields(spend: Spend, now: float) -> dict[str, Any]:
    """A ``ClaimView``'s fields as plain values (a status's claim is written from them without a model)."""
    return {
        "claim_id": spend.id,
        "persona": spend.persona_id,
        "tier": _PLAIN[spend.tier],
        "cost": spend.cost,
        "state": _PLAIN[spend.state],
        "expires_at": float(spend.refund_at) if spend.held(now) else None,
    }


def _claims_held(state: ChannelState, now: float) -> dict[str, int]:
    """Live claims by tier, in the order of their first claim (as a ``Counter`` would count them)."""
    held: dict[str, int] = {}
    for claim in state.claims:
        if claim.held(now):
            tier = _PLAIN[claim.tier]
            held[tier] = held.get(tier, 0) + 1
    return held


# --- verdicts: what a spending call answers ---------------------------------------------------------------

_Refusable = TypeVar("_Refusable", wire.ClaimResult, wire.SpeakResult)


def _refused(result: type[_Refusable], state: ChannelState, now: float, refusal: rules.Refusal) -> _Refusable:
    return result(
        granted=False,
        level=rules.level(state, now),
        capacity=state.settings.capacity,
        reason=refusal.reason,
        detail=refusal.detail,
        retry_after=refusal.retry_after,
    )


def claim_result(state: ChannelState, now: float, outcome: Outcome) -> wire.ClaimResult:
    """The answer to a claim: ``state`` is the channel after it."""
    if isinstance(outcome, rules.Refusal):
        return _refused(wire.ClaimResult, state, now, outcome)
    assert isinstance(outcome, rules.ClaimGranted), outcome
    return wire.ClaimResult(
        granted=True,
        level=rules.level(state, now),
        capacity=state.settings.capacity,
        claim=claim_view(outcome.spend, now),
    )


def speak_result(state: ChannelState, now: float, outcome: Outcome) -> wire.SpeakResult:
    """The answer to a speak or a consume: ``state`` is the channel after it."""
    if isinstance(outcome, rules.Refusal):
        return _refused(wire.SpeakResult, state, now, outcome)
    assert isinstance(outcome, rules.SpeechGranted), outcome
    return wire.SpeakResult(
        granted=True,
        level=rules.level(state, now),
        capacity=state.settings.capacity,
        message=message_view(outcome.message),
        refunded=outcome.refunded,
    )


def release_result(state: ChannelState, now: float, outcome: Outcome) -> wire.ReleaseResult:
    """The answer to a release (never refused: releasing what is gone already is a no-op)."""
    assert isinstance(outcome, rules.Released), outcome
    return wire.ReleaseResult(
        granted=True,
        level=rules.level(state, now),
        capacity=state.settings.capacity,
        claim=claim_view(outcome.spend, now),
    )


# --- events: what the stream hears --------------------------------------------------------------------------


def level_event(state: ChannelState, now: float, pending: list[Spend] | None = None) -> wire.LevelEvent:
    """``pending``: ``rules.pending(state, now)``, if the caller has it (the level and the refunds are both made
    from it)."""
    if pending is None:
        pending = rules.pending(state, now)
    schedule = [(spend.refund_at, spend.cost) for spend in pending]
    return wire.LevelEvent(
        channel_id=state.channel_id,
        level=_level(state, pending),
        capacity=state.settings.capacity,
        at=now,
        next_refund_at=schedule[0][0] if schedule else None,
        refunds=_refunds(schedule),
    )


def _level(state: ChannelState, pending: list[Spend]) -> int:
    """``rules.level`` from the pending spends already gathered: the same spends (every active one and every live
    claim), so the same sum."""
    return max(0, state.settings.capacity - sum(spend.cost for spend in pending))


def transition_events(transition: Transition, before: ChannelState, now: float) -> list[wire.ArbiterEvent]:
    """What the stream should hear about a transition from ``before``: the messages that left the history (retracted,
    or moved to its end: ``rules.move_to_end``), its new messages, every claim made or settled, and the level when it
    moved (or a claim did)."""
    channel_id = transition.state.channel_id
    events: list[wire.ArbiterEvent] = [
        wire.RetractedEvent(channel_id=channel_id, seq=m.seq)
        if m.retracted
        else wire.DeletedEvent(channel_id=channel_id, seq=m.seq)
        for m in transition.changed_messages
        if not m.visible
    ]
    events += [wire.MessageEvent(channel_id=channel_id, message=message_view(m)) for m in transition.new_messages]
    events += [
        wire.ClaimEvent(channel_id=channel_id, claim=claim_view(s, now))
        for s in (*transition.new_spends, *transition.changed_spends)
    ]
    # The state after is gathered once for its level and its level event.
    pending = rules.pending(transition.state, now)
    moved = _level(transition.state, pending) != rules.level(before, now)
    if moved or transition.new_spends or transition.changed_spends:
        events.append(level_event(transition.state, now, pending))
    return events
