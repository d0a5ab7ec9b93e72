"""What a request would cost a real model, for the offline stand-in's reports and the benchmarks: the stand-in
itself reports zero tokens."""

from __future__ import annotations

import json

from arbiter.contract import estimate_tokens
from bots.llm.base import CompletionRequest, DecisionRequest, decision_tool
from bots.llm.images import image_tokens

__all__ = ("estimate_prompt_tokens", "estimate_tokens")


def estimate_prompt_tokens(request: DecisionRequest | CompletionRequest) -> int:
    """About how many prompt tokens ``request`` would cost a real model: its system prompt, turns and tools (for
    a decision, the decide tool it would be sent with) and images (as Anthropic counts them)."""
    tools = (decision_tool(request),) if isinstance(request, DecisionRequest) else request.tools
    total = estimate_tokens(request.system) + 3
    for turn in request.turns:
        total += 4 + estimate_tokens(turn.text)
        total += sum(
            estimate_tokens(json.dumps(dict(call.arguments), ensure_ascii=False)) + 6 for call in turn.tool_calls
        )
        total += sum(estimate_tokens(result.content) + 6 for result in turn.tool_results)
        total += sum(image_tokens("anthropic", image) for image in turn.images)
    total += sum(
        estimate_tokens(tool.description) + estimate_tokens(json.dumps(dict(tool.parameters), ensure_ascii=False))
        for tool in tools
    )
    return total
