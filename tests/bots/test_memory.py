"""A persona's notes (dialogue state): what a model gives is fitted to the arbiter's bounds, dropping the stale first;
the prompt shows them one fact per line; the offline stand-in keeps them by rule, deterministically."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from arbiter import contract as wire
from bots.llm.base import DecisionRequest, Turn
from bots.llm.scripted import ScriptedProvider, kept_notes
from bots.memory import MEMORY_SCHEMA, fit_state, notes_lines
from bots.prompt import transcript_turn
from bots.scene import scene_of
from tests.bots.test_prompt import message, status
from tests.support.fleet import make_persona

GOOD = {
    "topic": "the picnic",
    "open_questions": ["Yuki: who brings the tea?"],
    "agreed": ["Saturday, by the river"],
    "speakers": [{"name": "Yuki", "note": "organises it"}, {"name": "Ren", "note": "bringing cake"}],
}


def test_notes_within_bounds_are_kept_as_given() -> None:
    state = fit_state(GOOD)
    assert state is not None
    assert state.model_dump() == GOOD


def test_what_is_no_state_at_all_keeps_the_previous_one() -> None:
    assert fit_state(None) is None
    assert fit_state("Yuki wants a picnic") is None
    assert fit_state(["topic"]) is None


def test_parts_of_the_wrong_shape_are_left_out_not_the_whole() -> None:
    state = fit_state({"topic": 5, "open_questions": "one", "agreed": [None, "cake"], "speakers": [{"name": "Yuki"}]})
    assert state is not None
    assert state.model_dump() == {"topic": "", "open_questions": [], "agreed": ["cake"], "speakers": []}


def test_too_much_drops_the_oldest_questions_and_the_least_recent_speakers_first() -> None:
    raw = {
        "topic": "a long evening",
        "open_questions": [f"question {i}: " + "why " * 60 for i in range(12)],
        "agreed": ["tea"],
        "speakers": [{"name": f"P{i}", "note": "likes " + "tea " * 60} for i in range(20)],
    }
    state = fit_state(raw)
    assert state is not None
    assert wire.memory_tokens(state) <= wire.MAX_MEMORY_TOKENS
    kept = [q.split(":")[0] for q in state.open_questions]
    assert kept == sorted(kept, key=lambda q: int(q.split()[1])) and kept[-1] == "question 11"  # the newest stay
    assert [s.name for s in state.speakers] == [f"P{i}" for i in range(len(state.speakers))]  # the most recent stay
    assert state.topic == "a long evening"


_TEXT = st.text(st.characters(codec="utf-8"), max_size=400)
_RAW = st.fixed_dictionaries(
    {},
    optional={
        "topic": st.one_of(_TEXT, st.integers(), st.none()),
        "open_questions": st.lists(st.one_of(_TEXT, st.integers()), max_size=20),
        "agreed": st.lists(_TEXT, max_size=20),
        "speakers": st.lists(
            st.fixed_dictionaries({}, optional={"name": _TEXT, "note": _TEXT}) | st.integers(), max_size=20
        ),
    },
)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(raw=_RAW)
def test_whatever_a_model_answers_fits_the_arbiter_or_is_dropped(raw: dict[str, Any]) -> None:
    state = fit_state(raw)
    if state is not None:
        # The arbiter takes it: the same model checks it there, bounds and cap included.
        again = wire.DialogueState.model_validate_json(state.model_dump_json())
        assert wire.memory_tokens(again) <= wire.MAX_MEMORY_TOKENS


def test_the_prompt_shows_the_notes_one_fact_per_line() -> None:
    state = wire.DialogueState.model_validate(GOOD)
    assert notes_lines(state) == [
        "Topic: the picnic",
        "Open questions:",
        "- Yuki: who brings the tea?",
        "Agreed:",
        "- Saturday, by the river",
        "Speakers:",
        "- Yuki: organises it",
        "- Ren: bringing cake",
    ]


def _request(notes: wire.MemoryUpdate | None, texts: list[tuple[str, str]], topic: str = "") -> DecisionRequest:
    persona = make_persona("aoi", name="Aoi")
    window = [message(seq, author.lower(), text, name=author) for seq, (author, text) in enumerate(texts, start=1)]
    shown = status(topic=topic)
    turn = transcript_turn(persona, window, shown, memory=notes, keeps_notes=True)
    scene = scene_of(persona, window, shown, memory=notes)
    return DecisionRequest(system="You are Aoi", turns=(turn,), memory_schema=MEMORY_SCHEMA, scene=scene)


async def test_the_offline_stand_in_keeps_each_speakers_latest_line_and_question() -> None:
    request = _request(
        None,
        [("Yuki", "Picnic on Saturday?"), ("Ren", "I can bake a cake."), ("Yuki", "Who brings the tea?")],
        topic="weekend plans",
    )
    first = await ScriptedProvider(("Mm.", "Oh!", "Ah."), ("I see.",), seed=1).decide(request)
    assert first.decision.memory == {
        "topic": "weekend plans",
        "open_questions": ["Yuki: Who brings the tea?"],
        "agreed": [],
        "speakers": [
            {"name": "Yuki", "note": "asked: Who brings the tea?"},
            {"name": "Ren", "note": "said: I can bake a cake."},
        ],
    }
    # It reads its notes back from the next prompt, and folds the new messages into them.
    state = fit_state(first.decision.memory)
    assert state is not None
    later = _request(
        wire.MemoryUpdate(seq=3, state=state),
        [
            ("Yuki", "Picnic on Saturday?"),
            ("Ren", "I can bake a cake."),
            ("Yuki", "Who brings the tea?"),
            ("Mei", "Can I come too?"),
        ],
    )
    second = await ScriptedProvider(("Mm.", "Oh!", "Ah."), ("I see.",), seed=2).decide(later)
    assert second.decision.memory == {
        "topic": "weekend plans",
        "open_questions": ["Yuki: Who brings the tea?", "Mei: Can I come too?"],
        "agreed": [],
        "speakers": [
            {"name": "Mei", "note": "asked: Can I come too?"},
            {"name": "Yuki", "note": "asked: Who brings the tea?"},
            {"name": "Ren", "note": "said: I can bake a cake."},
        ],
    }
    # Deterministic: the same scene gives the same notes, whatever the seed.
    assert later.scene is not None
    assert kept_notes(later.scene) == second.decision.memory


async def test_without_a_schema_the_offline_stand_in_keeps_no_notes() -> None:
    request = DecisionRequest(system="You are Aoi", turns=(Turn("user", "[Yuki (person)] hi"),))
    result = await ScriptedProvider(("Mm.", "Oh!", "Ah."), ("I see.",), seed=1).decide(request)
    assert result.decision.memory is None


def test_the_cap_is_checked_where_notes_come_in_not_again_on_every_read() -> None:
    over = {"speakers": [{"name": f"P{index}", "note": "x" * 290} for index in range(12)]}
    with pytest.raises(ValidationError, match="more than the cap"):
        wire.DialogueState.model_validate(over)  # what a persona sends (and what a model answers) is checked
    # What the arbiter sends was checked when it came in: a persona reads it back without counting it again.
    stored = {"channel_id": "c1", "persona": "hana", "seq": 3, "state": over, "updated_at": 1.0}
    frame = json.dumps({"type": "memory", "channel_id": "c1", "persona": "hana", "memory": stored})
    event = wire.parse_stream_frame(frame)
    assert isinstance(event, wire.MemoryEvent) and event.memory is not None
    assert [speaker.name for speaker in event.memory.state.speakers][-1] == "P11"
