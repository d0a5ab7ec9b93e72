"""Speaker distinctness and persona accuracy on hand-made transcripts whose answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.transcript_metrics import measure, ngrams, profile_text
from bots.persona import load_personas

PERSONAS = Path(__file__).resolve().parents[2] / "personas"

CAT_LINES = [
    "My cat purrs on the windowsill, such a sleepy cat.",
    "The kitten purrs and chases the other cat's tail.",
    "Cats purr in sunny spots, my cat most of all.",
]
DB_LINES = [
    "Index the orders table before the query scans the table.",
    "The migration locked the table; the index helped the query.",
    "Query the table by its index, not by scanning the table.",
]
PROFILES = {
    "neko": "Loves cats. Talks about kittens, purring, naps in the sun and feathers. " + " ".join(CAT_LINES),
    "dba": "A database engineer. Talks about tables, indexes, queries and migrations. " + " ".join(DB_LINES),
}


def interleave(*speakers: tuple[str, list[str]]) -> list[tuple[str, str]]:
    """The speakers' lines taken in turn, as a conversation would have them."""
    transcript = []
    for lines in zip(*(lines for _, lines in speakers), strict=True):
        transcript += [(speaker, line) for (speaker, _), line in zip(speakers, lines, strict=True)]
    return transcript


def test_speakers_with_different_vocabularies_are_distinct_and_recognised() -> None:
    scores = measure(interleave(("neko", CAT_LINES), ("dba", DB_LINES)), PROFILES)

    assert [s.speaker for s in scores.speakers] == ["dba", "neko"]
    assert scores.accuracy == 1.0
    assert (scores.correct, scores.lines) == (6, 6)
    assert scores.distinctness is not None
    assert scores.distinctness > 0.05
    for speaker in scores.speakers:
        assert speaker.distinctness is not None
        assert speaker.distinctness > 0.05


def test_speakers_saying_the_same_lines_are_not_distinct() -> None:
    line = "Same words from everyone, again and again."
    transcript = [("neko", line), ("dba", line), ("neko", line), ("dba", line)]

    scores = measure(transcript, PROFILES)

    assert scores.distinctness == pytest.approx(0.0, abs=1e-9)


def test_a_speaker_speaking_another_personas_lines_is_not_recognised() -> None:
    # dba says neko's lines: neko's are all recognised, dba's none.
    scores = measure(interleave(("neko", CAT_LINES), ("dba", CAT_LINES)), PROFILES)

    by_id = {s.speaker: s for s in scores.speakers}
    assert (by_id["neko"].correct, by_id["dba"].correct) == (3, 0)
    assert scores.accuracy == 0.5
    # Each hears its own lines word for word from the other, and only paraphrases from itself.
    assert scores.distinctness is not None
    assert scores.distinctness < 0


def test_mixing_another_voice_in_lowers_distinctness() -> None:
    pure = measure(interleave(("neko", CAT_LINES), ("dba", DB_LINES)), PROFILES)
    mixed = measure(interleave(("neko", CAT_LINES), ("dba", [DB_LINES[0], CAT_LINES[1], DB_LINES[2]])), PROFILES)

    assert pure.distinctness is not None
    assert mixed.distinctness is not None
    assert mixed.distinctness < pure.distinctness
    assert mixed.accuracy == pytest.approx(5 / 6)


def test_japanese_lines_without_spaces() -> None:
    hana = ["うちの子猫、窓辺で寝てて可愛すぎる!", "子猫がじゃれてきて可愛いじゃん!", "子猫の肉球、可愛すぎない?"]
    sora = [
        "テーブルに索引を先に作りましょう。",
        "索引がないとテーブル全体を読みます。",
        "移行でテーブルがロックされ、索引も作り直しです。",
    ]
    profiles = {
        "hana": "猫が大好き。日向ぼっこや毛玉の話ばかりする。" + "".join(hana),
        "sora": "データベース技術者。索引や表、移行の話をする。" + "".join(sora),
    }

    scores = measure(interleave(("hana", hana), ("sora", sora)), profiles)

    assert ngrams("猫が窓辺")  # one word, no tokenizer: still n-grams
    assert scores.accuracy == 1.0
    assert scores.distinctness is not None
    assert scores.distinctness > 0.05


def test_the_person_is_vocabulary_not_a_speaker() -> None:
    transcript = [("human", "Tell me about cats and tables."), *interleave(("neko", CAT_LINES), ("dba", DB_LINES))]

    scores = measure(transcript, PROFILES)

    assert {s.speaker for s in scores.speakers} == {"neko", "dba"}
    assert scores.lines == 6


def test_empty_and_one_line_transcripts() -> None:
    empty = measure([], PROFILES)
    assert (empty.speakers, empty.accuracy, empty.distinctness, empty.lines) == ((), None, None, 0)

    one = measure([("neko", CAT_LINES[0])], PROFILES)
    assert one.accuracy == 1.0
    assert one.distinctness is None  # one line: nothing to compare with
    assert one.speakers[0].distinctness is None


def test_a_speaker_alone_or_with_one_line_has_no_distinctness() -> None:
    alone = measure([("neko", line) for line in CAT_LINES], PROFILES)
    assert alone.distinctness is None
    assert alone.accuracy == 1.0

    # dba's one line is compared with, but dba itself has no own lines to compare to.
    quiet = measure([*(("neko", line) for line in CAT_LINES), ("dba", DB_LINES[0])], PROFILES)
    by_id = {s.speaker: s for s in quiet.speakers}
    assert by_id["dba"].distinctness is None
    assert by_id["neko"].distinctness is not None
    assert quiet.distinctness == by_id["neko"].distinctness


def test_ties_go_to_the_lowest_persona_id_whatever_the_order() -> None:
    twins = {"zed": "Exactly the same profile.", "abe": "Exactly the same profile."}
    transcript = [("zed", "Exactly the same."), ("abe", "Exactly the same."), ("zed", "")]

    scores = measure(transcript, twins)
    flipped = measure(transcript, dict(reversed(twins.items())))

    assert scores == flipped
    assert {s.speaker: s.correct for s in scores.speakers} == {"abe": 1, "zed": 0}


def test_a_profile_is_the_persona_file_without_placeholders() -> None:
    (rin,) = load_personas(PERSONAS, ["rin"])

    text = profile_text(rin)

    assert rin.personality in text
    assert rin.speaking_style in text
    assert rin.samples.remarks[0] in text
    assert "Of course, !" in text  # "Of course, {name}!"
    assert "{" not in text
