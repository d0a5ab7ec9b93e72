"""What the Anthropic adapter sends on the wire, as the real SDK client sends it to the fake server."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from bots.llm import CompletionRequest, Decision, DecisionRequest, ToolCall, ToolResult, ToolSpec, Turn, Usage
from tests.support.llm_server import FAKE_KEY, decision_reply, raw, text_reply, tool_call

if TYPE_CHECKING:
    from tests.bots.llm.conftest import MakeProvider
    from tests.support.llm_server import FakeLLMServer

HISTORY = ToolSpec("history", "Recent messages.", {"type": "object", "properties": {}})
CONSUME = ToolSpec(
    "consume",
    "Spend from the pool and speak.",
    {"type": "object", "properties": {"tier": {"type": "string"}, "text": {"type": "string"}}},
)
ASK = DecisionRequest(system="You are Kai.", turns=(Turn("user", "Hana: morning!"),), actions=("aizuchi",))


async def test_a_decision_request_forces_the_decide_tool_without_temperature(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "aizuchi", "text": "Morning!"}))

    await make_provider("anthropic", max_tokens=300).decide(ASK)

    request = llm_server.requests[0]
    assert request.path == "/v1/messages"
    assert request.headers["Authorization"] == f"Bearer {FAKE_KEY}"
    body = request.body
    assert body["model"] == "claude-haiku-5-5"
    assert body["max_tokens"] == 300
    assert body["system"] == "You are Kai."
    assert body["messages"] == [{"role": "user", "content": "Hana: morning!"}]
    assert body["tool_choice"] == {"type": "tool", "name": "decide"}
    assert [tool["name"] for tool in body["tools"]] == ["decide"]
    # The decision schema is strict-compatible: the API guarantees the call matches it.
    assert body["tools"][0]["strict"] is True
    assert body["tools"][0]["input_schema"]["additionalProperties"] is False
    assert not {"temperature", "top_p", "top_k"} & set(body)
    # Forced tool use and thinking do not mix; thinking is off unless the profile says otherwise.
    assert body["thinking"] == {"type": "disabled"}


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"type": "auto"}),
        ("required", {"type": "any"}),
        ("none", {"type": "none"}),
        ("consume", {"type": "tool", "name": "consume"}),
    ],
)
async def test_tool_choice_maps_to_anthropics_form(
    llm_server: FakeLLMServer, make_provider: MakeProvider, choice: str, expected: dict[str, str]
) -> None:
    llm_server.script(text_reply("ok"))

    await make_provider("anthropic").complete(
        CompletionRequest(system="", turns=ASK.turns, tools=(HISTORY, CONSUME), tool_choice=choice)
    )

    body = llm_server.requests[0].body
    assert body["tool_choice"] == expected
    assert body["tools"][1] == {
        "name": "consume",
        "description": "Spend from the pool and speak.",
        "input_schema": dict(CONSUME.parameters),
    }
    assert "system" not in body


async def test_strict_tools_can_be_turned_off_for_a_server_that_refuses_the_field(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "aizuchi", "text": "Morning!"}))

    await make_provider("anthropic", strict_tools=False).decide(ASK)

    assert "strict" not in llm_server.requests[0].body["tools"][0]


async def test_tool_calls_and_results_go_back_as_tool_use_and_tool_result_blocks(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(tool_call("history", {}), text_reply("done"))
    provider = make_provider("anthropic")
    first = await provider.complete(CompletionRequest(system="s", turns=ASK.turns, tools=(HISTORY, CONSUME)))
    call = first.tool_calls[0]
    failed = ToolCall("toolu_earlier", "consume", {"tier": "remark", "text": "hi"})

    await provider.complete(
        CompletionRequest(
            system="s",
            turns=(
                *ASK.turns,
                Turn("assistant", "Let me look.", tool_calls=(call, failed)),
                Turn(
                    "user",
                    tool_results=(
                        ToolResult(call.id, "history", '{"messages": []}'),
                        ToolResult("toolu_earlier", "consume", '{"granted": false}', is_error=True),
                    ),
                ),
            ),
            tools=(HISTORY, CONSUME),
        )
    )

    messages = llm_server.requests[1].body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": call.id, "name": "history", "input": {}},
            {"type": "tool_use", "id": "toolu_earlier", "name": "consume", "input": {"tier": "remark", "text": "hi"}},
        ],
    }
    assert messages[2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": call.id, "content": '{"messages": []}'},
            {"type": "tool_result", "tool_use_id": "toolu_earlier", "content": '{"granted": false}', "is_error": True},
        ],
    }


async def test_json_schema_mode_asks_for_structured_output_instead_of_a_tool(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("json_schema", {"action": "aizuchi", "text": "Morning!"}))

    result = await make_provider("anthropic", structured_output="json_schema", thinking="model_default").decide(ASK)

    assert result.decision == Decision("aizuchi", "Morning!")
    body = llm_server.requests[0].body
    assert body["output_config"]["format"]["type"] == "json_schema"
    # Every action in the schema, whatever the claim: what this one allows is checked on the answer.
    assert body["output_config"]["format"]["schema"]["properties"]["action"]["enum"] == [
        "pass",
        "aizuchi",
        "remark",
        "long",
    ]
    assert "tools" not in body
    assert "tool_choice" not in body
    # A model that always thinks gets no thinking parameter at all.
    assert "thinking" not in body


async def test_extra_body_is_sent_as_is(llm_server: FakeLLMServer, make_provider: MakeProvider) -> None:
    llm_server.script(decision_reply("tools", {"action": "pass", "text": ""}))

    await make_provider("anthropic", extra_body={"output_config": {"effort": "low"}}).decide(ASK)

    assert llm_server.requests[0].body["output_config"] == {"effort": "low"}


async def test_blocks_are_read_by_type_and_cached_input_counts_as_input(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-5-5",
        "content": [
            {"type": "thinking", "thinking": "", "signature": "sig"},
            {"type": "text", "text": "Sounds fun."},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "cache_creation_input_tokens": 100,
            "cache_read_input_tokens": 300,
            "output_tokens": 30,
        },
    }
    llm_server.script(raw(json.dumps(message)))

    completion = await make_provider("anthropic").complete(CompletionRequest(system="s", turns=ASK.turns))

    assert completion.text == "Sounds fun."
    # Every input token counts, and the cache's share is kept apart: each has its own price.
    assert completion.usage == Usage(412, 30, cache_read_tokens=300, cache_write_tokens=100)


async def test_empty_turns_are_left_out(llm_server: FakeLLMServer, make_provider: MakeProvider) -> None:
    llm_server.script(text_reply("ok"))

    await make_provider("anthropic").complete(
        CompletionRequest(system="s", turns=(Turn("user", "hi"), Turn("assistant", ""), Turn("user", "so?")))
    )

    assert llm_server.requests[0].body["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "so?"},
    ]
