from __future__ import annotations

import pytest

from arbiter.core.errors import InvalidRequest
from arbiter.core.usage import budget_tokens


@pytest.mark.parametrize(
    ("tokens", "rates", "weighed"),
    [
        pytest.param((1_000, 100, 0, 0), (0.1, 1.25), 1_100, id="nothing cached: one for one"),
        pytest.param((1_000, 100, 800, 0), (0.1, 1.25), 200 + 80 + 100, id="read from the cache: a tenth"),
        pytest.param((1_000, 100, 0, 800), (0.1, 1.25), 200 + 1_000 + 100, id="written to it: a quarter more"),
        pytest.param((1_000, 100, 800, 0), (0.05, 1.25), 200 + 40 + 100, id="a model whose reads cost 5%"),
        pytest.param((3, 0, 1, 1), (0.1, 1.25), 1 + 2, id="a part of a token counts as one"),
    ],
)
def test_cached_tokens_count_against_the_budget_at_their_own_price(
    tokens: tuple[int, int, int, int], rates: tuple[float, float], weighed: int
) -> None:
    prompt, completion, read, written = tokens
    read_rate, write_rate = rates

    counted = budget_tokens(
        prompt, completion, cache_read=read, cache_write=written, read_rate=read_rate, write_rate=write_rate
    )

    assert counted == weighed


def test_the_caches_share_is_a_part_of_the_prompt() -> None:
    with pytest.raises(InvalidRequest, match="part of prompt_tokens"):
        budget_tokens(10, 0, cache_read=8, cache_write=8)
