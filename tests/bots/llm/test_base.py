"""The provider-neutral values and the decision parsing every adapter shares."""

from __future__ import annotations

from typing import Any

import pytest

from bots.llm import (
    ChatProvider,
    Completion,
    CompletionRequest,
    Decision,
    DecisionRequest,
    LLMBadOutput,
    LLMBadRequest,
    LLMRateLimited,
    LLMUnavailable,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
)
from bots.llm.base import (
    decision_schema,
    decision_tool,
    error_for_status,
    parse_decision,
    parse_decision_json,
    retry_after_from_headers,
)

ASK = DecisionRequest(system="s", turns=(), actions=("aizuchi", "remark"), max_lengths={"aizuchi": 10})
USAGE = Usage(10, 3)


def test_pass_is_always_allowed_and_listed_first() -> None:
    assert DecisionRequest(system="s", turns=(), actions=("remark", "aizuchi")).actions == ("pass", "remark", "aizuchi")
    assert DecisionRequest(system="s", turns=(), actions=("aizuchi", "pass", "aizuchi")).actions == ("pass", "aizuchi")


def test_an_unknown_action_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown actions"):
        DecisionRequest(system="s", turns=(), actions=("shout",))  # type: ignore[arg-type]


def test_a_decision_needs_text_unless_it_passes() -> None:
    assert Decision("pass").text == ""
    with pytest.raises(ValueError, match="needs a text"):
        Decision("remark", "  ")


@pytest.mark.parametrize(
    ("turn", "message"),
    [
        (lambda: Turn("user", tool_calls=(ToolCall("1", "status", {}),)), "only an assistant turn"),
        (lambda: Turn("assistant", tool_results=(ToolResult("1", "status", "{}"),)), "only a user turn"),
        (lambda: Turn("system", "hi"), "role"),  # type: ignore[arg-type]
    ],
)
def test_tool_calls_and_results_belong_to_their_roles(turn: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        turn()


def test_a_forced_tool_must_be_among_the_tools() -> None:
    status = ToolSpec("status", "level", {"type": "object", "properties": {}})
    assert CompletionRequest(system="s", turns=(), tools=(status,), tool_choice="status").tool_choice == "status"
    with pytest.raises(ValueError, match="not among"):
        CompletionRequest(system="s", turns=(), tools=(status,), tool_choice="consume")
    with pytest.raises(ValueError, match="at least one tool"):
        CompletionRequest(system="s", turns=(), tool_choice="required")


def test_the_decide_tool_is_the_same_whatever_the_claim_allows() -> None:
    tool = decision_tool(ASK)

    assert tool.name == "decide"
    assert tool.parameters == decision_schema(ASK)
    # Every action, whatever this claim allows: the tool is part of the prompt's cacheable beginning.
    assert tool.parameters["properties"]["action"]["enum"] == ["pass", "aizuchi", "remark", "long"]
    assert "aizuchi: " in tool.description
    assert "long: " in tool.description
    assert "at most 10 columns" in tool.description
    for actions in (("aizuchi",), ("remark",), ("remark", "long")):
        other = DecisionRequest(system="s", turns=(), actions=actions, max_lengths={"aizuchi": 10})
        assert decision_tool(other) == tool
    assert tool.strict is True  # every property required, no others: what strict modes want
    assert ToolSpec("status", "level", {"type": "object", "properties": {}}).strict is False


@pytest.mark.parametrize("make", [CompletionRequest, DecisionRequest])
def test_a_time_left_is_seconds_or_none(make: Any) -> None:
    assert make(system="s", turns=()).time_left_s is None
    assert make(system="s", turns=(), time_left_s=-1.0).time_left_s == -1.0  # none left: the call times out
    with pytest.raises(ValueError, match="time_left_s"):
        make(system="s", turns=(), time_left_s=float("nan"))


class Recording(ChatProvider):
    name = "recording"

    def __init__(self) -> None:
        self.requests: list[CompletionRequest] = []

    async def complete(self, request: CompletionRequest) -> Completion:
        self.requests.append(request)
        call = ToolCall("1", "decide", {"action": "aizuchi", "text": "Mm."})
        return Completion("", (call,), USAGE, "tool_use")


async def test_the_default_decide_passes_the_time_left_and_max_tokens_on() -> None:
    provider = Recording()
    request = DecisionRequest(system="s", turns=(), actions=("aizuchi",), max_tokens=99, time_left_s=12.5)

    result = await provider.decide(request)

    assert result.decision == Decision("aizuchi", "Mm.")
    [sent] = provider.requests
    assert (sent.time_left_s, sent.max_tokens, sent.tool_choice) == (12.5, 99, "decide")
    assert sent.tools[0].strict is True


def test_an_error_status_carries_the_servers_retry_hints() -> None:
    busy = error_for_status(503, "busy", {"retry-after-ms": "250", "x-should-retry": "true"})
    limited = error_for_status(429, "slow down", {"retry-after": "40"})
    refused = error_for_status(400, "no", {"x-should-retry": "false"})

    assert isinstance(busy, LLMUnavailable)
    assert (busy.retry_after, busy.should_retry) == (0.25, True)
    assert isinstance(limited, LLMRateLimited)
    assert (limited.retry_after, limited.should_retry, limited.status) == (40.0, None, 429)
    assert isinstance(refused, LLMBadRequest)
    assert refused.should_retry is False


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"action": "remark", "text": "  I agree.  "}, Decision("remark", "I agree.")),
        ({"action": "aizuchi", "text": "Mm."}, Decision("aizuchi", "Mm.")),
        ({"action": "pass", "text": "nothing to add"}, Decision("pass")),
        ({"action": "pass"}, Decision("pass")),
        ({"action": "aizuchi", "text": "Oh!", "mood": "happy"}, Decision("aizuchi", "Oh!")),
    ],
)
def test_a_usable_decision_is_parsed(arguments: dict[str, Any], expected: Decision) -> None:
    assert parse_decision(arguments, ASK, USAGE) == expected


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param(["remark", "hi"], id="not an object"),
        pytest.param("remark", id="a string"),
        pytest.param({"action": "pass", "text": ""}, id="a pass where it must answer"),
        pytest.param({"action": "Remark", "text": "hi"}, id="wrong case"),
        pytest.param({"text": "hi"}, id="no action"),
        pytest.param({"action": "remark"}, id="no text"),
        pytest.param({"action": "remark", "text": 42}, id="text not a string"),
        pytest.param({"action": "aizuchi", "text": ""}, id="empty text"),
    ],
)
def test_an_unusable_decision_is_bad_output_carrying_the_usage(arguments: object) -> None:
    must_answer = DecisionRequest(system="s", turns=(), actions=("aizuchi", "remark"), allow_pass=False)
    with pytest.raises(LLMBadOutput) as caught:
        parse_decision(arguments, must_answer, USAGE)

    assert caught.value.usage == USAGE


@pytest.mark.parametrize(
    ("allowed", "chosen", "kept"),
    [
        pytest.param(("remark",), "long", "remark", id="a long remark on a remark's claim is that remark"),
        pytest.param(("remark", "long"), "long", "long", id="allowed as it is"),
        pytest.param(("aizuchi",), "remark", None, id="a remark on a nod's claim"),
        pytest.param(("aizuchi",), "long", None, id="a long remark on a nod's claim"),
        pytest.param(("remark",), "aizuchi", None, id="a nod on a remark's claim"),
        pytest.param(("remark", "long"), "aizuchi", None, id="a nod on a long remark's claim"),
    ],
)
def test_a_tier_the_claim_does_not_allow_is_clamped_or_refused(
    allowed: tuple[str, ...], chosen: str, kept: str | None
) -> None:
    request = DecisionRequest(system="s", turns=(), actions=allowed)  # type: ignore[arg-type]
    arguments = {"action": chosen, "text": "Well, there is a lot to say about that."}

    if kept is None:
        with pytest.raises(LLMBadOutput, match="not one of") as caught:
            parse_decision(arguments, request, USAGE)
        assert caught.value.usage == USAGE
    else:
        assert parse_decision(arguments, request, USAGE).action == kept


def test_a_decision_in_json_text_is_decoded_first() -> None:
    assert parse_decision_json('{"action": "remark", "text": "Sure."}', ASK, USAGE) == Decision("remark", "Sure.")
    with pytest.raises(LLMBadOutput, match="not valid JSON"):
        parse_decision_json("Sure.", ASK, USAGE)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"retry-after": "7"}, 7.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_retry_after_comes_from_the_headers(headers: dict[str, str] | None, expected: float | None) -> None:
    assert retry_after_from_headers(headers) == expected
