"""Retries and timeouts within a turn's time: the SDK clients make none of their own; bots.llm.base does the
profile's few, only when the wait fits in what the turn has left.

First through the real SDK clients against the fake server (both adapters), then the shared loop alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

from bots.llm import (
    Decision,
    DecisionRequest,
    LLMBadRequest,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    Turn,
)
from bots.llm.base import call_with_retries
from tests.support.llm_server import decision_reply, delayed, error

if TYPE_CHECKING:
    from tests.bots.llm.conftest import MakeProvider
    from tests.support.llm_server import FakeLLMServer

APIS = ["anthropic", "openai"]
ANSWER = decision_reply("tools", {"action": "aizuchi", "text": "Mm."})


def ask(time_left_s: float | None) -> DecisionRequest:
    return DecisionRequest(
        system="You are Kai.", turns=(Turn("user", "Hana: morning!"),), actions=("aizuchi",), time_left_s=time_left_s
    )


# --- through the SDKs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
def test_the_sdk_clients_make_no_retries_of_their_own(make_provider: MakeProvider, api: str) -> None:
    provider = make_provider(api, max_retries=2)

    assert provider._client.max_retries == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("api", APIS)
async def test_a_429_whose_wait_outlasts_the_turn_is_raised_at_once_with_its_retry_after(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(429, "slow down", headers={"retry-after": "40"}))
    provider = make_provider(api, max_retries=2, timeout_s=60.0)  # even a timeout that would allow the wait
    started = time.monotonic()

    with pytest.raises(LLMRateLimited) as caught:
        await provider.decide(ask(time_left_s=25.0))

    assert time.monotonic() - started < 1.0  # no sleeping
    assert caught.value.retry_after == 40.0  # the runtime backs off that long
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_429_with_a_short_retry_after_is_retried_and_answers(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(429, "slow down", headers={"retry-after-ms": "50"}), ANSWER)
    started = time.monotonic()

    result = await make_provider(api, max_retries=1).decide(ask(time_left_s=25.0))

    assert result.decision == Decision("aizuchi", "Mm.")
    assert len(llm_server.requests) == 2
    assert time.monotonic() - started >= 0.05


@pytest.mark.parametrize("api", APIS)
async def test_a_server_that_hangs_is_cut_off_when_the_turns_time_is_up(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(delayed(10.0, ANSWER))
    provider = make_provider(api, timeout_s=5.0, max_retries=2)
    started = time.monotonic()

    with pytest.raises(LLMTimeout):
        await provider.decide(ask(time_left_s=0.5))

    elapsed = time.monotonic() - started
    assert 0.4 <= elapsed < 1.5  # the time left, well under the profile's 5 s
    assert len(llm_server.requests) == 1  # no time was left for a retry


@pytest.mark.parametrize("api", APIS)
async def test_a_503_with_no_retries_configured_is_one_request(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(503, "busy", headers={"retry-after-ms": "1"}))

    with pytest.raises(LLMUnavailable) as caught:
        await make_provider(api, max_retries=0).decide(ask(time_left_s=25.0))

    assert caught.value.status == 503
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_503_without_retry_after_backs_off_briefly_then_answers(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(503, "busy"), ANSWER)
    started = time.monotonic()

    result = await make_provider(api, max_retries=1).decide(ask(time_left_s=25.0))

    assert result.decision == Decision("aizuchi", "Mm.")
    assert 0.5 <= time.monotonic() - started < 1.5  # the first back-off step
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("api", APIS)
async def test_a_backoff_that_does_not_fit_in_the_time_left_is_not_taken(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    # A back-off far longer than the time left, so that waiting it out could not pass for a slow machine.
    llm_server.script(error(503, "busy", headers={"retry-after-ms": "20000"}))
    started = time.monotonic()

    with pytest.raises(LLMUnavailable) as caught:
        await make_provider(api, max_retries=2).decide(ask(time_left_s=10.0))

    assert time.monotonic() - started < 10.0
    assert caught.value.retry_after == 20.0
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_server_that_says_not_to_retry_is_not_retried(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(503, "busy", headers={"x-should-retry": "false", "retry-after-ms": "1"}))

    with pytest.raises(LLMUnavailable):
        await make_provider(api, max_retries=2).decide(ask(time_left_s=None))

    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", APIS)
async def test_with_no_time_left_no_request_is_made(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    with pytest.raises(LLMTimeout):
        await make_provider(api).decide(ask(time_left_s=0.0))

    assert llm_server.requests == []


@pytest.mark.parametrize("api", APIS)
async def test_without_a_time_budget_a_wait_longer_than_the_timeout_is_not_taken(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(429, "slow down", headers={"retry-after": "5"}))

    with pytest.raises(LLMRateLimited) as caught:
        await make_provider(api, timeout_s=2.0, max_retries=2).decide(ask(time_left_s=None))

    assert caught.value.retry_after == 5.0
    assert len(llm_server.requests) == 1


# --- the shared loop ------------------------------------------------------------------------------------


class Attempts:
    """Answers each attempt from a list: an exception is raised, anything else returned; records the timeouts."""

    def __init__(self, *outcomes: object) -> None:
        self.outcomes = list(outcomes)
        self.timeouts: list[float] = []

    async def __call__(self, timeout_s: float) -> object:
        self.timeouts.append(timeout_s)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


async def retry(attempts: Attempts, *, timeout_s: float = 8.0, max_retries: int = 2, left: float | None) -> object:
    return await call_with_retries(
        attempts, name="test", timeout_s=timeout_s, max_retries=max_retries, time_left_s=left
    )


async def test_each_attempt_gets_the_profiles_timeout_or_the_time_left_if_less() -> None:
    attempts = Attempts(LLMRateLimited("429", retry_after=0.01), "answer")

    assert await retry(attempts, timeout_s=8.0, left=3.0) == "answer"

    assert attempts.timeouts[0] == pytest.approx(3.0, abs=0.05)
    assert attempts.timeouts[1] == pytest.approx(2.99, abs=0.05)
    assert await retry(Attempts("answer"), left=None) == "answer"


async def test_only_retryable_errors_are_retried() -> None:
    attempts = Attempts(LLMBadRequest("400", status=400), "answer")

    with pytest.raises(LLMBadRequest):
        await retry(attempts, left=None)

    assert len(attempts.timeouts) == 1


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(LLMRateLimited("429", retry_after=0.01), id="429"),
        pytest.param(LLMUnavailable("503", retry_after=0.01), id="5xx"),
        pytest.param(LLMTimeout("slow", retry_after=0.01), id="timeout"),
    ],
)
async def test_retries_stop_at_max_retries(failure: Exception) -> None:
    attempts = Attempts(failure, failure, failure, "never reached")

    with pytest.raises(type(failure)):
        await retry(attempts, max_retries=2, left=None)

    assert len(attempts.timeouts) == 3


async def test_an_attempt_that_outlasts_its_time_is_cut_off_as_a_timeout() -> None:
    async def hangs(timeout_s: float) -> object:
        await asyncio.sleep(10 * timeout_s)
        return "too late"

    started = time.monotonic()
    with pytest.raises(LLMTimeout):
        await call_with_retries(hangs, name="test", timeout_s=0.1, max_retries=0, time_left_s=None)

    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("left", [0.0, -1.0])
async def test_no_time_left_is_a_timeout_without_an_attempt(left: float) -> None:
    attempts = Attempts("answer")

    with pytest.raises(LLMTimeout):
        await retry(attempts, left=left)

    assert attempts.timeouts == []
