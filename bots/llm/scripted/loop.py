"""The offline stand-in in a tool loop: reading the calls and results of the loop running, and filling in the next
call's arguments, as a model following the reference design's instructions would. Pure.

Offered ``history``, ``status`` and ``consume`` tools, it calls them in that order; the ``history`` result is its
scene, the ``status`` result says which tier it can afford. Offered a lookup tool besides ``decide``, it calls it
with the question it answers.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, NamedTuple

from bots.llm.base import DECIDE_TOOL, ToolCall, ToolResult, Turn
from bots.llm.scene import Role, Scene, SceneLine

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bots.llm.base import ToolSpec

__all__ = (
    "MAX_CONSUMES",
    "Tier",
    "granted",
    "history_scene",
    "looked_up",
    "lookup_arguments",
    "loop_so_far",
    "refused_cost",
    "result_json",
    "spoken_text",
    "tiers_of",
)

MAX_CONSUMES = 2
# The reference design's tiers, for a status result that does not list its own.
_REFERENCE_COSTS: dict[str, int] = {"aizuchi": 5, "remark": 60, "long": 80}
_ROLES: dict[str, Role] = {"human": "person", "person": "person", "persona": "persona", "bot": "bot"}


class Tier(NamedTuple):
    cost: int
    max_length: int | None


def loop_so_far(turns: tuple[Turn, ...]) -> tuple[list[ToolCall], dict[str, ToolResult]]:
    """The tool calls and results since the last plain turn: the loop now running."""
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    for turn in reversed(turns):
        if not turn.tool_calls and not turn.tool_results:
            break
        calls[:0] = turn.tool_calls
        results.update((result.call_id, result) for result in turn.tool_results)
    return calls, results


def looked_up(turns: tuple[Turn, ...]) -> str | None:
    """The first line of what the latest lookup in the running loop found (not an error), if any."""
    calls, results = loop_so_far(turns)
    for call in reversed(calls):
        result = results.get(call.id)
        if call.name == DECIDE_TOOL or result is None or result.is_error:
            continue
        line = next((line.strip() for line in result.content.splitlines() if line.strip()), "")
        return line or None
    return None


def lookup_arguments(tool: ToolSpec, question: str) -> dict[str, Any] | None:
    """The arguments asking ``tool`` about ``question``: it goes in the first text parameter (required ones first);
    None when the tool takes no text."""
    properties = tool.parameters.get("properties", {})
    required = [name for name in tool.parameters.get("required", ()) if name in properties]
    texts = [name for name in (*required, *properties) if properties[name].get("type", "string") == "string"]
    return {texts[0]: question} if texts else None


def result_json(result: ToolResult | None) -> dict[str, Any]:
    if result is None or result.is_error:
        return {}
    try:
        data = json.loads(result.content)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def granted(result: ToolResult | None) -> bool:
    data = result_json(result)
    return bool(data.get("granted", data.get("success", False)))


def number(value: object, *, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def tiers_of(status: Mapping[str, Any]) -> dict[str, Tier]:
    """Tiers from a status result: ``tiers`` ({name: {cost, max_length}}), ``costs`` ({name: cost}), or defaults."""
    listed = status.get("tiers")
    if not isinstance(listed, dict):
        costs = status.get("costs")
        costs = costs if isinstance(costs, dict) else _REFERENCE_COSTS
        return {
            name: Tier(number(costs.get(name), default=cost), None)
            for name, cost in _REFERENCE_COSTS.items()
            if name in costs
        }
    tiers: dict[str, Tier] = {}
    for name, info in listed.items():
        if name not in _REFERENCE_COSTS or not isinstance(info, dict) or info.get("affordable") is False:
            continue
        limit = info.get("max_length")
        tiers[name] = Tier(
            number(info.get("cost"), default=_REFERENCE_COSTS[name]),
            limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        )
    return tiers


def refused_cost(arguments: Mapping[str, Any], tiers: Mapping[str, Tier]) -> int:
    tier = arguments.get("tier")
    if isinstance(tier, str) and tier in tiers:
        return tiers[tier].cost
    return number(arguments.get("amount"), default=0)


def spoken_text(arguments: Mapping[str, Any]) -> str:
    return str(arguments.get("text", arguments.get("message", "")))


def history_scene(calls: list[ToolCall], results: dict[str, ToolResult], speaker: str) -> Scene:
    """The messages of the loop's history results as a scene, oldest first; ``speaker`` is who it is there (its
    id, or its name where the result gives no id). A message says whether a person wrote it where the result
    does (``author_kind``); where it does not, it counts as a person's."""
    lines: list[SceneLine] = []
    for call in calls:
        if call.name == "history" and call.id in results:
            try:
                _collect(json.loads(results[call.id].content), speaker, lines)
            except ValueError:
                continue
    return Scene(names=(speaker,), lines=tuple(lines))


def _collect(data: object, speaker: str, into: list[SceneLine]) -> None:
    if isinstance(data, dict):
        text = data.get("text", data.get("message"))
        if isinstance(text, str):
            name = next((data[key] for key in ("author_name", "from") if isinstance(data.get(key), str)), "")
            author = data["author_id"] if isinstance(data.get("author_id"), str) else name
            addressed = data.get("addressed")
            listed = [str(item) for item in addressed] if isinstance(addressed, list) else []
            kind = data.get("author_kind", data.get("kind"))
            role: Role = "you" if author == speaker else _ROLES.get(kind if isinstance(kind, str) else "", "person")
            into.append(
                SceneLine(name, role, text, to_you=speaker in listed, to_others=bool(listed) and speaker not in listed)
            )
            return
        for value in data.values():
            _collect(value, speaker, into)
    elif isinstance(data, list):
        for item in data:
            _collect(item, speaker, into)
