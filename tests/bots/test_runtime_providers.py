"""The real Anthropic and OpenAI SDK clients, driven by the persona runtime, against a local server that speaks
their wire formats (tests.support.llm_server) and a real arbiter.

Each case of the issue - a normal decision, a pass, a tool-call round trip (tool-loop mode), a 429 then success,
a 500, a timeout, malformed model output - is checked end to end: what reached the platform and the history,
that no claim is left held and the pool refills, and that token usage reached the arbiter whenever the API
answered.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any, Literal, cast

import pytest

from arbiter import contract as wire
from arbiter.contract import AuthorKind, Tier
from arbiter.core.usage import budget_tokens
from bots.llm import ScriptedProvider, create_provider
from bots.tool_loop import ToolLoopRuntime
from bots.worker.actions import Decide
from bots.worker.turn import decide
from tests.bots.conftest import CHANNEL
from tests.support.eventually import eventually
from tests.support.fleet import FAST, RecordingProvider, make_persona
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
    from bots.runtime import PersonaRuntime
    from tests.support.fleet import Live
    from tests.support.llm_server import Reply

Api = Literal["anthropic", "openai"]
APIS = ["anthropic", "openai"]
QUESTION = "Aoi, ramen or udon tonight?"


@pytest.fixture(params=APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def provider_for(server: FakeLLMServer, api: str, **overrides: Any) -> RecordingProvider:
    profile = fake_profile(server, cast("Api", api), **{"max_retries": 0, **overrides})
    return RecordingProvider(create_provider(profile, {FAKE_KEY_ENV: FAKE_KEY}))


def decision(action: str, text: str = "") -> Reply:
    return decision_reply("tools", {"action": action, "text": text})


async def ask(live: Live, runtime: PersonaRuntime, text: str = QUESTION) -> int:
    """A human addresses the persona (so it claims a remark); returns once the persona's turn is over."""
    looks = runtime.stats.looks
    seq = await live.say(CHANNEL, text)
    await eventually(lambda: runtime.stats.looks > looks, what="the persona's turn")
    return seq


async def check_nothing_held(live: Live) -> None:
    assert (await live.status(CHANNEL, "aoi")).claim is None

    async def refilled() -> bool:
        status = await live.status(CHANNEL)
        return status.level == status.capacity

    await eventually(refilled, what="the pool back to full once refunds pass")


async def persona_texts(live: Live) -> list[str]:
    page = await live.service.history(CHANNEL, after=0, limit=100)
    return [m.text for m in page.messages if m.author_kind is AuthorKind.PERSONA]


async def tokens_today(live: Live) -> int:
    return int((await live.status(CHANNEL)).tokens_today)


def spent(server: FakeLLMServer) -> int:
    """What the server's answers count against the budget: their tokens, the prompt cache's reads and writes (a
    persona's stable prompt is long enough to cache) at their prices."""
    return sum(budget_tokens(p, c, cache_read=read, cache_write=written) for p, c, read, written in server.usages)


async def test_a_decision_is_spoken_posted_and_its_usage_reported(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    fake_llm.script(decision("remark", "Ramen, obviously. The place by the station."))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    await ask(live, runtime)

    assert [post.text for post in live.room.posts] == ["Ramen, obviously. The place by the station."]
    history = (await live.service.history(CHANNEL, after=0, limit=10)).messages
    assert (history[-1].author_id, history[-1].tier, history[-1].text) == (
        "aoi",
        Tier.REMARK,
        "Ramen, obviously. The place by the station.",
    )
    assert fake_llm.usages[0][3] > 0  # the persona's stable prompt, written to the provider's cache
    assert await tokens_today(live) == spent(fake_llm)
    await check_nothing_held(live)


async def test_a_pass_releases_the_claim_and_still_reports_usage(fake_llm: FakeLLMServer, live: Live, api: str) -> None:
    fake_llm.script(decision("pass"))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    await ask(live, runtime)

    assert live.room.posts == []
    assert await persona_texts(live) == []
    assert runtime.stats.passes == 1
    assert await tokens_today(live) == spent(fake_llm)
    await check_nothing_held(live)


async def test_a_429_retried_by_the_sdk_then_success_is_posted(fake_llm: FakeLLMServer, live: Live, api: str) -> None:
    fake_llm.script(error(429, "slow down", headers={"retry-after-ms": "1"}), decision("remark", "Udon, for once."))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api, max_retries=2), CHANNEL)

    await ask(live, runtime)

    assert len(fake_llm.requests) == 2  # the SDK retried on its own: one runtime call, two HTTP requests
    assert runtime.stats.llm_requests == 1
    assert [post.text for post in live.room.posts] == ["Udon, for once."]
    assert await tokens_today(live) == spent(fake_llm)
    await check_nothing_held(live)


async def test_a_429_that_outlasts_the_sdk_skips_the_turn_and_backs_off_as_told(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    fake_llm.script(error(429, "slow down", headers={"retry-after": "0.5"}))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    loop = asyncio.get_running_loop()
    asked_at = loop.time()  # the 429, and so the back-off, comes after this
    await ask(live, runtime)
    assert runtime.stats.provider_errors == 1
    assert live.room.posts == []
    assert await tokens_today(live) == 0  # the API answered nothing: no usage
    await check_nothing_held(live)

    fake_llm.script(decision("remark", "Sorry, where were we? Ramen."))
    await live.say(CHANNEL, "Aoi, still deciding?")
    await eventually(lambda: live.room.posts, what="the next message answered after the back-off")
    # The server's retry-after (0.5 s) outweighs the runtime's own first back-off (0.2 s).
    assert loop.time() - asked_at >= 0.5
    assert await tokens_today(live) == spent(fake_llm)


async def test_a_server_error_skips_the_turn_without_posting(fake_llm: FakeLLMServer, live: Live, api: str) -> None:
    fake_llm.script(error(500, "the model fell over"))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    await ask(live, runtime)

    assert runtime.stats.provider_errors == 1
    assert live.room.posts == []
    assert await persona_texts(live) == []
    assert await tokens_today(live) == 0
    await check_nothing_held(live)


async def test_a_server_error_after_the_sdk_retries_skips_the_turn(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    fast = {"retry-after-ms": "1"}
    fake_llm.script(error(503, "busy", headers=fast), error(502, "bad gateway", headers=fast), error(500, "down"))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api, max_retries=2), CHANNEL)

    await ask(live, runtime)

    assert len(fake_llm.requests) == 3
    assert runtime.stats.provider_errors == 1
    assert live.room.posts == []
    await check_nothing_held(live)


async def test_a_timeout_skips_the_turn_without_posting(fake_llm: FakeLLMServer, live: Live, api: str) -> None:
    fake_llm.script(delayed(5.0, decision("remark", "Too late to matter.")))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api, timeout_s=0.15), CHANNEL)

    await ask(live, runtime)

    assert runtime.stats.provider_errors == 1
    assert live.room.posts == []
    assert await persona_texts(live) == []
    assert await tokens_today(live) == 0
    await check_nothing_held(live)


@pytest.mark.parametrize(
    ("reply", "answered"),
    [
        pytest.param(tool_call("decide", "{not json at all"), True, id="arguments-not-json"),
        pytest.param(tool_call("decide", {"action": "aizuchi", "text": "Mm."}), True, id="nod-on-a-remarks-claim"),
        pytest.param(tool_call("decide", {"action": "remark", "text": "  "}), True, id="remark-without-text"),
        pytest.param(text_reply("I think ramen."), True, id="no-tool-call"),
        pytest.param(raw("{this is not json"), False, id="body-not-json"),
    ],
)
async def test_malformed_model_output_is_dropped_and_usage_reported_when_the_api_answered(
    fake_llm: FakeLLMServer, live: Live, api: str, reply: Reply, answered: bool
) -> None:
    fake_llm.script(reply)
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    await ask(live, runtime)

    assert live.room.posts == []
    assert await persona_texts(live) == []
    assert await tokens_today(live) == (spent(fake_llm) if answered else 0)
    await check_nothing_held(live)
    # Bad output is not an outage: the next message is answered at once, without a back-off.
    assert runtime.backing_off() == 0
    fake_llm.script(decision("remark", "Let me try that again: ramen."))
    await ask(live, runtime, "Aoi, so?")
    assert [post.text for post in live.room.posts] == ["Let me try that again: ramen."]


# --- tool-loop mode -------------------------------------------------------------------------------------


def tool_results(api: str, body: dict[str, Any]) -> list[str]:
    """The tool results a request carried back to the model, in the API's own format."""
    if api == "openai":
        return [m["content"] for m in body["messages"] if m["role"] == "tool"]
    return [
        block["content"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    ]


async def test_a_tool_loop_round_trip_reads_history_and_status_then_consumes_and_posts(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    line = "Ramen, obviously. The place by the station."
    fake_llm.script(
        tool_call("history", {}),
        tool_call("status", {}),
        tool_call("consume", {"amount": 60, "message": line}),
        text_reply("Done."),
    )
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL, kind=ToolLoopRuntime)

    await ask(live, runtime)

    bodies = fake_llm.bodies(cast("Api", api))
    assert len(bodies) == 4
    offered = [tool["function"]["name"] if api == "openai" else tool["name"] for tool in bodies[0]["tools"]]
    assert sorted(offered) == ["consume", "history", "status"]
    history = json.loads(tool_results(api, bodies[1])[-1])
    assert {"from": "Yui", "author_kind": "human", "message": QUESTION} in history["history"]
    status = json.loads(tool_results(api, bodies[2])[-1])
    assert status["resource"] == 100 and status["costs"]["remark"] == 60
    consumed = json.loads(tool_results(api, bodies[3])[-1])
    assert consumed["success"] is True
    assert [post.text for post in live.room.posts] == [line]
    history_now = (await live.service.history(CHANNEL, after=0, limit=10)).messages
    assert (history_now[-1].author_id, history_now[-1].tier) == ("aoi", Tier.REMARK)
    assert await tokens_today(live) == spent(fake_llm)  # every call of the loop reported
    await check_nothing_held(live)


async def test_a_tool_loop_that_fails_midway_posts_nothing(fake_llm: FakeLLMServer, live: Live, api: str) -> None:
    fake_llm.script(tool_call("history", {}), error(500, "the model fell over"))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL, kind=ToolLoopRuntime)

    await ask(live, runtime)

    assert len(fake_llm.requests) == 2
    assert runtime.stats.provider_errors == 1
    assert live.room.posts == []
    assert await tokens_today(live) == spent(fake_llm)  # the first call was answered
    await check_nothing_held(live)


# --- within the claim's life ----------------------------------------------------------------------------


async def test_a_provider_that_hangs_is_cut_off_before_the_claim_lapses(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    # The profile would wait 30 s; the claim lives 4 s, and speaking needs the last 3 (RuntimeConfig's margin).
    await live.service.update_settings(CHANNEL, {"claim_ttl_s": 4.0})
    fake_llm.script(delayed(30.0, decision("remark", "Far too late.")))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api, timeout_s=30.0), CHANNEL)
    loop = asyncio.get_running_loop()

    asked_at = loop.time()
    await ask(live, runtime)
    took = loop.time() - asked_at

    assert took < 2.5, f"the turn took {took:.1f} s with a claim of 4 s"
    assert runtime.stats.provider_errors == 1
    assert live.room.posts == [] and await persona_texts(live) == []
    assert live.room.typing_now == set()  # "typing..." stopped with the call
    await check_nothing_held(live)


async def test_a_429_asking_for_longer_than_the_turn_has_skips_it_at_once_and_backs_off_that_long(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    fake_llm.script(error(429, "slow down", headers={"retry-after": "40"}))
    patient = dataclasses.replace(FAST, max_backoff_s=60.0)  # as in production: a server's wait is honoured
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api, max_retries=2), CHANNEL, config=patient)
    loop = asyncio.get_running_loop()

    asked_at = loop.time()
    await ask(live, runtime)
    took = loop.time() - asked_at

    assert len(fake_llm.requests) == 1  # no retry: its wait (40 s) does not fit in the claim (10 s)
    assert took < 1.0, f"the turn took {took:.1f} s"
    assert runtime.backing_off() > 35  # as the server asked, not the runtime's own short back-off
    assert live.room.posts == []
    await check_nothing_held(live)


async def test_an_answer_that_comes_after_the_conversation_moved_on_is_not_posted(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    stale, fresh = "Ramen! (to a question long gone)", "Pizza works. Save me a slice."
    fake_llm.script(delayed(1.0, decision("remark", stale)), decision("remark", fresh))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)

    await live.say(CHANNEL, QUESTION)
    await eventually(lambda: fake_llm.requests, what="aoi asks her model")
    await live.say(CHANNEL, "Never mind, we ordered pizza.", author="ken")
    moved_on = await live.say(CHANNEL, "It's here already!", author="ken")
    await eventually(lambda: live.room.posts, within=5.0, what="aoi answers, with fresh context")
    await live.settled(CHANNEL)

    # Two messages came after what it answered: the arbiter would refuse the answer as stale, so the call was
    # stopped as the second arrived (nothing generated for nothing), and, asked, she looked once more.
    assert [post.text for post in live.room.posts] == [fresh]
    history = await live.history(CHANNEL)
    assert [(m.seq > moved_on, m.text) for m in history if m.author_id == "aoi"] == [(True, fresh)]
    assert (runtime.stats.overtaken, runtime.stats.wasted) == (1, 0)
    await check_nothing_held(live)


# --- a key the API refuses ------------------------------------------------------------------------------


async def test_a_refused_key_stops_the_persona_says_why_once_and_the_others_answer_at_once(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    # A floor held a minute: the others answer within seconds only because the persona hands it back.
    await live.channel("porch", priority_window_s=60.0)
    async with FakeLLMServer(keys=["not-the-key-in-the-env"]) as llm:
        provider = create_provider(fake_profile(llm, "openai", max_retries=0), {FAKE_KEY_ENV: FAKE_KEY})
        aoi = await live.start(make_persona("aoi"), provider, "porch")
        ben = make_persona("ben", talkativeness=1.0, extraversion=1.0, agreeableness=1.0)
        await live.start(ben, RecordingProvider(ScriptedProvider.for_persona(ben, seed=3)), "porch", seed=3)

        with caplog.at_level(logging.INFO):
            asked = await live.say("porch", "Aoi, what's 17 times 3?")
            await eventually(lambda: _spoken_after(live, "porch", asked, "ben"), within=10.0, what="ben answers")
            again = await live.say("porch", "Aoi, are you there?")
            await eventually(lambda: _spoken_after(live, "porch", again, "ben"), within=10.0, what="ben again")
            await live.settled("porch")

    assert len(llm.requests) == 1  # it stopped calling after the refusal
    said = [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]
    assert len(said) == 1, said
    assert f"the API refused the key in {FAKE_KEY_ENV} (profile 'fake-openai')" in said[0]
    assert FAKE_KEY not in caplog.text and FAKE_KEY[-4:] not in caplog.text
    # The arbiter knows, and shows why: nobody's message waits on it, and "Aoi, ..." addresses nobody now.
    [info] = [p for p in live.service.registry.views().personas if p.id == "aoi"]
    assert info.cannot_speak is not None and info.cannot_speak.startswith(f"the API refused the key in {FAKE_KEY_ENV}")
    assert info.cannot_speak.endswith("put a valid key in .env and start again")
    assert [m.addressed for m in await live.history("porch") if m.seq == again] == [[]]
    assert aoi.cannot_speak == info.cannot_speak


async def _spoken_after(live: Live, channel: str, seq: int, persona_id: str) -> bool:
    return any(m.seq > seq and m.author_id == persona_id for m in await live.history(channel))


async def test_a_persona_reads_its_cached_prompt_back_on_a_claim_of_another_tier(
    fake_llm: FakeLLMServer, live: Live, api: str
) -> None:
    # The worker's own decisions (bots.worker.turn.decide) on a nod's claim, then a remark's; the channel is paused so
    # that the persona's worker makes none of its own meanwhile.
    await live.service.update_settings(CHANNEL, {"paused": True})
    fake_llm.script(decision("aizuchi", "Ooh."), decision("remark", "Ramen, obviously."))
    runtime = await live.start(make_persona("aoi"), provider_for(fake_llm, api), CHANNEL)
    await live.say(CHANNEL, "Back from the trip! Ramen or udon tonight?")
    status = await live.status(CHANNEL, "aoi")
    shown = tuple(await live.history(CHANNEL))

    for tier, moves in ((Tier.AIZUCHI, ("pass", "aizuchi")), (Tier.REMARK, ("pass", "remark"))):
        claim = wire.ClaimView(claim_id=f"c-{tier}", persona="aoi", tier=tier, cost=5, state=wire.SpendState.HELD)
        action = Decide(status, claim, shown, moves, {}, 20.0, True, None, ())
        decided = await decide(runtime, CHANNEL, action, asyncio.Event())
        assert decided.outcome.decision.action == str(tier)  # type: ignore[union-attr]

    (_, _, _, written), (_, _, read, written_again) = fake_llm.usages
    assert written > 500 and (read, written_again) == (written, 0)  # written on the nod's claim, read on the remark's
    assert await tokens_today(live) == spent(fake_llm)
    [used] = (await live.service.usage_today(CHANNEL)).personas
    assert (used.requests, used.cache_read_tokens, used.cache_write_tokens) == (2, written, written)
    assert (runtime.stats.cache_read_tokens, runtime.stats.cache_write_tokens) == (written, written)
