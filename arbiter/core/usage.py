"""What an LLM call's tokens weigh against a channel's daily budget: each kind at its own price.

The budget counts tokens as an uncached input token costs. A token the provider read from its prompt cache costs
less (a tenth on Claude Haiku 5.5 and GPT-5.6), one written to it more (1.25 times, both): they count at those
rates, which the persona reports with the tokens (its provider's prices, ``bots.llm.pricing``). Output tokens
count one for one, as they always did. Pure; standard library only.
"""

from __future__ import annotations

import math

from arbiter.core.errors import InvalidRequest

__all__ = ("DEFAULT_READ_RATE", "DEFAULT_WRITE_RATE", "budget_tokens")

# The rates of the built-in providers' models, for a report that names none.
DEFAULT_READ_RATE = 0.1
DEFAULT_WRITE_RATE = 1.25


def budget_tokens(
    prompt: int,
    completion: int,
    *,
    cache_read: int = 0,
    cache_write: int = 0,
    read_rate: float = DEFAULT_READ_RATE,
    write_rate: float = DEFAULT_WRITE_RATE,
) -> int:
    """The tokens a call counts against the budget: ``prompt`` (every input token, the cache's ``cache_read`` and
    ``cache_write`` among them) less the cache's share, plus that share at its rates (rounded up), plus
    ``completion``. Raises InvalidRequest when the cache's share is more than the prompt it is a part of."""
    if cache_read + cache_write > prompt:
        raise InvalidRequest(
            "cache_read_tokens and cache_write_tokens are part of prompt_tokens: together at most as many",
            field="cache_read_tokens",
        )
    uncached = prompt - cache_read - cache_write
    return uncached + math.ceil(cache_read * read_rate + cache_write * write_rate) + completion
