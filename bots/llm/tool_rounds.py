"""A decision with tools: the model may call a persona's tools for a few rounds, then it decides.

Each round is one :meth:`ChatProvider.complete` call offering the tools and the ``decide`` tool, with tool use
required (Anthropic ``any``, OpenAI ``required``): the model either calls tools, whose results go back to it in the
next round, or decides. The last round forces ``decide``. Every round offers the same tools, because a request whose
turns hold tool calls must declare tools (Anthropic refuses it otherwise).

Time: the rounds share the request's ``time_left_s``; a tool call gets at most half of what is left then (and its own
timeout, see :class:`bots.mcp_host.ToolHost`), so the decision always has time to be made. Forcing a tool is refused
with thinking on, so this needs a profile that decides by a forced call (``structured_output = "tools"``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeAlias

from bots.llm.base import (
    DECIDE_TOOL,
    CompletionRequest,
    DecisionResult,
    LLMBadOutput,
    ToolCall,
    ToolResult,
    Turn,
    Usage,
    decision_tool,
    parse_decision,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.base import ChatProvider, DecisionRequest, ToolSpec

__all__ = ("DEFAULT_ROUNDS", "ToolRunner", "answer_calls", "decide_with_tools")

_log = logging.getLogger(__name__)

DEFAULT_ROUNDS = 3  # tool rounds and the decision included: at most this many requests per turn
TOOLS_NOTE = (
    "You may first call the other tools to look something up (only when it helps you answer); then call decide."
)

# (call, seconds it may take or None) -> its result; it never raises for what the tool does.
ToolRunner: TypeAlias = Callable[[ToolCall, float | None], Awaitable[ToolResult]]


async def answer_calls(calls: Sequence[ToolCall], run: ToolRunner, time_s: float | None) -> Turn:
    """The user turn answering ``calls``: one result each, in order (both APIs want every call answered)."""
    results = [await run(call, time_s) for call in calls]
    return Turn(role="user", tool_results=tuple(results))


async def decide_with_tools(
    provider: ChatProvider,
    request: DecisionRequest,
    tools: Sequence[ToolSpec],
    run: ToolRunner,
    *,
    rounds: int = DEFAULT_ROUNDS,
    on_request: Callable[[], None] = lambda: None,
    on_answer: Callable[[Usage], Awaitable[None]] | None = None,
) -> DecisionResult:
    """The model's decision after at most ``rounds - 1`` rounds of tool calls.

    ``on_request`` is called before each request (a round is an LLM request), ``on_answer`` with the usage of each
    answered round before the deciding one (whose usage is the result's, or the error's)."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    loop = asyncio.get_running_loop()
    deadline = None if request.time_left_s is None else loop.time() + request.time_left_s
    decide = decision_tool(request)
    offered = (*tools, decide)
    system = f"{request.system}\n\n{TOOLS_NOTE}" if tools else request.system
    turns: list[Turn] = list(request.turns)
    forced = False
    for round_no in range(1, rounds + 1):
        last = forced or round_no == rounds
        left = None if deadline is None else round(deadline - loop.time(), 3)
        completion_request = CompletionRequest(
            system=system,
            turns=tuple(turns),
            tools=offered,
            tool_choice=DECIDE_TOOL if last else "required",
            max_tokens=request.max_tokens,
            time_left_s=left,
            scene=request.scene,
            cache_key=request.cache_key,
        )
        on_request()
        completion = await provider.complete(completion_request)
        chosen = next((call for call in completion.tool_calls if call.name == DECIDE_TOOL), None)
        if chosen is not None:
            return DecisionResult(parse_decision(chosen.arguments, request, completion.usage), completion.usage)
        if last:
            raise LLMBadOutput(
                f"the model did not call {DECIDE_TOOL!r} (stop reason {completion.stop_reason})",
                usage=completion.usage,
            )
        if on_answer is not None:
            await on_answer(completion.usage)
        if not completion.tool_calls:
            # A server that let it answer in words (tool use required, though): the next round forces the decision.
            forced = True
            continue
        _log.debug("tool round %d: %s", round_no, ", ".join(_shown(call) for call in completion.tool_calls))
        turns.append(Turn(role="assistant", text=completion.text, tool_calls=completion.tool_calls))
        # Half of what is left at most, so that the decision still has time after the slowest tool.
        budget = None if deadline is None else max(0.0, (deadline - loop.time()) / 2)
        turns.append(await answer_calls(completion.tool_calls, run, budget))
    raise LLMBadOutput(f"no {DECIDE_TOOL!r} call within {rounds} rounds")


def _shown(call: ToolCall) -> str:
    arguments = json.dumps(call.arguments, ensure_ascii=False)
    return f"{call.name}({arguments[:80]})"
