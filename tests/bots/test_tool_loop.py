"""Tool-loop mode (the reference design): the model calls history, status and consume as tools in a bounded
loop. Against a real arbiter, with the scripted provider playing the model - or the OpenAI SDK on the fake
wire-format server when the test needs the model to do something exact."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, cast

import pytest

from arbiter.contract import AuthorKind
from bots.llm import ScriptedProvider, create_provider
from bots.tool_loop import MAX_STEPS, ToolLoopRuntime
from tests.bots.conftest import CHANNEL
from tests.support.eventually import eventually
from tests.support.fleet import RecordingProvider, make_persona, mentions_in
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, fake_profile, text_reply, tool_call

if TYPE_CHECKING:
    from bots.llm import Completion
    from bots.persona import Persona
    from bots.runtime import PersonaRuntime
    from tests.support.fleet import Live
    from tests.support.llm_server import FakeLLMServer


def scripted(persona: Persona, seed: int = 5) -> RecordingProvider:
    return RecordingProvider(ScriptedProvider(persona.samples.aizuchi, persona.samples.remarks, seed=seed))


def on_fake(server: FakeLLMServer) -> RecordingProvider:
    return RecordingProvider(create_provider(fake_profile(server, "openai", max_retries=0), {FAKE_KEY_ENV: FAKE_KEY}))


async def start(live: Live, provider: RecordingProvider, persona: Persona | None = None) -> PersonaRuntime:
    return await live.start(persona or make_persona("aoi"), provider, CHANNEL, kind=ToolLoopRuntime)


def completions(provider: RecordingProvider) -> list[Completion]:
    return [cast("Completion", answer) for answer in provider.answers]


def called(provider: RecordingProvider) -> list[str]:
    """What the model did at each step: the tool it called, or "text" when it answered without one."""
    return [",".join(call.name for call in c.tool_calls) or "text" for c in completions(provider)]


def loops(provider: RecordingProvider) -> int:
    """Loops started: a loop's first request carries only the opening instruction."""
    return sum(1 for request in provider.completions if len(request.turns) == 1)


async def test_each_turn_calls_history_then_status_then_consume_then_answers_and_posts(live: Live) -> None:
    provider = scripted(make_persona("aoi"))
    runtime = await start(live, provider)

    await live.say(CHANNEL, "What did everyone do this weekend?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the loop")

    assert called(provider) == ["history", "status", "consume", "text"]
    consume = completions(provider)[2].tool_calls[0]
    [post] = live.room.posts
    assert post.text == consume.arguments["message"]
    page = await live.service.history(CHANNEL, after=0, limit=10)
    assert [(m.author_id, m.text) for m in page.messages if m.author_kind is AuthorKind.PERSONA] == [("aoi", post.text)]
    requests = [call for call in live.log.of("aoi") if call != ("GET", "/v1/events")]
    assert ("POST", "consume") in requests and ("POST", "claims") not in requests  # one step, as the reference
    usage = sum(c.usage.total_tokens for c in completions(provider))
    assert (await live.status(CHANNEL)).tokens_today == usage


async def test_messages_during_a_loop_start_exactly_one_more_loop(live: Live) -> None:
    provider = scripted(make_persona("aoi"))
    provider.hold()
    runtime = await start(live, provider)
    worker = runtime.join(CHANNEL)

    await live.say(CHANNEL, "Favourite breakfast, anyone?")
    await eventually(lambda: provider.waiting == 1, what="the first loop started")
    for text in ("Mine is toast.", "With butter, obviously.", "Or rice and miso soup?"):
        newest = await live.say(CHANNEL, text)
    await eventually(lambda: worker.last_seq == newest, what="all three heard")
    provider.open()

    await live.settled(CHANNEL)
    assert loops(provider) == 2  # one more loop for three messages, not three
    last_loop_history = [
        json.loads(result.content)
        for request in provider.completions[-3:]
        for turn in request.turns
        for result in turn.tool_results
        if result.name == "history"
    ]
    assert any(entry["message"] == "Or rice and miso soup?" for page in last_loop_history for entry in page["history"])


async def test_no_mention_reaches_the_platform_from_the_tool_loop(live: Live) -> None:
    persona = make_persona(
        "aoi",
        aizuchi=("@everyone yes!", "<@123> true.", "@here wow."),
        remarks=(
            "@everyone the bakery on the corner reopened today.",
            "Tell <@&456> that the bakery on the corner reopened.",
            "<@!789> you would love the bakery on the corner.",
        ),
    )
    provider = scripted(persona)
    runtime = await start(live, provider, persona)

    await live.say(CHANNEL, "Any news from the neighbourhood?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the loop")

    [post] = live.room.posts
    assert not mentions_in(post.text), post.text
    page = await live.service.history(CHANNEL, after=0, limit=10)
    assert not any(mentions_in(m.text) for m in page.messages if m.author_kind is AuthorKind.PERSONA)


async def test_a_loop_is_bounded_even_when_the_model_never_stops_calling_tools(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    fake_llm.script(*(tool_call("status", {}) for _ in range(MAX_STEPS)))
    provider = on_fake(fake_llm)
    runtime = await start(live, provider)

    await live.say(CHANNEL, "Hello?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the loop")

    assert provider.calls == MAX_STEPS  # and the fake server saw no request it had no reply for
    assert live.room.posts == []


async def test_a_refused_consume_is_reported_to_the_model_and_nothing_is_posted(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    # An aizuchi's amount with a remark's worth of text: the arbiter refuses it as too long.
    fake_llm.script(
        tool_call("consume", {"amount": 5, "message": "This is far too much to say for a mere nod, surely."}),
        text_reply("Fine, I will stay quiet."),
    )
    provider = on_fake(fake_llm)
    runtime = await start(live, provider)

    await live.say(CHANNEL, "Thoughts?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the loop")

    result = json.loads(provider.completions[1].turns[-1].tool_results[0].content)
    assert result["success"] is False
    assert live.room.posts == []
    assert runtime.stats.wasted == 1


async def test_a_failed_post_in_the_tool_loop_is_retracted(fake_llm: FakeLLMServer, live: Live) -> None:
    live.room.fail_post = lambda _persona, _channel, _text: True
    fake_llm.script(tool_call("consume", {"amount": 60, "message": "Let us meet at the station."}), text_reply("ok"))
    provider = on_fake(fake_llm)
    runtime = await start(live, provider)

    await live.say(CHANNEL, "Where shall we meet?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the loop")

    result = json.loads(provider.completions[1].turns[-1].tool_results[0].content)
    assert result["success"] is False
    page = await live.service.history(CHANNEL, after=0, limit=10)
    assert [m for m in page.messages if m.author_kind is AuthorKind.PERSONA] == []  # retracted
    status = await live.status(CHANNEL)
    assert status.level == status.capacity  # and refunded at once


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"paused": True}, id="paused"),
        pytest.param({"daily_token_budget": 0}, id="budget-spent"),
        pytest.param({"enabled": False}, id="not-enabled"),
    ],
)
async def test_the_tool_loop_makes_no_llm_call_when_the_channel_says_no(
    live: Live, settings: dict[str, object]
) -> None:
    await live.service.update_settings(CHANNEL, settings)
    provider = scripted(make_persona("aoi"))
    runtime = await start(live, provider)

    await live.say(CHANNEL, "Anyone?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the look")

    assert provider.calls == 0
    assert live.room.posts == []
