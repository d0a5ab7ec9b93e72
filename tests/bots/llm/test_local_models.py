"""The built-in profiles for models on this machine, through the real openai SDK adapter and ``create_provider``:
``ollama`` against the local wire server answering as Ollama does (its model list, what it reads, refuses and
drops without a word; see tests.support.llm_server), and ``local`` against a lenient OpenAI-compatible server
(llama.cpp's llama-server, vLLM, LM Studio), each reached by the address its setting gives."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
import openai
import pytest

from bots.llm import BUILTIN_PROFILES, DecisionRequest, LLMBadRequest, Turn, create_provider
from bots.llm.base import decision_schema
from bots.llm.openai_chat import OpenAIChat
from bots.llm.profiles import NO_KEY, OLLAMA_MODEL
from tests.support.llm_server import OLLAMA_FIELDS, FakeLLMServer, decision_reply

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

PULLED = ["gemma4:latest", "qwen3:8b"]
ASK = DecisionRequest(
    system="You are Hana, cheerful and curious.",
    turns=(Turn("user", "Mio: has anyone tried the new ramen place by the station?"),),
    actions=("pass", "aizuchi", "remark"),
    max_lengths={"aizuchi": 16, "remark": 80},
)
REMARK = {"action": "remark", "text": "Not yet, but I hear the broth is great!"}


@pytest.fixture
async def ollama() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer(ollama=PULLED) as server:
        yield server
        assert server.unscripted == 0, "a request arrived that the test did not script a reply for"


def at(server: FakeLLMServer, **more: str) -> dict[str, str]:
    """The settings that point the ollama profile at ``server`` (as .env would)."""
    return {"AIZUCHI_OLLAMA_URL": server.openai_url, **more}


async def test_ollama_lists_its_models_in_its_own_shape(ollama: FakeLLMServer) -> None:
    client = openai.AsyncOpenAI(base_url=ollama.openai_url, api_key=NO_KEY, max_retries=0)
    try:
        listed = [model async for model in client.models.list()]
        one = await client.models.retrieve(OLLAMA_MODEL)
        with pytest.raises(openai.NotFoundError) as missing:
            await client.models.retrieve("llama3.2")
    finally:
        await client.close()

    assert [(m.id, m.object, m.owned_by) for m in listed] == [
        ("gemma4:latest", "model", "library"),
        ("qwen3:8b", "model", "library"),
    ]
    assert (one.id, one.owned_by) == (OLLAMA_MODEL, "library")
    assert missing.value.body == {
        "message": "model 'llama3.2' not found",
        "type": "not_found_error",
        "param": None,
        "code": None,
    }


async def test_ollama_with_nothing_pulled_lists_null() -> None:
    async with (
        FakeLLMServer(ollama=[]) as server,
        aiohttp.ClientSession() as session,
        session.get(f"{server.openai_url}/models") as response,
    ):
        assert await response.json() == {"object": "list", "data": None}


async def test_the_ollama_profile_decides_with_what_ollama_reads(ollama: FakeLLMServer) -> None:
    ollama.script(decision_reply("json_schema", REMARK, usage=(30, 9)))

    async with create_provider(BUILTIN_PROFILES["ollama"], at(ollama)) as provider:
        result = await provider.decide(ASK)

    assert isinstance(provider, OpenAIChat)
    assert (result.decision.action, result.decision.text) == ("remark", REMARK["text"])
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (30, 9)
    [request] = ollama.requests
    body: dict[str, Any] = request.body
    assert request.path == "/v1/chat/completions"
    assert request.headers["Authorization"] == f"Bearer {NO_KEY}"  # the SDK wants a key; Ollama ignores it
    assert body["model"] == OLLAMA_MODEL
    # The schema is Ollama's `format`: the answer is held to it. No tool call, which Ollama cannot be made to force.
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == decision_schema(ASK)
    assert "tools" not in body and "tool_choice" not in body
    assert body["max_tokens"] == BUILTIN_PROFILES["ollama"].max_tokens  # the cap Ollama reads
    assert body["reasoning_effort"] == "none"  # a thinking model's thinking off
    assert set(body) <= OLLAMA_FIELDS
    assert ollama.ignored == []
    assert ollama.refusals == []


async def test_the_setting_names_the_model(ollama: FakeLLMServer) -> None:
    ollama.script(decision_reply("json_schema", REMARK))

    async with create_provider(BUILTIN_PROFILES["ollama"], at(ollama, AIZUCHI_OLLAMA_MODEL="qwen3:8b")) as provider:
        await provider.decide(ASK)

    assert provider.name == "openai/qwen3:8b"
    assert ollama.bodies()[0]["model"] == "qwen3:8b"


async def test_what_the_openai_profile_sends_ollama_would_partly_drop(ollama: FakeLLMServer) -> None:
    # Why the ollama profile differs from the openai one: Ollama reads neither the forced tool choice nor
    # max_completion_tokens, and says nothing about it.
    ollama.script(decision_reply("tools", REMARK))
    profile = BUILTIN_PROFILES["openai"].model_copy(update={"base_url": ollama.openai_url, "model": "gemma4"})

    async with create_provider(profile, {"OPENAI_API_KEY": "unused"}) as provider:
        await provider.decide(ASK)

    assert sorted(ollama.ignored) == ["max_completion_tokens", "tool_choice"]


async def test_a_model_that_is_not_pulled_is_a_bad_request_naming_it(ollama: FakeLLMServer) -> None:
    async with create_provider(BUILTIN_PROFILES["ollama"], at(ollama, AIZUCHI_OLLAMA_MODEL="llama3.2")) as provider:
        with pytest.raises(LLMBadRequest) as caught:
            await provider.decide(ASK)

    assert caught.value.status == 404
    assert "model 'llama3.2' not found" in str(caught.value)
    assert [refusal.message for refusal in ollama.refusals] == ["model 'llama3.2' not found"]


async def test_a_reasoning_value_ollama_does_not_know_is_refused(ollama: FakeLLMServer) -> None:
    profile = BUILTIN_PROFILES["ollama"].model_copy(update={"extra_body": {"reasoning_effort": "minimal"}})

    async with create_provider(profile, at(ollama)) as provider:
        with pytest.raises(LLMBadRequest) as caught:
            await provider.decide(ASK)

    assert caught.value.status == 400
    assert "invalid reasoning value: 'minimal'" in str(caught.value)


async def test_the_local_profile_reaches_any_openai_compatible_server_by_its_settings() -> None:
    async with FakeLLMServer(decision_reply("json_schema", REMARK), lenient=True) as server:
        env = {"AIZUCHI_LOCAL_URL": server.openai_url, "AIZUCHI_LOCAL_MODEL": "Qwen/Qwen3-8B"}
        async with create_provider(BUILTIN_PROFILES["local"], env) as provider:
            result = await provider.decide(ASK)

    assert result.decision.text == REMARK["text"]
    [body] = server.bodies()
    assert body["model"] == "Qwen/Qwen3-8B"
    assert body["response_format"]["type"] == "json_schema"
    assert "max_tokens" in body and "max_completion_tokens" not in body
    assert "reasoning_effort" not in body and "tools" not in body
    assert server.refusals == []
