from __future__ import annotations

import pytest

from bench.prompt_cache import BUSY_DAY_PACE_S, CachedCall, busy_day
from bots.llm.pricing import PRICES

HAIKU = PRICES["claude-haiku-5-5"]  # caches 512 tokens or more, for 5 minutes
LUNA = PRICES["gpt-5.6-luna"]  # 1,024 or more, for 30 minutes


def call(at: float, beginning: str = "rin", tokens: int = 1_000) -> CachedCall:
    return CachedCall(at, beginning, tokens, prompt_tokens=tokens + 400, answer_tokens=150)


def test_a_beginning_is_written_then_read_while_it_lives_and_written_again_after() -> None:
    # Run seconds at the busy day's pace (one person's message every 144 s): no stretch.
    calls = [call(0), call(200), call(490), call(800, "theo"), call(1_200)]

    day = busy_day(calls, people=600, every_s=BUSY_DAY_PACE_S, price=HAIKU)

    # rin: written at 0, read at 200 and 490 (each read keeps it 5 more minutes), written again at 1,200 (710 s
    # after its last read); theo: written once.
    assert (day.usage.cache_write_tokens, day.usage.cache_read_tokens) == (3_000, 2_000)
    assert day.requests == 5
    assert day.cached < day.uncached


def test_a_beginning_below_the_models_minimum_is_never_cached() -> None:
    calls = [call(0, tokens=900), call(10, tokens=900)]

    luna, haiku = (busy_day(calls, 600, BUSY_DAY_PACE_S, price) for price in (LUNA, HAIKU))

    assert (luna.usage.cache_read_tokens, luna.usage.cache_write_tokens) == (0, 0)  # 900 < 1,024
    assert luna.cached == pytest.approx(luna.uncached)
    assert (haiku.usage.cache_read_tokens, haiku.usage.cache_write_tokens) == (900, 900)


def test_the_run_is_stretched_to_a_busy_days_pace_and_scaled_to_its_messages() -> None:
    # A person every 20 s in the run: 100 run seconds are 720 s of a busy day, past Haiku's 5 minutes.
    calls = [call(0), call(100)]

    day = busy_day(calls, people=2, every_s=20.0, price=HAIKU)

    assert day.requests == 600  # one request per message, 600 messages
    assert (day.usage.cache_read_tokens, day.usage.cache_write_tokens) == (0, 600_000)
    assert day.saved < 0  # written every time and never read: caching costs more
