"""The scripted provider: offline, deterministic for a seed, built from a persona's sample lines.

It stands in for an LLM in the local room, in demos and in tests, so it aims for a conversation with rhythm:
mostly nods and remarks, a long remark now and then when allowed, a pass now and then. It never repeats one of
its own recent lines or a line present in the turns it was shown, and reports token counts estimated from
text length, so budgets and benchmarks see plausible numbers.

:meth:`ScriptedProvider.complete` also plays the reference design's tool loop: offered ``history``, ``status``
and ``consume`` tools, it calls them in that order (one per call, as a model following the reference's
instructions would), picks a tier the level in the ``status`` result affords and a line that fits it, and then
answers with plain text and no tool call, which ends the loop.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import unicodedata
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from arbiter.contract import display_length
from bots.llm.base import (
    ACTIONS,
    DECIDE_TOOL,
    Action,
    ChatProvider,
    Completion,
    CompletionRequest,
    Decision,
    DecisionRequest,
    DecisionResult,
    LLMTimeout,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

__all__ = ("DEFAULT_AIZUCHI", "DEFAULT_REMARKS", "ScriptedProvider")

DEFAULT_AIZUCHI: tuple[str, ...] = (
    "I see.",
    "Right!",
    "Mm-hm.",
    "No way!",
    "Oh, nice.",
    "Fair point.",
    "Ha, true.",
    "Really?",
)
DEFAULT_REMARKS: tuple[str, ...] = (
    "That reminds me of something I read last week.",
    "I'm not sure I agree, but go on.",
    "What made you think of that?",
    "Honestly, I'd never looked at it that way.",
    "We should try that sometime.",
    "That sounds harder than it looks.",
    "I keep coming back to that idea.",
    "Maybe the simplest answer is the right one here.",
)

# How often each move comes up before the mood adjustments below: mostly nods and remarks. A pass is rare:
# the runtime only asks after it has decided to take a turn and claimed the tier, as a model would mostly
# speak when asked at that point.
_WEIGHTS: dict[str, float] = {"pass": 0.04, "aizuchi": 0.42, "remark": 0.34, "long": 0.12}
# After each own move, how the next one's weights shift, so the persona does not do the same thing twice running.
_AFTER: dict[str, dict[str, float]] = {
    "pass": {"pass": 0.5},
    "aizuchi": {"aizuchi": 0.8},
    "remark": {"remark": 0.7},
    "long": {"long": 0.25, "remark": 0.7},
}
# The reference design's tiers, for a status result that does not list its own.
_REFERENCE_COSTS: dict[str, int] = {"aizuchi": 5, "remark": 60, "long": 80}
_MAX_CONSUMES = 2
_DECISION_OVERHEAD_TOKENS = 8


class _Tier(NamedTuple):
    cost: int
    max_length: int | None


class ScriptedProvider(ChatProvider):
    """Sample lines in, a lively-enough conversation out; no network.

    ``recent_window`` is how many of its own latest lines it will not say again. ``latency_s`` pauses each
    call (jittered by a quarter either way) so a demo does not answer instantly; a request's ``time_left_s``
    bounds it as it bounds a real call (LLMTimeout when the pause would not fit).
    """

    def __init__(
        self,
        aizuchi: Sequence[str],
        remarks: Sequence[str],
        *,
        seed: int,
        latency_s: float = 0.0,
        recent_window: int = 6,
        speaker: str = "scripted",
    ) -> None:
        self.name = "scripted"
        self.aizuchi = _clean(aizuchi) or DEFAULT_AIZUCHI
        self.remarks = _clean(remarks) or DEFAULT_REMARKS
        self.latency_s = latency_s
        self.speaker = speaker
        self._rng = random.Random(seed)
        # Latency draws come from their own generator, so the lines do not depend on whether a demo pauses.
        self._latency_rng = random.Random(seed ^ 0x5EED)
        self._recent: deque[str] = deque(maxlen=max(1, recent_window))
        self._last_action: str | None = None
        self._calls = 0

    def __repr__(self) -> str:
        return f"ScriptedProvider(aizuchi={len(self.aizuchi)}, remarks={len(self.remarks)})"

    # --- the interface --------------------------------------------------------------------------------

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        await self._pause(request.time_left_s)
        decision = self._choose(request.actions, request.max_lengths, _spoken(request.turns))
        usage = Usage(
            _prompt_tokens(request.system, request.turns, ()),
            _tokens(decision.text) + _DECISION_OVERHEAD_TOKENS,
        )
        return DecisionResult(decision, usage)

    async def complete(self, request: CompletionRequest) -> Completion:
        await self._pause(request.time_left_s)
        prompt = _prompt_tokens(request.system, request.turns, request.tools)
        tools = {tool.name: tool for tool in request.tools}
        forced = None if request.tool_choice in ("auto", "required", "none") else request.tool_choice
        if not tools or request.tool_choice == "none":
            return self._text(prompt, self._line_for_text(request.turns))
        if forced == DECIDE_TOOL or (forced is None and set(tools) == {DECIDE_TOOL}):
            return self._decide_call(prompt, tools[DECIDE_TOOL], request.turns)
        if forced is not None and forced not in ("history", "status", "consume"):
            return self._call(prompt, forced, {})
        return self._tool_loop_step(prompt, tools, request.turns)

    # --- choosing -------------------------------------------------------------------------------------

    def _choose(self, actions: Iterable[str], max_lengths: Mapping[str, int], exclude: set[str]) -> Decision:
        weights = {action: _WEIGHTS[action] for action in actions}
        # The largest move offered is what the caller made room for (the runtime claims before it asks): take
        # it most of the time, as a model would.
        largest = max((a for a in weights if a != "pass"), key=ACTIONS.index, default=None)
        if largest is not None:
            weights[largest] += 3.0
        for action, factor in _AFTER.get(self._last_action or "", {}).items():
            if action in weights:
                weights[action] *= factor
        while weights:
            action = self._rng.choices(list(weights), weights=list(weights.values()))[0]
            if action == "pass":
                break
            parts = self._pick(action, max_lengths.get(action), exclude)
            if parts is not None:
                self._recent.extend(_key(part) for part in parts)
                self._last_action = action
                return Decision(cast("Action", action), _join(parts))
            # Nothing fresh fits this tier: try the others before falling silent.
            del weights[action]
        self._last_action = "pass"
        return Decision("pass")

    def _pick(self, action: str, limit: int | None, exclude: set[str]) -> tuple[str, ...] | None:
        def fresh(parts: tuple[str, ...]) -> bool:
            keys = [_key(part) for part in parts]
            return (
                not any(key in self._recent or key in exclude for key in keys)
                and _key(_join(parts)) not in exclude
                and (limit is None or display_length(_join(parts)) <= limit)
            )

        usable: list[tuple[str, ...]] = []
        if action == "long":
            # A long remark is two remarks run together; a single one will do when no pair fits.
            usable = [(a, b) for a in self.remarks for b in self.remarks if a != b and fresh((a, b))]
        if not usable:
            lines = self.aizuchi if action == "aizuchi" else self.remarks
            usable = [(line,) for line in lines if fresh((line,))]
        return self._rng.choice(usable) if usable else None

    def _line_for_text(self, turns: tuple[Turn, ...]) -> str:
        decision = self._choose(("aizuchi", "remark"), {}, _spoken(turns))
        return decision.text

    # --- answers --------------------------------------------------------------------------------------

    def _decide_call(self, prompt: int, tool: ToolSpec, turns: tuple[Turn, ...]) -> Completion:
        enum = tool.parameters.get("properties", {}).get("action", {}).get("enum", ACTIONS)
        actions = tuple(action for action in ACTIONS if action in enum)
        decision = self._choose(actions, {}, _spoken(turns))
        return self._call(prompt, DECIDE_TOOL, {"action": decision.action, "text": decision.text})

    def _tool_loop_step(self, prompt: int, tools: dict[str, ToolSpec], turns: tuple[Turn, ...]) -> Completion:
        calls, results = _loop_so_far(turns)
        called = [call.name for call in calls]
        for step in ("history", "status"):
            if step in tools and step not in called:
                return self._call(prompt, step, {})
        consumes = [call for call in calls if call.name == "consume"]
        last = consumes[-1] if consumes else None
        if last is not None and _granted(results.get(last.id)):
            return self._text(prompt, _spoken_text(last.arguments))
        if "consume" in tools and len(consumes) < _MAX_CONSUMES:
            arguments = self._consume_arguments(tools["consume"], calls, results, turns, last)
            if arguments is not None:
                return self._call(prompt, "consume", arguments)
        self._last_action = "pass"
        return self._text(prompt, "(pass)")

    def _consume_arguments(
        self,
        tool: ToolSpec,
        calls: list[ToolCall],
        results: dict[str, ToolResult],
        turns: tuple[Turn, ...],
        refused: ToolCall | None,
    ) -> dict[str, Any] | None:
        status = next((_json(results.get(c.id)) for c in reversed(calls) if c.name == "status"), {})
        if status.get("paused") or status.get("enabled") is False:
            return None
        tiers = _tiers(status)
        level = _number(status.get("level", status.get("resource")), default=100)
        if refused is not None:
            # A refused spend: retry once, cheaper, with the level the refusal reported.
            refusal = _json(results.get(refused.id))
            level = _number(refusal.get("level", refusal.get("resource")), default=level)
            ceiling = _refused_cost(refused.arguments, tiers)
            tiers = {name: tier for name, tier in tiers.items() if tier.cost < ceiling}
        affordable = [name for name in ("aizuchi", "remark", "long") if name in tiers and tiers[name].cost <= level]
        exclude = _spoken(turns) | _history_texts(calls, results)
        lengths = {name: tier.max_length for name, tier in tiers.items() if tier.max_length is not None}
        decision = self._choose(("pass", *affordable), lengths, exclude)
        if decision.action == "pass":
            return None
        # Fill in the consume tool's own parameter names: ours (text, tier) or the reference's (message, amount).
        properties = tool.parameters.get("properties", {})
        text_key = "message" if "message" in properties and "text" not in properties else "text"
        arguments: dict[str, Any] = {text_key: decision.text}
        if "tier" in properties:
            arguments["tier"] = decision.action
        elif "amount" in properties:
            arguments["amount"] = tiers[decision.action].cost
        if "from" in properties:
            arguments["from"] = self.speaker
        return arguments

    def _call(self, prompt: int, name: str, arguments: dict[str, Any]) -> Completion:
        self._calls += 1
        call = ToolCall(id=f"scripted_{self._calls}", name=name, arguments=arguments)
        usage = Usage(prompt, _tokens(json.dumps(arguments, ensure_ascii=False)) + _DECISION_OVERHEAD_TOKENS)
        return Completion(text="", tool_calls=(call,), usage=usage, stop_reason="tool_use")

    def _text(self, prompt: int, text: str) -> Completion:
        return Completion(text=text, tool_calls=(), usage=Usage(prompt, max(1, _tokens(text))), stop_reason="end_turn")

    async def _pause(self, time_left_s: float | None) -> None:
        # As a real provider does: a call with no time left fails at once, one slower than the time left fails
        # when the time is up.
        pause = self.latency_s * (0.75 + 0.5 * self._latency_rng.random()) if self.latency_s > 0 else 0.0
        if time_left_s is not None and pause >= time_left_s:
            await asyncio.sleep(max(0.0, time_left_s))
            raise LLMTimeout(f"the scripted provider takes {pause:.2f} s; the call had {time_left_s:.2f} s")
        if pause > 0:
            await asyncio.sleep(pause)


# --- helpers --------------------------------------------------------------------------------------------


def _clean(lines: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))


def _key(text: str) -> str:
    # As the runtime compares lines for repeats: width and case folded, punctuation and spaces ignored, so
    # "たしかに!" and "たしかに。" are the same line.
    return "".join(char for char in unicodedata.normalize("NFKC", text).casefold() if char.isalnum())


def _join(parts: tuple[str, ...]) -> str:
    # Latin text wants a space between sentences; Japanese and Chinese do not.
    text = parts[0]
    for part in parts[1:]:
        text += (" " if text[-1:].isascii() else "") + part
    return text


def _tokens(text: str) -> int:
    """A rough token count: about four Latin characters per token, one per wide character."""
    ascii_chars = sum(1 for char in text if char.isascii())
    return math.ceil(ascii_chars / 4) + (len(text) - ascii_chars)


def _prompt_tokens(system: str, turns: tuple[Turn, ...], tools: Iterable[ToolSpec]) -> int:
    total = _tokens(system) + 3
    for turn in turns:
        total += 4 + _tokens(turn.text)
        total += sum(_tokens(json.dumps(dict(call.arguments), ensure_ascii=False)) + 6 for call in turn.tool_calls)
        total += sum(_tokens(result.content) + 6 for result in turn.tool_results)
    total += sum(_tokens(tool.description) + _tokens(json.dumps(dict(tool.parameters))) for tool in tools)
    return total


def _spoken(turns: tuple[Turn, ...]) -> set[str]:
    """Every line said in the turns, with and without a speaker in front ("Name: ", "[Name] "), to keep clear of."""
    said: set[str] = set()
    for turn in turns:
        for line in turn.text.splitlines():
            said.add(_key(line))
            for mark in (": ", "：", "] "):
                if mark in line:
                    said.add(_key(line.split(mark, 1)[1]))
    said.discard("")
    return said


def _loop_so_far(turns: tuple[Turn, ...]) -> tuple[list[ToolCall], dict[str, ToolResult]]:
    """The tool calls and results since the last plain turn: the loop now running."""
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    for turn in reversed(turns):
        if not turn.tool_calls and not turn.tool_results:
            break
        calls[:0] = turn.tool_calls
        results.update((result.call_id, result) for result in turn.tool_results)
    return calls, results


def _json(result: ToolResult | None) -> dict[str, Any]:
    if result is None or result.is_error:
        return {}
    try:
        data = json.loads(result.content)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _granted(result: ToolResult | None) -> bool:
    data = _json(result)
    return bool(data.get("granted", data.get("success", False)))


def _number(value: object, *, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _tiers(status: Mapping[str, Any]) -> dict[str, _Tier]:
    """Tiers from a status result: ``tiers`` ({name: {cost, max_length}}), ``costs`` ({name: cost}), or defaults."""
    listed = status.get("tiers")
    if not isinstance(listed, dict):
        costs = status.get("costs")
        costs = costs if isinstance(costs, dict) else _REFERENCE_COSTS
        return {
            name: _Tier(_number(costs.get(name), default=cost), None)
            for name, cost in _REFERENCE_COSTS.items()
            if name in costs
        }
    tiers: dict[str, _Tier] = {}
    for name, info in listed.items():
        if name not in _REFERENCE_COSTS or not isinstance(info, dict) or info.get("affordable") is False:
            continue
        limit = info.get("max_length")
        tiers[name] = _Tier(
            _number(info.get("cost"), default=_REFERENCE_COSTS[name]),
            limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        )
    return tiers


def _refused_cost(arguments: Mapping[str, Any], tiers: Mapping[str, _Tier]) -> int:
    tier = arguments.get("tier")
    if isinstance(tier, str) and tier in tiers:
        return tiers[tier].cost
    return _number(arguments.get("amount"), default=0)


def _spoken_text(arguments: Mapping[str, Any]) -> str:
    return str(arguments.get("text", arguments.get("message", "")))


def _history_texts(calls: list[ToolCall], results: dict[str, ToolResult]) -> set[str]:
    texts: set[str] = set()
    for call in calls:
        if call.name == "history" and call.id in results:
            try:
                _collect_texts(json.loads(results[call.id].content), texts)
            except ValueError:
                continue
    return texts


def _collect_texts(data: object, into: set[str]) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in ("text", "message") and isinstance(value, str):
                into.add(_key(value))
            else:
                _collect_texts(value, into)
    elif isinstance(data, list):
        for item in data:
            _collect_texts(item, into)
