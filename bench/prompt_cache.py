"""The providers' prompt caches replayed on a benchmark run's requests, and what a busy channel-day costs with and
without them, at the prices of ``bots.llm.pricing``.

The scripted provider spends no tokens, so each request's sizes are estimated from the prompt it was really sent
(``bots.llm.scripted.estimate_prompt_tokens``), and its stable beginning (the tools and the system prompt, what the
adapters mark for caching) from the same text the adapters measure (``bots.llm.pricing.prefix_tokens``). A cache
entry is keyed by that beginning's exact text: the same text within the model's cache lifetime is read, else written,
and a beginning shorter than the model's minimum is neither, as the APIs document (``tests.support.llm_cache``).

A busy channel-day is 600 people's messages (the issue's busy channel). The run's conversation is stretched to that
pace for the cache lifetime: a person's message every 144 s, where the run has one every ``--every`` seconds, so a
persona's prompt waits as long between its calls as it would on such a day.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bots.llm.base import DecisionRequest, Usage, decision_tool
from bots.llm.pricing import cost, prefix_tokens, uncached_cost

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.base import CompletionRequest
    from bots.llm.pricing import ModelPrice

__all__ = ("BUSY_DAY_MESSAGES", "BUSY_DAY_PACE_S", "CachedCall", "DayCost", "busy_day", "stable_beginning")

BUSY_DAY_MESSAGES = 600
BUSY_DAY_PACE_S = 86_400 / BUSY_DAY_MESSAGES  # seconds between a person's messages on a busy day


@dataclass(frozen=True, slots=True)
class CachedCall:
    """One request of a run: when (conversation seconds), its stable beginning (a digest and its tokens), and its
    prompt and answer tokens in all."""

    at: float
    beginning: str
    beginning_tokens: int
    prompt_tokens: int
    answer_tokens: int


def stable_beginning(request: DecisionRequest | CompletionRequest) -> tuple[str, int]:
    """The digest and the tokens of what a request sends before the conversation: the tools (for a decision, its
    decide tool) and the system prompt."""
    tools = (decision_tool(request),) if isinstance(request, DecisionRequest) else request.tools
    text = json.dumps(
        [request.system, *({"name": t.name, "description": t.description, **t.parameters} for t in tools)],
        ensure_ascii=False,
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest(), prefix_tokens(request.system, tools)


@dataclass(frozen=True, slots=True)
class DayCost:
    """A busy channel-day on one model: its requests' tokens as the cache saw them, and what they cost."""

    requests: float
    usage: Usage  # the day's tokens in all
    cached: float  # US dollars
    uncached: float

    @property
    def saved(self) -> float:
        return 1 - self.cached / self.uncached if self.uncached else 0.0


def _replay(calls: Sequence[CachedCall], price: ModelPrice, stretch: float) -> list[Usage]:
    """Each call's usage as the model's cache would report it, the run's time stretched by ``stretch``."""
    expires: dict[str, float] = {}
    usages = []
    for call in sorted(calls, key=lambda c: c.at):
        at = call.at * stretch
        read = written = 0
        if call.beginning_tokens >= price.min_cacheable:
            if expires.get(call.beginning, float("-inf")) > at:
                read = call.beginning_tokens
            else:
                written = call.beginning_tokens
            expires[call.beginning] = at + price.cache_ttl_s  # a read refreshes the entry too
        usages.append(Usage(call.prompt_tokens, call.answer_tokens, cache_read_tokens=read, cache_write_tokens=written))
    return usages


def busy_day(calls: Sequence[CachedCall], people: int, every_s: float, price: ModelPrice) -> DayCost:
    """A busy channel-day on ``price``'s model, from a run of ``calls`` in which a person said ``people`` messages,
    one every ``every_s`` seconds."""
    usages = _replay(calls, price, BUSY_DAY_PACE_S / every_s)
    scale = BUSY_DAY_MESSAGES / max(1, people)  # the run's requests per person's message, over a day's messages
    total = Usage(
        round(sum(u.prompt_tokens for u in usages) * scale),
        round(sum(u.completion_tokens for u in usages) * scale),
        cache_read_tokens=round(sum(u.cache_read_tokens for u in usages) * scale),
        cache_write_tokens=round(sum(u.cache_write_tokens for u in usages) * scale),
    )
    return DayCost(len(usages) * scale, total, cost(total, price), uncached_cost(total, price))
