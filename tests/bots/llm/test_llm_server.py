"""The fake wire server refuses what the real APIs refuse (tests.support.llm_server says where each rule comes
from), in their own error format, and accepts what our adapters send for every built-in and example profile.

Raw aiohttp drives the rules one request body at a time; the real SDK clients show how a refusal reaches them.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import anthropic
import openai
import pytest

from bots.llm import (
    BUILTIN_PROFILES,
    CompletionRequest,
    DecisionRequest,
    LLMBadRequest,
    ProviderProfile,
    ToolResult,
    Turn,
    create_provider,
    load_profiles,
)
from bots.tool_loop import TOOLS
from tests.support.llm_server import (
    FAKE_KEY,
    FAKE_KEY_ENV,
    FakeLLMServer,
    decision_reply,
    fake_profile,
    text_reply,
    tool_call,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

EXAMPLE = Path(__file__).resolve().parents[3] / "profiles.example.toml"

STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"action": {"type": "string"}, "text": {"type": "string"}},
    "required": ["action", "text"],
    "additionalProperties": False,
}
LOOSE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"action": {"type": "string"}, "text": {"type": "string"}},
}

CLAUDE_OK: dict[str, Any] = {
    "model": "claude-haiku-5-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Mio: ramen tonight?"}],
    "thinking": {"type": "disabled"},
}
CLAUDE_TOOL = {"name": "decide", "description": "Decide.", "input_schema": LOOSE_SCHEMA}
GPT_OK: dict[str, Any] = {
    "model": "gpt-5.6-luna",
    "messages": [{"role": "user", "content": "Mio: ramen tonight?"}],
    "max_completion_tokens": 64,
}


CLAUDE_TOOL_TURNS = [
    {"role": "user", "content": "Mio: when is the event?"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "decide", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Saturday"}]},
]
GPT_TOOL_TURNS = [
    {"role": "user", "content": "Mio: when is the event?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "decide", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "Saturday"},
]


def gpt_tool(schema: dict[str, Any], *, strict: bool | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": "decide", "description": "Decide.", "parameters": schema}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


def edited(base: dict[str, Any], drop: tuple[str, ...] = (), **changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(base)
    for name in drop:
        del body[name]
    body.update(changes)
    return body


@pytest.fixture
async def server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as running:
        yield running


async def post(server: FakeLLMServer, api: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    url = f"{server.anthropic_url}/v1/messages" if api == "anthropic" else f"{server.openai_url}/chat/completions"
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, dict(response.headers), await response.json()


def claude_image(source: dict[str, Any], role: str = "user") -> list[dict[str, Any]]:
    """Messages whose last shows one image block with ``source``."""
    return [{"role": role, "content": [{"type": "image", "source": source}, {"type": "text", "text": "Look!"}]}]


def gpt_image(image_url: dict[str, Any], role: str = "user", count: int = 1) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": image_url} for _ in range(count)]
    return [{"role": role, "content": [*parts, {"type": "text", "text": "Look!"}]}]


PHOTO = "https://cdn.discordapp.com/attachments/1/2/cat.png?ex=6a1b2c3d&is=6a19dabd&hm=abc"
PNG_DATA = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


# --- Anthropic Messages ---------------------------------------------------------------------------------

CLAUDE_REFUSED = [
    pytest.param(
        edited(CLAUDE_OK, messages=claude_image({"type": "base64", "media_type": "image/bmp", "data": PNG_DATA})),
        "media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        id="image of a media type the API does not take",
    ),
    pytest.param(
        edited(CLAUDE_OK, messages=claude_image({"type": "url", "url": "file:///etc/hosts"})),
        "not a URL the API can fetch",
        id="image address not on the web",
    ),
    pytest.param(
        edited(CLAUDE_OK, messages=claude_image({"type": "link", "url": PHOTO})),
        "does not match any of the expected tags",
        id="image source of an unknown type",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            messages=[*claude_image({"type": "url", "url": PHOTO}, role="assistant"), CLAUDE_OK["messages"][0]],
        ),
        "image blocks are only allowed in user messages",
        id="image in an assistant message",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            messages=[{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": PHOTO}}] * 601}],
        ),
        "too many images",
        id="more images than a request takes",
    ),
    pytest.param(edited(CLAUDE_OK, drop=("model",)), "model: Field required", id="no model"),
    pytest.param(edited(CLAUDE_OK, drop=("max_tokens",)), "max_tokens: Field required", id="no max_tokens"),
    pytest.param(edited(CLAUDE_OK, drop=("messages",)), "messages: Field required", id="no messages"),
    pytest.param(edited(CLAUDE_OK, messages=[]), "at least one message", id="empty messages"),
    pytest.param(
        edited(CLAUDE_OK, response_format={"type": "json_object"}),
        "response_format: Extra inputs are not permitted",
        id="unknown parameter",
    ),
    pytest.param(edited(CLAUDE_OK, temperature=0.2), "`temperature` is deprecated", id="temperature"),
    pytest.param(edited(CLAUDE_OK, top_p=0.9), "`top_p` is deprecated", id="top_p"),
    pytest.param(edited(CLAUDE_OK, top_k=40), "`top_k` is deprecated", id="top_k"),
    pytest.param(
        edited(CLAUDE_OK, messages=[*CLAUDE_OK["messages"], {"role": "assistant", "content": "Well,"}]),
        "does not support assistant message prefill",
        id="assistant prefill",
    ),
    pytest.param(
        edited(CLAUDE_OK, drop=("thinking",), tools=[CLAUDE_TOOL], tool_choice={"type": "tool", "name": "decide"}),
        "Thinking may not be enabled when tool_choice forces tool use",
        id="forced tool, thinking left on by default",
    ),
    pytest.param(
        edited(CLAUDE_OK, thinking={"type": "adaptive"}, tools=[CLAUDE_TOOL], tool_choice={"type": "any"}),
        "Thinking may not be enabled when tool_choice forces tool use",
        id="any tool, adaptive thinking",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            model="claude-opus-4-6",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 2048},
            tools=[CLAUDE_TOOL],
            tool_choice={"type": "any"},
        ),
        "Thinking may not be enabled when tool_choice forces tool use",
        id="any tool, thinking enabled",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            model="claude-opus-5-5",
            drop=("thinking",),
            tools=[CLAUDE_TOOL],
            tool_choice={"type": "tool", "name": "decide"},
        ),
        "forcing tool use",
        id="forced tool on a model that always thinks",
    ),
    pytest.param(
        edited(CLAUDE_OK, model="claude-opus-5-5"),
        '"thinking.type.disabled" is not supported for this model',
        id="thinking disabled on a model that always thinks",
    ),
    pytest.param(
        edited(CLAUDE_OK, thinking={"type": "enabled", "budget_tokens": 2048}, max_tokens=4096),
        '"thinking.type.enabled" is not supported for this model',
        id="manual thinking on Haiku 5.5",
    ),
    pytest.param(
        edited(CLAUDE_OK, model="claude-opus-4-6", thinking={"type": "enabled", "budget_tokens": 500}),
        "greater than or equal to 1024",
        id="thinking budget too small",
    ),
    pytest.param(
        edited(CLAUDE_OK, messages=CLAUDE_TOOL_TURNS),
        "Requests which include tool_use or tool_result blocks must define tools.",
        id="tool blocks without tools",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            tools=[CLAUDE_TOOL],
            messages=[CLAUDE_TOOL_TURNS[0], CLAUDE_TOOL_TURNS[1], {"role": "user", "content": "And?"}],
        ),
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1.",
        id="a tool call left unanswered",
    ),
    pytest.param(
        edited(CLAUDE_OK, tools=[{**CLAUDE_TOOL, "input_schema": {"type": "array", "items": {"type": "string"}}}]),
        "tools.0.custom.input_schema.type: Input should be 'object'",
        id="input_schema not an object",
    ),
    pytest.param(
        edited(CLAUDE_OK, tools=[{**CLAUDE_TOOL, "strict": True}]),
        "tools.0.custom: For 'object' type, 'additionalProperties' must be explicitly set to false",
        id="strict tool with an open object",
    ),
    pytest.param(
        edited(CLAUDE_OK, output_config={"format": {"type": "json_schema", "schema": LOOSE_SCHEMA}}),
        "output_config.format.schema: For 'object' type, 'additionalProperties' must be explicitly set to false",
        id="json output with an open object",
    ),
]


@pytest.mark.parametrize(("body", "message"), CLAUDE_REFUSED)
async def test_anthropic_refusals_are_400s_in_the_apis_format_and_consume_no_reply(
    server: FakeLLMServer, body: dict[str, Any], message: str
) -> None:
    server.script(text_reply("never sent"))

    status, headers, answer = await post(server, "anthropic", body)

    assert status == 400
    assert headers["x-should-retry"] == "false"
    assert answer["type"] == "error"
    assert answer["error"]["type"] == "invalid_request_error"
    assert message in answer["error"]["message"]
    assert answer["request_id"] == headers["request-id"]
    assert [refusal.message for refusal in server.refusals] == [answer["error"]["message"]]
    assert server.remaining == 1


CLAUDE_ACCEPTED = [
    pytest.param(CLAUDE_OK, id="plain"),
    pytest.param(
        edited(CLAUDE_OK, messages=claude_image({"type": "base64", "media_type": "image/png", "data": PNG_DATA})),
        id="an image in base64",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            tools=[{**CLAUDE_TOOL, "strict": True, "input_schema": STRICT_SCHEMA}],
            tool_choice={"type": "tool", "name": "decide"},
        ),
        id="strict forced tool, thinking disabled",
    ),
    pytest.param(
        edited(CLAUDE_OK, drop=("thinking",), tools=[CLAUDE_TOOL], tool_choice={"type": "auto"}),
        id="auto tool choice while thinking",
    ),
    pytest.param(
        edited(CLAUDE_OK, tools=[CLAUDE_TOOL], tool_choice={"type": "any"}, messages=CLAUDE_TOOL_TURNS),
        id="a tool call answered, then any tool forced with thinking off",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            model="claude-opus-5-5",
            drop=("thinking",),
            output_config={"format": {"type": "json_schema", "schema": STRICT_SCHEMA}},
        ),
        id="json output on a model that always thinks",
    ),
    pytest.param(
        edited(CLAUDE_OK, model="claude-sonnet-5-5", thinking={"type": "between_tools"}),
        id="between_tools on Sonnet 5.5",
    ),
    pytest.param(
        edited(
            CLAUDE_OK,
            model="claude-haiku-4-5-20251001",
            drop=("thinking",),
            temperature=0.2,
            messages=[*CLAUDE_OK["messages"], {"role": "assistant", "content": "Well,"}],
            tools=[CLAUDE_TOOL],
            tool_choice={"type": "any"},
        ),
        id="Haiku 4.5: sampling, prefill, and a forced tool with thinking off by default",
    ),
]


@pytest.mark.parametrize("body", CLAUDE_ACCEPTED)
async def test_anthropic_accepts_what_the_api_accepts(server: FakeLLMServer, body: dict[str, Any]) -> None:
    server.script(text_reply("Sure."))

    status, _, answer = await post(server, "anthropic", body)

    assert status == 200, answer
    assert server.refusals == []
    assert answer["content"] == [{"type": "text", "text": "Sure."}]


# --- OpenAI Chat Completions ----------------------------------------------------------------------------

GPT_REFUSED = [
    pytest.param(
        edited(GPT_OK, messages=gpt_image({"url": "ftp://example.org/cat.png"})),
        "Invalid image URL",
        id="image address not on the web",
    ),
    pytest.param(
        edited(GPT_OK, messages=gpt_image({"url": f"data:image/bmp;base64,{PNG_DATA}"})),
        "Invalid image URL",
        id="image data URL of a type the API does not take",
    ),
    pytest.param(
        edited(GPT_OK, messages=gpt_image({"url": PHOTO, "detail": "ultra"})),
        "Supported values are: 'auto', 'low', and 'high'.",
        id="image detail unknown",
    ),
    pytest.param(
        edited(GPT_OK, messages=[*gpt_image({"url": PHOTO}, role="assistant"), GPT_OK["messages"][-1]]),
        "only supported in user messages",
        id="image in an assistant message",
    ),
    pytest.param(
        edited(GPT_OK, messages=gpt_image({"url": PHOTO}, count=501)),
        "Too many images",
        id="more images than a request takes",
    ),
    pytest.param(edited(GPT_OK, drop=("model",)), "you must provide a model parameter", id="no model"),
    pytest.param(edited(GPT_OK, drop=("messages",)), "Missing required parameter: 'messages'.", id="no messages"),
    pytest.param(edited(GPT_OK, messages=[]), "Invalid 'messages': empty array", id="empty messages"),
    pytest.param(edited(GPT_OK, top_k=20), "Unrecognized request argument supplied: top_k", id="unknown parameter"),
    pytest.param(
        edited(GPT_OK, drop=("max_completion_tokens",), max_tokens=64),
        "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
        id="max_tokens on a reasoning model",
    ),
    pytest.param(
        edited(GPT_OK, tools=[gpt_tool(STRICT_SCHEMA)]),
        "Function tools with reasoning_effort are not supported for gpt-5.6-luna in /v1/chat/completions",
        id="function tools, reasoning left at its default",
    ),
    pytest.param(
        edited(GPT_OK, tools=[gpt_tool(STRICT_SCHEMA)], reasoning_effort="low"),
        "set reasoning_effort to 'none'",
        id="function tools, reasoning low",
    ),
    pytest.param(
        edited(GPT_OK, model="gpt-5.4", tools=[gpt_tool(STRICT_SCHEMA)], reasoning_effort="high"),
        "Function tools with reasoning_effort are not supported for gpt-5.4",
        id="function tools, explicit reasoning on GPT-5.4",
    ),
    pytest.param(
        edited(GPT_OK, reasoning_effort="minimal"),
        "'reasoning_effort' does not support 'minimal' with this model",
        id="an effort the model does not take",
    ),
    pytest.param(
        edited(GPT_OK, reasoning_effort="none", tools=[gpt_tool(LOOSE_SCHEMA, strict=True)]),
        "Invalid schema for function 'decide': In context=(), 'additionalProperties' is required to be supplied",
        id="strict function with an open object",
    ),
    pytest.param(
        edited(
            GPT_OK,
            reasoning_effort="none",
            tools=[gpt_tool({**STRICT_SCHEMA, "required": ["action"]}, strict=True)],
        ),
        "'required' is required to be supplied and to be an array including every key in properties. Missing 'text'.",
        id="strict function with an optional property",
    ),
    pytest.param(
        edited(
            GPT_OK,
            reasoning_effort="none",
            tools=[
                gpt_tool(
                    {
                        **STRICT_SCHEMA,
                        "properties": {**STRICT_SCHEMA["properties"], "mood": LOOSE_SCHEMA},
                        "required": ["action", "text", "mood"],
                    },
                    strict=True,
                )
            ],
        ),
        "In context=('properties', 'mood')",
        id="strict function with a nested open object",
    ),
    pytest.param(
        edited(GPT_OK, messages=[*GPT_TOOL_TURNS[:2], {"role": "user", "content": "And?"}]),
        "The following tool_call_ids did not have response messages: call_1",
        id="a tool call left unanswered",
    ),
    pytest.param(
        edited(
            GPT_OK,
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "decision", "schema": LOOSE_SCHEMA, "strict": True},
            },
        ),
        "Invalid schema for response_format 'decision'",
        id="strict response format with an open object",
    ),
]


@pytest.mark.parametrize(("body", "message"), GPT_REFUSED)
async def test_openai_refusals_are_400s_in_the_apis_format_and_consume_no_reply(
    server: FakeLLMServer, body: dict[str, Any], message: str
) -> None:
    server.script(text_reply("never sent"))

    status, headers, answer = await post(server, "openai", body)

    assert status == 400
    assert headers["x-should-retry"] == "false"
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert answer["error"]["type"] == "invalid_request_error"
    assert message in answer["error"]["message"]
    assert [refusal.message for refusal in server.refusals] == [answer["error"]["message"]]
    assert server.remaining == 1


GPT_ACCEPTED = [
    pytest.param(GPT_OK, id="plain"),
    pytest.param(
        edited(GPT_OK, messages=gpt_image({"url": f"data:image/png;base64,{PNG_DATA}", "detail": "low"})),
        id="an image as a data URL, low detail",
    ),
    pytest.param(
        edited(GPT_OK, reasoning_effort="none", tools=[gpt_tool(STRICT_SCHEMA, strict=True)]),
        id="strict function, reasoning none",
    ),
    pytest.param(edited(GPT_OK, model="gpt-5.4", tools=[gpt_tool(LOOSE_SCHEMA)]), id="GPT-5.4 tools, no effort"),
    pytest.param(
        edited(
            GPT_OK,
            reasoning_effort="none",
            tools=[gpt_tool(LOOSE_SCHEMA)],
            tool_choice="required",
            messages=GPT_TOOL_TURNS,
        ),
        id="a tool call answered, then tool use required",
    ),
    pytest.param(
        edited(GPT_OK, model="gpt-4.1-mini", drop=("max_completion_tokens",), max_tokens=64, temperature=0.2),
        id="max_tokens on a model that does not reason",
    ),
    pytest.param(
        edited(
            GPT_OK,
            model="llama3.2",
            drop=("max_completion_tokens",),
            max_tokens=64,
            top_k=20,
            tools=[gpt_tool(LOOSE_SCHEMA, strict=True)],
        ),
        id="a compatible server's model: lenient",
    ),
    pytest.param(
        edited(GPT_OK, model="gpt-oss:20b", drop=("max_completion_tokens",), max_tokens=64, top_k=20),
        id="open weights on a compatible server: lenient",
    ),
]


@pytest.mark.parametrize("body", GPT_ACCEPTED)
async def test_openai_accepts_what_the_api_accepts(server: FakeLLMServer, body: dict[str, Any]) -> None:
    server.script(text_reply("Sure."))

    status, _, answer = await post(server, "openai", body)

    assert status == 200, answer
    assert server.refusals == []
    assert answer["choices"][0]["message"]["content"] == "Sure."


async def test_a_lenient_server_takes_what_openai_refuses_whatever_the_model() -> None:
    async with FakeLLMServer(text_reply("Sure."), lenient=True) as lenient:
        status, _, _ = await post(lenient, "openai", edited(GPT_OK, top_k=20, tools=[gpt_tool(LOOSE_SCHEMA)]))

        assert status == 200
        assert lenient.refusals == []
        # Required fields hold everywhere.
        status, _, _ = await post(lenient, "openai", edited(GPT_OK, drop=("messages",)))
        assert status == 400


# --- through the real SDK clients -----------------------------------------------------------------------


async def test_the_sdks_see_a_refusal_as_a_bad_request_and_do_not_retry_it(server: FakeLLMServer) -> None:
    claude = anthropic.AsyncAnthropic(api_key=FAKE_KEY, base_url=server.anthropic_url, max_retries=2)
    gpt = openai.AsyncOpenAI(api_key=FAKE_KEY, base_url=server.openai_url, max_retries=2)
    try:
        with pytest.raises(anthropic.BadRequestError) as refused_claude:
            # The SDK no longer takes temperature at all; a prefill it still sends.
            await claude.messages.create(
                **edited(CLAUDE_OK, messages=[*CLAUDE_OK["messages"], {"role": "assistant", "content": "Well,"}])
            )
        with pytest.raises(openai.BadRequestError) as refused_gpt:
            await gpt.chat.completions.create(**edited(GPT_OK, drop=("max_completion_tokens",), max_tokens=64))
    finally:
        await claude.close()
        await gpt.close()

    assert refused_claude.value.status_code == 400
    assert "does not support assistant message prefill" in str(refused_claude.value)
    assert refused_gpt.value.code == "unsupported_parameter"
    assert refused_gpt.value.param == "max_tokens"
    assert len(server.requests) == 2  # one each: x-should-retry: false, and a 400 is not retried anyway


async def test_our_adapter_reports_a_refusal_as_a_bad_request(server: FakeLLMServer) -> None:
    profile = fake_profile(server, "openai", extra_body={})  # without reasoning_effort "none"

    async with create_provider(profile, {FAKE_KEY_ENV: FAKE_KEY}) as provider:
        with pytest.raises(LLMBadRequest, match="Function tools with reasoning_effort are not supported"):
            await provider.decide(ASK)

    assert len(server.requests) == 1


# --- what our adapters send, for every built-in and example profile --------------------------------------

ASK = DecisionRequest(
    system="You are Hana.", turns=(Turn("user", "Mio: ramen tonight?"),), actions=("aizuchi", "remark")
)


def wire_profiles() -> list[Any]:
    examples = load_profiles(EXAMPLE)
    return [
        *(pytest.param(BUILTIN_PROFILES[name], id=f"built-in {name}") for name in ("anthropic", "openai")),
        *(
            pytest.param(profile, id=f"example {name}")
            for name, profile in sorted(examples.items())
            if profile.provider != "scripted"
        ),
    ]


def on_server(profile: ProviderProfile, server: FakeLLMServer) -> ProviderProfile:
    url = server.anthropic_url if profile.provider == "anthropic" else server.openai_url
    return profile.model_copy(update={"base_url": url, "api_key_env": FAKE_KEY_ENV, "timeout_s": 2.0})


@pytest.mark.parametrize("profile", wire_profiles())
async def test_every_profiles_requests_are_accepted(server: FakeLLMServer, profile: ProviderProfile) -> None:
    status = next(tool for tool in TOOLS if tool.name == "status")
    server.script(
        decision_reply(profile.structured_output, {"action": "remark", "text": "Ramen, always."}),
        tool_call("status", {}),
        text_reply("Done."),
    )

    async with create_provider(on_server(profile, server), {FAKE_KEY_ENV: FAKE_KEY}) as provider:
        # A decision, in the profile's mode, then the tool loop's round trip.
        await provider.decide(ASK)
        first = CompletionRequest(system="Speak as instructed.", turns=ASK.turns, tools=TOOLS)
        called = await provider.complete(first)
        call = called.tool_calls[0]
        await provider.complete(
            CompletionRequest(
                system=first.system,
                turns=(
                    *ASK.turns,
                    Turn("assistant", tool_calls=(call,)),
                    Turn("user", tool_results=(ToolResult(call.id, status.name, '{"level": 80}'),)),
                ),
                tools=TOOLS,
            )
        )

    assert server.refusals == []
    assert len(server.requests) == 3
