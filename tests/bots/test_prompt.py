"""The words sent to the model: who the persona is, the rules of the room, the recent conversation. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from arbiter.contract import AuthorKind, MessageView, StatusView, Tier
from bots.llm.base import COLUMNS_NOTE, DecisionRequest, decision_instructions, decision_schema, decision_tool
from bots.prompt import OWN_LINES, length_limit, moves_now, persona_prompt, rules_prompt, transcript_turn
from tests.support.fleet import make_persona
from tests.support.status import status_for

if TYPE_CHECKING:
    from bots.persona import Persona


def japanese() -> Persona:
    persona = make_persona("mio", name="みお", language="ja", aizuchi=("へー", "なるほど", "うんうん"))
    return persona.model_copy(update={"aliases": ["Mio"]})


def message(
    seq: int,
    author: str,
    text: str,
    kind: AuthorKind = AuthorKind.HUMAN,
    *,
    name: str | None = None,
    addressed: tuple[str, ...] = (),
) -> MessageView:
    return MessageView(
        seq=seq,
        author_id=author,
        author_kind=kind,
        author_name=name or author.title(),
        text=text,
        at=0.0,
        addressed=list(addressed),
    )


def status(priority: tuple[str, ...] = (), topic: str = "") -> StatusView:
    return status_for("aoi", priority=priority, lengths=dict.fromkeys(Tier, 24), topic=topic)


# --- who the persona is ------------------------------------------------------------------------------------


def test_the_persona_prompt_says_who_the_persona_is() -> None:
    persona = make_persona("aoi", name="Aoi", openness=0.9, extraversion=0.1)

    prompt = persona_prompt(persona)

    for part in (persona.personality, persona.background, persona.speaking_style):
        assert part in prompt
    assert prompt.startswith("You are Aoi,")
    assert "openness very high" in prompt and "extraversion very low" in prompt  # traits in words
    assert prompt.endswith("Always write in English.")


def test_the_samples_are_shown_as_a_voice_not_as_lines_to_reuse() -> None:
    persona = make_persona("aoi", name="Aoi")

    prompt = persona_prompt(persona)

    assert "never reuse these lines; they only show how you sound:" in prompt
    assert f"- nods: {' / '.join(persona.samples.aizuchi[:6])}\n" in prompt
    assert f"- remarks: {' / '.join(persona.samples.remarks[:3])}\n" in prompt
    assert persona.samples.remarks[3] not in prompt  # a few examples, not the whole list


def test_the_persona_prompt_names_the_aliases_and_the_language() -> None:
    prompt = persona_prompt(japanese())

    assert "You are みお (also called Mio)" in prompt
    assert prompt.endswith("Always write in Japanese.")


# --- the rules and the lengths -----------------------------------------------------------------------------


def test_the_rules_list_every_move_with_its_length() -> None:
    rules = rules_prompt(make_persona("aoi"), {"aizuchi": 24, "remark": 120, "long": 300}, "")

    lines = rules.splitlines()
    moves = [line.split(":")[0] for line in lines if line.startswith("- ")]
    # Every move, whatever the claim: the system prompt is the same on each call (a provider caches it).
    assert moves == ["- pass", "- aizuchi", "- remark", "- long"]
    assert next(line for line in lines if line.startswith("- aizuchi")).endswith("(at most 24 columns)")
    assert next(line for line in lines if line.startswith("- remark")).endswith("(at most 120 columns)")
    assert "at most" not in next(line for line in lines if line.startswith("- pass"))
    assert COLUMNS_NOTE in lines
    assert "never @-mention anyone" in rules
    assert "never repeat" in rules
    assert "moderators set the topic" not in rules


def test_a_japanese_persona_gets_the_same_columns_and_the_topic() -> None:
    rules = rules_prompt(japanese(), {"aizuchi": 20}, "summer holidays")

    assert "(at most 20 columns)" in rules  # one unit for every language: the arbiter's
    assert "Japanese characters" not in rules
    assert "a Japanese, Chinese or Korean character takes 2" in rules
    assert rules.endswith("The moderators set the topic: summer holidays")


def test_the_length_is_said_in_the_same_words_in_the_prompt_the_tool_and_the_schema() -> None:
    lengths = {"aizuchi": 24, "remark": 120}
    rules = rules_prompt(japanese(), lengths, "")
    request = DecisionRequest(system=rules, turns=(), actions=("aizuchi", "remark"), max_lengths=lengths)
    text_description = decision_schema(request)["properties"]["text"]["description"]

    for columns in (24, 120):
        phrase = length_limit(columns)
        assert phrase == f"at most {columns} columns"
        assert phrase in rules
        assert phrase in decision_tool(request).description
        assert phrase in decision_instructions(request)  # the system prompt in json_schema mode
        assert phrase in text_description
    assert COLUMNS_NOTE in decision_tool(request).description
    for other_unit in ("characters)", "Japanese characters", "letters"):
        assert other_unit not in rules + decision_instructions(request) + text_description


def test_the_moves_this_claim_allows_are_said_last_with_their_lengths() -> None:
    window = [message(1, "yui", "How was the trip?")]
    lengths = {"aizuchi": 24, "remark": 120, "long": 300}

    remark = transcript_turn(make_persona("aoi"), window, status(), moves=("pass", "remark"), max_lengths=lengths)
    nod = transcript_turn(make_persona("aoi"), window, status(), moves=("aizuchi",), max_lengths=lengths)

    assert remark.text.endswith("\nThis time you may: pass or remark (at most 120 columns).")
    assert nod.text.endswith("\nThis time you may: aizuchi (at most 24 columns).")
    assert moves_now(("pass", "remark", "long"), lengths) == (
        "This time you may: pass, remark (at most 120 columns) or long (at most 300 columns)."
    )


# --- the transcript ----------------------------------------------------------------------------------------


def test_the_transcript_marks_people_personas_bots_and_the_persona_itself() -> None:
    aoi = make_persona("aoi", name="Aoi")
    window = [
        message(1, "yui", "Anyone up for ramen?"),
        message(2, "aoi", "Always.", AuthorKind.PERSONA),
        message(3, "ben", "Count me in.", AuthorKind.PERSONA),
        message(4, "cron", "Reminder: standup at 10.", AuthorKind.BOT, name="SomeBot"),
    ]

    turn = transcript_turn(aoi, window, status())

    assert turn.role == "user"
    assert turn.text == (
        "Recent conversation, oldest first. Each speaker is marked (person), (persona: an AI like you), (bot) or "
        "(you):\n"
        "[Yui (person)] Anyone up for ramen?\n"
        "[Aoi (you)] Always.\n"
        "[Ben (persona)] Count me in.\n"
        "[SomeBot (bot)] Reminder: standup at 10.\n"
        "\n"
        'You would be replying to SomeBot: "Reminder: standup at 10."\n'
        "What is your next move? Choose one of the moves you may make now."
    )


def test_an_addressed_english_persona_is_shown_the_question_quoted() -> None:
    rin = make_persona("rin", name="Rin")
    window = [
        message(1, "yui", "Hi all!"),
        message(2, "rin", "Hey Yui!", AuthorKind.PERSONA),
        message(3, "yui", "Rin, what are you building?", addressed=("rin",)),
        message(4, "theo", "Evening.", AuthorKind.PERSONA),
    ]

    turn = transcript_turn(rin, window, status(priority=("rin",)))

    assert turn.text == (
        "Recent conversation, oldest first. Each speaker is marked (person), (persona: an AI like you), (bot) or "
        "(you):\n"
        "[Yui (person)] Hi all!\n"
        "[Rin (you)] Hey Yui!\n"
        "[Yui (person)] Rin, what are you building?\n"
        "[Theo (persona)] Evening.\n"
        "\n"
        'Yui asked you: "Rin, what are you building?"\n'
        "Answer it: it is your turn to speak."
    )


def test_an_addressed_japanese_persona_is_shown_the_question_quoted() -> None:
    mio = japanese()
    window = [
        message(1, "hana", "こんにちは!", AuthorKind.PERSONA, name="はな"),
        message(2, "yui", "みおさん、おすすめの本は？", name="ゆい", addressed=("mio",)),
    ]

    turn = transcript_turn(mio, window, status(priority=("mio",)))

    assert turn.text.splitlines()[1:] == [
        "[はな (persona)] こんにちは!",
        "[ゆい (person)] みおさん、おすすめの本は？",
        "",
        'ゆい asked you: "みおさん、おすすめの本は？"',
        "Answer it: it is your turn to speak.",
    ]


def test_a_persona_addressed_without_a_question_is_told_to_reply() -> None:
    window = [message(1, "yui", "Aoi, great demo today.", addressed=("aoi",))]

    turn = transcript_turn(make_persona("aoi"), window, status(priority=("aoi",)))

    assert turn.text.endswith('Yui said to you: "Aoi, great demo today."\nReply to it: it is your turn to speak.')


def test_an_addressed_persona_whose_question_left_the_window_is_still_told_to_answer() -> None:
    turn = transcript_turn(make_persona("aoi"), [message(1, "ben", "Hm.")], status(priority=("aoi",)))

    assert turn.text.endswith("You were addressed directly: answer.")


def test_a_long_or_multiline_message_is_quoted_on_one_line_and_cut() -> None:
    text = "first line\nsecond line " + "word " * 100
    turn = transcript_turn(make_persona("aoi"), [message(1, "yui", text)], status())

    [quote] = [line for line in turn.text.splitlines() if line.startswith("You would be replying to")]
    assert quote.startswith('You would be replying to Yui: "first line second line word')
    assert quote.endswith('…"') and len(quote) < 340
    assert "[Yui (person)] first line second line" in turn.text  # the transcript keeps one line per message


def test_the_persona_is_shown_its_own_earlier_lines_not_in_the_window() -> None:
    window = [message(1, "yui", "So?"), message(2, "aoi", "Ramen, then.", AuthorKind.PERSONA)]

    turn = transcript_turn(
        make_persona("aoi"), window, status(), own_lines=["Noodles again?", "I like udon.", "Ramen, then."]
    )

    assert "Lines you said before these - say something else now:\n- Noodles again?\n- I like udon.\n\n" in turn.text
    assert turn.text.endswith(
        'You would be replying to Yui: "So?"\nWhat is your next move? Choose one of the moves you may make now.'
    )


def test_every_own_line_the_runtime_would_refuse_is_listed_and_none_older() -> None:
    # The runtime drops a reply that repeats one of the persona's last OWN_LINES lines: a model not told of one
    # may well say it (a short nod most of all), and the call is wasted.
    said = [f"Line number {n}." for n in range(OWN_LINES + 5)]
    window = [message(1, "yui", "So?")]

    listed = transcript_turn(make_persona("aoi"), window, status(), own_lines=said).text.split("\n")

    assert [line for line in listed if line.startswith("- Line number")] == [f"- {line}" for line in said[-OWN_LINES:]]


def test_nothing_from_others_yet() -> None:
    turn = transcript_turn(make_persona("aoi"), [message(1, "aoi", "Hello?", AuthorKind.PERSONA)], status())

    assert turn.text.endswith(
        "Nobody else has spoken yet. What is your next move? Choose one of the moves you may make now."
    )


@pytest.mark.parametrize("priority", [(), ("aoi",)])
def test_prompts_stay_compact(priority: tuple[str, ...]) -> None:
    persona = make_persona("aoi")
    window = [message(seq, "yui", "Short line.", addressed=("aoi",)) for seq in range(1, 13)]

    system = persona_prompt(persona) + rules_prompt(persona, {}, "")
    turn = transcript_turn(persona, window, status(priority))

    assert len(system) < 1600
    assert len(turn.text) - sum(len(m.text) + 16 for m in window) < 300  # the framing around the messages
