"""The turn-taking domain as frozen values.

Times are POSIX seconds (floats). The core never reads a clock: every rule takes ``now``.
"""

from __future__ import annotations

import collections.abc
import enum
import types
from dataclasses import MISSING, dataclass, field, fields, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, get_type_hints

from arbiter.core.limits import MAX_TOPIC_LENGTH, Bound

if TYPE_CHECKING:
    from collections.abc import Mapping

    from arbiter.core.images import ImageRef

__all__ = (
    "DEFAULT_TIERS",
    "RECENT_SUBSTANTIVE",
    "SETTINGS",
    "SETTING_BOUNDS",
    "TIER_SETTINGS",
    "AuthorKind",
    "ChannelSettings",
    "ChannelState",
    "Declared",
    "Memory",
    "Message",
    "PersonaInfo",
    "PersonaPolicy",
    "Priority",
    "RefusalReason",
    "Setting",
    "Spend",
    "SpendState",
    "Tier",
    "TierRule",
)


class Tier(enum.StrEnum):
    """Speaking tiers, cheapest first."""

    AIZUCHI = "aizuchi"
    REMARK = "remark"
    LONG = "long"

    @property
    def rank(self) -> int:
        return _TIER_ORDER.index(self)


_TIER_ORDER: tuple[Tier, ...] = (Tier.AIZUCHI, Tier.REMARK, Tier.LONG)


class AuthorKind(enum.StrEnum):
    HUMAN = "human"
    PERSONA = "persona"
    BOT = "bot"  # another bot in the channel that is not one of ours


class SpendState(enum.StrEnum):
    HELD = "held"  # a claim: the cost is held until speak, release or expiry
    SPOKEN = "spoken"
    RELEASED = "released"
    RETRACTED = "retracted"  # granted, but the platform post failed
    CLEARED = "cleared"  # a claim closed when the history was cleared: refunded, and its speech refused as stale


class RefusalReason(enum.StrEnum):
    INSUFFICIENT = "insufficient"
    PAUSED = "paused"
    MUTED = "muted"
    NOT_ENABLED = "not_enabled"
    TOO_LONG = "too_long"
    STALE = "stale"
    IDLE_CAP = "idle_cap"
    BUDGET = "budget"
    PRIORITY = "priority"
    NODDED = "nodded"  # the latest message has its nod (given, or about to be): one per message


@dataclass(frozen=True, slots=True)
class Setting:
    """A channel setting's declaration beside its name, type and default: its bounds (a number), its longest
    length (text) and a line for people. Everything that lists, checks, stores or shows settings is derived from
    these declarations (``SETTINGS``, ``TIER_SETTINGS``), so a setting is added in one place: here (plus its column)."""

    doc: str
    bound: Bound | None = None
    longest: int | None = None


def _setting(
    default: Any = MISSING, *, doc: str, low: float | None = None, high: float | None = None, longest: int | None = None
) -> Any:
    bound = None if low is None or high is None else Bound(low, high)
    return field(default=default, metadata={"setting": Setting(doc, bound, longest)})


@dataclass(frozen=True, slots=True)
class TierRule:
    cost: int = _setting(doc="what a turn in this tier takes from the pool", low=1, high=1_000_000)
    # Display columns: CJK characters count 2, see core.text. At most Discord's message limit.
    max_length: int = _setting(doc="the longest text of this tier, in display columns", low=1, high=2_000)
    recovery_s: float = _setting(doc="seconds until a turn's cost comes back to the pool", low=0, high=3_600)


DEFAULT_TIERS: Mapping[Tier, TierRule] = MappingProxyType(
    {
        # The reference design allowed 10/50/100 Japanese characters; in display columns that is
        # 20/100/200. English needs a little more room per thought, hence 24/120/240.
        Tier.AIZUCHI: TierRule(cost=5, max_length=24, recovery_s=5.0),
        Tier.REMARK: TierRule(cost=60, max_length=120, recovery_s=5.0),
        Tier.LONG: TierRule(cost=80, max_length=240, recovery_s=5.0),
    }
)

# How many recent substantive messages a channel remembers for the staleness rule.
RECENT_SUBSTANTIVE = 16


@dataclass(frozen=True, slots=True)
class PersonaPolicy:
    enabled: bool = True
    muted: bool = False
    # Not a moderator's choice: why the persona said it cannot post here (a permission its account lacks), or None.
    # Kept with the policy so that moderators see it where they see the rest of the persona's standing.
    cannot_post: str | None = None


_ENABLED = PersonaPolicy()
_DISABLED = PersonaPolicy(enabled=False)


@dataclass(frozen=True, slots=True)
class ChannelSettings:
    capacity: int = _setting(100, doc="the pool's size", low=1, high=1_000_000)
    tiers: Mapping[Tier, TierRule] = field(default_factory=lambda: DEFAULT_TIERS)
    enabled: bool = _setting(True, doc="whether the fleet takes part in this channel")
    paused: bool = _setting(False, doc="whether the personas hold back for now")
    idle_cap: int = _setting(12, doc="bot turns in a row without a human before the bots stop", low=1, high=1_000)
    daily_token_budget: int | None = _setting(
        500_000, doc="LLM tokens the personas may use here per UTC day; null for no budget", low=0, high=10_000_000_000
    )
    topic: str = _setting("", doc="what the channel is about, for the personas", longest=MAX_TOPIC_LENGTH)
    claim_ttl_s: float = _setting(30.0, doc="seconds a claim holds its cost before it lapses", low=1, high=600)
    priority_window_s: float = _setting(
        20.0, doc="seconds an addressed persona has the floor to answer", low=0, high=600
    )
    human_hold_s: float = _setting(0.0, doc="seconds a human message holds the bots to nods", low=0, high=120)
    stale_tolerance: int = _setting(
        1, doc="remarks or human messages that may follow the one a remark answers before it is stale", low=0, high=15
    )
    personas_enabled_by_default: bool = _setting(True, doc="whether a persona takes part here unless disabled")
    personas: Mapping[str, PersonaPolicy] = field(default_factory=dict)

    def tier(self, tier: Tier) -> TierRule:
        return self.tiers[tier]

    def policy(self, persona_id: str) -> PersonaPolicy:
        found = self.personas.get(persona_id)
        if found is not None:
            return found
        # Frozen, so shared: asked at every status, for personas that mostly have no policy of their own.
        return _ENABLED if self.personas_enabled_by_default else _DISABLED

    def with_policy(self, persona_id: str, policy: PersonaPolicy) -> ChannelSettings:
        return replace(self, personas={**self.personas, persona_id: policy})


@dataclass(frozen=True, slots=True)
class Spend:
    """One entry of the spend ledger. A claim is a spend in state HELD whose refund time is its expiry."""

    id: str
    persona_id: str
    tier: Tier
    cost: int
    state: SpendState
    created_at: float
    refund_at: float
    message_seq: int | None = None

    def active(self, now: float) -> bool:
        return self.refund_at > now

    def held(self, now: float) -> bool:
        return self.state is SpendState.HELD and self.refund_at > now


@dataclass(frozen=True, slots=True)
class Message:
    channel_id: str
    seq: int
    author_id: str
    author_kind: AuthorKind
    author_name: str
    text: str
    created_at: float
    tier: Tier | None = None
    cost: int = 0
    platform_message_id: str | None = None
    spend_id: str | None = None
    retracted: bool = False
    addressed: tuple[str, ...] = ()
    deleted: bool = False  # removed on the platform
    edited_at: float | None = None
    images: tuple[ImageRef, ...] = ()  # shown with it (a human's or another bot's), as references

    @property
    def visible(self) -> bool:
        """Part of the conversation: neither retracted (its post failed) nor deleted on the platform."""
        return not (self.retracted or self.deleted)

    @property
    def substantive(self) -> bool:
        """Human messages and remarks move the conversation; nods do not."""
        return self.author_kind is AuthorKind.HUMAN or (self.tier is not None and self.tier is not Tier.AIZUCHI)


@dataclass(frozen=True, slots=True)
class PersonaInfo:
    """How a persona registered with the arbiter."""

    id: str
    display_name: str
    aliases: tuple[str, ...] = ()
    color: str | None = None
    platform_user_id: str | None = None  # its account on the chat platform (a Discord user id)
    cannot_speak: str | None = None  # why it cannot speak anywhere (its model refused its key)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.display_name, *self.aliases)


@dataclass(frozen=True, slots=True)
class Memory:
    """A persona's dialogue state in a channel. The core does not read the state itself (the personas write it,
    the API checks its shape); it only keeps the newest: ``seq`` is the last message it takes into account."""

    channel_id: str
    persona_id: str
    seq: int
    state: Mapping[str, object]
    updated_at: float


@dataclass(frozen=True, slots=True)
class Priority:
    """Personas addressed by a human message: the others wait (not even a nod) until they answer, give the floor
    up, or ``until`` passes. A pass (a released claim) is one try: an addressed persona that passes a second
    time gives its floor up. A claim granted before the floor was given is no try: it was not made to answer."""

    persona_ids: frozenset[str]
    until: float
    since_seq: int = 0  # the addressing message: only a reply written after reading it answers it
    tried: frozenset[str] = frozenset()  # addressed personas that passed once
    since_at: float = 0.0  # when the floor was given (recorded, not said): claims granted before are no tries


@dataclass(frozen=True, slots=True)
class ChannelState:
    channel_id: str
    settings: ChannelSettings = field(default_factory=ChannelSettings)
    # The active spends, sorted by refund_at, and the claims (see core.ledger); plus any spend an operation
    # asked for by id.
    spends: tuple[Spend, ...] = ()
    claims: tuple[Spend, ...] = ()
    last_seq: int = 0
    bot_streak: int = 0  # bot messages since the last human message
    last_human_seq: int = 0
    last_human_at: float | None = None
    priority: Priority | None = None
    recent_substantive: tuple[int, ...] = ()  # seqs, oldest first, at most RECENT_SUBSTANTIVE
    # The last RECENT_SUBSTANTIVE messages still in the history, oldest first, as (seq, whether it is a nod): what
    # a nod answers, and whether the latest message already is one (one nod per message).
    recent_said: tuple[tuple[int, bool], ...] = ()
    tokens_day: int = 0  # proleptic ordinal of the UTC day tokens_used belongs to
    tokens_used: int = 0
    # When the fleet was last enabled here or the history cleared: what was said on the platform before then is
    # not part of the history, so a catch-up after a restart reads nothing older. None: no such moment is known.
    history_since: float | None = None
    # The last seq of the history cleared last (0: never cleared). What was said up to it is gone: nothing may be based
    # on it any more (a remark written against it, notes taking it in).
    cleared_seq: int = 0

    @property
    def latest_is_nod(self) -> bool:
        return bool(self.recent_said) and self.recent_said[-1][1]

    def said_after(self, seq: int) -> int:
        """How many messages still in the history came after ``seq`` (counting back RECENT_SUBSTANTIVE at most)."""
        return sum(1 for said, _nod in self.recent_said if said > seq)

    def spend(self, spend_id: str) -> Spend | None:
        for claim in self.claims:
            if claim.id == spend_id:
                return claim
        return next((spend for spend in self.spends if spend.id == spend_id), None)

    def claim_of(self, persona_id: str, now: float) -> Spend | None:
        """The persona's live claim here, if any."""
        return next((c for c in self.claims if c.persona_id == persona_id and c.refund_at > now), None)


@dataclass(frozen=True, slots=True)
class Declared:
    """One declared setting: its name, its value's type (int, float, bool or str), whether null is allowed, and
    its declaration."""

    name: str
    kind: type
    nullable: bool
    setting: Setting


def _declared(cls: type) -> tuple[Declared, ...]:
    hints = get_type_hints(cls, localns={"Mapping": collections.abc.Mapping})
    declared = []
    for found in fields(cls):
        if "setting" not in found.metadata:
            continue
        hint = hints[found.name]
        kinds = [kind for kind in getattr(hint, "__args__", ()) if kind is not types.NoneType] or [hint]
        nullable = isinstance(hint, types.UnionType)
        declared.append(Declared(found.name, kinds[0], nullable, found.metadata["setting"]))
    return tuple(declared)


SETTINGS: tuple[Declared, ...] = _declared(ChannelSettings)
"""The channel's scalar settings (all but ``tiers`` and ``personas``), in their declaration order."""
TIER_SETTINGS: tuple[Declared, ...] = _declared(TierRule)
"""Each tier's settings."""
SETTING_BOUNDS: Mapping[str, Bound] = MappingProxyType(
    {d.name: d.setting.bound for d in (*SETTINGS, *TIER_SETTINGS) if d.setting.bound is not None}
)
