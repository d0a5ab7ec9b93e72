"""Personas with MCP tools: real MCP servers run over stdio by the SDK's client (the shipped FAQ example, and a test
server whose tools hang or fail), the persona runtime against a real arbiter, with the scripted provider and with
the real Anthropic and OpenAI SDKs against the local wire server scripting a tool call and then a decision."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bots.llm.base import ToolCall
from bots.llm.scripted import ScriptedProvider
from bots.mcp_host import open_tools
from bots.persona import McpServer, Persona
from tests.bots.conftest import CHANNEL
from tests.bots.test_runtime_providers import (
    APIS,
    ask,
    check_nothing_held,
    decision,
    persona_texts,
    provider_for,
    spent,
    tokens_today,
    tool_results,
)
from tests.support.fleet import make_persona
from tests.support.llm_server import text_reply, tool_call

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from bots.mcp_host import ToolHost
    from tests.support.fleet import Live
    from tests.support.llm_server import FakeLLMServer

ROOT = Path(__file__).parents[2]
FAQ_SERVER = ROOT / "examples" / "faq" / "faq_server.py"
MISBEHAVING = ROOT / "tests" / "support" / "mcp_tools_server.py"
EVENT_ANSWER = "Every Saturday at 20:00 UTC in the Stage channel"


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def faq(tmp_path: Path) -> Path:
    """A copy of the example FAQ, for the test to edit."""
    return Path(shutil.copy(ROOT / "examples" / "faq" / "faq.md", tmp_path / "faq.md"))


def faq_server(faq: Path) -> McpServer:
    return McpServer(name="faq", command=sys.executable, args=[str(FAQ_SERVER), str(faq)], tools=["search_faq"])


def misbehaving(*tools: str, delay_s: float = 60.0, timeout_s: float = 5.0) -> McpServer:
    return McpServer(
        name="flaky",
        command=sys.executable,
        args=[str(MISBEHAVING), str(delay_s)],
        tools=list(tools),
        timeout_s=timeout_s,
    )


def with_servers(persona: Persona, *servers: McpServer) -> Persona:
    return Persona.model_validate({**persona.model_dump(), "mcp_servers": [s.model_dump() for s in servers]})


@pytest.fixture
async def host_of() -> AsyncIterator[Any]:
    """Open a persona's tools for the test; closed (its servers stopped) at the end."""
    async with contextlib.AsyncExitStack() as stack:

        async def opened(persona: Persona) -> ToolHost:
            return await stack.enter_async_context(open_tools(persona))

        yield opened


# --- the host -------------------------------------------------------------------------------------------


async def test_the_faq_server_answers_from_its_file_and_an_edit_counts_at_once(faq: Path, host_of: Any) -> None:
    host = await host_of(with_servers(make_persona("aoi"), faq_server(faq)))
    assert [spec.name for spec in host.specs] == ["search_faq"]
    assert host.specs[0].parameters["required"] == ["query"]

    found = await host.call(ToolCall("c1", "search_faq", {"query": "When is the weekly event?"}))
    assert not found.is_error and found.content.startswith(EVENT_ANSWER)

    with faq.open("a", encoding="utf-8") as file:
        file.write("\n## Is there a dress code?\n\nNo, come as you are.\n")
    edited = await host.call(ToolCall("c2", "search_faq", {"query": "dress code"}))
    assert edited.content.startswith("No, come as you are.")
    nothing = await host.call(ToolCall("c3", "search_faq", {"query": "pizza toppings"}))
    assert "no answer" in nothing.content and "Is there a dress code?" in nothing.content


async def test_python_as_the_command_is_the_fleets_own_whatever_the_path(
    faq: Path, host_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As the example persona file says it: "python", on a machine where the PATH has no python (Debian's has only
    # python3, and neither would have the mcp SDK the server needs).
    monkeypatch.setenv("PATH", "/nonexistent")
    server = McpServer(name="faq", command="python", args=[str(FAQ_SERVER), str(faq)], tools=["search_faq"])
    host = await host_of(with_servers(make_persona("aoi"), server))
    found = await host.call(ToolCall("c1", "search_faq", {"query": "When is the weekly event?"}))
    assert not found.is_error and found.content.startswith(EVENT_ANSWER)


async def test_a_server_that_cannot_start_or_lacks_a_tool_is_one_warning_and_the_rest_still_serve(
    faq: Path, host_of: Any, caplog: pytest.LogCaptureFixture
) -> None:
    gone = McpServer(name="gone", command=str(faq.parent / "no-such-server"), tools=["lookup"])
    persona = with_servers(make_persona("aoi"), gone, faq_server(faq), misbehaving("echo", "teleport"))
    with caplog.at_level(logging.WARNING, logger="bots.mcp_host"):
        host = await host_of(persona)

    assert [spec.name for spec in host.specs] == ["search_faq", "echo"]
    warnings = [r.getMessage() for r in caplog.records if r.name == "bots.mcp_host"]
    assert len(warnings) == 2, warnings
    assert "MCP server gone" in warnings[0] and "could not be started" in warnings[0]
    assert "has no tool teleport" in warnings[1]
    assert (await host.call(ToolCall("c1", "echo", {"query": "hi"}))).content == "echo: hi"


async def test_a_tool_that_hangs_fails_or_is_not_allowed_is_an_error_result_in_time(host_of: Any) -> None:
    host = await host_of(
        with_servers(
            make_persona("aoi"), misbehaving("slow_lookup", "broken_lookup", "crashing_lookup", "echo", timeout_s=0.5)
        )
    )
    loop = asyncio.get_running_loop()

    started = loop.time()
    hung = await host.call(ToolCall("c1", "slow_lookup", {"query": "anything"}))
    assert loop.time() - started < 1.5
    assert hung.is_error and "did not answer within 0.5 s" in hung.content
    # The time the caller has left wins over the server's own timeout.
    started = loop.time()
    short = await host.call(ToolCall("c2", "slow_lookup", {"query": "anything"}), 0.2)
    assert loop.time() - started < 1.0 and "within 0.2 s" in short.content

    failed = await host.call(ToolCall("c3", "broken_lookup", {"query": "rules"}))
    assert failed.is_error and "the lookup service is down" in failed.content
    crashed = await host.call(ToolCall("c3b", "crashing_lookup", {"query": "rules"}), 5.0)
    assert crashed.is_error and crashed.content == "Error executing tool crashing_lookup"
    not_allowed = await host.call(ToolCall("c4", "search_faq", {"query": "rules"}))
    assert not_allowed.is_error and "no tool 'search_faq'" in not_allowed.content
    # The session outlives a call that hung.
    assert (await host.call(ToolCall("c5", "echo", {"query": "still here"}))).content == "echo: still here"


# --- a persona's turn ------------------------------------------------------------------------------------


async def test_a_persona_looks_a_question_up_in_the_faq_and_answers_from_it(
    faq: Path, live: Live, host_of: Any
) -> None:
    persona = with_servers(make_persona("aoi"), faq_server(faq))
    runtime = await live.start(
        persona, ScriptedProvider.for_persona(persona, seed=0), CHANNEL, tools=await host_of(persona)
    )

    await ask(live, runtime, "Aoi, when is the weekly event?")

    assert [post.text for post in live.room.posts] == [
        "Every Saturday at 20:00 UTC in the Stage channel: a game night, and a talk on the first Saturday of the month."
    ]
    assert runtime.stats.llm_requests == 2  # the lookup, then the decision
    await check_nothing_held(live)

    # Nothing to look up in a statement: one request, as for a persona without tools.
    await ask(live, runtime, "Aoi, I finally fixed my bike today.")
    assert runtime.stats.llm_requests == 3
    assert len(live.room.posts) == 2 and not live.room.posts[1].text.startswith("(FAQ")


async def test_a_tool_that_hangs_does_not_keep_the_claim(live: Live, host_of: Any) -> None:
    # The claim lives 4 s, speaking needs the last 3: the tool gets half of the second left, whatever its timeout.
    await live.service.update_settings(CHANNEL, {"claim_ttl_s": 4.0})
    persona = with_servers(make_persona("aoi"), misbehaving("slow_lookup", timeout_s=30.0))
    tools = await host_of(persona)
    runtime = await live.start(persona, ScriptedProvider.for_persona(persona, seed=0), CHANNEL, tools=tools)
    loop = asyncio.get_running_loop()

    asked_at = loop.time()
    await ask(live, runtime, "Aoi, when is the weekly event?")
    took = loop.time() - asked_at

    assert took < 2.5, f"the turn took {took:.1f} s with a claim of 4 s"
    # The model read that the tool timed out, and decided without it: a line of its own, posted in time.
    assert runtime.stats.llm_requests == 2
    texts = await persona_texts(live)
    assert [post.text for post in live.room.posts] == texts and len(texts) == 1
    assert "slowly found" not in texts[0]
    await check_nothing_held(live)


async def test_a_tool_that_fails_is_read_as_an_error_and_the_persona_still_speaks(live: Live, host_of: Any) -> None:
    persona = with_servers(make_persona("aoi"), misbehaving("broken_lookup"))
    provider = ScriptedProvider.for_persona(persona, seed=0)
    runtime = await live.start(persona, provider, CHANNEL, tools=await host_of(persona))

    await ask(live, runtime, "Aoi, what are the rules here?")

    texts = await persona_texts(live)
    assert len(texts) == 1 and "lookup service" not in texts[0]
    assert runtime.stats.llm_requests == 2 and runtime.stats.provider_errors == 0
    await check_nothing_held(live)


# --- the real SDKs ---------------------------------------------------------------------------------------


async def test_the_sdks_round_trip_tool_calls_and_then_the_forced_decision(
    fake_llm: FakeLLMServer, faq: Path, live: Live, host_of: Any, api: str
) -> None:
    answer = "Saturdays at 20:00 UTC, in the Stage channel."
    fake_llm.script(
        tool_call("search_faq", {"query": "weekly event"}),
        tool_call("search_faq", {"query": "event time"}),
        decision("remark", answer),
    )
    persona = with_servers(make_persona("aoi"), faq_server(faq))
    runtime = await live.start(persona, provider_for(fake_llm, api), CHANNEL, tools=await host_of(persona))

    await ask(live, runtime, "Aoi, when is the weekly event?")

    assert [post.text for post in live.room.posts] == [answer]
    bodies = fake_llm.bodies(api)  # type: ignore[arg-type]
    assert len(bodies) == 3 and runtime.stats.llm_requests == 3
    names = [t["name"] if api == "anthropic" else t["function"]["name"] for t in bodies[0]["tools"]]
    assert names == ["search_faq", "decide"]
    required, forced = (
        ({"type": "any"}, {"type": "tool", "name": "decide"})
        if api == "anthropic"
        else (
            "required",
            {"type": "function", "function": {"name": "decide"}},
        )
    )
    assert [body["tool_choice"] for body in bodies] == [required, required, forced]
    assert tool_results(api, bodies[0]) == []
    assert [r.startswith(EVENT_ANSWER) for r in tool_results(api, bodies[2])] == [True, True]
    # Every round's tokens count, not only the decision's.
    assert len(fake_llm.usages) == 3 and await tokens_today(live) == spent(fake_llm)  # all three answers
    await check_nothing_held(live)


async def test_a_model_that_answers_in_words_is_made_to_decide_in_the_next_round(
    fake_llm: FakeLLMServer, faq: Path, live: Live, host_of: Any, api: str
) -> None:
    # Tool use is required, but compatible servers do not all hold to it: the next round forces the decision.
    fake_llm.script(text_reply("Let me think about that."), decision("remark", "Saturdays, I believe."))
    persona = with_servers(make_persona("aoi"), faq_server(faq))
    runtime = await live.start(persona, provider_for(fake_llm, api), CHANNEL, tools=await host_of(persona))

    await ask(live, runtime, "Aoi, when is the weekly event?")

    assert [post.text for post in live.room.posts] == ["Saturdays, I believe."]
    bodies = fake_llm.bodies(api)  # type: ignore[arg-type]
    forced = (
        {"type": "tool", "name": "decide"}
        if api == "anthropic"
        else {"type": "function", "function": {"name": "decide"}}
    )
    assert [body["tool_choice"] == forced for body in bodies] == [False, True]
    assert runtime.stats.llm_requests == 2 and await tokens_today(live) == spent(fake_llm)
    await check_nothing_held(live)
