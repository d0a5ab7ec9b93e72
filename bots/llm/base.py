"""The provider-neutral LLM interface: values in, completion or decision and usage out, one error family.

Every provider turns a :class:`CompletionRequest` into one API call and back into a :class:`Completion`
(the primitive of a tool-dispatch loop), and answers a :class:`DecisionRequest` with a
:class:`DecisionResult`: pass, or a tier and a text. The default :meth:`ChatProvider.decide` forces one call
of a ``decide`` tool whose JSON schema is built from the request; an adapter may override it (OpenAI's and
Anthropic's ``json_schema`` modes).

Errors: each adapter translates its SDK's exceptions once, into the :class:`LLMError` family below. Errors
raised after the API answered carry the answer's token ``usage`` so budgets still see what was spent.

Time: a turn lives only as long as the persona's claim on the conversation (about 30 s), so a call must not
outlive it. The SDK clients make no retries of their own (``max_retries=0``): :func:`call_with_retries` does
them, here for every provider, within the request's ``time_left_s`` (what the claim has left): each attempt
gets ``min(profile timeout, time left)``, and a retry is made only for a retryable error (429, 5xx, a
timeout) when the wait before it (the server's ``retry-after``, else 0.5 s, 1 s) fits in what is left.
Otherwise the error is raised at once; a 429 carries its ``retry_after`` so the runtime backs off that long.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from types import TracebackType
    from typing import Self

    from bots.llm.pricing import ModelPrice
    from bots.llm.scene import Scene

__all__ = (
    "ACTIONS",
    "COLUMNS_NOTE",
    "DECIDE_TOOL",
    "Action",
    "ChatProvider",
    "Completion",
    "CompletionRequest",
    "Decision",
    "DecisionRequest",
    "DecisionResult",
    "ImageInput",
    "LLMAuthError",
    "LLMBadOutput",
    "LLMBadRequest",
    "LLMError",
    "LLMRateLimited",
    "LLMTimeout",
    "LLMUnavailable",
    "StopReason",
    "ToolCall",
    "ToolChoice",
    "ToolResult",
    "ToolSpec",
    "Turn",
    "Usage",
    "allowed_action",
    "call_with_retries",
    "decision_instructions",
    "decision_schema",
    "decision_tool",
    "error_for_status",
    "length_limit",
    "parse_decision",
    "parse_decision_json",
    "retry_after_from_headers",
    "should_retry_from_headers",
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

Action = Literal["pass", "aizuchi", "remark", "long"]
ACTIONS: tuple[Action, ...] = get_args(Action)
DECIDE_TOOL = "decide"

# "auto" | "required" | "none", or the name of one tool the model must call.
ToolChoice = str
# Normalised from each API's own vocabulary (Anthropic's names, which are the most telling).
StopReason = Literal["end_turn", "tool_use", "max_tokens", "refusal", "other"]

_ACTION_MEANING: dict[str, str] = {
    "pass": "stay silent this time",
    "aizuchi": "a short backchannel reply: a nod, a laugh, 'I see', 'no way!'",
    "remark": "an ordinary remark: an opinion, a question, a reply",
    "long": "a longer remark, for a new topic or an explanation",
}


# --- values ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """What one call spent. ``prompt_tokens`` is every input token, those read from the provider's prompt cache
    (``cache_read_tokens``) and written to it (``cache_write_tokens``) included: each is priced apart."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the model may call. ``parameters`` is a JSON schema of an object.

    ``strict``: the schema is fit for the APIs' strict mode (every object lists all its properties as required
    and allows no others), so an adapter may ask for strict schema adherence (when the profile's
    ``strict_tools`` allows it). A strict API refuses a schema that is not fit, so it is off unless said.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    strict: bool = False


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model made. ``arguments`` is always a JSON object (adapters refuse anything else)."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool returned, fed back to the model in the user turn after the call. ``content`` is text (JSON)."""

    call_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ImageInput:
    """An image the model is shown: a person's attachment, say. By address (the provider fetches it), or inline when
    ``data`` holds its bytes (an address no provider can reach: the local room's). ``width`` and ``height``
    (pixels, when known) are for estimating what it costs."""

    url: str
    media_type: str
    width: int | None = None
    height: int | None = None
    data: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Turn:
    """One conversation turn. An assistant turn may carry tool calls; the next user turn carries their results,
    and a user turn may show images (``images``: sent before its text, as both providers advise)."""

    role: Literal["user", "assistant"]
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_results: tuple[ToolResult, ...] = ()
    images: tuple[ImageInput, ...] = ()

    def __post_init__(self) -> None:
        if self.role not in ("user", "assistant"):
            raise ValueError(f"a turn's role is 'user' or 'assistant', not {self.role!r}")
        if self.role == "user" and self.tool_calls:
            raise ValueError("only an assistant turn carries tool calls")
        if self.role == "assistant" and self.tool_results:
            raise ValueError("only a user turn carries tool results")
        if self.role == "assistant" and self.images:
            raise ValueError("only a user turn shows images")


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """One model call. ``turns`` should end with a user turn: newer models reject an assistant prefill.

    ``max_tokens`` of None means the profile's ``max_tokens``. ``time_left_s``: the seconds this call may take
    in all, retries included (None: no limit but the profile's timeout per attempt); the runtime gives what
    its claim has left. ``scene``: the facts the prompt tells, for a provider that cannot read it (never sent).
    ``cache_key``: what the provider may group this prompt's cache entries by (a persona in a channel, whose prompts
    share their stable beginning); never shown to the model.
    """

    system: str
    turns: tuple[Turn, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    max_tokens: int | None = None
    time_left_s: float | None = None
    scene: Scene | None = None
    cache_key: str | None = None

    def __post_init__(self) -> None:
        _check_time_left(self.time_left_s)
        forced = self.tool_choice not in ("auto", "required", "none")
        if forced and self.tool_choice not in {tool.name for tool in self.tools}:
            raise ValueError(f"tool_choice names {self.tool_choice!r}, which is not among the request's tools")
        if self.tool_choice == "required" and not self.tools:
            raise ValueError("tool_choice 'required' needs at least one tool")


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    stop_reason: StopReason


@dataclass(frozen=True, slots=True)
class Decision:
    """What the model chose. ``memory``: the state it was asked to keep (``DecisionRequest.memory_schema``), as the
    model gave it (JSON, unchecked: the runtime fits it to the arbiter's bounds); None when not asked or not given."""

    action: Action
    text: str = ""
    memory: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}")
        if self.action != "pass" and not self.text.strip():
            raise ValueError(f"a {self.action!r} decision needs a text")


@dataclass(frozen=True, slots=True)
class DecisionRequest:
    """Ask the model what to do now.

    ``actions`` are what the persona may choose this time (what its claim allows); "pass" is added if missing,
    unless ``allow_pass`` is off (an addressed persona's second try: it must answer). The decide tool offers every
    action whatever the claim, so that it is the same on every call of a persona and a provider can cache it: the
    prompt says which are allowed now, and :func:`parse_decision` holds the answer to them. ``max_lengths`` gives
    each tier's maximum length in display columns (a wide character counts 2), for the instructions; the provider
    does not trim, the runtime does. ``max_tokens`` and ``time_left_s`` as in :class:`CompletionRequest`.
    ``memory_schema``: the JSON schema of a state the model keeps along with its decision (a persona's notes on
    the conversation); the decision then has a required ``memory`` property of that schema. ``scene`` and
    ``cache_key`` as in :class:`CompletionRequest`.
    """

    system: str
    turns: tuple[Turn, ...]
    actions: tuple[Action, ...] = ACTIONS
    max_lengths: Mapping[str, int] = field(default_factory=dict)
    max_tokens: int | None = None
    time_left_s: float | None = None
    allow_pass: bool = True
    memory_schema: Mapping[str, Any] | None = None
    scene: Scene | None = None
    cache_key: str | None = None

    def __post_init__(self) -> None:
        _check_time_left(self.time_left_s)
        unknown = [action for action in self.actions if action not in ACTIONS]
        if unknown:
            raise ValueError(f"unknown actions {unknown!r}; known: {ACTIONS!r}")
        offered = ("pass", *self.actions) if self.allow_pass else self.actions
        actions = tuple(dict.fromkeys(action for action in offered if self.allow_pass or action != "pass"))
        if not actions:
            raise ValueError("a decision needs at least one action to choose from")
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "max_lengths", MappingProxyType(dict(self.max_lengths)))


def _check_time_left(time_left_s: float | None) -> None:
    # Zero or less is allowed (the call then fails at once with LLMTimeout); NaN would compare as "enough".
    if time_left_s is not None and math.isnan(time_left_s):
        raise ValueError("time_left_s must be a number of seconds or None")


@dataclass(frozen=True, slots=True)
class DecisionResult:
    decision: Decision
    usage: Usage


# --- errors ---------------------------------------------------------------------------------------------


class LLMError(Exception):
    """Root of the provider errors. ``usage`` is set when the API answered (tokens were spent).

    ``retry_after``: the seconds the server asked us to wait (``retry-after-ms`` or ``retry-after``), when it
    did. ``should_retry``: the server's own ``x-should-retry`` verdict, when it gave one.
    """

    def __init__(
        self,
        message: str,
        *,
        usage: Usage | None = None,
        status: int | None = None,
        retry_after: float | None = None,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.usage = usage
        self.status = status
        self.retry_after = retry_after
        self.should_retry = should_retry


class LLMRateLimited(LLMError):
    """429, when no retry fitted in the time left. ``retry_after`` (seconds) when the server said."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float | None = None,
        usage: Usage | None = None,
        status: int | None = 429,
        should_retry: bool | None = None,
    ) -> None:
        super().__init__(message, usage=usage, status=status, retry_after=retry_after, should_retry=should_retry)


class LLMUnavailable(LLMError):
    """5xx, overloaded, or the server could not be reached (and no retry fitted in the time left)."""


class LLMTimeout(LLMError):
    """No answer within the attempt's time (the profile's ``timeout_s``, or less when the turn had less left)."""


class LLMAuthError(LLMError):
    """401/403, or no key configured. The message names the environment variable, never the key."""


class LLMBadRequest(LLMError):
    """Any other 4xx: the request was wrong (model name, parameters the server does not take, ...)."""


class LLMBadOutput(LLMError):
    """The API answered, but the answer is unusable (no tool call, invalid JSON, an action not allowed, ...)."""


def retry_after_from_headers(headers: Mapping[str, str] | None) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds only; dates are ignored)."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue
        if seconds >= 0:
            return seconds
    return None


def should_retry_from_headers(headers: Mapping[str, str] | None) -> bool | None:
    """The server's ``x-should-retry`` verdict ("true" or "false", as both SDKs read it), or None."""
    value = None if headers is None else headers.get("x-should-retry")
    if value == "true":
        return True
    if value == "false":
        return False
    return None


# What a server quotes of a key it refused ("Incorrect API key provided: sk-proj-****SJh4."): not for the logs.
_QUOTED_KEY = re.compile(r"[^\s:]*\*{3,}[^\s.,]*")


def error_for_status(status: int, detail: str, headers: Mapping[str, str] | None) -> LLMError:
    """Our error for an HTTP error status, the same for every provider: what the runtime does next (back off,
    give up, fix the settings) depends on the status alone."""
    hints: dict[str, Any] = {
        "status": status,
        "retry_after": retry_after_from_headers(headers),
        "should_retry": should_retry_from_headers(headers),
    }
    if status == 429:
        return LLMRateLimited(detail, **hints)
    if status in (401, 403):
        return LLMAuthError(_QUOTED_KEY.sub("[the key]", detail), **hints)
    if status == 408:
        return LLMTimeout(detail, **hints)
    if status == 409 or status >= 500:
        return LLMUnavailable(detail, **hints)
    return LLMBadRequest(detail, **hints)


# --- retries within the time left -----------------------------------------------------------------------

# Waits between attempts when the server names none: short, because the turn is short.
_BACKOFF_S = 0.5
# A retry that would leave the next attempt less than this is not worth making.
_MIN_ATTEMPT_S = 0.5
_RETRYABLE = (LLMRateLimited, LLMUnavailable, LLMTimeout)


async def call_with_retries(
    attempt: Callable[[float], Awaitable[T]],
    *,
    name: str,
    timeout_s: float,
    max_retries: int,
    time_left_s: float | None,
) -> T:
    """Run ``attempt(timeout)`` until it answers, making at most ``max_retries`` retries, all within
    ``time_left_s`` seconds (None: no overall limit).

    Each attempt gets ``min(timeout_s, what is left)`` and is cut off there (whatever the SDK does with a slow
    body). A retry is made only after a retryable error the server did not mark ``x-should-retry: false``,
    and only when its wait (the server's retry-after, else 0.5 s, 1 s, ...) is no longer than ``timeout_s``
    (we wait for a retry no longer than we would for an answer) and still leaves time for another attempt.
    Otherwise the error is raised at once, a 429 with its ``retry_after`` for the runtime's back-off. With no
    time left at all, LLMTimeout.
    """
    loop = asyncio.get_running_loop()
    deadline = None if time_left_s is None else loop.time() + time_left_s
    retries = 0
    while True:
        left = None if deadline is None else deadline - loop.time()
        if left is not None and left <= 0:
            raise LLMTimeout(f"{name}: no time left for the call")
        attempt_s = timeout_s if left is None else min(timeout_s, left)
        try:
            async with asyncio.timeout(attempt_s):
                return await attempt(attempt_s)
        except TimeoutError:
            # Our own cut-off: the SDK's timeout is per read, a slow trickle could outlast it.
            error: LLMError = LLMTimeout(f"{name}: no answer within {attempt_s:.2f} s")
        except LLMError as raised:
            error = raised
        wait = _retry_wait(error, retries, max_retries, timeout_s)
        left = None if deadline is None else deadline - loop.time()
        if wait is None or (left is not None and wait + _MIN_ATTEMPT_S > left):
            raise error
        retries += 1
        _log.info(
            "%s: %s (%s); retry %d of %d in %.2f s", name, type(error).__name__, error, retries, max_retries, wait
        )
        await asyncio.sleep(wait)


def _retry_wait(error: LLMError, retries: int, max_retries: int, timeout_s: float) -> float | None:
    """How long to wait before retrying after ``error``, or None when it is not to be retried."""
    if retries >= max_retries or not isinstance(error, _RETRYABLE) or error.should_retry is False:
        return None
    wait = error.retry_after if error.retry_after is not None else _BACKOFF_S * 2**retries
    return wait if wait <= timeout_s else None


# --- the structured decision ----------------------------------------------------------------------------


# How every length is stated to a model, in the unit the arbiter counts: the same words in the prompt, the decide
# tool's description and the decision schema.
COLUMNS_NOTE = "Lengths are in columns: a Japanese, Chinese or Korean character takes 2, any other character 1."


def length_limit(columns: int) -> str:
    """A length limit in words: "at most 120 columns" (see COLUMNS_NOTE)."""
    return f"at most {columns} columns"


def decision_instructions(request: DecisionRequest) -> str:
    """What the model is asked to choose, in words; used as the decide tool's description or in the prompt. Every
    action is described, whatever the claim allows this time (the conversation's end says which), so that these
    words are the same on every call of a persona."""
    lines = [
        "Decide your next move in the conversation. Choose one action, among those the conversation says you may"
        " make this time:"
    ]
    for action in ACTIONS:
        limit = request.max_lengths.get(action)
        bound = f" ({length_limit(limit)})" if limit is not None and action != "pass" else ""
        lines.append(f"- {action}: {_ACTION_MEANING[action]}{bound}")
    lines.append(
        "Put exactly what you say in text, in your own voice, without your name in front; leave text empty when"
        " you pass."
    )
    if any(action != "pass" for action in request.max_lengths):
        lines.append(COLUMNS_NOTE)
    if request.memory_schema is not None:
        lines.append("In memory, give your notes on the conversation, updated with the messages you were shown.")
    return "\n".join(lines)


def _text_description(request: DecisionRequest) -> str:
    limits = [
        f"{action} {length_limit(limit)}"
        for action in ACTIONS
        if action != "pass" and (limit := request.max_lengths.get(action)) is not None
    ]
    within = f", within the action's length ({'; '.join(limits)})" if limits else ""
    return f"what you say{within}; empty when you pass"


def decision_schema(request: DecisionRequest) -> dict[str, Any]:
    """The JSON schema of a decision. Every property is required and no other is allowed, as strict modes want.
    The action may be any of them: which the claim allows is checked in :func:`parse_decision`, not here, so that the
    schema (a part of the prompt's cacheable beginning) is the same whatever the claim."""
    properties: dict[str, Any] = {
        "action": {
            "type": "string",
            "enum": list(ACTIONS),
            "description": "what you do now; 'pass' stays silent",
        },
        "text": {"type": "string", "description": _text_description(request)},
    }
    if request.memory_schema is not None:
        properties["memory"] = dict(request.memory_schema)
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


def decision_tool(request: DecisionRequest) -> ToolSpec:
    return ToolSpec(
        name=DECIDE_TOOL,
        description=decision_instructions(request),
        parameters=decision_schema(request),
        strict=True,  # decision_schema is strict-compatible by construction
    )


def parse_decision(arguments: object, request: DecisionRequest, usage: Usage | None) -> Decision:
    """Check a decision the model produced (already decoded from JSON); anything unusable is LLMBadOutput."""
    if not isinstance(arguments, Mapping):
        raise LLMBadOutput(f"the decision is not a JSON object: {_preview(arguments)}", usage=usage)
    action = allowed_action(arguments.get("action"), request)
    if action is None:
        raise LLMBadOutput(
            f"the decision's action {_preview(arguments.get('action'))} is not one of {list(request.actions)}",
            usage=usage,
        )
    # A state the model forgot or botched costs only the update (the previous state stays), never the turn.
    memory = arguments.get("memory") if request.memory_schema is not None else None
    memory = memory if isinstance(memory, Mapping) else None
    if action == "pass":
        return Decision("pass", memory=memory)
    text = arguments.get("text")
    if not isinstance(text, str) or not text.strip():
        raise LLMBadOutput(f"the decision {action!r} has no text", usage=usage)
    return Decision(action, text.strip(), memory=memory)


def allowed_action(action: object, request: DecisionRequest) -> Action | None:
    """The action the claim allows for ``action``: itself when allowed; the longest tier allowed when the model chose
    a longer one (a remark for a long remark: the runtime trims the text to that tier's length, as it trims any
    answer too long); None when nothing allowed stands for it (a pass when the persona must answer, a nod on a claim
    to say something, a remark on a nod's claim), which is an unusable answer."""
    if action in request.actions:
        return action
    if action not in ACTIONS or action in ("pass", "aizuchi"):
        return None
    tiers = [allowed for allowed in request.actions if allowed not in ("pass", "aizuchi")]
    if not tiers:
        return None
    longest = max(tiers, key=ACTIONS.index)
    return longest if ACTIONS.index(action) > ACTIONS.index(longest) else None


def parse_decision_json(text: str, request: DecisionRequest, usage: Usage | None) -> Decision:
    """Decode a decision answered as JSON text (structured output modes)."""
    try:
        arguments = json.loads(text)
    except ValueError:
        raise LLMBadOutput(f"the decision is not valid JSON: {_preview(text)}", usage=usage) from None
    return parse_decision(arguments, request, usage)


def _preview(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- the interface --------------------------------------------------------------------------------------


class ChatProvider(ABC):
    """One LLM behind one small interface. Providers hold long-lived clients: close them with :meth:`aclose`."""

    name: str

    @property
    def price(self) -> ModelPrice | None:
        """The model's prices and prompt cache (:mod:`bots.llm.pricing`) when known: what its cached tokens weigh in
        a channel's budget."""
        return None

    @abstractmethod
    async def complete(self, request: CompletionRequest) -> Completion:
        """One model call: the primitive of a tool-dispatch loop."""

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        """Pass, or a tier and a text: one forced call of a ``decide`` tool whose schema is built from the request."""
        completion = await self.complete(
            CompletionRequest(
                system=request.system,
                turns=request.turns,
                tools=(decision_tool(request),),
                tool_choice=DECIDE_TOOL,
                max_tokens=request.max_tokens,
                time_left_s=request.time_left_s,
                scene=request.scene,
                cache_key=request.cache_key,
            )
        )
        call = next((call for call in completion.tool_calls if call.name == DECIDE_TOOL), None)
        if call is None:
            raise LLMBadOutput(
                f"the model did not call {DECIDE_TOOL!r} (stop reason {completion.stop_reason})",
                usage=completion.usage,
            )
        return DecisionResult(parse_decision(call.arguments, request, completion.usage), completion.usage)

    async def check_key(self, timeout_s: float) -> None:  # noqa: B027 - a provider without a key has none to check
        """Raise LLMAuthError (naming the variable) if the API refuses the provider's key, by the cheapest call that
        needs one; any other LLMError when the API could not say within ``timeout_s``."""

    async def aclose(self) -> None:  # noqa: B027 - a provider without resources has nothing to close
        """Release the provider's client. Safe to call twice."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
