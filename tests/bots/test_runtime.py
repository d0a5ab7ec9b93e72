"""The persona runtime against a real arbiter (in process, SQLite, served on a localhost port) and the in-memory
platform: the loop of the issue - wait, look, claim, one LLM call, speak or release, post - and its guarantees.

Providers are real: the scripted one, or the OpenAI SDK adapter on the fake wire-format server when a test needs
the model to say something exact. Time is real but short (see tests.support.fleet.FAST); every wait polls a
condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.contract import AuthorKind, Tier, display_length
from arbiter.core.usage import budget_tokens
from bots.llm import LLMUnavailable, ScriptedProvider, create_provider
from tests.bots.conftest import CHANNEL
from tests.support.eventually import eventually
from tests.support.fleet import FAST, RecordingProvider, make_persona, mentions_in
from tests.support.llm_server import FAKE_KEY, FAKE_KEY_ENV, decision_reply, error, fake_profile

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from arbiter.contract import MessageView
    from bots.persona import Persona
    from bots.runtime import PersonaRuntime
    from tests.support.fleet import Live
    from tests.support.llm_server import FakeLLMServer, Reply


def scripted(persona: Persona, *, seed: int = 1) -> RecordingProvider:
    return RecordingProvider(ScriptedProvider(persona.samples.aizuchi, persona.samples.remarks, seed=seed))


def on_fake(server: FakeLLMServer) -> RecordingProvider:
    """The real OpenAI SDK adapter, pointed at the fake server: the test scripts exactly what the model says."""
    return RecordingProvider(create_provider(fake_profile(server, "openai", max_retries=0), {FAKE_KEY_ENV: FAKE_KEY}))


def eager(persona_id: str) -> Persona:
    """A persona that takes every turn it may: it answers whenever the floor is open to it."""
    return make_persona(persona_id, talkativeness=1.0, extraversion=1.0, agreeableness=1.0)


def says(tier: str, text: str) -> Reply:
    return decision_reply("tools", {"action": tier, "text": text})


def persona_lines(history: list[MessageView]) -> list[MessageView]:
    return [m for m in history if m.author_kind is AuthorKind.PERSONA]


async def claim_of(live: Live, persona_id: str) -> object:
    return (await live.status(CHANNEL, persona_id)).claim


async def spoken_after(live: Live, seq: int, persona_id: str | None = None) -> bool:
    return any(m.seq > seq and persona_id in (None, m.author_id) for m in persona_lines(await live.history(CHANNEL)))


async def pool_full(live: Live) -> bool:
    status = await live.status(CHANNEL)
    return status.level == status.capacity


# --- one turn ---------------------------------------------------------------------------------------------


async def test_an_addressed_persona_looks_claims_generates_speaks_and_posts(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)

    asked = await live.say(CHANNEL, "Aoi, what should we cook tonight?")
    await eventually(lambda: live.room.posts, what="a post")

    [post] = live.room.posts
    history = await live.history(CHANNEL)
    reply = history[-1]
    assert (reply.author_id, reply.text, reply.seq) == ("aoi", post.text, asked + 1)
    assert reply.tier is Tier.REMARK  # addressed: it claimed a remark, and the scripted model used it
    await eventually(lambda: _linked(live, reply.seq, post.platform_message_id), what="the platform id linked")
    # The order of the issue: claim (planned from the status asked on the stream: no status request; its notes here
    # come with its first granted claim), (one LLM call), speak, then the post's platform id. The scripted stand-in
    # costs nothing, so there is no usage to report.
    calls = [call for call in live.log.of("aoi") if call != ("GET", "/v1/events")]
    assert calls == [
        ("PUT", "/v1/personas/aoi"),
        ("POST", "claims"),
        ("POST", "claims/speak"),
        ("PUT", "messages/platform-id"),
    ]
    assert (runtime.stats.statuses_streamed, runtime.stats.statuses_read) == (1, 0)
    assert ("POST", "usage") not in calls
    assert provider.calls == runtime.stats.llm_requests == 1
    assert ("aoi", CHANNEL) in live.room.typing  # it showed it was typing while it generated
    assert await claim_of(live, "aoi") is None
    await eventually(lambda: pool_full(live), what="the remark refunded after its recovery")


async def _linked(live: Live, seq: int, platform_id: str) -> bool:
    history = await live.history(CHANNEL)
    return any(m.seq == seq and m.platform_message_id == platform_id for m in history)


async def test_token_usage_of_each_call_is_reported_to_the_arbiter(fake_llm: FakeLLMServer, live: Live) -> None:
    fake_llm.script(says("long", "Quiet. A long walk, a short nap, and far too much tea."))
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, tell me about your weekend.")
    await eventually(lambda: live.room.posts, what="a post")
    stats = runtime.stats

    [(prompt, completion, read, written)] = fake_llm.usages  # what the API said the call used
    weighed = budget_tokens(prompt, completion, cache_read=read, cache_write=written)

    async def reported() -> bool:
        return (await live.status(CHANNEL)).tokens_today == weighed

    assert written > 0  # the persona's stable prompt, the first time: written to the provider's cache
    assert (stats.prompt_tokens, stats.completion_tokens, stats.cache_write_tokens) == (prompt, completion, written)
    await eventually(reported, what="tokens_today matches what the API counted, the cache's writes at their price")
    [used] = (await live.service.usage_today(CHANNEL)).personas
    assert (used.persona, used.requests, used.cache_write_tokens) == ("aoi", 1, written)


async def test_the_offline_stand_in_costs_nothing_so_it_never_spends_the_budget(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"daily_token_budget": 1})
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)

    for answered, question in enumerate(("Aoi, tell me about your weekend.", "Aoi, and the one before?"), start=1):
        await live.say(CHANNEL, question)
        await eventually(lambda answered=answered: len(live.room.posts) == answered, what="aoi's answer")

    # A budget of one token, and both questions answered: the stand-in reported nothing to spend.
    assert (await live.status(CHANNEL)).tokens_today == 0
    assert runtime.stats.prompt_tokens == runtime.stats.completion_tokens == 0


async def test_a_pass_releases_the_claim_and_posts_nothing(fake_llm: FakeLLMServer, live: Live) -> None:
    fake_llm.script(says("pass", ""))
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, anything to add?")
    await eventually(lambda: runtime.stats.looks >= 1, what="a look")

    assert runtime.stats.passes == 1
    assert live.room.posts == []
    assert persona_lines(await live.history(CHANNEL)) == []
    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)  # a release refunds at once


async def test_the_model_is_offered_what_the_claim_covers_with_the_channels_lengths(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    await live.service.update_settings(CHANNEL, {"tiers": {"remark": {"max_length": 90}}})
    fake_llm.script(says("remark", "Mm, ramen it is."))
    provider = on_fake(fake_llm)
    await live.start(make_persona("aoi"), provider, CHANNEL)

    await live.say(CHANNEL, "Aoi, ramen tonight?")
    await eventually(lambda: live.room.posts, what="the reply")

    [request] = provider.decisions
    # Addressed, it claimed a remark: it may answer or pass (a mere nod would not answer the question).
    assert request.actions == ("pass", "remark")
    # Every tier's length, the channel's, from the arbiter: the prompt begins the same whatever the claim.
    assert dict(request.max_lengths) == {"aizuchi": 24, "remark": 90, "long": 240}
    assert "at most 90 columns" in request.system
    assert request.turns[-1].text.endswith("This time you may: pass or remark (at most 90 columns).")
    reply = persona_lines(await live.history(CHANNEL))[-1]
    assert (reply.tier, reply.cost, reply.text) == (Tier.REMARK, 60, "Mm, ramen it is.")


async def test_the_wait_before_looking_is_jittered_and_shorter_for_eager_personas(live: Live) -> None:
    # What each worker asks to wait before it looks, through the runtime's injectable sleep. The channel is
    # paused so nobody speaks: every wait is a reaction to the test's own messages.
    await live.service.update_settings(CHANNEL, {"paused": True})
    waits: dict[str, list[float]] = {"aoi": [], "ben": []}

    def recording(into: list[float]) -> Callable[[float], Awaitable[None]]:
        async def sleep(seconds: float) -> None:
            into.append(seconds)
            await asyncio.sleep(seconds)

        return sleep

    eager = make_persona("aoi", talkativeness=1.0, extraversion=1.0)
    shy = make_persona("ben", talkativeness=0.0, extraversion=0.0)
    runtimes = [
        await live.start(eager, scripted(eager), CHANNEL, sleep=recording(waits["aoi"]), seed=3),
        await live.start(shy, scripted(shy), CHANNEL, sleep=recording(waits["ben"]), seed=4),
    ]
    for count in range(1, 7):
        await live.say(CHANNEL, f"Message number {count}.")
        await eventually(lambda: all(r.stats.looks >= count for r in runtimes), what=f"look {count}")  # noqa: B023

    base = FAST.base_delay_s
    # delay = base * (1.5 - mean(talkativeness, extraversion)) * uniform(0.6, 1.4)
    assert all(0.3 * base <= wait <= 0.7 * base for wait in waits["aoi"]), waits["aoi"]
    assert all(0.9 * base <= wait <= 2.1 * base for wait in waits["ben"]), waits["ben"]
    assert len(set(waits["aoi"])) > 1 and len(set(waits["ben"])) > 1  # jittered, not a fixed beat

    await live.say(CHANNEL, "Ben, a question for you.")
    await eventually(lambda: runtimes[1].stats.looks >= 7, what="ben looks at the question")
    assert waits["ben"][-1] == pytest.approx(0.2 * base)  # addressed: it answers promptly, however shy


# --- the status check before any claim ---------------------------------------------------------------------


async def _paused(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"paused": True})


async def _muted(live: Live) -> None:
    await live.service.set_persona(CHANNEL, "aoi", muted=True)


async def _persona_not_enabled(live: Live) -> None:
    await live.service.set_persona(CHANNEL, "aoi", enabled=False)


async def _channel_not_enabled(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"enabled": False})


async def _budget_spent(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"daily_token_budget": 100})
    await live.service.report_usage(CHANNEL, "probe", 90, 10)


async def _nothing_affordable(live: Live) -> None:
    # An aizuchi dearer than what is left once another persona holds a long claim: not even a nod is affordable.
    await live.service.update_settings(CHANNEL, {"tiers": {"aizuchi": {"cost": 30}}})
    held = await live.service.claim(CHANNEL, "probe", Tier.LONG)
    assert held.granted and held.level == 20


async def _nothing_in_the_way(live: Live) -> None:
    pass


@pytest.mark.parametrize(
    ("block", "speaks"),
    [
        pytest.param(_paused, False, id="paused"),
        pytest.param(_muted, False, id="muted"),
        pytest.param(_persona_not_enabled, False, id="persona-not-enabled"),
        pytest.param(_channel_not_enabled, False, id="channel-not-enabled"),
        pytest.param(_budget_spent, False, id="budget-spent"),
        pytest.param(_nothing_affordable, False, id="nothing-affordable"),
        pytest.param(_nothing_in_the_way, True, id="control-nothing-in-the-way"),
    ],
)
async def test_a_blocked_persona_checks_status_and_makes_no_claim_and_no_llm_call(
    live: Live, block: Callable[[Live], Awaitable[None]], speaks: bool
) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    await block(live)

    await live.say(CHANNEL, "Aoi, what do you think?")  # addressed: unblocked, it would certainly claim
    await eventually(lambda: runtime.stats.looks >= 1, what="a look")

    calls = [call for call in live.log.of("aoi") if call != ("GET", "/v1/events")]
    # The look planned from the persona's status (pushed by the stream), with the block in its verdicts.
    assert runtime.stats.statuses_streamed + runtime.stats.statuses_read >= 1
    assert (("POST", "claims") in calls) is speaks
    assert (runtime.stats.claims, provider.calls) == ((1, 1) if speaks else (0, 0))
    if speaks:
        await eventually(lambda: live.room.posts, what="the control case speaks")
    else:
        assert live.room.posts == []


async def _resumed(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"paused": False})


async def _unmuted(live: Live) -> None:
    await live.service.set_persona(CHANNEL, "aoi", muted=False)


async def _persona_enabled(live: Live) -> None:
    await live.service.set_persona(CHANNEL, "aoi", enabled=True)


async def _budget_raised(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"daily_token_budget": 1000})


@pytest.mark.parametrize(
    ("block", "lift"),
    [
        pytest.param(_paused, _resumed, id="paused-then-resumed"),
        pytest.param(_muted, _unmuted, id="muted-then-unmuted"),
        pytest.param(_persona_not_enabled, _persona_enabled, id="off-then-on"),
        pytest.param(_budget_spent, _budget_raised, id="budget-spent-then-raised"),
    ],
)
async def test_what_was_said_while_a_persona_was_held_back_is_answered_when_the_settings_let_it_speak(
    live: Live, block: Callable[[Live], Awaitable[None]], lift: Callable[[Live], Awaitable[None]]
) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    await block(live)
    await live.say(CHANNEL, "Aoi, are you there?")
    await eventually(lambda: runtime.stats.looks >= 1, what="a look, refused outright")

    # A settings change that lifts nothing: it looks again (the event cannot tell), and is still held back.
    await live.service.update_settings(CHANNEL, {"topic": "weekend plans"})
    await eventually(lambda: runtime.stats.looks >= 2, what="a second look after the settings event")
    await live.settled(CHANNEL)
    assert (runtime.stats.claims, provider.calls, live.room.posts) == (0, 0, [])

    await lift(live)  # no new message: only the settings event says the persona may speak again
    await eventually(lambda: live.room.posts, what="aoi answers the question asked while it was held back")
    assert provider.calls == 1
    await live.settled(CHANNEL)
    looks = runtime.stats.looks
    await live.service.update_settings(CHANNEL, {"topic": "and now?"})
    await asyncio.sleep(0.2)  # answered: a settings event after that is no cue to look again
    assert (runtime.stats.looks, len(live.room.posts)) == (looks, 1)


async def test_at_the_idle_cap_a_persona_makes_no_claim_until_a_human_speaks(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"idle_cap": 1})
    aoi = make_persona("aoi", talkativeness=1.0, agreeableness=1.0)
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)

    # Another bot's message takes the bots' turns to the cap of 1.
    await live.say(CHANNEL, "Beep. Aoi, the build is green.", author="ci-bot", bot=True)
    await eventually(lambda: runtime.stats.looks >= 1, what="a look")
    assert (runtime.stats.claims, provider.calls, live.room.posts) == (0, 0, [])

    await live.say(CHANNEL, "Aoi, nice - shall we ship it?")  # a human resets the count
    await eventually(lambda: live.room.posts, what="it speaks again")
    assert provider.calls == 1


async def test_a_persona_waiting_for_the_pool_speaks_as_soon_as_another_claim_is_given_back(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    held = await live.service.claim(CHANNEL, "probe", Tier.REMARK)  # 40 left: a remark is not affordable
    assert held.claim is not None

    await live.say(CHANNEL, "Aoi, hello?")
    await eventually(lambda: runtime.stats.looks >= 1, what="aoi looks, and waits for the pool")
    assert provider.calls == 0
    await live.service.release(CHANNEL, "probe", held.claim.claim_id)  # the other persona passes

    # Not when the other claim would have lapsed (10 s here, 30 s by default): as soon as the pool refills.
    await eventually(lambda: live.room.posts, within=5.0, what="aoi answers once the pool refills")


async def test_a_persona_waiting_for_a_refund_claims_when_it_is_due_without_reading_the_status(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"tiers": {"remark": {"recovery_s": 1.5}}})
    said = await live.service.consume(CHANNEL, "probe", "Back in a bit.", tier=Tier.REMARK)  # 40 left for 1.5 s
    assert said.granted
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)

    await live.say(CHANNEL, "Aoi, hello?")
    await eventually(lambda: live.room.posts, what="aoi answers once the remark's cost is back")

    # It planned the wait from the status it asked on the stream, and the claim at its end from the status it asked
    # then: no status read over HTTP, and no claim before the pool held a remark.
    assert ("GET", "status") not in live.log.of("aoi")
    assert (runtime.stats.statuses_read, runtime.stats.refused_claims) == (0, 0)
    assert runtime.stats.statuses_streamed >= 2  # the look that waited, and the one at the wait's end
    assert runtime.stats.claims == 1


# --- a claim is always spoken or released ----------------------------------------------------------------


async def test_a_provider_that_raises_leaves_no_claim_and_the_persona_carries_on(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    provider.fail_next(RuntimeError("a bug in some provider"))
    runtime = await live.start(aoi, provider, CHANNEL)

    await live.say(CHANNEL, "Aoi, say something?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the failed turn")
    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)
    assert live.room.posts == []

    await live.say(CHANNEL, "Aoi, try again?")
    await eventually(lambda: live.room.posts, what="the next turn works")


async def test_provider_errors_back_off_and_skip_the_turn(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    provider.fail_next(LLMUnavailable("503 from the provider", status=503))
    runtime = await live.start(aoi, provider, CHANNEL)

    loop = asyncio.get_running_loop()
    asked_at = loop.time()  # the failure, and so the back-off, starts after this
    await live.say(CHANNEL, "Aoi, are you there?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the failed turn")
    assert runtime.stats.provider_errors == 1
    assert await claim_of(live, "aoi") is None
    assert live.room.posts == []

    # A message during the back-off is not answered at once (that takes a few hundredths of a second here),
    # but once the back-off has passed.
    await live.say(CHANNEL, "Aoi, still there?")
    await eventually(lambda: live.room.posts, what="the persona answers after the back-off")
    assert loop.time() - asked_at >= FAST.backoff_s
    assert provider.calls == 2


async def test_a_failed_post_is_retracted_and_refunded(live: Live) -> None:
    live.room.fail_post = lambda _persona, _channel, _text: True
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)

    await live.say(CHANNEL, "Aoi, anything?")
    await eventually(lambda: runtime.stats.looks >= 1, what="the turn")

    assert live.room.posts == []
    assert persona_lines(await live.history(CHANNEL)) == []  # granted, then retracted: not in the history
    assert runtime.stats.wasted == 1
    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)  # a retraction refunds at once


async def test_closing_the_runtime_mid_generation_releases_the_claim(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    provider.hold()
    runtime = await live.start(aoi, provider, CHANNEL)

    await live.say(CHANNEL, "Aoi, a long question for you...")
    await eventually(lambda: provider.waiting == 1, what="generation started")
    assert await claim_of(live, "aoi") is not None

    await runtime.close()

    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)
    assert live.room.posts == []
    assert persona_lines(await live.history(CHANNEL)) == []


async def test_closing_the_runtime_while_a_claim_is_on_its_way_gives_back_what_the_arbiter_grants(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    gate = live.log.hold("POST", "claims")

    await live.say(CHANNEL, "Aoi, a quick one?")
    await eventually(lambda: ("POST", "claims") in live.log.of("aoi"), what="the claim sent")
    closing = asyncio.create_task(runtime.close())
    await asyncio.sleep(0.1)
    gate.set()  # the arbiter gets the claim only now, after the persona was told to stop, and grants it
    await asyncio.wait_for(closing, 5)

    assert live.log.of("aoi")[-2:] == [("POST", "claims"), ("DELETE", "claims")]
    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)
    assert provider.calls == 0
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.text


async def test_closing_the_runtime_while_it_gives_a_claim_back_waits_for_the_release(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bots.worker")
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    provider.fail_next(LLMUnavailable("the model is down"))  # the turn ends in a release
    runtime = await live.start(aoi, provider, CHANNEL)
    gate = live.log.hold("DELETE", "claims")

    await live.say(CHANNEL, "Aoi, anything?")
    await eventually(lambda: ("DELETE", "claims") in live.log.of("aoi"), what="the release sent")
    closing = asyncio.create_task(runtime.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # a claim given back is seen through
    gate.set()
    await asyncio.wait_for(closing, 5)

    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)
    assert "could not release" not in caplog.text
    assert "stopped while giving claim" in caplog.text  # it says what happened
    looks = runtime.stats.looks
    await asyncio.sleep(0.2)
    assert runtime.stats.looks == looks  # closed: it does not go on looking


async def test_closing_the_runtime_while_it_posts_sees_the_post_through(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    live.room.post_gate = gate = asyncio.Event()

    await live.say(CHANNEL, "Aoi, a quick one?")
    await eventually(lambda: live.room.posting == 1, what="the post under way")
    closing = asyncio.create_task(runtime.close())
    await asyncio.sleep(0.1)
    assert not closing.done()  # the arbiter granted the message: it is posted before the persona goes
    gate.set()
    await asyncio.wait_for(closing, 5)

    [post] = live.room.posts
    [line] = persona_lines(await live.history(CHANNEL))
    assert (line.text, line.platform_message_id) == (post.text, post.platform_message_id)
    assert await claim_of(live, "aoi") is None
    assert "could not release" not in caplog.text


# --- coalescing --------------------------------------------------------------------------------------------


async def test_messages_during_a_generation_make_exactly_one_more_look_that_answers_the_newest(live: Live) -> None:
    # Very talkative: once it has looked again, whether it answers a plain human question is all but certain.
    aoi = make_persona("aoi", talkativeness=1.0)
    provider = scripted(aoi)
    provider.hold()
    runtime = await live.start(aoi, provider, CHANNEL)
    worker = runtime.join(CHANNEL)

    await live.say(CHANNEL, "Aoi, where should we travel this summer?")
    await eventually(lambda: provider.waiting == 1, what="generation started")
    await live.say(CHANNEL, "Somewhere with mountains, maybe.")
    await live.say(CHANNEL, "Or the sea. I cannot decide.")
    newest = await live.say(CHANNEL, "Aoi, which one would you pick?")
    await eventually(lambda: worker.last_seq == newest, what="the runtime heard all three")
    provider.open()

    await eventually(lambda: spoken_after(live, newest), what="the answer")
    await live.settled(CHANNEL)
    assert provider.calls == 2  # one more look for three messages, not three
    last_prompt = provider.decisions[-1].turns[-1].text
    assert "Aoi, which one would you pick?" in last_prompt
    assert last_prompt.index("Somewhere with mountains") < last_prompt.index("which one would you pick")
    reply = persona_lines(await live.history(CHANNEL))[-1]
    assert reply.seq > newest
    assert await claim_of(live, "aoi") is None


@pytest.mark.parametrize(
    ("interruption", "stopped"),
    [
        pytest.param("Aoi, what would you cook?", True, id="a-person-asks-someone-else"),
        pytest.param("Ben, what would you cook?", False, id="a-person-asks-it"),
        pytest.param("Aoi and Ben, what would you cook?", False, id="a-person-asks-it-and-another"),
        pytest.param("Something with noodles, maybe.", False, id="a-plain-statement"),
    ],
)
async def test_a_remark_a_new_question_to_someone_else_overtakes_is_stopped_unwritten(
    live: Live, interruption: str, stopped: bool
) -> None:
    ben = eager("ben")
    provider = scripted(ben)
    provider.hold()
    runtime = await live.start(ben, provider, CHANNEL)
    await live.say(CHANNEL, "What should we cook tonight, everyone?")
    await eventually(lambda: provider.waiting == 1, what="ben writing")
    claim = await claim_of(live, "ben")
    assert claim is not None and claim.tier is not Tier.AIZUCHI  # type: ignore[attr-defined]

    interrupted = await live.say(CHANNEL, interruption)

    if stopped:
        # Its answer could not come before Aoi's: the call is stopped (the provider saw it cancelled) and the
        # claim given back at once, without waiting for the model to finish.
        await eventually(lambda: runtime.stats.overtaken == 1, what="the call stopped")
        assert provider.waiting == 0 and provider.answers == []
        await eventually(lambda: _no_claim(live, "ben"), what="the claim given back")
        assert runtime.stats.wasted == 0
        assert not await spoken_after(live, interrupted - 1, "ben")
    else:
        provider.open()
        await eventually(lambda: spoken_after(live, interrupted, "ben"), what="ben's answer posted")
        await live.settled(CHANNEL)
        assert runtime.stats.overtaken == 0
        assert runtime.stats.wasted == 0


async def _no_claim(live: Live, persona_id: str) -> bool:
    return await claim_of(live, persona_id) is None


# --- what reaches the platform -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("language", "text"),
    [
        pytest.param("en", "Honestly I think we should go to the mountains first and the sea after that.", id="en"),
        pytest.param("ja", "山に行くのが一番だと思うけど、海もいいよね。どっちも行けたら最高じゃない?", id="ja"),
    ],
)
async def test_a_reply_longer_than_its_tier_is_trimmed_to_the_tier(
    fake_llm: FakeLLMServer, live: Live, language: str, text: str
) -> None:
    await live.service.update_settings(CHANNEL, {"tiers": {"remark": {"max_length": 40}}})
    fake_llm.script(says("remark", text))
    aoi = make_persona("aoi", language=language)
    await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, mountains or the sea?")
    await eventually(lambda: live.room.posts, what="the trimmed reply")

    [post] = live.room.posts
    assert display_length(post.text) <= 40  # display columns: a Japanese character counts two
    assert display_length(post.text) >= 20  # cut near the limit, not emptied
    # At a clause or a word boundary, never mid-word and with no "..." put in.
    assert text.startswith(post.text) and "…" not in post.text
    assert text[len(post.text)] in " 、,。."
    assert persona_lines(await live.history(CHANNEL))[-1].text == post.text


@pytest.mark.parametrize(
    "text",
    [
        "@everyone look at this, the bakery is open again!",
        "Hey <@123456789>, what do you think about the bakery?",
        "Ask <@!123456789> and <@&456> about the bakery hours.",
        "@here the bakery is open, @everyone come along!",
        "Sneaky bakery news: @@everyone and <@<@1>2> should not ping anyone.",
    ],
)
async def test_no_mention_ever_reaches_the_platform(fake_llm: FakeLLMServer, live: Live, text: str) -> None:
    fake_llm.script(says("remark", text))
    aoi = make_persona("aoi")
    await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, any news?")
    await eventually(lambda: live.room.posts, what="a post")

    [post] = live.room.posts
    assert not mentions_in(post.text), post.text
    assert "bakery" in post.text  # the rest of the words survive
    assert not any(mentions_in(m.text) for m in persona_lines(await live.history(CHANNEL)))


async def test_a_reply_that_echoes_the_last_message_is_not_posted(fake_llm: FakeLLMServer, live: Live) -> None:
    fake_llm.script(says("remark", "I love fresh bread in the morning!"))
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi: I love fresh bread in the morning.")
    await eventually(lambda: runtime.stats.looks >= 1, what="the turn")

    assert live.room.posts == []
    assert persona_lines(await live.history(CHANNEL)) == []
    assert await claim_of(live, "aoi") is None
    assert await pool_full(live)


async def test_a_persona_does_not_repeat_its_own_line(fake_llm: FakeLLMServer, live: Live) -> None:
    line = "We should bake some bread together this weekend."
    fake_llm.script(says("remark", line), says("remark", line.upper()))
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, plans for the weekend?")
    await eventually(lambda: live.room.posts, what="the first reply")
    await live.say(CHANNEL, "Aoi, and what else?")
    await eventually(lambda: runtime.stats.looks >= 2, what="the second turn")

    assert [post.text for post in live.room.posts] == [line]
    assert [m.text for m in persona_lines(await live.history(CHANNEL))] == [line]
    assert await claim_of(live, "aoi") is None


# --- the event stream --------------------------------------------------------------------------------------


async def test_after_the_arbiter_restarts_the_stream_catches_up_and_misses_nothing(live: Live) -> None:
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    worker = runtime.join(CHANNEL)
    before = await live.say(CHANNEL, "Just a note, nothing to answer.", bot=True, author="notes-bot")
    await eventually(lambda: worker.last_seq == before, what="the first message heard live")

    await live.stop()
    said = [
        await live.say(CHANNEL, "Is anyone here?"),
        await live.say(CHANNEL, "The server was down for a moment."),
        await live.say(CHANNEL, "Aoi, did you miss anything?"),
    ]
    await live.serve()  # same port: the persona's URL is still right

    await eventually(lambda: worker.last_seq == said[-1], what="the missed messages replayed")
    seqs = [m.seq for m in worker.window]
    assert seqs == sorted(set(seqs))
    assert set(said) <= set(seqs)
    assert live.log.of("aoi").count(("GET", "/v1/events")) >= 2  # it reconnected
    await eventually(lambda: spoken_after(live, said[-1], "aoi"), what="the addressed message answered")


async def test_when_the_arbiter_drops_the_stream_the_persona_reconnects(live: Live) -> None:
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    worker = runtime.join(CHANNEL)

    live.arbiter.hub.close_all()  # the server ends every event stream, as when a slow reader is dropped
    said = [await live.say(CHANNEL, f"Line {n} while the stream is being re-opened.") for n in range(3)]
    said.append(await live.say(CHANNEL, "Aoi, still with us?"))

    await eventually(lambda: worker.last_seq == said[-1], what="every message heard")
    assert set(said) <= {m.seq for m in worker.window}
    await eventually(lambda: spoken_after(live, said[-1], "aoi"), what="the addressed message answered")


async def said_on_discord(live: Live, text: str, platform_message_id: str) -> int:
    """A person's message as the arbiter's Discord bot records it: with its Discord id, so it can be edited and
    deleted there later."""
    result = await live.service.record_message(
        CHANNEL, author_id="yui", author_name="Yui", text=text, platform_message_id=platform_message_id
    )
    return result.seq


async def test_the_model_reads_an_edited_message_as_edited_and_a_deleted_one_not_at_all(live: Live) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    worker = runtime.join(CHANNEL)
    await said_on_discord(live, "Let's meet at five.", "d-1")
    secret = await said_on_discord(live, "oops, my password is hunter2", "d-2")
    await eventually(lambda: worker.last_seq == secret, what="both messages heard")

    await live.service.edit_message(CHANNEL, "d-1", "Let's meet at six.")
    await live.service.delete_message(CHANNEL, "d-2")
    asked = await live.say(CHANNEL, "Aoi, what time did we say?")
    await eventually(lambda: spoken_after(live, asked, "aoi"), what="the answer")

    [prompt, *_] = [
        decision.turns[-1].text
        for decision in reversed(provider.decisions)
        if "what time did we say" in decision.turns[-1].text
    ]
    assert "meet at six" in prompt
    assert "meet at five" not in prompt
    assert "hunter2" not in prompt


async def test_its_own_line_edited_on_the_platform_is_remembered_as_edited(live: Live) -> None:
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    worker = runtime.join(CHANNEL)
    await live.say(CHANNEL, "Aoi, say something.")
    await eventually(lambda: live.room.posts, what="a post")
    [post] = live.room.posts

    async def linked() -> bool:  # the persona tells the arbiter which platform message its line became
        return any(m.platform_message_id == post.platform_message_id for m in await live.history(CHANNEL))

    await eventually(linked, what="the post linked")
    await eventually(lambda: list(worker.own_lines) == [post.text], what="its line heard back on the stream")

    await live.service.edit_message(CHANNEL, post.platform_message_id, "An edited line.")
    await eventually(lambda: list(worker.own_lines) == ["An edited line."], what="the edit heard")
    assert [m.text for m in worker.window if m.author_id == "aoi"] == ["An edited line."]


async def test_a_cleared_history_leaves_the_window_and_what_is_said_next_comes_in(live: Live) -> None:
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    worker = runtime.join(CHANNEL)
    before = await live.say(CHANNEL, "Something to forget.", bot=True, author="notes-bot")
    await eventually(lambda: worker.last_seq == before, what="the message heard")

    await live.service.clear_history(CHANNEL)
    await eventually(lambda: not worker.window, what="the window emptied")
    after = await live.say(CHANNEL, "A fresh start.", bot=True, author="notes-bot")
    await eventually(lambda: after in {m.seq for m in worker.window}, what="the next message heard")
    assert all(m.seq > before for m in worker.window)


async def test_a_history_cleared_while_a_persona_writes_ends_its_turn_unposted_and_unnoted(
    live: Live, caplog: pytest.LogCaptureFixture
) -> None:
    aoi = make_persona("aoi")
    provider = scripted(aoi)
    provider.hold()
    runtime = await live.start(aoi, provider, CHANNEL)
    await live.say(CHANNEL, "Aoi, what about the thing we should forget?")
    await eventually(lambda: provider.waiting == 1, what="generation started")

    await live.service.clear_history(CHANNEL)
    assert await pool_full(live)  # its claim was closed by the clear
    provider.open()
    await eventually(lambda: runtime.stats.looks >= 1, what="the turn over")

    assert live.room.posts == []
    assert await live.history(CHANNEL) == []
    assert (await live.service.memories(CHANNEL)).memories == []
    assert runtime.stats.wasted == 1
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")], caplog.text


# --- three personas and a human ----------------------------------------------------------------------------

TRIO_SAMPLES = {
    "aoi": (
        ("Right.", "I see.", "Oh, nice."),
        (
            "I would rather walk there than take the bus.",
            "@everyone the second one sounds more fun to me.",
            "That depends on how much time we have left, <@123>.",
            "Let us try it next weekend and see what happens.",
        ),
    ),
    "ben": (
        ("Mm-hm.", "Fair.", "<@&42> yes."),
        (
            "My sister did exactly that and never regretted it.",
            "I am not convinced, but tell me more about it.",
            "We tried that in school once and it went badly.",
            "@here honestly, the simple plan usually wins.",
        ),
    ),
    "cho": (
        ("Huh.", "True.", "No way!"),
        (
            "I read something about that last week, funnily enough.",
            "That reminds me of the trip to the coast in spring.",
            "Could we do both if we start early enough?",
            "I like the idea, but the weather might not agree.",
        ),
    ),
}


async def start_trio(live: Live, **traits: Any) -> dict[str, tuple[PersonaRuntime, RecordingProvider]]:
    trio = {}
    for seed, (persona_id, (nods, remarks)) in enumerate(TRIO_SAMPLES.items()):
        persona = make_persona(persona_id, aizuchi=nods, remarks=remarks, **traits)
        provider = scripted(persona, seed=seed)
        trio[persona_id] = (await live.start(persona, provider, CHANNEL, seed=10 + seed), provider)
    return trio


def check_every_generation_was_claimed_and_used(
    live: Live, trio: dict[str, tuple[PersonaRuntime, RecordingProvider]]
) -> None:
    for persona_id, (runtime, provider) in trio.items():
        stats = runtime.stats
        assert provider.calls == stats.llm_requests
        # No LLM call without a claim (one given back unused when the conversation moved on while claiming)
        assert stats.llm_requests == stats.claims - stats.refused_claims - stats.given_back, persona_id
        assert stats.wasted == 0, persona_id  # every generation posted ...
        # ... or a deliberate pass, or stopped when a message came that it could no longer be said after
        assert stats.llm_requests == sum(stats.posted.values()) + stats.passes + stats.overtaken, persona_id
        # Every claim planned from a status: the one the stream pushed, or one read when none held.
        assert stats.claims <= stats.statuses_streamed + stats.statuses_read, persona_id
        calls = live.log.of(persona_id)
        assert calls.count(("GET", "status")) == stats.statuses_read, persona_id


async def test_three_personas_stop_at_the_idle_cap_and_resume_when_a_human_speaks(live: Live) -> None:
    await live.service.update_settings(CHANNEL, {"idle_cap": 2})
    trio = await start_trio(live)

    first = await live.say(CHANNEL, "Aoi, Ben, Cho: beach or mountains this year?")
    # All three were addressed and each wants a remark, but the cap allows two bot turns without a human.
    await eventually(lambda: _bot_streak(live, 2), what="two bot turns")
    await live.settled(CHANNEL)
    calls = sum(provider.calls for _, provider in trio.values())
    await asyncio.sleep(0.25)  # a margin longer than any wait or refund here: nothing more may happen
    after_first = [m for m in persona_lines(await live.history(CHANNEL)) if m.seq > first]
    assert len(after_first) == 2
    assert sum(provider.calls for _, provider in trio.values()) == calls
    assert (await live.status(CHANNEL)).bot_streak == 2

    quiet = next(pid for pid in trio if pid not in {m.author_id for m in after_first})
    second = await live.say(CHANNEL, f"{quiet.title()}, you have been quiet. What do you say?")
    await eventually(lambda: spoken_after(live, second, quiet), what="the quiet one speaks after the human")
    await live.settled(CHANNEL)
    assert len([m for m in persona_lines(await live.history(CHANNEL)) if m.seq > second]) <= 2

    check_every_generation_was_claimed_and_used(live, trio)
    assert [p.text for p in live.room.posts] == [m.text for m in persona_lines(await live.history(CHANNEL))]
    assert not any(mentions_in(post.text) for post in live.room.posts)


async def _bot_streak(live: Live, count: int) -> bool:
    return (await live.status(CHANNEL)).bot_streak >= count


async def test_an_addressed_persona_answers_first(live: Live) -> None:
    # Eager, agreeable personas: all of them want to talk; the others may only nod until Ben has answered.
    trio = await start_trio(live, talkativeness=1.0, extraversion=1.0, agreeableness=1.0)

    asked = await live.say(CHANNEL, "Ben, what is your favourite season, and why?")
    await eventually(lambda: spoken_after(live, asked, "ben"), what="ben answers")

    after = [m for m in persona_lines(await live.history(CHANNEL)) if m.seq > asked]
    first_remark = next(m for m in after if m.tier is not Tier.AIZUCHI)
    assert first_remark.author_id == "ben"
    assert all(m.tier is Tier.AIZUCHI for m in after if m.seq < first_remark.seq)
    await live.settled(CHANNEL)
    check_every_generation_was_claimed_and_used(live, trio)
    assert not any(mentions_in(post.text) for post in live.room.posts)


async def test_a_message_that_arrives_while_a_persona_generates_is_answered(live: Live) -> None:
    trio = await start_trio(live)
    aoi_provider, ben_provider = trio["aoi"][1], trio["ben"][1]
    aoi_provider.hold()

    first = await live.say(CHANNEL, "Aoi, how was the concert?")
    await eventually(lambda: aoi_provider.waiting == 1, what="aoi generating")
    ben = trio["ben"][0]
    # Aoi has the floor: Ben looks, and waits for her answer without so much as a nod.
    await eventually(lambda: ben.stats.looks >= 1, what="ben looks at the first message")
    assert not await spoken_after(live, first)
    calls, looks = ben_provider.calls, ben.stats.looks
    asked = await live.say(CHANNEL, "Ben, were you there too?")
    # Ben looks while Aoi's claim holds the pool: a remark is not affordable, so no claim and no LLM call.
    await eventually(lambda: ben.stats.looks > looks, what="ben looks")
    assert ben_provider.calls == calls
    assert not await spoken_after(live, asked)
    aoi_provider.open()

    await eventually(lambda: spoken_after(live, asked, "ben"), what="ben answers the message")
    assert "Ben, were you there too?" in ben_provider.decisions[-1].turns[-1].text
    await live.settled(CHANNEL)
    check_every_generation_was_claimed_and_used(live, trio)


# --- the addressed persona answers first ---------------------------------------------------------------------


def offered(body: dict[str, Any]) -> list[str]:
    """The moves a request to the OpenAI wire format offered this time: its last line says them (the decide tool
    offers every action, whatever the claim)."""
    last = body["messages"][-1]["content"].splitlines()[-1]
    assert last.startswith("This time you may: ")
    said = last.removeprefix("This time you may: ").rstrip(".").replace(" or ", ", ")
    return [move.split(" (")[0] for move in said.split(", ")]


async def test_an_addressed_persona_that_passes_looks_once_more_without_a_pass_and_answers(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    # (A third reply for a later look of its own, should it want one: the test is about the first two.)
    fake_llm.script(says("pass", ""), says("remark", "Fine, fine: ramen."), says("pass", ""))
    aoi = make_persona("aoi")
    await live.start(aoi, on_fake(fake_llm), CHANNEL)
    ben = await live.start(eager("ben"), scripted(eager("ben")), CHANNEL, seed=3)

    asked = await live.say(CHANNEL, "Aoi, ramen or udon?")
    await eventually(lambda: spoken_after(live, asked, "aoi"), what="aoi's answer")
    await live.settled(CHANNEL)

    first, second, *_ = fake_llm.bodies("openai")
    assert "pass" in offered(first)
    assert "pass" not in offered(second)  # the second look must answer
    after = [m for m in persona_lines(await live.history(CHANNEL)) if m.seq > asked]
    assert (after[0].author_id, after[0].text) == ("aoi", "Fine, fine: ramen.")  # nobody, not even a nod, before
    assert ben.stats.llm_requests == sum(1 for m in after if m.author_id == "ben")


async def test_when_the_addressed_persona_fails_twice_the_floor_opens_and_another_answers(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    fake_llm.script(error(500, "down"), error(500, "still down"))
    await live.start(make_persona("aoi"), on_fake(fake_llm), CHANNEL)
    ben_persona = eager("ben")
    ben = await live.start(ben_persona, scripted(ben_persona), CHANNEL, seed=3)

    asked = await live.say(CHANNEL, "Aoi, what's 17 times 3?")
    await eventually(lambda: spoken_after(live, asked, "ben"), within=10.0, what="ben answers instead")

    assert len(fake_llm.requests) == 2  # aoi tried twice (one retry after her back-off) before giving up
    [answer] = [m for m in persona_lines(await live.history(CHANNEL)) if m.seq > asked and m.tier is not Tier.AIZUCHI]
    assert answer.author_id == "ben" and "51" in answer.text
    assert ben.stats.wasted == 0


async def test_a_line_said_within_the_personas_last_thirty_is_not_posted_again(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    aoi = make_persona("aoi")
    said_long_ago = "I'd rather walk than take the bus."
    await live.service.consume(CHANNEL, "aoi", said_long_ago, tier=Tier.REMARK)
    for index in range(20):  # enough that the line is long out of the 16-message window
        await live.say(CHANNEL, f"filler {index}")
    # Asked, she tries twice (the second time with no pass offered); the model repeats the old line both times.
    fake_llm.script(says("remark", said_long_ago), says("remark", said_long_ago))
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)

    await live.say(CHANNEL, "Aoi, bus or walk?")
    await eventually(lambda: runtime.stats.wasted == 2, what="both repeats dropped")
    await live.settled(CHANNEL)
    assert fake_llm.unscripted == 0

    assert live.room.posts == []
    assert await claim_of(live, "aoi") is None


async def test_its_own_last_lines_come_from_the_arbiter_however_much_others_said_since(
    fake_llm: FakeLLMServer, live: Live
) -> None:
    # Said before the persona (re)started, with more said by others since than it reads back on arriving.
    own = ["I'd rather walk than take the bus.", "Soba beats udon, fight me.", "The river path is prettier."]
    await live.channel(CHANNEL, capacity=1000)
    for line in own:
        assert (await live.service.consume(CHANNEL, "aoi", line, tier=Tier.REMARK)).granted
    for index in range(120):
        await live.say(CHANNEL, f"filler {index}")
    fake_llm.script(says("remark", own[1]), says("remark", "Let's try the new place by the station."))
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, on_fake(fake_llm), CHANNEL)
    assert not [m for m in runtime.join(CHANNEL).window if m.author_id == "aoi"]

    await live.say(CHANNEL, "Aoi, where should we eat?")
    await eventually(lambda: live.room.posts, what="her answer")

    assert [post.text for post in live.room.posts] == ["Let's try the new place by the station."]
    assert runtime.stats.wasted == 1  # the old line, dropped as a repeat
    first_prompt = json.dumps(fake_llm.bodies()[0], ensure_ascii=False)
    assert all(line in first_prompt for line in own)  # and shown to the model as hers, not to say again
    # Its new line joins them as the stream brings it back, a moment after the post.
    await eventually(
        lambda: runtime.join(CHANNEL).own_lines[-4:] == [*own, "Let's try the new place by the station."],
        what="her new line among her own",
    )


async def test_a_persona_in_several_channels_holds_one_stream_and_reads_no_status_to_plan(live: Live) -> None:
    channels = [CHANNEL, "hall", "den"]
    for channel in channels[1:]:
        await live.channel(channel)
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    for channel in channels[1:]:
        await asyncio.wait_for(runtime.join(channel).ready(), 5.0)

    asked = {channel: await live.say(channel, f"Aoi, what do you think of {channel}?") for channel in channels}
    for channel, seq in asked.items():
        await eventually(lambda c=channel, s=seq: spoken_after_in(live, c, s), what=f"an answer in {channel}")

    calls = live.log.of("aoi")
    assert calls.count(("GET", "/v1/events")) == 1  # one connection for the three channels
    assert ("GET", "status") not in calls and ("GET", "history") not in calls
    assert runtime.stats.statuses_streamed >= 3


async def spoken_after_in(live: Live, channel: str, seq: int) -> bool:
    return any(m.seq > seq and m.author_id == "aoi" for m in await live.history(channel))


@pytest.mark.parametrize("opened", [True, False], ids=["opened-for-it", "joined"])
async def test_a_line_said_after_a_channel_was_opened_for_a_slow_persona_is_answered(live: Live, opened: bool) -> None:
    # A room a person opened while the persona was still coming up: the person's first line is in the history
    # before the persona follows the channel. Opened for it at the seq before, the persona answers it; merely
    # joining a channel, it takes what it finds there as context.
    await live.channel("hall")
    aoi = make_persona("aoi")
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    before = await live.say("hall", "(earlier talk)")
    asked = await live.say("hall", "Aoi, are you there?")

    worker = runtime.join("hall")
    if opened:
        worker.opened(before)
    await asyncio.wait_for(worker.ready(), 5.0)

    if opened:
        await eventually(lambda: spoken_after_in(live, "hall", asked), what="her answer")
    await live.settled("hall")
    assert await spoken_after_in(live, "hall", asked) is opened


# --- a thousand channels: what a quiet worker holds ------------------------------------------------------


async def test_a_quiet_worker_holds_no_task_and_a_busy_one_lets_it_go_when_done(live: Live) -> None:
    aoi = make_persona("aoi")
    channels = [f"quiet-{n}" for n in range(20)]
    for channel in channels:
        await live.channel(channel)
    runtime = await live.start(aoi, scripted(aoi), CHANNEL)
    await asyncio.gather(*(runtime.join(channel).ready() for channel in channels))

    def turn_tasks() -> list[str]:
        return [task.get_name() for task in asyncio.all_tasks() if task.get_name().startswith("turns aoi@")]

    assert turn_tasks() == []  # twenty-one channels followed, nothing to look at: no task among them

    await live.say(channels[3], "Aoi, are you there?")
    await eventually(lambda: live.room.posts, what="a post")
    await eventually(lambda: runtime.join(channels[3]).idle, what="the turn over")
    await eventually(lambda: not turn_tasks(), what="the look's task gone with it")


async def test_a_worker_that_chose_silence_looks_once_more_then_rests(live: Live) -> None:
    shy = make_persona("aoi", talkativeness=0.0, extraversion=0.0, agreeableness=0.0)
    runtime = await live.start(shy, scripted(shy), CHANNEL, seed=5)
    await live.say(CHANNEL, "Nice weather today.")

    # A silence is a cue too: it looks once more after a pause (asking its status again), and stays quiet again.
    # Then nothing is to come: no task, no retry.
    await eventually(lambda: runtime.stats.looks >= 2, what="a second look")
    await eventually(lambda: runtime.join(CHANNEL).idle, what="the looks over")
    assert runtime.stats.claims == 0
    assert runtime.stats.statuses_streamed == runtime.stats.looks == 2


async def test_the_personas_of_a_process_share_one_stream_and_each_message_parsed_once(live: Live) -> None:
    aoi, ben = make_persona("aoi"), make_persona("ben")
    first = await live.start(aoi, scripted(aoi), CHANNEL)
    second = await live.start(ben, scripted(ben, seed=2), CHANNEL)
    said = await live.say(CHANNEL, "Ben and Aoi, nice weather today?")

    def heard(runtime: PersonaRuntime) -> bool:
        return any(m.seq == said for m in runtime.join(CHANNEL).window)

    await eventually(lambda: heard(first) and heard(second), what="both heard it")
    [one] = [m for m in first.join(CHANNEL).window if m.seq == said]
    [other] = [m for m in second.join(CHANNEL).window if m.seq == said]
    assert one is other  # one object for both windows: the stream brought one frame for both
    # One connection for both personas, opened with the first one's token; each asked its own status on it.
    streams = [entry for entry in live.log.entries if entry[1:] == ("GET", "/v1/events")]
    assert [who for who, _, _ in streams] == ["aoi"]
    await eventually(lambda: first.stats.statuses_streamed and second.stats.statuses_streamed, what="both looked")
    assert ("GET", "status") not in live.log.of("aoi") + live.log.of("ben")
