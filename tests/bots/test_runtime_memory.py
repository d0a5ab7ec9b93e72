"""The persona runtime keeps notes on each conversation (its dialogue state) at no extra model call: the one decision
call returns them, the arbiter stores them with the speech or the release, and the next prompt is built from them
and the messages since, not from a long window. Against a real arbiter (SQLite, a localhost port)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from arbiter import contract as wire
from bots.prompt import NEW_SINCE_NOTES, NO_NOTES, NOTES_HEADER
from tests.bots.conftest import CHANNEL
from tests.bots.test_runtime import on_fake, persona_lines, scripted, spoken_after
from tests.support.eventually import eventually
from tests.support.fleet import make_persona
from tests.support.llm_server import decision_reply

if TYPE_CHECKING:
    from tests.support.fleet import Live
    from tests.support.llm_server import FakeLLMServer

NOTES = {
    "topic": "dinner",
    "open_questions": ["Yui: ramen or curry?"],
    "agreed": [],
    "speakers": [{"name": "Yui", "note": "hungry; wants to decide dinner"}],
}


async def stored(live: Live, persona: str) -> wire.MemoryView | None:
    found = await live.service.memories(CHANNEL, persona)
    return found.memories[0] if found.memories else None


async def remember(live: Live, persona: str, seq: int, state: dict[str, Any]) -> None:
    """Notes stored as a pass would store them, before the persona's runtime starts."""
    claimed = await live.service.claim(CHANNEL, persona, wire.Tier.REMARK)
    assert claimed.claim is not None, claimed
    update = wire.MemoryUpdate(seq=seq, state=wire.DialogueState.model_validate(state))
    await live.service.release(CHANNEL, persona, claimed.claim.claim_id, memory=update)


async def test_a_turn_stores_the_notes_with_the_speech_and_makes_one_call(live: Live) -> None:
    aoi = make_persona("aoi", name="Aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)

    asked = await live.say(CHANNEL, "Aoi, ramen or curry tonight?")
    await eventually(lambda: spoken_after(live, asked, "aoi"), what="the answer")
    await eventually(lambda: stored(live, "aoi"), what="the notes")

    memory = await stored(live, "aoi")
    assert memory is not None
    assert memory.seq == asked  # they take in what it answered (its own answer comes after)
    assert ("Yui", "asked: Aoi, ramen or curry tonight?") in [(s.name, s.note) for s in memory.state.speakers]
    assert provider.calls == runtime.stats.llm_requests == 1  # the notes came with the decision
    assert ("GET", "memory") not in live.log.of("aoi")  # what it had came with its first granted claim
    [request] = provider.decisions
    assert NO_NOTES in request.turns[-1].text  # it had none yet
    assert request.memory_schema is not None


async def test_a_pass_gives_the_notes_back_with_the_claim(fake_llm: FakeLLMServer, live: Live) -> None:
    fake_llm.script(decision_reply("tools", {"action": "pass", "text": "", "memory": NOTES}))
    runtime = await live.start(make_persona("aoi"), on_fake(fake_llm), CHANNEL)

    asked = await live.say(CHANNEL, "Aoi, ramen or curry?")
    await eventually(lambda: runtime.stats.looks >= 1, what="a look")
    await eventually(lambda: stored(live, "aoi"), what="the notes")

    memory = await stored(live, "aoi")
    assert memory is not None
    assert (memory.seq, memory.state.model_dump()) == (asked, NOTES)
    assert persona_lines(await live.history(CHANNEL)) == []
    assert runtime.join(CHANNEL).memory == wire.MemoryUpdate(seq=asked, state=memory.state)


async def test_a_persona_back_after_a_long_absence_reads_its_notes_and_only_what_came_since(live: Live) -> None:
    for n in range(20):
        await live.say(CHANNEL, f"old news number {n}")
    noted = await live.say(CHANNEL, "That was everything from yesterday.")
    await remember(live, "aoi", noted, NOTES)
    for n in range(3):
        await live.say(CHANNEL, f"fresh news number {n}")

    aoi = make_persona("aoi", name="Aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    asked = await live.say(CHANNEL, "Aoi, are you there?")
    await eventually(lambda: spoken_after(live, asked, "aoi"), what="the answer")

    prompt = provider.decisions[0].turns[-1].text
    assert NOTES_HEADER in prompt
    assert "- Yui: hungry; wants to decide dinner" in prompt
    # Four messages came after its notes: it is shown at least the last eight, the notes' last ones marked apart.
    shown = [line for line in prompt.splitlines() if line.startswith("[Yui (person)]")]
    assert len(shown) == runtime.config.recent
    assert "old news number 16" not in prompt and "old news number 17" in prompt
    lines = prompt.splitlines()
    assert lines.index(NEW_SINCE_NOTES) == lines.index("[Yui (person)] That was everything from yesterday.") + 1


async def test_a_persona_away_longer_than_its_window_folds_what_it_can_see_in_one_go(live: Live) -> None:
    await remember(live, "aoi", await live.say(CHANNEL, "the start"), NOTES)
    for n in range(40):
        await live.say(CHANNEL, f"busy chat {n}")

    aoi = make_persona("aoi", name="Aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    asked = await live.say(CHANNEL, "Aoi, did you catch all that?")
    await eventually(lambda: spoken_after(live, asked, "aoi"), what="the answer")

    prompt = provider.decisions[0].turns[-1].text
    shown = [line for line in prompt.splitlines() if line.startswith("[Yui (person)]")]
    assert len(shown) == runtime.config.window  # everything it can see; the oldest unseen are gone for it
    assert NEW_SINCE_NOTES not in prompt  # none of what is shown was in its notes
    memory = await stored(live, "aoi")
    assert memory is not None and memory.seq == asked


async def test_notes_a_moderator_resets_are_forgotten_by_the_running_persona(live: Live) -> None:
    aoi = make_persona("aoi", name="Aoi")
    provider = scripted(aoi)
    runtime = await live.start(aoi, provider, CHANNEL)
    worker = runtime.join(CHANNEL)
    first = await live.say(CHANNEL, "Aoi, ramen or curry tonight?")
    await eventually(lambda: spoken_after(live, first, "aoi"), what="the answer")
    await eventually(lambda: worker.memory is not None, what="the notes kept")

    await live.service.reset_memory(CHANNEL, "aoi")
    await eventually(lambda: worker.memory is None, what="the reset heard")
    second = await live.say(CHANNEL, "Aoi, and dessert?")
    await eventually(lambda: spoken_after(live, second, "aoi"), what="the second answer")

    assert NO_NOTES in provider.decisions[-1].turns[-1].text
