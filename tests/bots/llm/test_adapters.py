"""Both SDK adapters, every decision mode, against the fake server: the behaviours the issue asks for.

The SDK clients are real (anthropic.AsyncAnthropic, openai.AsyncOpenAI); only the server is fake.
"""

from __future__ import annotations

import socket
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from bots.llm import (
    ChatProvider,
    CompletionRequest,
    Decision,
    DecisionRequest,
    LLMAuthError,
    LLMBadOutput,
    LLMBadRequest,
    LLMRateLimited,
    LLMTimeout,
    LLMUnavailable,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    create_provider,
)
from bots.memory import MEMORY_SCHEMA
from tests.support.llm_server import (
    FAKE_KEY,
    FAKE_KEY_ENV,
    FakeLLMServer,
    decision_reply,
    delayed,
    error,
    fake_profile,
    raw,
    text_reply,
    tool_call,
)

if TYPE_CHECKING:
    from tests.bots.llm.conftest import MakeProvider

# (provider, structured_output): every way an SDK adapter produces a decision.
FLAVOURS = [
    pytest.param(("anthropic", "tools"), id="anthropic-tools"),
    pytest.param(("anthropic", "json_schema"), id="anthropic-json_schema"),
    pytest.param(("openai", "tools"), id="openai-tools"),
    pytest.param(("openai", "json_schema"), id="openai-json_schema"),
]
PROVIDERS = ["anthropic", "openai"]
FAST_RETRY = {"retry-after-ms": "1"}

TURNS = (Turn("user", "Mio: has anyone tried the new ramen place by the station?"),)
ASK = DecisionRequest(
    system="You are Hana, cheerful and curious.",
    turns=TURNS,
    actions=("aizuchi", "remark"),
    max_lengths={"aizuchi": 16, "remark": 80},
)


@pytest.fixture(params=FLAVOURS)
def flavour(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


def provider_for(make_provider: MakeProvider, flavour: tuple[str, str], **overrides: Any) -> ChatProvider:
    api, structured_output = flavour
    return make_provider(api, structured_output=structured_output, **overrides)


# --- decisions ------------------------------------------------------------------------------------------


async def test_a_remark_decision_comes_back_with_its_text_and_usage(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    llm_server.script(decision_reply(flavour[1], {"action": "remark", "text": " Not yet, is it good? "}, usage=(40, 9)))

    result = await provider_for(make_provider, flavour).decide(ASK)

    assert result.decision == Decision("remark", "Not yet, is it good?")
    assert result.usage == Usage(40, 9)
    assert len(llm_server.requests) == 1


async def test_a_pass_decision_has_no_text(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    llm_server.script(decision_reply(flavour[1], {"action": "pass", "text": "(I'd rather listen)"}))

    result = await provider_for(make_provider, flavour).decide(ASK)

    assert result.decision == Decision("pass")


async def test_the_decision_schema_offers_every_action_whatever_the_claim(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    llm_server.script(decision_reply(flavour[1], {"action": "aizuchi", "text": "Ooh!"}))

    await provider_for(make_provider, flavour).decide(ASK)

    body = llm_server.requests[0].body
    api, mode = flavour
    if mode == "tools":
        tool = body["tools"][0]
        schema = tool["input_schema"] if api == "anthropic" else tool["function"]["parameters"]
        instructions = tool["description"] if api == "anthropic" else tool["function"]["description"]
    elif api == "anthropic":
        schema = body["output_config"]["format"]["schema"]
        instructions = body["system"]
    else:
        schema = body["response_format"]["json_schema"]["schema"]
        content = body["messages"][0]["content"]
        instructions = content if isinstance(content, str) else content[0]["text"]
    # The same schema on every call of a persona (a provider caches it); the claim's moves are checked in code.
    assert schema["properties"]["action"]["enum"] == ["pass", "aizuchi", "remark", "long"]
    assert schema["required"] == ["action", "text"]
    assert "at most 16 columns" in instructions
    assert "at most 80 columns" in instructions


NOTES = {
    "topic": "the ramen place by the station",
    "open_questions": ["Mio: has anyone tried it?"],
    "agreed": [],
    "speakers": [{"name": "Mio", "note": "curious about the new ramen place"}],
}


async def test_a_decision_keeps_notes_in_the_same_call_in_every_mode(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    # The notes ride on the one decision call: the schema the real SDK sends must pass the API's strict checks (the
    # local server refuses what the real API refuses), and what comes back is the decision plus the notes.
    llm_server.script(decision_reply(flavour[1], {"action": "remark", "text": "Not yet!", "memory": NOTES}))

    result = await provider_for(make_provider, flavour).decide(replace(ASK, memory_schema=MEMORY_SCHEMA))

    assert result.decision == Decision("remark", "Not yet!", memory=NOTES)
    assert llm_server.refusals == []
    assert len(llm_server.requests) == 1
    body = llm_server.requests[0].body
    api, mode = flavour
    if mode == "tools":
        tool = body["tools"][0]
        schema = tool["input_schema"] if api == "anthropic" else tool["function"]["parameters"]
    elif api == "anthropic":
        schema = body["output_config"]["format"]["schema"]
    else:
        schema = body["response_format"]["json_schema"]["schema"]
    assert schema["required"] == ["action", "text", "memory"]
    assert schema["properties"]["memory"] == MEMORY_SCHEMA


async def test_notes_the_model_left_out_cost_only_the_notes(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    llm_server.script(decision_reply(flavour[1], {"action": "aizuchi", "text": "Ooh!", "memory": "lots of notes"}))

    result = await provider_for(make_provider, flavour).decide(replace(ASK, memory_schema=MEMORY_SCHEMA))

    assert result.decision == Decision("aizuchi", "Ooh!", memory=None)


# A model's answer that cannot be used, per mode: each is LLMBadOutput, with the tokens it cost.
MALFORMED_TOOL_ANSWERS = [
    pytest.param(text_reply("Sure, I'd say something nice."), id="no tool call"),
    pytest.param(tool_call("decide", "{not json"), id="arguments not JSON"),
    pytest.param(tool_call("decide", "[1, 2]"), id="arguments not an object"),
    pytest.param(tool_call("decide", {"action": "shout", "text": "HEY"}), id="unknown action"),
    pytest.param(tool_call("decide", {"action": "remark"}), id="missing text"),
    pytest.param(tool_call("decide", {"action": "aizuchi", "text": "   "}), id="blank text"),
    pytest.param(tool_call("history", {}), id="another tool"),
]
MALFORMED_JSON_ANSWERS = [
    pytest.param("Sure, I'd say something nice.", id="not JSON"),
    pytest.param("[1, 2]", id="not an object"),
    pytest.param('{"action": "remark"}', id="missing text"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize("answer", MALFORMED_TOOL_ANSWERS)
async def test_an_unusable_tool_answer_is_bad_output_with_usage(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, answer: Any
) -> None:
    llm_server.script(answer)
    provider = make_provider(api, structured_output="tools")

    with pytest.raises(LLMBadOutput) as caught:
        await provider.decide(ASK)

    assert caught.value.usage == Usage(21, 7)


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize("answer", MALFORMED_JSON_ANSWERS)
async def test_an_unusable_json_answer_is_bad_output_with_usage(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, answer: str
) -> None:
    llm_server.script(text_reply(answer))
    provider = make_provider(api, structured_output="json_schema")

    with pytest.raises(LLMBadOutput) as caught:
        await provider.decide(ASK)

    assert caught.value.usage == Usage(21, 7)


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize(
    "body",
    [
        pytest.param(raw("{this is not json"), id="invalid JSON body"),
        pytest.param(raw("<html>bad gateway</html>", content_type="text/html"), id="HTML body"),
        pytest.param(raw('{"unexpected": true}'), id="JSON of another shape"),
    ],
)
async def test_a_malformed_response_body_is_bad_output(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, body: Any
) -> None:
    llm_server.script(body)

    with pytest.raises(LLMBadOutput):
        await make_provider(api).decide(ASK)


# --- the tool loop --------------------------------------------------------------------------------------

STATUS_TOOL = ToolSpec("status", "The pool's level and the tiers' costs.", {"type": "object", "properties": {}})


@pytest.mark.parametrize("api", PROVIDERS)
async def test_a_tool_call_round_trip_ends_in_plain_text(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(tool_call("status", {}, usage=(30, 4)), text_reply("Nodded along.", usage=(45, 3)))
    provider = make_provider(api)
    first = CompletionRequest(system="Check the level, then speak.", turns=TURNS, tools=(STATUS_TOOL,))

    called = await provider.complete(first)

    assert called.stop_reason == "tool_use"
    assert [(call.name, dict(call.arguments)) for call in called.tool_calls] == [("status", {})]
    assert called.usage == Usage(30, 4)
    call = called.tool_calls[0]
    result = ToolResult(call.id, "status", '{"level": 80}')
    second = CompletionRequest(
        system=first.system,
        turns=(*TURNS, Turn("assistant", tool_calls=(call,)), Turn("user", tool_results=(result,))),
        tools=(STATUS_TOOL,),
    )

    answered = await provider.complete(second)

    assert answered.text == "Nodded along."
    assert answered.tool_calls == ()
    assert answered.stop_reason == "end_turn"
    assert answered.usage == Usage(45, 3)
    assert call.id  # the server's id travels back with the result, checked per wire format in the adapter tests
    assert len(llm_server.requests) == 2


# --- errors ---------------------------------------------------------------------------------------------


async def test_a_429_is_retried_then_succeeds(
    llm_server: FakeLLMServer, make_provider: MakeProvider, flavour: tuple[str, str]
) -> None:
    llm_server.script(
        error(429, "slow down", headers=FAST_RETRY), decision_reply(flavour[1], {"action": "aizuchi", "text": "Yes!"})
    )

    result = await provider_for(make_provider, flavour).decide(ASK)

    assert result.decision == Decision("aizuchi", "Yes!")
    assert len(llm_server.requests) == 2


@pytest.mark.parametrize("api", PROVIDERS)
async def test_a_429_past_the_retries_is_rate_limited_with_the_servers_delay(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(error(429, "slow down", headers={"retry-after": "7"}))

    with pytest.raises(LLMRateLimited) as caught:
        await make_provider(api, max_retries=0).decide(ASK)

    assert caught.value.retry_after == 7.0
    assert caught.value.status == 429


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize("status", [500, 503, 529])
async def test_server_errors_are_unavailable_after_the_configured_retries(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, status: int
) -> None:
    llm_server.script(*[error(status, "internal trouble", headers=FAST_RETRY)] * 3)

    with pytest.raises(LLMUnavailable) as caught:
        await make_provider(api, max_retries=2).decide(ASK)

    assert caught.value.status == status
    assert len(llm_server.requests) == 3  # the first try and two retries


@pytest.mark.parametrize("api", PROVIDERS)
async def test_no_answer_within_the_timeout_is_a_timeout(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str
) -> None:
    llm_server.script(delayed(5.0, text_reply("too late")))
    started = time.monotonic()

    with pytest.raises(LLMTimeout):
        await make_provider(api, timeout_s=0.3, max_retries=0).decide(ASK)

    assert time.monotonic() - started < 2.0
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize("status", [401, 403])
async def test_a_rejected_key_is_an_auth_error_without_retries(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, status: int
) -> None:
    llm_server.script(error(status, "invalid x-api-key"))

    with pytest.raises(LLMAuthError) as caught:
        await make_provider(api).decide(ASK)

    assert caught.value.status == status
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", PROVIDERS)
async def test_a_key_the_api_refuses_is_named_by_its_variable_and_profile_never_quoted(api: str) -> None:
    # The server answers as the API does for a wrong key (OpenAI quotes the key masked): the error says which
    # variable and which profile, and nothing of the key, masked or not.
    async with FakeLLMServer(keys=["the-good-key"]) as server:
        provider = create_provider(fake_profile(server, api), {FAKE_KEY_ENV: FAKE_KEY})
        try:
            with pytest.raises(LLMAuthError) as decided:
                await provider.decide(ASK)
            with pytest.raises(LLMAuthError) as checked:
                await provider.check_key(2.0)
        finally:
            await provider.aclose()

    for caught in (decided, checked):
        message = str(caught.value)
        assert message.startswith(f"the API refused the key in {FAKE_KEY_ENV} (profile 'fake-{api}'): "), message
        assert caught.value.status == 401
        assert FAKE_KEY[-4:] not in message and FAKE_KEY[:6] not in message and "***" not in message, message
    assert len(server.requests) == 1  # no retry of a refused key
    assert [check.api for check in server.key_checks] == [api]


@pytest.mark.parametrize("api", PROVIDERS)
async def test_a_good_key_passes_the_check_by_listing_models_and_spends_nothing(api: str) -> None:
    async with FakeLLMServer(keys=[FAKE_KEY]) as server:
        provider = create_provider(fake_profile(server, api), {FAKE_KEY_ENV: FAKE_KEY})
        try:
            await provider.check_key(2.0)
        finally:
            await provider.aclose()

    assert server.requests == []  # no model call
    [check] = server.key_checks
    assert (check.api, check.path) == (api, "/v1/models")


@pytest.mark.parametrize("api", PROVIDERS)
@pytest.mark.parametrize("status", [400, 404, 422])
async def test_other_client_errors_are_bad_requests(
    llm_server: FakeLLMServer, make_provider: MakeProvider, api: str, status: int
) -> None:
    llm_server.script(error(status, "model: unknown model 'claude-nope'"))

    with pytest.raises(LLMBadRequest) as caught:
        await make_provider(api).decide(ASK)

    assert "unknown model" in caught.value.message
    assert len(llm_server.requests) == 1


@pytest.mark.parametrize("api", PROVIDERS)
async def test_an_unreachable_server_is_unavailable(api: str, llm_server: FakeLLMServer) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port was free a moment ago and nothing listens on it now.
    profile = fake_profile(llm_server, api, base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)  # type: ignore[arg-type]

    async with create_provider(profile, {FAKE_KEY_ENV: FAKE_KEY}) as provider:
        with pytest.raises(LLMUnavailable):
            await provider.decide(ASK)
