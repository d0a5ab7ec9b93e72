"""The turn-taking rules: pure functions of (state, request, now).

Each operation returns a :class:`Transition`: the channel's next state, what to persist, and the outcome.
A refusal leaves the state as it was. Errors (unknown claim, bad amount) raise ``ArbiterError``s.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from arbiter.core import ledger
from arbiter.core.errors import ConflictError, InvalidRequest, NotFound, PermissionDenied
from arbiter.core.models import (
    RECENT_SUBSTANTIVE,
    AuthorKind,
    ChannelState,
    Message,
    Priority,
    RefusalReason,
    Spend,
    SpendState,
    Tier,
)
from arbiter.core.text import display_length

if TYPE_CHECKING:
    from arbiter.core.images import ImageRef

__all__ = (
    "Author",
    "ClaimGranted",
    "Refusal",
    "Released",
    "SpeechGranted",
    "Transition",
    "check_turn",
    "claim",
    "clear_history",
    "consume",
    "delete",
    "edit",
    "level",
    "link_platform_id",
    "move_to_end",
    "observe",
    "pending",
    "record_usage",
    "refund_schedule",
    "release",
    "retract",
    "speak",
    "stand",
    "tier_for_amount",
    "utc_day",
    "verdicts",
)


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: RefusalReason
    detail: str
    retry_after: float | None = None  # seconds; None when waiting alone will not help


@dataclass(frozen=True, slots=True)
class ClaimGranted:
    spend: Spend


@dataclass(frozen=True, slots=True)
class SpeechGranted:
    spend: Spend
    message: Message
    refunded: int = 0  # cost given back at once by a downgrade


@dataclass(frozen=True, slots=True)
class Released:
    spend: Spend


Outcome = Refusal | ClaimGranted | SpeechGranted | Released | Message | None


@dataclass(frozen=True, slots=True)
class Transition:
    state: ChannelState
    outcome: Outcome = None
    new_spends: tuple[Spend, ...] = ()
    changed_spends: tuple[Spend, ...] = ()
    new_messages: tuple[Message, ...] = ()
    changed_messages: tuple[Message, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.new_spends or self.changed_spends or self.new_messages or self.changed_messages)


@dataclass(frozen=True, slots=True)
class Author:
    id: str
    name: str
    kind: AuthorKind = AuthorKind.PERSONA


# --- the pool -------------------------------------------------------------------------------------------


def level(state: ChannelState, now: float) -> int:
    """capacity minus the cost of every spend whose refund time has not passed (never below zero)."""
    return max(0, state.settings.capacity - ledger.held_total(state.spends, state.claims, now))


def refund_schedule(state: ChannelState, now: float) -> list[tuple[float, int]]:
    """Pending refunds as (time, amount), soonest first."""
    return [(spend.refund_at, spend.cost) for spend in _pending(state, now)]


def pending(state: ChannelState, now: float) -> list[Spend]:
    """Every spend and claim not yet refunded, soonest refund first: what ``level`` subtracts and ``refund_schedule``
    lists, for a caller that needs several of them at once (a status) and would otherwise gather it each time."""
    return _pending(state, now)


def _pending(state: ChannelState, now: float) -> list[Spend]:
    """Every spend and claim not yet refunded, soonest refund first."""
    pending = list(ledger.active(state.spends, now))
    live = [claim for claim in state.claims if claim.refund_at > now]
    if live:
        pending = sorted(pending + live, key=lambda spend: spend.refund_at)
    return pending


def _wait_for(
    state: ChannelState, cost: int, now: float, excluding: str | None, pending: list[Spend] | None = None
) -> float | None:
    """Seconds until the pool can afford ``cost``; None if it never can. ``pending``: ``_pending(state, now)``, if
    the caller has it."""
    capacity = state.settings.capacity
    if cost > capacity:
        return None
    active = _pending(state, now) if pending is None else pending
    if excluding is not None:
        active = [spend for spend in active if spend.id != excluding]
    available = capacity - sum(spend.cost for spend in active)
    for spend in active:
        if available >= cost:
            break
        available += spend.cost
        if available >= cost:
            return ledger.wait_seconds(spend.refund_at, now)
    return 0.0 if available >= cost else None


_EPOCH_ORDINAL = 719_163  # datetime.date(1970, 1, 1).toordinal()


def utc_day(now: float) -> int:
    """The UTC day of POSIX time ``now``, as a proleptic ordinal. Arithmetic, not datetime: it runs on every
    status read, and POSIX days are all 86,400 seconds long."""
    return _EPOCH_ORDINAL + int(now // 86_400)


def _seconds_to_next_utc_day(now: float) -> float:
    day = _dt.date.fromordinal(utc_day(now) + 1)
    midnight = _dt.datetime(day.year, day.month, day.day, tzinfo=_dt.UTC).timestamp()
    return ledger.wait_seconds(midnight, now)


def tokens_today(state: ChannelState, now: float) -> int:
    return state.tokens_used if state.tokens_day == utc_day(now) else 0


def tier_for_amount(state: ChannelState, amount: int) -> Tier:
    """The tier an explicit amount buys: the most expensive one it covers (the reference's consume(amount))."""
    capacity = state.settings.capacity
    if amount > capacity:
        raise InvalidRequest(f"amount {amount} exceeds the channel's capacity {capacity}", field="amount")
    covered = [tier for tier in Tier if state.settings.tier(tier).cost <= amount]
    if not covered:
        cheapest = state.settings.tier(Tier.AIZUCHI).cost
        raise InvalidRequest(f"amount {amount} is below the cheapest tier (aizuchi costs {cheapest})", field="amount")
    return max(covered, key=lambda tier: tier.rank)


# --- the checks -----------------------------------------------------------------------------------------


def _holds_by_others(state: ChannelState, persona_id: str, now: float) -> list[Spend]:
    return [c for c in state.claims if c.refund_at > now and c.persona_id != persona_id]


def _check_based_on(state: ChannelState, based_on_seq: int | None) -> None:
    # A seq not yet written is a bad request, whatever the state: checked before any refusal, so that the answer
    # to it does not depend on the pool, a pause or who spoke last.
    if based_on_seq is not None and based_on_seq > state.last_seq:
        raise InvalidRequest(
            f"based_on_seq {based_on_seq} is ahead of the history (last seq {state.last_seq})", field="based_on_seq"
        )


def _stale(state: ChannelState, based_on_seq: int | None, tier: Tier) -> Refusal | None:
    if based_on_seq is None:
        return None
    if 0 < based_on_seq <= state.cleared_seq:
        return Refusal(
            RefusalReason.STALE,
            f"the history up to seq {state.cleared_seq} was cleared; seq {based_on_seq} is gone",
            retry_after=0.0,
        )
    if tier is Tier.AIZUCHI:
        # A nod is about the latest message: once anything was said after it, it would nod at the wrong thing.
        # (Counted from what is still in the history: a message retracted or deleted since does not count.)
        newer = state.said_after(based_on_seq)
        if newer:
            return Refusal(
                RefusalReason.STALE,
                f"a nod is for the latest message; {newer} came after seq {based_on_seq}",
                retry_after=0.0,
            )
        return None
    # recent_substantive keeps more entries than the largest tolerance, so a full count here is never short.
    newer = sum(1 for seq in state.recent_substantive if seq > based_on_seq)
    tolerance = state.settings.stale_tolerance
    if newer > tolerance:
        return Refusal(
            RefusalReason.STALE,
            f"{newer} new messages since seq {based_on_seq} (tolerance {tolerance}); read the history again",
            retry_after=0.0,
        )
    return None


def check_turn(
    state: ChannelState,
    persona_id: str,
    tier: Tier,
    cost: int,
    now: float,
    *,
    text: str | None = None,
    based_on_seq: int | None = None,
    replacing: str | None = None,
    claimed: bool = False,
) -> Refusal | None:
    """Why ``persona_id`` may not spend ``cost`` on ``tier`` now, or None. Reasons are checked in a fixed order.

    ``claimed`` skips what a live claim already settled when it was granted: the budget, the idle cap,
    the floor and the pool. (Whether the latest message already has its nod is checked again: a claim of a
    remark may be spoken as a nod.)
    """
    _check_based_on(state, based_on_seq)
    settings = state.settings
    refusal = _standing(state, persona_id)
    if refusal is not None:
        return refusal
    if not claimed:
        refusal = _budget_spent(state, now) or _idle_capped(state, persona_id, now, replacing)
        if refusal is None:
            refusal = _floor_taken(state, persona_id, tier, now)
        if refusal is not None:
            return refusal
    elif (refusal := _floor_given(state, persona_id, now)) is not None:
        # Claimed before someone else was asked something: what it wrote must not come before their answer.
        return refusal
    if tier is Tier.AIZUCHI:
        refusal = _nodded(state, persona_id, now, replacing, claimed=claimed)
    elif not claimed:
        refusal = _nod_first(state, persona_id, now, replacing)
    if refusal is not None:
        return refusal
    if text is not None:
        limit = settings.tier(tier).max_length
        length = display_length(text)
        if length > limit:
            return Refusal(RefusalReason.TOO_LONG, f"text is {length} columns; {tier} allows {limit}")
    stale = _stale(state, based_on_seq, tier)
    if stale is not None or claimed:
        return stale
    held = ledger.held_total(state.spends, state.claims, now)
    replaced = state.spend(replacing) if replacing is not None else None
    if replaced is not None and replaced.active(now):
        held -= replaced.cost
    available = max(0, settings.capacity - held)
    if available < cost:
        return Refusal(
            RefusalReason.INSUFFICIENT,
            f"{tier} costs {cost}; the pool holds {available}",
            retry_after=_wait_for(state, cost, now, replacing),
        )
    return None


def verdicts(
    state: ChannelState, persona_id: str, now: float, pending: list[Spend] | None = None
) -> dict[Tier, Refusal | None]:
    """``check_turn`` of a claim of each tier by ``persona_id`` now (what its status shows), the checks that are the
    same for every tier made once: a status is read at every look of every persona. ``pending``: ``pending(state,
    now)``, if the caller has it."""
    tiers = state.settings.tiers
    # The claims others hold, gathered once for the idle cap and the nod checks (each gathered its own).
    others = _holds_by_others(state, persona_id, now)
    refusal = (
        _standing(state, persona_id) or _budget_spent(state, now) or _idle_capped(state, persona_id, now, None, others)
    )
    if refusal is not None:
        return dict.fromkeys(tiers, refusal)
    if pending is None:
        pending = _pending(state, now)
    available = max(0, state.settings.capacity - sum(spend.cost for spend in pending))
    # The floor and nod checks tell a nod only from the rest: made once for each kind, not once per tier.
    turns: dict[bool, Refusal | None] = {}
    found: dict[Tier, Refusal | None] = {}
    for tier, rule in tiers.items():
        nod = tier is Tier.AIZUCHI
        if nod in turns:
            refusal = turns[nod]
        else:
            refusal = _floor_taken(state, persona_id, tier, now)
            if refusal is None:
                refusal = (
                    _nodded(state, persona_id, now, None, others=others)
                    if nod
                    else _nod_first(state, persona_id, now, None, others=others)
                )
            turns[nod] = refusal
        if refusal is None and available < rule.cost:
            refusal = Refusal(
                RefusalReason.INSUFFICIENT,
                f"{tier} costs {rule.cost}; the pool holds {available}",
                retry_after=_wait_for(state, rule.cost, now, None, pending),
            )
        found[tier] = refusal
    return found


def _standing(state: ChannelState, persona_id: str) -> Refusal | None:
    """Whether the persona may take part here at all: the fleet and the persona enabled, not muted, not paused."""
    settings = state.settings
    policy = settings.policy(persona_id)
    if not settings.enabled:
        return Refusal(RefusalReason.NOT_ENABLED, "the fleet is not enabled in this channel")
    if not policy.enabled:
        return Refusal(RefusalReason.NOT_ENABLED, f"persona {persona_id} is not enabled in this channel")
    if policy.muted:
        return Refusal(RefusalReason.MUTED, f"persona {persona_id} is muted in this channel")
    if settings.paused:
        return Refusal(RefusalReason.PAUSED, "the channel is paused")
    return None


def _budget_spent(state: ChannelState, now: float) -> Refusal | None:
    budget = state.settings.daily_token_budget
    if budget is None or tokens_today(state, now) < budget:
        return None
    return Refusal(
        RefusalReason.BUDGET, f"today's token budget of {budget} is spent", retry_after=_seconds_to_next_utc_day(now)
    )


def _idle_capped(
    state: ChannelState, persona_id: str, now: float, replacing: str | None, others: list[Spend] | None = None
) -> Refusal | None:
    """``others``: ``_holds_by_others(state, persona_id, now)``, if the caller has it."""
    cap = state.settings.idle_cap
    if others is None:
        others = _holds_by_others(state, persona_id, now)
    in_flight = sum(1 for s in others if s.id != replacing)
    if state.bot_streak + in_flight < cap:
        return None
    return Refusal(
        RefusalReason.IDLE_CAP,
        f"bots have taken {state.bot_streak} turns since the last human message"
        f" ({in_flight} more in progress; cap {cap})",
    )


def _floor_given(state: ChannelState, persona_id: str, now: float) -> Refusal | None:
    """Refused while other personas have the floor. Not even a nod: a nod from someone else before the answer
    reads as an answer to a question put to them."""
    priority = state.priority
    if priority is None or now >= priority.until or persona_id in priority.persona_ids:
        return None
    names = ", ".join(sorted(priority.persona_ids))
    return Refusal(
        RefusalReason.PRIORITY,
        f"{names} was addressed and has not answered yet; the others wait",
        retry_after=ledger.wait_seconds(priority.until, now),
    )


def _floor_taken(state: ChannelState, persona_id: str, tier: Tier, now: float) -> Refusal | None:
    priority = state.priority
    if priority is not None and now < priority.until:
        return _floor_given(state, persona_id, now)
    hold = state.settings.human_hold_s
    if tier is not Tier.AIZUCHI and hold > 0 and state.last_human_at is not None and now < state.last_human_at + hold:
        return Refusal(
            RefusalReason.PRIORITY,
            "a human has just spoken; only aizuchi for a moment",
            retry_after=ledger.wait_seconds(state.last_human_at + hold, now),
        )
    return None


# --- speaking -------------------------------------------------------------------------------------------


def _nodded(
    state: ChannelState,
    persona_id: str,
    now: float,
    replacing: str | None,
    *,
    claimed: bool = False,
    others: list[Spend] | None = None,
) -> Refusal | None:
    """One nod per message: none to a nod, none while another persona's nod is on its way. Nor while another
    persona is about to speak: its message would come first, and the nod would be about one no longer the latest
    (and be refused as stale then). A claim already granted is only checked against the history: what others
    hold now was claimed after it."""
    if state.latest_is_nod:
        return Refusal(RefusalReason.NODDED, "the latest message is a nod; a nod to a nod is noise")
    if claimed:
        return None
    if others is None:
        others = _holds_by_others(state, persona_id, now)
    coming = [s for s in others if s.id != replacing]
    if coming:
        first = min(coming, key=lambda spend: spend.refund_at)
        what = "nodding to the latest message" if first.tier is Tier.AIZUCHI else "about to speak"
        return Refusal(
            RefusalReason.NODDED,
            f"{first.persona_id} is already {what}",
            retry_after=ledger.wait_seconds(first.refund_at, now),
        )
    return None


# A nod being written goes first, for this long: a remark claimed meanwhile would be spoken before it and leave it
# nodding at a message no longer the latest. Longer than a nod takes to write, short enough that a slow writer
# does not hold the room up.
NOD_FIRST_S = 3.0


def _nod_first(
    state: ChannelState, persona_id: str, now: float, replacing: str | None, *, others: list[Spend] | None = None
) -> Refusal | None:
    if state.priority is not None and persona_id in state.priority.persona_ids and now < state.priority.until:
        return None  # an answer does not wait for a nod to the question (that nod will be stale anyway)
    if others is None:
        others = _holds_by_others(state, persona_id, now)
    nodding = [s for s in others if s.tier is Tier.AIZUCHI and s.id != replacing and now < s.created_at + NOD_FIRST_S]
    if not nodding:
        return None
    first = min(nodding, key=lambda spend: spend.created_at)
    return Refusal(
        RefusalReason.NODDED,
        f"{first.persona_id} is nodding to the latest message; a remark waits a moment for it",
        retry_after=ledger.wait_seconds(first.created_at + NOD_FIRST_S, now),
    )


def _after_message(state: ChannelState, message: Message) -> dict[str, Any]:
    """The counters a new message moves, as fields for ``replace``."""
    fields: dict[str, Any] = {
        "last_seq": message.seq,
        "recent_said": (*state.recent_said, (message.seq, message.tier is Tier.AIZUCHI))[-RECENT_SUBSTANTIVE:],
    }
    if message.substantive:
        fields["recent_substantive"] = (*state.recent_substantive, message.seq)[-RECENT_SUBSTANTIVE:]
    if message.author_kind is AuthorKind.HUMAN:
        fields.update(bot_streak=0, last_human_seq=message.seq, last_human_at=message.created_at)
    else:
        fields["bot_streak"] = state.bot_streak + 1
    return fields


def _answered(state: ChannelState, persona_id: str, tier: Tier, based_on_seq: int | None) -> Priority | None:
    """The priority after ``persona_id`` spoke in ``tier``. Only a remark answers, and only one written after
    reading the addressing message (as its based_on_seq says): a nod, or a reply to an earlier message, must not
    give the floor away. A released claim never does either: it may have been an error, not a choice."""
    priority = state.priority
    if priority is None or persona_id not in priority.persona_ids or tier is Tier.AIZUCHI:
        return priority
    if based_on_seq is not None and based_on_seq < priority.since_seq:
        return priority
    rest = priority.persona_ids - {persona_id}
    return replace(priority, persona_ids=rest) if rest else None


def _with_spend(state: ChannelState, spend: Spend, previous: Spend | None) -> ChannelState:
    spends, claims = ledger.place(state.spends, state.claims, spend, previous)
    return replace(state, spends=spends, claims=claims)


def _post(
    state: ChannelState,
    author: Author,
    spend: Spend,
    text: str,
    now: float,
    *,
    previous: Spend | None,
    based_on_seq: int | None,
) -> tuple[ChannelState, Spend, Message]:
    message = Message(
        channel_id=state.channel_id,
        seq=state.last_seq + 1,
        author_id=author.id,
        author_kind=author.kind,
        author_name=author.name,
        text=text,
        created_at=now,
        tier=spend.tier,
        cost=spend.cost,
        spend_id=spend.id,
    )
    spend = replace(spend, message_seq=message.seq)
    spends, claims = ledger.place(state.spends, state.claims, spend, previous)
    fields = _after_message(state, message)
    priority = _answered(state, author.id, spend.tier, based_on_seq)
    next_state = replace(state, spends=spends, claims=claims, priority=priority, **fields)
    return next_state, spend, message


def consume(
    state: ChannelState,
    author: Author,
    text: str,
    now: float,
    *,
    spend_id: str,
    tier: Tier | None = None,
    amount: int | None = None,
    based_on_seq: int | None = None,
) -> Transition:
    """One step: spend and speak at once (the reference design's ``consume``)."""
    if (tier is None) == (amount is None):
        raise InvalidRequest("give exactly one of tier or amount", field="tier" if tier is None else "amount")
    if amount is not None:
        tier = tier_for_amount(state, amount)
    assert tier is not None
    rule = state.settings.tier(tier)
    cost = rule.cost if amount is None else amount
    refusal = check_turn(state, author.id, tier, cost, now, text=text, based_on_seq=based_on_seq)
    if refusal is not None:
        return Transition(state, refusal)
    spend = Spend(spend_id, author.id, tier, cost, SpendState.SPOKEN, now, now + rule.recovery_s)
    next_state, spend, message = _post(state, author, spend, text, now, previous=None, based_on_seq=based_on_seq)
    return Transition(next_state, SpeechGranted(spend, message), new_spends=(spend,), new_messages=(message,))


def claim(
    state: ChannelState,
    persona_id: str,
    tier: Tier,
    now: float,
    *,
    claim_id: str,
    based_on_seq: int | None = None,
) -> Transition:
    """Hold ``tier``'s cost before generating. A persona holds at most one claim per channel: a new one replaces it."""
    previous = state.claim_of(persona_id, now)
    replacing = previous.id if previous is not None else None
    cost = state.settings.tier(tier).cost
    refusal = check_turn(state, persona_id, tier, cost, now, based_on_seq=based_on_seq, replacing=replacing)
    if refusal is not None:
        return Transition(state, refusal)
    held = Spend(claim_id, persona_id, tier, cost, SpendState.HELD, now, now + state.settings.claim_ttl_s)
    changed: tuple[Spend, ...] = ()
    next_state = state
    if previous is not None:
        released = replace(previous, state=SpendState.RELEASED, refund_at=now)
        next_state = _with_spend(next_state, released, previous)
        changed = (released,)
    next_state = _with_spend(next_state, held, None)
    return Transition(next_state, ClaimGranted(held), new_spends=(held,), changed_spends=changed)


def _own_claim(state: ChannelState, persona_id: str, claim_id: str) -> Spend:
    spend = state.spend(claim_id)
    if spend is None:
        raise NotFound(f"no claim {claim_id} in channel {state.channel_id}", field="claim_id", code="unknown_claim")
    if spend.persona_id != persona_id:
        raise PermissionDenied(f"claim {claim_id} belongs to another persona", field="claim_id")
    return spend


def speak(
    state: ChannelState,
    author: Author,
    claim_id: str,
    text: str,
    now: float,
    *,
    tier: Tier | None = None,
    based_on_seq: int | None = None,
) -> Transition:
    """Turn a claim into a message, in its tier or a cheaper one; the difference is refunded at once. A claim the
    history was cleared under is refused as stale: what it was for is gone."""
    held = _own_claim(state, author.id, claim_id)
    if held.state is SpendState.CLEARED:
        return Transition(state, Refusal(RefusalReason.STALE, f"the history was cleared under claim {claim_id}"))
    if held.state is not SpendState.HELD:
        raise ConflictError(f"claim {claim_id} was already {held.state}", field="claim_id", code="claim_closed")
    tier = held.tier if tier is None else tier
    if tier.rank > held.tier.rank:
        raise InvalidRequest(f"claim {claim_id} is for {held.tier}; cannot speak in {tier}", field="tier")
    rule = state.settings.tier(tier)
    cost = min(rule.cost, held.cost)
    expired = not held.held(now)
    # An expired claim no longer holds anything: the turn is checked afresh, as a one-step consume would be.
    refusal = check_turn(state, author.id, tier, cost, now, text=text, based_on_seq=based_on_seq, claimed=not expired)
    if refusal is not None:
        return Transition(state, refusal)
    spoken = replace(held, tier=tier, cost=cost, state=SpendState.SPOKEN, refund_at=now + rule.recovery_s)
    next_state, spoken, message = _post(state, author, spoken, text, now, previous=held, based_on_seq=based_on_seq)
    refunded = 0 if expired else held.cost - cost
    return Transition(
        next_state, SpeechGranted(spoken, message, refunded), changed_spends=(spoken,), new_messages=(message,)
    )


def release(state: ChannelState, persona_id: str, claim_id: str, now: float) -> Transition:
    """Give a claim back (the persona passes): full refund at once. Releasing twice is harmless, and so is releasing a
    claim the history was cleared under (it was given back then).

    An addressed persona's pass is a try: its second pass gives the floor up, so the others may answer.
    """
    held = _own_claim(state, persona_id, claim_id)
    if held.state in (SpendState.RELEASED, SpendState.CLEARED):
        return Transition(state, Released(held))
    if held.state is not SpendState.HELD:
        raise ConflictError(f"claim {claim_id} was already {held.state}", field="claim_id", code="claim_closed")
    released = replace(held, state=SpendState.RELEASED, refund_at=min(held.refund_at, now))
    spends, claims = ledger.place(state.spends, state.claims, released, held)
    priority = _passed(state.priority, held, now)
    next_state = replace(state, spends=spends, claims=claims, priority=priority)
    return Transition(next_state, Released(released), changed_spends=(released,))


def _passed(priority: Priority | None, claim: Spend, now: float) -> Priority | None:
    persona_id = claim.persona_id
    if priority is None or now >= priority.until or persona_id not in priority.persona_ids:
        return priority
    if claim.created_at < priority.since_at:
        # Claimed before it was asked (a nod to what came before, say, refused as stale once the question came):
        # giving that back is no pass of the question.
        return priority
    if persona_id not in priority.tried:
        return replace(priority, tried=priority.tried | {persona_id})
    rest = priority.persona_ids - {persona_id}
    return replace(priority, persona_ids=rest, tried=priority.tried - {persona_id}) if rest else None


# --- observed messages and bookkeeping ------------------------------------------------------------------


def observe(
    state: ChannelState,
    author: Author,
    text: str,
    now: float,
    *,
    platform_message_id: str | None = None,
    addressed: tuple[str, ...] = (),
    at: float | None = None,
    images: tuple[ImageRef, ...] = (),
) -> Transition:
    """Record a message that cost nothing: a human's, or another bot's. Humans never pay.

    ``at``: when it was said, for a message recorded late (read back from the platform after a restart); never
    later than ``now``. The message keeps that time, and the floor and the human hold it gives run from it: a
    question asked twenty minutes ago gives nobody the floor now. It counts as any message does otherwise (a
    human's resets the bots' streak), since it was said after everything before it in the history.
    """
    said = now if at is None else min(at, now)
    # A persona that cannot post here cannot answer: asking it gives it no floor, and the others no wait.
    addressed = tuple(pid for pid in addressed if state.settings.policy(pid).cannot_post is None)
    message = Message(
        channel_id=state.channel_id,
        seq=state.last_seq + 1,
        author_id=author.id,
        author_kind=author.kind,
        author_name=author.name,
        text=text,
        created_at=said,
        platform_message_id=platform_message_id,
        addressed=addressed if author.kind is AuthorKind.HUMAN else (),
        images=images,
    )
    fields = _after_message(state, message)
    if author.kind is AuthorKind.HUMAN:
        fields["priority"] = _floor_after(state.priority, message, said + state.settings.priority_window_s, now)
    next_state = replace(state, **fields)
    return Transition(next_state, message, new_messages=(message,))


def _floor_after(priority: Priority | None, message: Message, until: float, now: float) -> Priority | None:
    """The floor after a human message: the personas it addresses join those still waiting to answer (asked in
    turn, they answer in turn); one that addresses nobody leaves the floor as it was."""
    live = priority if priority is not None and now < priority.until else None
    if not message.addressed or until <= now:
        return live
    asked = frozenset(message.addressed)
    if live is None:
        return Priority(asked, until, message.seq, since_at=now)
    # A persona asked again gets its tries back; an earlier question's answer may still be on its way, so the
    # floor counts from the earliest question.
    return Priority(live.persona_ids | asked, max(live.until, until), live.since_seq, live.tried - asked, live.since_at)


def stand(state: ChannelState, persona_id: str, cannot_post: str | None) -> Transition:
    """The persona says whether it can post here (``cannot_post``: why not, or None). One that cannot hands back any
    floor it has at once: the others need not wait for an answer that cannot come (and ``observe`` gives it none)."""
    policy = state.settings.policy(persona_id)
    if policy.cannot_post == cannot_post:
        return Transition(state)
    settings = state.settings.with_policy(persona_id, replace(policy, cannot_post=cannot_post))
    priority = state.priority
    if cannot_post is not None and priority is not None and persona_id in priority.persona_ids:
        rest = priority.persona_ids - {persona_id}
        priority = replace(priority, persona_ids=rest, tried=priority.tried - {persona_id}) if rest else None
    return Transition(replace(state, settings=settings, priority=priority))


def retract(state: ChannelState, persona_id: str, message: Message, now: float) -> Transition:
    """A granted message whose platform post failed: out of the history, its cost back at once."""
    if message.author_id != persona_id or message.author_kind is not AuthorKind.PERSONA:
        raise PermissionDenied(f"message {message.seq} was not written by {persona_id}", field="seq")
    if message.retracted:
        return Transition(state, message)
    if message.platform_message_id is not None:
        raise ConflictError(f"message {message.seq} was posted; it cannot be retracted", field="seq")
    retracted = replace(message, retracted=True)
    next_state = replace(
        state,
        recent_substantive=tuple(seq for seq in state.recent_substantive if seq != message.seq),
        recent_said=_without(state.recent_said, message.seq),
        bot_streak=state.bot_streak - 1
        if message.seq > state.last_human_seq and state.bot_streak > 0
        else state.bot_streak,
    )
    changed_spends: tuple[Spend, ...] = ()
    spend = state.spend(message.spend_id) if message.spend_id else None
    if spend is not None:
        refunded = replace(spend, state=SpendState.RETRACTED, refund_at=min(spend.refund_at, now))
        next_state = _with_spend(next_state, refunded, spend)
        changed_spends = (refunded,)
    return Transition(next_state, retracted, changed_spends=changed_spends, changed_messages=(retracted,))


def link_platform_id(state: ChannelState, persona_id: str, message: Message, platform_message_id: str) -> Transition:
    """Attach the platform's id to a granted message once it was posted."""
    if message.author_id != persona_id:
        raise PermissionDenied(f"message {message.seq} was not written by {persona_id}", field="seq")
    if not message.visible:
        raise ConflictError(f"message {message.seq} is no longer in the history", field="seq")
    if message.platform_message_id == platform_message_id:
        return Transition(state, message)
    if message.platform_message_id is not None:
        raise ConflictError(
            f"message {message.seq} is already linked to {message.platform_message_id}", field="platform_message_id"
        )
    linked = replace(message, platform_message_id=platform_message_id)
    return Transition(state, linked, changed_messages=(linked,))


def move_to_end(state: ChannelState, message: Message, *, platform_message_id: str, said_at: float) -> Transition:
    """Move a message granted before it was posted to the end of the history, linked to ``platform_message_id``: the
    platform shows it after messages the arbiter recorded after it (said while it was on its way, and heard late), and
    the history keeps the platform's order. It takes the next seq (and no earlier time than ``said_at``, the newest
    message's); its old place leaves the history as a deletion would (it was said: nothing is refunded); and the
    counters see it where it is now: after a person spoke, it is a bot turn since."""
    seq = state.last_seq + 1
    moved = replace(
        message, seq=seq, platform_message_id=platform_message_id, created_at=max(message.created_at, said_at)
    )
    left = replace(message, deleted=True, platform_message_id=None)
    without = replace(
        state,
        recent_substantive=tuple(s for s in state.recent_substantive if s != message.seq),
        recent_said=_without(state.recent_said, message.seq),
    )
    fields = _after_message(without, moved)
    if moved.author_kind is not AuthorKind.HUMAN:
        fields["bot_streak"] = state.bot_streak + (1 if state.last_human_seq > message.seq else 0)
    next_state = replace(without, **fields)
    changed: tuple[Spend, ...] = ()
    spend = state.spend(message.spend_id) if message.spend_id else None
    if spend is not None:
        repointed = replace(spend, message_seq=seq)
        next_state = _with_spend(next_state, repointed, spend)
        changed = (repointed,)
    return Transition(next_state, moved, changed_spends=changed, new_messages=(moved,), changed_messages=(left,))


def edit(state: ChannelState, message: Message, text: str, now: float) -> Transition:
    """A message was edited on the platform: the history shows the new text."""
    if not message.visible:
        raise ConflictError(f"message {message.seq} is no longer in the history", field="seq")
    if message.text == text:
        return Transition(state, message)
    edited = replace(message, text=text, edited_at=now)
    return Transition(state, edited, changed_messages=(edited,))


def delete(state: ChannelState, message: Message) -> Transition:
    """A message was deleted on the platform: it leaves the history. What it cost is not refunded early - the
    turn was taken - and the counters of turns stay as they were."""
    if message.deleted:
        return Transition(state, message)
    deleted = replace(message, deleted=True)
    recent = tuple(seq for seq in state.recent_substantive if seq != message.seq)
    return Transition(
        replace(state, recent_substantive=recent, recent_said=_without(state.recent_said, message.seq)),
        deleted,
        changed_messages=(deleted,),
    )


def _without(said: tuple[tuple[int, bool], ...], seq: int) -> tuple[tuple[int, bool], ...]:
    return tuple(entry for entry in said if entry[0] != seq)


def record_usage(state: ChannelState, tokens: int, now: float) -> Transition:
    day = utc_day(now)
    used = tokens + (state.tokens_used if state.tokens_day == day else 0)
    return Transition(replace(state, tokens_day=day, tokens_used=used))


def clear_history(state: ChannelState, now: float) -> Transition:
    """Forget the conversation, not the sequence: new messages keep counting up, so no seq is reused. What was
    said on the platform before ``now`` stays forgotten: a catch-up after a restart does not read it back.

    What was under way about it ends too: every live claim is closed, its cost back in the pool at once (its speech
    would answer a conversation that is gone: ``speak`` refuses it as stale), and nothing may be based on the cleared
    seqs any more (``cleared_seq``)."""
    cleared, closed = state, []
    for claim in state.claims:
        if claim.held(now):
            ended = replace(claim, state=SpendState.CLEARED, refund_at=now)
            cleared = _with_spend(cleared, ended, claim)
            closed.append(ended)
    return Transition(
        replace(
            cleared,
            bot_streak=0,
            last_human_at=None,
            priority=None,
            recent_substantive=(),
            recent_said=(),
            last_human_seq=state.last_seq,
            history_since=now,
            cleared_seq=state.last_seq,
        ),
        changed_spends=tuple(closed),
    )
