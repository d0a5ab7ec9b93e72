"""What the OpenAI adapter sends on the wire, as the real SDK client sends it to the fake server."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from bots.llm import (
    CompletionRequest,
    Decision,
    DecisionRequest,
    LLMBadOutput,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
)
from tests.support.llm_server import FAKE_KEY, decision_reply, raw, text_reply, tool_call

if TYPE_CHECKING:
    from tests.bots.llm.conftest import MakeProvider
    from tests.support.llm_server import FakeLLMServer

STATUS = ToolSpec("status", "The pool's level.", {"type": "object", "properties": {}})
CONSUME = ToolSpec(
    "consume",
    "Spend from the pool and speak.",
    {"type": "object", "properties": {"tier": {"type": "string"}, "text": {"type": "string"}}},
)
ASK = DecisionRequest(system="You are Mio.", turns=(Turn("user", "Kai: anyone up for a walk?"),), actions=("remark",))


async def test_a_decision_request_forces_the_decide_function(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "remark", "text": "Count me in!"}))

    await make_provider("openai", max_tokens=200).decide(ASK)

    request = llm_server.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {FAKE_KEY}"
    body = request.body
    assert body["model"] == "gpt-5.6-luna"
    assert body["max_completion_tokens"] == 200
    assert "max_tokens" not in body
    assert body["messages"] == [
        {"role": "system", "content": "You are Mio."},
        {"role": "user", "content": "Kai: anyone up for a walk?"},
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "decide"}}
    assert body["tools"][0]["type"] == "function"
    assert body["tools"][0]["function"]["name"] == "decide"
    # The decision schema is strict-compatible: the API guarantees the call matches it.
    assert body["tools"][0]["function"]["strict"] is True
    # Function tools on GPT-5.6 need reasoning off (the built-in profile's extra_body).
    assert body["reasoning_effort"] == "none"
    assert "temperature" not in body


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("required", "required"),
        ("none", "none"),
        ("consume", {"type": "function", "function": {"name": "consume"}}),
    ],
)
async def test_tool_choice_maps_to_openais_form(
    llm_server: FakeLLMServer, make_provider: MakeProvider, choice: str, expected: Any
) -> None:
    llm_server.script(text_reply("ok"))

    await make_provider("openai").complete(
        CompletionRequest(system="", turns=ASK.turns, tools=(STATUS, CONSUME), tool_choice=choice)
    )

    body = llm_server.requests[0].body
    assert body["tool_choice"] == expected
    assert body["tools"][1] == {
        "type": "function",
        "function": {
            "name": "consume",
            "description": "Spend from the pool and speak.",
            "parameters": dict(CONSUME.parameters),
        },
    }
    assert body["messages"][0]["role"] == "user"  # no empty system message


async def test_strict_tools_can_be_turned_off_for_a_server_that_refuses_the_field(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "remark", "text": "Count me in!"}))

    await make_provider("openai", strict_tools=False).decide(ASK)

    assert "strict" not in llm_server.requests[0].body["tools"][0]["function"]


async def test_tool_calls_go_back_with_json_arguments_and_results_as_tool_messages(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(tool_call("status", {}), text_reply("done"))
    provider = make_provider("openai")
    first = await provider.complete(CompletionRequest(system="s", turns=ASK.turns, tools=(STATUS, CONSUME)))
    call = first.tool_calls[0]
    refused = ToolCall("call_earlier", "consume", {"tier": "remark", "text": "Sure!"})

    await provider.complete(
        CompletionRequest(
            system="s",
            turns=(
                *ASK.turns,
                Turn("assistant", tool_calls=(call, refused)),
                Turn(
                    "user",
                    "(the level moved)",
                    tool_results=(
                        ToolResult(call.id, "status", '{"level": 40}'),
                        ToolResult("call_earlier", "consume", "claim expired", is_error=True),
                    ),
                ),
            ),
            tools=(STATUS, CONSUME),
        )
    )

    messages = llm_server.requests[1].body["messages"]
    assert messages[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "status", "arguments": "{}"}},
            {
                "id": "call_earlier",
                "type": "function",
                "function": {"name": "consume", "arguments": json.dumps({"tier": "remark", "text": "Sure!"})},
            },
        ],
    }
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": call.id, "content": '{"level": 40}'},
        {"role": "tool", "tool_call_id": "call_earlier", "content": "error: claim expired"},
        {"role": "user", "content": "(the level moved)"},
    ]


async def test_json_schema_mode_sends_a_strict_response_format(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("json_schema", {"action": "remark", "text": "Yes, let's go."}))

    result = await make_provider("openai", structured_output="json_schema").decide(ASK)

    assert result.decision == Decision("remark", "Yes, let's go.")
    body = llm_server.requests[0].body
    response_format = body["response_format"]
    assert response_format["type"] == "json_schema"
    assert response_format["json_schema"]["strict"] is True
    assert response_format["json_schema"]["schema"]["additionalProperties"] is False
    assert "tools" not in body
    assert "remark" in body["messages"][0]["content"]  # the instructions travel in the system message


async def test_older_servers_get_max_tokens_and_extra_body_passes_through(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    llm_server.script(decision_reply("tools", {"action": "pass", "text": ""}))
    # A compatible server's model (vLLM's, say): OpenAI itself refuses both max_tokens and top_k on its models.
    provider = make_provider(
        "openai",
        model="Qwen/Qwen3-8B",
        max_tokens_param="max_tokens",
        max_tokens=64,
        extra_body={"reasoning_effort": "none", "top_k": 20},
    )

    await provider.decide(ASK)

    body = llm_server.requests[0].body
    assert body["max_tokens"] == 64
    assert "max_completion_tokens" not in body
    assert body["reasoning_effort"] == "none"
    assert body["top_k"] == 20


async def test_a_refusal_in_json_schema_mode_is_bad_output(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    refusal = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-5.6-luna",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": "I can't help with that."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 50, "completion_tokens": 6, "total_tokens": 56},
    }
    llm_server.script(raw(json.dumps(refusal)))

    with pytest.raises(LLMBadOutput) as caught:
        await make_provider("openai", structured_output="json_schema").decide(ASK)

    assert caught.value.usage == Usage(50, 6)


async def test_a_server_that_sends_argument_objects_or_no_usage_still_works(
    llm_server: FakeLLMServer, make_provider: MakeProvider
) -> None:
    # Some OpenAI-compatible servers send arguments as an object and leave usage out.
    answer = {
        "id": "chatcmpl-2",
        "object": "chat.completion",
        "created": 1,
        "model": "llama3",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "decide", "arguments": {"action": "remark", "text": "Sure."}},
                        }
                    ],
                },
                "finish_reason": "stop",
            }
        ],
    }
    llm_server.script(raw(json.dumps(answer)))

    result = await make_provider("openai").decide(ASK)

    assert result.decision == Decision("remark", "Sure.")
    assert result.usage == Usage(0, 0)
