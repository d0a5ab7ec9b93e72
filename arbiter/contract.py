"""The HTTP API's wire models: what goes over the wire, in and out. No I/O.

The persona runtime (``bots``) imports this module and nothing else from ``arbiter``. The OpenAPI document
is generated from these models, so the documentation cannot drift from the code.

Times are POSIX seconds (``*_at``); durations are seconds (``*_s``, ``retry_after``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from arbiter.core.limits import ID_PATTERN, LIMITS, MAX_NAME_LENGTH, MAX_SEQ, MAX_TEXT_LENGTH, MAX_TOPIC_LENGTH
from arbiter.core.models import SETTING_BOUNDS, SETTINGS, TIER_SETTINGS, AuthorKind, RefusalReason, SpendState, Tier

if TYPE_CHECKING:
    from collections.abc import Callable

# How lengths are measured is part of the contract (a tier's max_length is in these units), so clients get the
# very functions the arbiter checks with.
from arbiter.core.text import display_length, estimate_tokens, trim_to_length
from arbiter.core.usage import DEFAULT_READ_RATE, DEFAULT_WRITE_RATE

__all__ = (
    "DISCORD_SPEECH_TYPES",
    "EVENT_MODELS",
    "FROM_THE_ARBITER",
    "MAX_MEMORY_TOKENS",
    "MAX_OWN_LINES",
    "MAX_RECENT",
    "Amount",
    "ArbiterEvent",
    "AuthorKind",
    "ChannelList",
    "ChannelSummary",
    "ClaimEvent",
    "ClaimRequest",
    "ClaimResult",
    "ClaimView",
    "ClearedEvent",
    "Color",
    "ConsumeRequest",
    "DeletedEvent",
    "DialogueState",
    "EditRequest",
    "EditedEvent",
    "EndedEvent",
    "ErrorBody",
    "ErrorDetail",
    "EventType",
    "Health",
    "HistoryPage",
    "Id",
    "LevelEvent",
    "LinkRequest",
    "MemberKind",
    "MemoryEvent",
    "MemoryList",
    "MemoryUpdate",
    "MemoryView",
    "MessageEvent",
    "MessageView",
    "Name",
    "ObserveResult",
    "ObservedMessage",
    "PersonaInfoView",
    "PersonaList",
    "PersonaPolicyPatch",
    "PersonaRegistration",
    "PersonaUsageView",
    "PersonaView",
    "RefundView",
    "RefusalReason",
    "ReleaseRequest",
    "ReleaseResult",
    "ReplyEvent",
    "RetractResult",
    "RetractedEvent",
    "Seq",
    "SettingsEvent",
    "SettingsPatch",
    "SettingsView",
    "SpeakRequest",
    "SpeakResult",
    "SpeakerNote",
    "SpendState",
    "StandingReport",
    "StatusAsk",
    "StatusEvent",
    "StatusView",
    "StreamCall",
    "StreamCommand",
    "StreamFrame",
    "Subscribe",
    "Text",
    "Tier",
    "TierPatch",
    "TierSettings",
    "TierView",
    "Token",
    "UsageList",
    "UsageReport",
    "UsageResult",
    "Verdict",
    "display_length",
    "estimate_tokens",
    "memory_tokens",
    "parse_event",
    "parse_stream_frame",
    "trim_to_length",
)


DISCORD_SPEECH_TYPES = frozenset({0, 19, 20, 23})
"""The Discord message types that are somebody speaking: a message (0), a reply (19), and a bot's answer to a slash
command or a context menu (20, 23). The arbiter records only these, and only these are answered; every other type is
a notice Discord writes itself when something happens (a pin, a member joining, a thread created, a boost, a call, a
channel renamed, a thread's starter message, a poll's result...). Part of the contract because the personas' own
accounts see the channel's messages too, and wait for the arbiter to have recorded the same ones."""


def _whole_number(value: Any) -> Any:
    # JSON has one kind of number, and JSON Schema (so the OpenAPI document) counts 5.0 as the integer 5: clients
    # that write every number with a point must be understood. A fraction, a string or a boolean stays an error.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _bounded(name: str, kind: Any = None) -> Any:
    """A number in a request, within its bounds (a setting's declared ones, else LIMITS). An integer (``kind``
    None) is strict (no strings, no booleans) but for a whole number written as 5.0; bounded, none reaches the
    database larger than it can store. The bounds come before the conversion, so that the JSON schema shows them as
    its minimum and maximum."""
    bound = SETTING_BOUNDS.get(name) or LIMITS[name]
    if kind is None:
        return Annotated[StrictInt, Field(ge=bound.low, le=bound.high), BeforeValidator(_whole_number)]
    return Annotated[kind, Field(ge=bound.low, le=bound.high)]


class _NoNul:
    """No NUL character (U+0000) in a string: PostgreSQL cannot store one in text, so it must be refused at the
    door, naming the field, rather than fail the write.

    Every free-form string of the wire models carries this; the patterned ones (ids, colours) exclude NUL by their
    pattern. The JSON schema says so too, so clients generated from the OpenAPI document know."""

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(_refuse_nul, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        json_schema = handler(schema)
        json_schema["pattern"] = NO_NUL_PATTERN
        return json_schema


NO_NUL_PATTERN = r"^[^\u0000]*$"


def _refuse_nul(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("nul_character", "must not contain the NUL character (U+0000)")
    return value


NoNul = _NoNul()

Id = Annotated[str, StringConstraints(pattern=ID_PATTERN)]
Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT_LENGTH), NoNul]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_NAME_LENGTH), NoNul]
# A history position: stored as a 64-bit integer, so anything larger is refused here rather than by the database.
Seq = Annotated[StrictInt, Field(ge=0, le=MAX_SEQ), BeforeValidator(_whole_number)]
PlatformId = Annotated[str, StringConstraints(min_length=1, max_length=64), NoNul]
# What a consume may spend: it buys the most expensive tier it covers.
Amount = Annotated[StrictInt, Field(gt=0, le=SETTING_BOUNDS["capacity"].high), BeforeValidator(_whole_number)]


def _not_nullable(schema: dict[str, Any]) -> None:
    """Make ``X | None``'s JSON schema plain ``X``: for a field that may be left out but never sent as null."""
    options = schema.pop("anyOf", None)
    if options is not None:
        [kept] = [option for option in options if option != {"type": "null"}]
        schema.update(kept)
    schema.pop("default", None)


def absent() -> Any:
    """The default of a patch field that may be left out (None, to Python) but not sent as null (the validators
    refuse it): the JSON schema must not offer null, or clients generated from it would send it."""
    return Field(None, json_schema_extra=_not_nullable)


def _describe(declared: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    """A JSON schema hook giving each setting the line its declaration has (``arbiter.core.models.SETTINGS``)."""
    docs = {d.name: d.setting.doc for d in declared}

    def describe(schema: dict[str, Any]) -> None:
        for name, prop in schema.get("properties", {}).items():
            if name in docs:
                prop.setdefault("description", docs[name])

    return describe


class _In(BaseModel):
    """Requests: strict types, unknown fields rejected, so a typo is an error and not a silent no-op."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


# --- memory: a persona's dialogue state ----------------------------------------------------------------
# Each persona keeps, per channel, what it knows of the conversation from its own point of view (after the
# multi-agent dialogue-state tracking paper this project follows): an overall state and a short note per speaker.
# Its one decision call returns the state updated with the messages since; the arbiter stores it with the speech
# or the release that ends the turn. A cap in tokens keeps every prompt the same size however long the talk runs.

MAX_MEMORY_TOKENS = 400
"""The most a dialogue state may take, in tokens as ``estimate_tokens`` counts them."""

MAX_OWN_LINES = 100
"""The most of its own last lines a persona may ask to have with a claim (``ClaimRequest.own_lines``)."""

MAX_MEMORY_ITEMS = 8  # open questions, or things agreed
MAX_MEMORY_SPEAKERS = 12
_MEMORY_LINE = 300  # characters of one item or note

FROM_THE_ARBITER: dict[str, bool] = {"from_the_arbiter": True}
"""Validation context for what the arbiter sends (stream frames, notes stored): a dialogue state in it was checked
against ``MAX_MEMORY_TOKENS`` when it came in, and is not counted again on each read."""

MemoryLine = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=_MEMORY_LINE), NoNul]


class SpeakerNote(_In):
    """What one speaker (a person or a persona) cares about and said they would do, as the persona sees it."""

    name: Name
    note: MemoryLine


class DialogueState(_In):
    """A persona's notes on a channel's conversation: what it is about now, the questions still open, what was
    agreed, and a short note per speaker. Bounded item by item and, as a whole, by ``MAX_MEMORY_TOKENS``."""

    topic: Annotated[str, StringConstraints(strip_whitespace=True, max_length=_MEMORY_LINE), NoNul] = ""
    open_questions: list[MemoryLine] = Field(default_factory=list, max_length=MAX_MEMORY_ITEMS)
    agreed: list[MemoryLine] = Field(default_factory=list, max_length=MAX_MEMORY_ITEMS)
    speakers: list[SpeakerNote] = Field(default_factory=list, max_length=MAX_MEMORY_SPEAKERS)

    @model_validator(mode="after")
    def _within_the_cap(self, info: ValidationInfo) -> DialogueState:
        if info.context is FROM_THE_ARBITER:
            return self  # checked when it came in; a persona reads its notes back far more often than it writes them
        tokens = memory_tokens(self)
        if tokens > MAX_MEMORY_TOKENS:
            raise PydanticCustomError(
                "memory_too_large",
                "the state takes about {tokens} tokens, more than the cap of {cap}: drop what is stale",
                {"tokens": tokens, "cap": MAX_MEMORY_TOKENS},
            )
        return self


def memory_tokens(state: DialogueState) -> int:
    """About how many tokens the state takes in a prompt (each part as its text, with a little for its framing)."""
    parts = [state.topic, *state.open_questions, *state.agreed]
    parts += [f"{speaker.name}: {speaker.note}" for speaker in state.speakers]
    return sum(estimate_tokens(part) + 2 for part in parts if part)


class MemoryUpdate(_In):
    """A persona's new dialogue state, and the last history seq it takes into account."""

    seq: Seq = Field(description="the newest message the state takes into account")
    state: DialogueState


# --- requests -------------------------------------------------------------------------------------------


class ConsumeRequest(_In):
    """Spend and speak in one step. Give a tier, or an amount (it buys the most expensive tier it covers)."""

    # The rules refuse both or neither (arbiter.core.rules); the document says so, for generated clients.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["tier"], "properties": {"tier": {"not": {"type": "null"}}}},
                {"required": ["amount"], "properties": {"amount": {"not": {"type": "null"}}}},
            ]
        }
    )

    text: Text
    tier: Tier | None = None
    amount: Amount | None = None
    based_on_seq: Seq | None = Field(None, description="the last history seq the text was written against")
    persona: Id | None = Field(None, description="optional; must be the token's own persona")


class ClaimRequest(_In):
    """Hold a tier's cost before generating."""

    tier: Tier
    based_on_seq: Seq | None = None
    persona: Id | None = None
    notes: StrictBool = Field(
        False,
        description="with a granted claim, also the persona's notes on this channel (``memory``): a persona reads"
        " them once, before its first generation there",
    )
    own_lines: Annotated[StrictInt, Field(ge=0, le=MAX_OWN_LINES), BeforeValidator(_whole_number)] = Field(
        0,
        description="with a granted claim, also the persona's own last lines here, up to this many (``own_lines``):"
        " what it must not say again, however much others said since. A persona reads them once, with ``notes``",
    )


class SpeakRequest(_In):
    """Speak on a claim, in its tier or a cheaper one."""

    text: Text
    tier: Tier | None = Field(None, description="defaults to the claim's tier")
    based_on_seq: Seq | None = None
    persona: Id | None = None
    memory: MemoryUpdate | None = Field(None, description="the persona's dialogue state, stored if it speaks")


class ReleaseRequest(_In):
    """Give a claim back (a pass). The body is optional."""

    memory: MemoryUpdate | None = Field(None, description="the persona's dialogue state, stored with the release")


# Patterned: no NUL (see NoNul), and an address a model provider can fetch.
ImageUrl = Annotated[str, StringConstraints(max_length=2048, pattern=r"^https?://[^\u0000]+$")]
_Count = Annotated[StrictInt, Field(ge=0, le=2**31), BeforeValidator(_whole_number)]
ImageType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


class ObservedImage(_In):
    """An image shown with a message, as a reference (see ``arbiter.core.images``)."""

    url: ImageUrl
    content_type: ImageType = Field(description="a media type both model providers take")
    size: _Count | None = Field(None, description="bytes, when known")
    width: _Count | None = None
    height: _Count | None = None
    expires_at: StrictFloat | StrictInt | None = Field(None, description="Unix time the url stops answering")


class ObservedMessage(_In):
    """A message seen on the platform (a human's, or another bot's). Idempotent by platform_message_id."""

    author_id: Id
    author_name: Name
    author_kind: AuthorKind = AuthorKind.HUMAN
    text: Text
    platform_message_id: PlatformId | None = None
    mentions: list[Id] = Field(default_factory=list, max_length=50, description="persona ids @mentioned")
    images: list[ObservedImage] = Field(
        default_factory=list, max_length=10, description="images shown with it (kept within the arbiter's bounds)"
    )


class LinkRequest(_In):
    platform_message_id: PlatformId


class EditRequest(_In):
    """A message's new text after it was edited on the platform."""

    text: Text


class UsageReport(_In):
    """One LLM call's tokens. ``prompt_tokens`` is every input token; of them, ``cache_read_tokens`` were read from
    the provider's prompt cache and ``cache_write_tokens`` written to it, which the daily budget counts at their own
    prices: ``cache_read_rate`` and ``cache_write_rate`` times an uncached input token's."""

    prompt_tokens: _bounded("tokens")  # type: ignore[valid-type]
    completion_tokens: _bounded("tokens")  # type: ignore[valid-type]
    model: Annotated[str, StringConstraints(max_length=100), NoNul] | None = None
    persona: Id | None = None
    cache_read_tokens: _bounded("tokens") = 0  # type: ignore[valid-type]
    cache_write_tokens: _bounded("tokens") = 0  # type: ignore[valid-type]
    cache_read_rate: Annotated[StrictFloat, Field(ge=0, le=1)] = Field(
        DEFAULT_READ_RATE, description="a cached input token's price as a share of an uncached one's"
    )
    cache_write_rate: Annotated[StrictFloat, Field(ge=1, le=4)] = Field(
        DEFAULT_WRITE_RATE, description="a token written to the cache: its price as a multiple of an uncached one's"
    )


Color = Annotated[str, StringConstraints(pattern=r"^#[0-9a-fA-F]{6}$")]


Reason = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=300), NoNul]


class PersonaRegistration(_In):
    """How a persona presents itself: names people may call it by, its colour, its account on the platform; and,
    when it cannot speak anywhere, why."""

    display_name: Name
    aliases: list[Name] = Field(default_factory=list, max_length=10)
    color: Color | None = Field(None, description="its colour in the local room, #rrggbb")
    platform_user_id: PlatformId | None = Field(
        None, description="its account on the chat platform, e.g. a Discord user id"
    )
    cannot_speak: Reason | None = Field(
        None,
        description="why it cannot speak anywhere until it is restarted (its model refused its key), or null;"
        " nobody's message addresses it meanwhile",
    )


def _not_null(value: Any, info: ValidationInfo) -> Any:
    # In a patch, a field left out keeps its value; null is not a way to say that, and would silently do nothing.
    if value is None:
        raise ValueError(f"{info.field_name} cannot be null; leave it out to keep the current value")
    return value


class TierPatch(_In):
    model_config = ConfigDict(json_schema_extra=_describe(TIER_SETTINGS))

    cost: _bounded("cost") | None = absent()  # type: ignore[valid-type]
    max_length: _bounded("max_length") | None = absent()  # type: ignore[valid-type]
    recovery_s: _bounded("recovery_s", StrictFloat) | None = absent()  # type: ignore[valid-type]

    _present = field_validator("*", mode="before")(_not_null)


class SettingsPatch(_In):
    """Change some settings; fields left out stay as they are. The whole result is checked before it is saved."""

    model_config = ConfigDict(json_schema_extra=_describe(SETTINGS))

    capacity: _bounded("capacity") | None = absent()  # type: ignore[valid-type]
    tiers: dict[Tier, TierPatch] | None = absent()
    enabled: StrictBool | None = absent()
    paused: StrictBool | None = absent()
    idle_cap: _bounded("idle_cap") | None = absent()  # type: ignore[valid-type]
    daily_token_budget: _bounded("daily_token_budget") | None = Field(  # type: ignore[valid-type]
        None, description="null for no budget"
    )
    topic: Annotated[str, StringConstraints(strip_whitespace=True, max_length=MAX_TOPIC_LENGTH), NoNul] | None = (
        absent()
    )
    claim_ttl_s: _bounded("claim_ttl_s", StrictFloat) | None = absent()  # type: ignore[valid-type]
    priority_window_s: _bounded("priority_window_s", StrictFloat) | None = absent()  # type: ignore[valid-type]
    human_hold_s: _bounded("human_hold_s", StrictFloat) | None = absent()  # type: ignore[valid-type]
    stale_tolerance: _bounded("stale_tolerance") | None = absent()  # type: ignore[valid-type]
    personas_enabled_by_default: StrictBool | None = absent()

    @field_validator("*", mode="before")
    @classmethod
    def _present(cls, value: Any, info: ValidationInfo) -> Any:
        return value if info.field_name == "daily_token_budget" else _not_null(value, info)

    def changes(self) -> dict[str, Any]:
        """The fields the caller set (an explicit null budget means "no budget")."""
        changes = self.model_dump(include=self.model_fields_set, exclude_none=False)
        if "tiers" in changes and changes["tiers"] is not None:
            changes["tiers"] = {
                str(tier): patch.model_dump(exclude_none=True) for tier, patch in (self.tiers or {}).items()
            }
        return {key: value for key, value in changes.items() if value is not None or key == "daily_token_budget"}


class PersonaPolicyPatch(_In):
    enabled: StrictBool | None = absent()
    muted: StrictBool | None = absent()

    _present = field_validator("*", mode="before")(_not_null)


# --- responses ------------------------------------------------------------------------------------------


class ImageView(_Out):
    """An image shown with a message: a reference, never the bytes. ``expires_at``: when the url stops answering
    (Discord's signed attachment addresses expire); a persona skips an image past it. ``local``: the arbiter holds
    the bytes at ``url`` (an image given to the local room), an address no model provider can reach, so a persona
    fetches them and sends them inline."""

    url: str
    content_type: str
    size: int | None = None
    width: int | None = None
    height: int | None = None
    expires_at: float | None = None
    local: bool = False


class MessageView(_Out):
    seq: int
    author_id: str
    author_kind: AuthorKind
    author_name: str
    text: str
    at: float
    tier: Tier | None = None
    cost: int = 0
    platform_message_id: str | None = None
    addressed: list[str] = Field(default_factory=list)
    images: list[ImageView] = Field(default_factory=list)


class ClaimView(_Out):
    claim_id: str
    persona: str
    tier: Tier
    cost: int
    state: SpendState
    expires_at: float | None = Field(None, description="while held: when the claim lapses")


class Verdict(_Out):
    """Every spending call answers with a verdict: granted, or refused with a reason. Refusals are not errors."""

    granted: bool
    level: int = Field(description="the pool's level after this call")
    capacity: int
    reason: RefusalReason | None = None
    detail: str | None = None
    retry_after: float | None = Field(None, description="seconds until trying again could succeed")


class ClaimResult(Verdict):
    claim: ClaimView | None = None
    status: StatusView | None = Field(
        None, description="on a refusal, the persona's status after it: what to plan its next look from"
    )
    memory: MemoryView | None = Field(
        None, description="granted and asked with notes: the persona's notes here (null when it has none yet)"
    )
    own_lines: list[MessageView] | None = Field(
        None,
        description="granted and asked for them: the persona's own last lines here, oldest first (deleted ones"
        " included: said once, they are no better to say again)",
    )


class SpeakResult(Verdict):
    message: MessageView | None = None
    refunded: int = Field(0, description="cost given back at once by speaking in a cheaper tier")


class ReleaseResult(Verdict):
    claim: ClaimView


class RetractResult(_Out):
    seq: int
    refunded: int
    level: int


class ObserveResult(_Out):
    seq: int
    created: bool = Field(description="false when this platform message was already recorded")


class UsageResult(_Out):
    tokens_today: int
    daily_token_budget: int | None


class PersonaUsageView(_Out):
    """One persona's LLM tokens in a channel today, as it reported them."""

    persona: str
    requests: int
    prompt_tokens: int = Field(description="every input token, the cache's included")
    completion_tokens: int
    cache_read_tokens: int = Field(description="input tokens the provider read from its prompt cache")
    cache_write_tokens: int = Field(description="input tokens the provider wrote to its prompt cache")


class UsageList(_Out):
    """The channel's LLM tokens today (UTC), per persona."""

    channel_id: str
    personas: list[PersonaUsageView]


class TierSettings(_Out):
    model_config = ConfigDict(json_schema_extra=_describe(TIER_SETTINGS))

    cost: int
    max_length: int = Field(description="display columns: CJK characters count 2")
    recovery_s: float


class TierView(TierSettings):
    affordable: bool = Field(description="whether the pool holds this tier's cost now")
    # The arbiter's own verdict (the rules a claim is checked by), for the persona whose token read the status:
    # personas plan from it instead of keeping a copy of the rules.
    may_claim: bool | None = Field(
        None, description="whether a claim of this tier by the caller would be granted now; null without a persona"
    )
    reason: RefusalReason | None = Field(None, description="why a claim would be refused now")
    detail: str | None = Field(None, description="the refusal in words")
    retry_after: float | None = Field(None, description="seconds until trying again could succeed, when waiting helps")


class RefundView(_Out):
    at: float
    amount: int


class PersonaView(_Out):
    enabled: bool
    muted: bool
    display_name: str | None = None
    cannot_post: str | None = Field(
        None, description="why the persona said it cannot post here (a permission its account lacks), or null"
    )


class StandingReport(_In):
    """A persona says whether it can post in the channel: one that cannot is given no floor, and hands back any it
    has at once."""

    cannot_post: (
        Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200), NoNul] | None
    ) = Field(None, description="why it cannot post here (null: it can)")


class StatusView(_Out):
    channel_id: str
    now: float
    level: int
    capacity: int
    enabled: bool
    paused: bool
    topic: str
    tiers: dict[Tier, TierView]
    refunds: list[RefundView]
    bot_streak: int
    idle_cap: int
    priority: list[str] = Field(default_factory=list, description="personas addressed and not yet answered")
    priority_until: float | None = None
    tokens_today: int
    daily_token_budget: int | None
    last_seq: int
    stale_tolerance: int = Field(
        1, description="how many remarks or human messages may come after the one a remark answers before it is stale"
    )
    claims_held: dict[Tier, int] = Field(
        default_factory=dict, description="live claims in the channel by tier: who is about to speak, and how much"
    )
    you: PersonaView | None = Field(None, description="the calling persona's standing here")
    claim: ClaimView | None = Field(None, description="the calling persona's held claim, if any")


class HistoryPage(_Out):
    channel_id: str
    messages: list[MessageView]
    next_after: int = Field(description="pass as ?after= for the next page")
    has_more: bool


class SettingsView(_Out):
    model_config = ConfigDict(json_schema_extra=_describe(SETTINGS))

    channel_id: str
    capacity: int
    tiers: dict[Tier, TierSettings]
    enabled: bool
    paused: bool
    idle_cap: int
    daily_token_budget: int | None
    topic: str
    claim_ttl_s: float
    priority_window_s: float
    human_hold_s: float
    stale_tolerance: int
    personas_enabled_by_default: bool
    personas: dict[str, PersonaView]


MemberKind: TypeAlias = Literal["persona", "agent"]
"""A persona of the fleet, or an external agent (an MCP client with a token of its own)."""


class PersonaInfoView(_Out):
    id: str
    kind: MemberKind = Field("persona", description="a persona of the fleet, or an external agent (MCP)")
    display_name: str
    aliases: list[str] = Field(default_factory=list)
    color: str | None = None
    platform_user_id: str | None = None
    cannot_speak: str | None = Field(None, description="why it cannot speak anywhere (as it registered), or null")


class PersonaList(_Out):
    personas: list[PersonaInfoView]


class MemoryView(_Out):
    """A persona's dialogue state in a channel, and the last history seq it takes into account."""

    channel_id: str
    persona: str
    seq: int
    state: DialogueState
    updated_at: float


class MemoryList(_Out):
    memories: list[MemoryView]


class ChannelSummary(_Out):
    channel_id: str
    enabled: bool
    last_seq: int


class ChannelList(_Out):
    channels: list[ChannelSummary]


class ErrorDetail(_Out):
    code: str
    message: str
    field: str | None = None


class ErrorBody(_Out):
    error: ErrorDetail


class Health(_Out):
    """The arbiter is up and answering."""

    ok: bool = True


# --- events (the event stream) ---------------------------------------------------------------------------
# Each frame of GET /v1/channels/{channel_id}/events is one of these, told apart by ``type``. The arbiter builds
# every event it sends from these models and clients parse every frame into them (``parse_event``), so both ends
# agree on the shapes by construction.


class MessageEvent(_Out):
    """A message was said; or, on a stream opened with ?after=, one said after that seq, replayed from the history."""

    type: Literal["message"] = "message"
    channel_id: str
    message: MessageView


class LevelEvent(_Out):
    """The pool's level: first on every stream (right after any replay), then whenever it changes."""

    type: Literal["level"] = "level"
    channel_id: str
    level: int
    capacity: int
    at: float
    next_refund_at: float | None = Field(None, description="when the next spend comes back, if one is out")
    refunds: list[RefundView] = Field(
        default_factory=list,
        description="the next refunds, as a status lists them: the level at any moment until the next level event",
    )


class ClaimEvent(_Out):
    """A claim was made, or settled: spoken, released (a pass) or retracted (see ``claim.state``)."""

    type: Literal["claim"] = "claim"
    channel_id: str
    claim: ClaimView


class RetractedEvent(_Out):
    """A persona took back message ``seq`` (its post failed): it is no longer part of the conversation."""

    type: Literal["retracted"] = "retracted"
    channel_id: str
    seq: int


class EditedEvent(_Out):
    """A message was edited on the platform: ``message`` is the message with its new text, under the same seq."""

    type: Literal["edited"] = "edited"
    channel_id: str
    message: MessageView


class DeletedEvent(_Out):
    """Message ``seq`` was deleted on the platform: it is no longer part of the conversation."""

    type: Literal["deleted"] = "deleted"
    channel_id: str
    seq: int


class SettingsEvent(_Out):
    """The channel's settings changed (or the channel was created)."""

    type: Literal["settings"] = "settings"
    channel_id: str
    settings: SettingsView


class ClearedEvent(_Out):
    """The history was cleared: every message up to ``last_seq`` is gone. New messages go on from ``last_seq + 1``,
    so a client drops what it holds up to ``last_seq`` (not what it may have been sent after it)."""

    type: Literal["cleared"] = "cleared"
    channel_id: str
    last_seq: int


class MemoryEvent(_Out):
    """A persona's dialogue state here changed (``memory``), or was reset (``memory`` null)."""

    type: Literal["memory"] = "memory"
    channel_id: str
    persona: str
    memory: MemoryView | None


_ChannelEvent: TypeAlias = (
    MessageEvent
    | LevelEvent
    | ClaimEvent
    | RetractedEvent
    | EditedEvent
    | DeletedEvent
    | SettingsEvent
    | ClearedEvent
    | MemoryEvent
)
ArbiterEvent: TypeAlias = Annotated[_ChannelEvent, Field(discriminator="type")]
"""Any frame of the event stream. A ``match`` over it that ends in ``assert_never`` handles every kind."""

EVENT_MODELS: tuple[type[_Out], ...] = get_args(get_args(ArbiterEvent)[0])

_EVENT: TypeAdapter[ArbiterEvent] = TypeAdapter(ArbiterEvent)


def parse_event(raw: str | bytes) -> ArbiterEvent:
    """One frame of the event stream as its model. Raises ``pydantic.ValidationError`` for a frame that is not
    one (of a kind this version does not know, the error's type is ``union_tag_invalid``)."""
    return _EVENT.validate_json(raw, context=FROM_THE_ARBITER)


# --- the multiplexed event stream (GET /v1/events) -------------------------------------------------------
# One WebSocket for every channel a client follows: it sends ``StreamCommand`` frames to subscribe to channels
# (each from a seq of its own, as ``?after=`` does on a channel's stream) and receives each channel's events, every
# frame naming its channel, plus the frames below. Per channel the order and the join are those of the per-channel
# stream: the messages after ``after`` replayed, then the level, then every event as it happens.

MAX_RECENT = 200
"""The most messages a subscription may ask to have replayed from the channel's end (``Subscribe.recent``)."""


class Subscribe(_In):
    """Follow one channel: with ``after``, the messages after that seq replayed first (a client that resumes);
    with ``recent``, the channel's last ``recent`` messages (a client that arrives); with both, from whichever of
    the two starts earlier (one stream for several personas, some resuming and some arriving); with neither, live
    only."""

    channel: Id
    after: Seq | None = None
    recent: Annotated[StrictInt, Field(ge=1, le=MAX_RECENT)] | None = None


EventType: TypeAlias = Literal[
    "message", "level", "claim", "retracted", "edited", "deleted", "settings", "cleared", "memory"
]
"""The ``type`` of each kind of channel event."""

Token = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class StatusAsk(_In):
    """A persona's status of a channel, asked on the multiplexed stream: the answer is a ``StatusEvent``."""

    channel: Id
    persona: Id | None = Field(
        None, description="whose status: a persona the stream acts for (by default, the one whose token opened it)"
    )


class StreamCall(_In):
    """A persona's request sent on the multiplexed stream rather than over HTTP: the endpoint's method and path
    (under /v1, as the HTTP API has them) and its JSON body as text, carried out as that request would be for the
    persona the call names (one the stream acts for) and answered by a ``ReplyEvent`` with the same ``id``. One
    HTTP round trip fewer per claim, speech and release for a process that holds the stream anyway."""

    id: Annotated[StrictInt, Field(ge=0, le=MAX_SEQ)]
    persona: Id | None = Field(
        None, description="as whom: a persona the stream acts for (by default, the one whose token opened it)"
    )
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    path: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    body: Annotated[str, StringConstraints(max_length=64 * 1024)] | None = Field(
        None, description="the request's JSON body, as text (none: the endpoint's empty body)"
    )


class StreamCommand(_In):
    """A client's frame on the multiplexed stream: channels to follow (subscribing to one already followed
    starts it again from the new point) and channels to stop following; personas the stream acts for; statuses to
    send now; and kinds of events the client does without."""

    subscribe: list[Subscribe] = Field(default_factory=list, max_length=5_000)
    unsubscribe: list[Id] = Field(default_factory=list, max_length=5_000)
    tokens: list[Token] = Field(
        default_factory=list,
        max_length=64,
        description="bearer tokens of more personas this stream acts for (a process of several personas follows"
        " their channels on one stream): their statuses may be asked on it",
    )
    status: list[StatusAsk] = Field(
        default_factory=list,
        max_length=5_000,
        description="statuses to send now, each as a status frame (a persona asks as it is about to look at its turn)",
    )
    calls: list[StreamCall] = Field(
        default_factory=list,
        max_length=5_000,
        description="requests of the personas the stream acts for, each answered by a reply frame",
    )
    skip: list[EventType] | None = Field(
        None,
        description="kinds of channel events not to send from now on (every kind until a command says otherwise;"
        " an empty list sends every kind again); the level that ends a subscription's replay is sent all the same",
    )


class StatusEvent(_Out):
    """A persona's status of a channel as GET status answers it, sent when asked (``StreamCommand.status``). Its
    verdicts hold at ``status.now``: a ``retry_after`` says when one may change with no event (a floor or a wait
    that ends)."""

    type: Literal["status"] = "status"
    channel_id: str
    persona: str
    status: StatusView


class EndedEvent(_Out):
    """The stream stopped following the channel: ``fell_behind`` (subscribe again with ``after``, the last message
    seq it was sent, and lose nothing), ``closed`` (the arbiter ended the channel's feed, as when it shuts down:
    the same) or ``unknown_channel`` (no such channel; ``after`` null)."""

    type: Literal["ended"] = "ended"
    channel_id: str
    reason: Literal["fell_behind", "closed", "unknown_channel"]
    after: int | None = None
    detail: str


class ReplyEvent(_Out):
    """The answer to a ``StreamCall``: the status and the JSON body the HTTP request would have been answered
    with (an error's body for a refusal; empty for 204). It names the call's channel, when its path has one."""

    type: Literal["reply"] = "reply"
    channel_id: str | None = None
    id: int
    status: int
    body: str = ""


StreamFrame: TypeAlias = Annotated[_ChannelEvent | StatusEvent | EndedEvent | ReplyEvent, Field(discriminator="type")]
"""Any frame the multiplexed stream sends: a channel's event, or one of the stream's own."""

_STREAM_FRAME: TypeAdapter[StreamFrame] = TypeAdapter(StreamFrame)


def parse_stream_frame(raw: str | bytes) -> StreamFrame:
    """One frame of the multiplexed stream as its model (raises ``pydantic.ValidationError`` like ``parse_event``)."""
    return _STREAM_FRAME.validate_json(raw, context=FROM_THE_ARBITER)
