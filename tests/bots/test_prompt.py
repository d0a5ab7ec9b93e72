"""The words sent to the model: who the persona is, the rules of the room, the recent conversation. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arbiter.contract import AuthorKind, MessageView, StatusView, Tier, TierView
from bots.prompt import length_in_words, persona_prompt, rules_prompt, transcript_turn
from tests.support.fleet import make_persona

if TYPE_CHECKING:
    from bots.persona import Persona


def japanese() -> Persona:
    persona = make_persona("mio", name="みお", language="ja", aizuchi=("へー", "なるほど", "うんうん"))
    return persona.model_copy(update={"aliases": ["Mio"]})


def message(seq: int, author: str, text: str, kind: AuthorKind = AuthorKind.HUMAN) -> MessageView:
    return MessageView(seq=seq, author_id=author, author_kind=kind, author_name=author.title(), text=text, at=0.0)


def status(priority: tuple[str, ...] = ()) -> StatusView:
    tiers = {tier: TierView(cost=5, max_length=24, recovery_s=5.0, affordable=True) for tier in Tier}
    return StatusView(
        channel_id="lounge",
        now=0.0,
        level=100,
        capacity=100,
        enabled=True,
        paused=False,
        topic="",
        tiers=tiers,
        refunds=[],
        bot_streak=0,
        idle_cap=12,
        priority=list(priority),
        tokens_today=0,
        daily_token_budget=None,
        last_seq=3,
    )


def test_the_persona_prompt_says_who_the_persona_is() -> None:
    persona = make_persona("aoi", name="Aoi", openness=0.9, extraversion=0.1)

    prompt = persona_prompt(persona)

    for part in (persona.personality, persona.background, persona.speaking_style):
        assert part in prompt
    assert prompt.startswith("You are Aoi,")
    assert "openness very high" in prompt and "extraversion very low" in prompt  # traits in words
    assert all(nod in prompt for nod in persona.samples.aizuchi[:6])
    assert all(line in prompt for line in persona.samples.remarks[:4])
    assert persona.samples.remarks[4] not in prompt  # a few examples, not the whole list
    assert prompt.endswith("Always write in English.")


def test_the_persona_prompt_names_the_aliases_and_the_language() -> None:
    prompt = persona_prompt(japanese())

    assert "You are みお (also called Mio)" in prompt
    assert prompt.endswith("Always write in Japanese.")


@pytest.mark.parametrize(
    ("persona", "columns", "words"),
    [
        pytest.param(make_persona("aoi"), 120, "120 characters", id="en"),
        pytest.param(japanese(), 120, "60 Japanese characters", id="ja-two-columns-each"),
        pytest.param(japanese(), 25, "12 Japanese characters", id="ja-rounds-down"),
    ],
)
def test_a_tier_length_is_given_as_the_persona_counts_it(persona: Persona, columns: int, words: str) -> None:
    assert length_in_words(persona, columns) == words


def test_the_rules_list_only_the_moves_offered_with_their_lengths() -> None:
    rules = rules_prompt(make_persona("aoi"), ("pass", "aizuchi", "remark"), {"aizuchi": 24, "remark": 120}, "")

    lines = rules.splitlines()
    moves = [line.split(":")[0] for line in lines if line.startswith("- ")]
    assert moves == ["- pass", "- aizuchi", "- remark"]  # no long remark: it was not claimed
    assert "(at most 24 characters)" in next(line for line in lines if line.startswith("- aizuchi"))
    assert "(at most 120 characters)" in next(line for line in lines if line.startswith("- remark"))
    assert "at most" not in next(line for line in lines if line.startswith("- pass"))
    assert "never @-mention anyone" in rules
    assert "never repeat" in rules
    assert "topic" not in rules


def test_the_rules_give_japanese_lengths_and_the_topic() -> None:
    rules = rules_prompt(japanese(), ("pass", "aizuchi"), {"aizuchi": 20}, "summer holidays")

    assert "(at most 10 Japanese characters)" in rules
    assert rules.endswith("The moderators set the topic: summer holidays")


def test_the_transcript_lists_the_conversation_oldest_first_and_marks_the_persona() -> None:
    aoi = make_persona("aoi", name="Aoi")
    window = [
        message(1, "yui", "Anyone up for ramen?"),
        message(2, "aoi", "Always.", AuthorKind.PERSONA),
        message(3, "ben", "Count me in.", AuthorKind.PERSONA),
    ]

    turn = transcript_turn(aoi, window, status())

    assert turn.role == "user"
    lines = turn.text.splitlines()
    assert lines[1:4] == ["[Yui] Anyone up for ramen?", "[Aoi (you)] Always.", "[Ben] Count me in."]
    assert lines[-1].startswith("What is your next move?")


def test_an_addressed_persona_is_told_to_answer() -> None:
    turn = transcript_turn(make_persona("aoi"), [message(1, "yui", "Aoi, ramen?")], status(priority=("aoi",)))

    assert turn.text.endswith("You were addressed directly: answer.")
