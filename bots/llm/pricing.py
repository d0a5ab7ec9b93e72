"""What each model charges, and what its prompt cache takes: the one table of prices and caching facts, with where
each number comes from and when it was read. The adapters read it to decide whether a prompt's stable prefix is long
enough to mark for caching; the runtime reads it to weigh cached tokens in the channel's daily budget; the
conversation benchmark prices a busy channel-day with it.

Prices are US dollars per million tokens, for prompts within each model's first price band (Claude Haiku 5.5 up to
100,000 prompt tokens, GPT-5.6 up to 272,000: a persona's prompt is about 2,000). A cache write is the 5-minute one
on Anthropic (the default ``cache_control``; 1.25x input) and OpenAI's only one on GPT-5.6 (30 minutes, 1.25x input).
A cache read is input served from the cache. The minimum is the shortest prefix a model caches: a shorter one
marked for caching is processed in full, without an error and without a write.

Sources, read on 2026-11-27:

- Claude Haiku 5.5: platform.claude.com/docs/en/models/haiku-5-5/overview (input $0.10, output $0.50, 5m cache
  write $0.125, cache read $0.01; "The minimum cacheable prompt length is 512 tokens").
- Claude Sonnet 5.5 and Opus 5.5: the model overview pages (Sonnet $2 / $10, Opus $4 / $20, cache reads 5% of
  input since 2026-10-07, minimum 512 tokens each); Claude Haiku 4.5: the prompt caching page's table (minimum
  4,096) and the pricing page ($1 / $5, write $1.25, read $0.10).
- GPT-5.6 Luna and Terra: developers.openai.com/api/docs/models/gpt-5.6-luna (input $0.20, cached input $0.02,
  output $1.20; "Cache writes are billed at 1.25x the uncached input token rate"), the Terra page ($2.00 / $0.20 /
  $12.00), and developers.openai.com/api/docs/guides/prompt-caching ("The minimum cacheable prompt length is 1,024
  tokens for GPT-5.6 and later"; explicit breakpoints, ``prompt_cache_options.ttl`` 30m the default and only value).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from arbiter.contract import estimate_tokens

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.base import ToolSpec, Usage

__all__ = (
    "CHECKED",
    "PRICES",
    "UNKNOWN_CLAUDE_MIN",
    "ModelPrice",
    "cost",
    "min_cacheable",
    "model_price",
    "prefix_tokens",
    "uncached_cost",
)

CHECKED = "2026-11-27"
"""When the table was last read against the providers' pages."""

Vendor = Literal["anthropic", "openai"]


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One model's prices (USD per million tokens) and prompt cache.

    ``explicit_breakpoints``: OpenAI's GPT-5.6 and later take ``prompt_cache_breakpoint`` marks (and, without
    ``prompt_cache_options.mode = "explicit"``, also write an implicit breakpoint at the newest message, which a
    prompt whose end changes every time would pay for and never read)."""

    vendor: Vendor
    input: float
    output: float
    cache_write: float
    cache_read: float
    min_cacheable: int
    cache_ttl_s: float
    source: str
    explicit_breakpoints: bool = False

    @property
    def read_rate(self) -> float:
        """What a token read from the cache costs, as a share of an uncached input token."""
        return self.cache_read / self.input

    @property
    def write_rate(self) -> float:
        """What a token written to the cache costs, as a share of an uncached input token."""
        return self.cache_write / self.input


_ANTHROPIC_TTL = 5 * 60.0  # the default ephemeral cache, refreshed each time it is read
_OPENAI_TTL = 30 * 60.0  # prompt_cache_options.ttl "30m", the default and only value

# By the longest prefix of the model name (a dated snapshot matches its family).
PRICES: dict[str, ModelPrice] = {
    "claude-haiku-5-5": ModelPrice(
        "anthropic", 0.10, 0.50, 0.125, 0.01, 512, _ANTHROPIC_TTL, "platform.claude.com/docs/en/models/haiku-5-5"
    ),
    "claude-sonnet-5-5": ModelPrice(
        "anthropic", 2.00, 10.00, 2.50, 0.10, 512, _ANTHROPIC_TTL, "platform.claude.com/docs/en/models/sonnet-5-5"
    ),
    "claude-opus-5-5": ModelPrice(
        "anthropic", 4.00, 20.00, 5.00, 0.20, 512, _ANTHROPIC_TTL, "platform.claude.com/docs/en/models/opus-5-5"
    ),
    "claude-haiku-4-5": ModelPrice(
        "anthropic", 1.00, 5.00, 1.25, 0.10, 4096, _ANTHROPIC_TTL, "platform.claude.com/docs/en/about-claude/pricing"
    ),
    "gpt-5.6-luna": ModelPrice(
        "openai",
        0.20,
        1.20,
        0.25,
        0.02,
        1024,
        _OPENAI_TTL,
        "developers.openai.com/api/docs/models/gpt-5.6-luna",
        explicit_breakpoints=True,
    ),
    "gpt-5.6-terra": ModelPrice(
        "openai",
        2.00,
        12.00,
        2.50,
        0.20,
        1024,
        _OPENAI_TTL,
        "developers.openai.com/api/docs/models/gpt-5.6-terra",
        explicit_breakpoints=True,
    ),
}


def model_price(vendor: Vendor, model: str) -> ModelPrice | None:
    """The row for ``model`` of ``vendor``'s API, or None for a model the table does not know (an OpenAI-compatible
    server's, say: nothing is marked for caching there)."""
    matches = [prefix for prefix, row in PRICES.items() if model.startswith(prefix) and row.vendor == vendor]
    return PRICES[max(matches, key=len)] if matches else None


# A Claude model the table does not know: the longest minimum any Claude model documents, so that what is marked is
# long enough whatever the model (a shorter prefix would only be marked in vain: nothing is charged for that).
UNKNOWN_CLAUDE_MIN = 4096


def min_cacheable(vendor: Vendor, model: str) -> int | None:
    """The fewest tokens a prefix marked for caching must have on ``model``; None where nothing is to be marked (an
    OpenAI-compatible server's model: those servers cache, or not, on their own terms)."""
    price = model_price(vendor, model)
    if price is not None:
        return price.min_cacheable
    return UNKNOWN_CLAUDE_MIN if vendor == "anthropic" else None


def prefix_tokens(system: str, tools: Sequence[ToolSpec]) -> int:
    """About how many tokens the tools and the system prompt take: the beginning of a request both APIs cache (the
    tools come first on both). Estimated as :func:`arbiter.contract.estimate_tokens` counts, as the benchmarks do."""
    return estimate_tokens(system) + sum(
        estimate_tokens(tool.name)
        + estimate_tokens(tool.description)
        + estimate_tokens(json.dumps(dict(tool.parameters), ensure_ascii=False))
        for tool in tools
    )


def cost(usage: Usage, price: ModelPrice) -> float:
    """What ``usage`` costs in US dollars: uncached input, cache writes and reads, and output, each at its price."""
    uncached = usage.prompt_tokens - usage.cache_read_tokens - usage.cache_write_tokens
    return (
        uncached * price.input
        + usage.cache_write_tokens * price.cache_write
        + usage.cache_read_tokens * price.cache_read
        + usage.completion_tokens * price.output
    ) / 1_000_000


def uncached_cost(usage: Usage, price: ModelPrice) -> float:
    """What ``usage`` would cost with nothing cached: every prompt token at the input price."""
    return (usage.prompt_tokens * price.input + usage.completion_tokens * price.output) / 1_000_000
