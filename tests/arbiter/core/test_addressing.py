"""Whom a human message addresses: explicit mentions first, then personas named in the text."""

from __future__ import annotations

import pytest

from arbiter.core.addressing import addressed_personas

# persona id -> other names it answers to
NAMES: dict[str, tuple[str, ...]] = {
    "ann": ("Ann",),
    "kai": ("Kai", "カイ"),
    "hana": ("Hana", "はな", "花"),
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ann, what do you think?", ("ann",)),
        ("what do you think, ann?", ("ann",)),  # names are matched case-insensitively
        ("ANN!", ("ann",)),
        ("I asked Ann's opinion", ("ann",)),
        ("the Annual report is out", ()),  # a Latin name needs word boundaries
        ("Joanna said hi", ()),
        ("planning a banner", ()),
        ("Kaiさん、どう思う？", ("kai",)),  # Japanese text around a Latin name is still a boundary
        ("昨日Annと話した", ("ann",)),
        ("Annélie is here", ()),  # accented letters still continue a Latin word
        ("カイはどう思う？", ("kai",)),  # a Japanese name is found inside the sentence
        ("はなちゃん、おはよう", ("hana",)),
        ("花が咲いた", ("hana",)),  # substring matching is the price of no word breaks in Japanese
        ("hana and kai, come here", ("kai", "hana")),  # named ones in the registry's order
        ("nobody in particular", ()),
        ("", ()),
    ],
)
def test_named_personas_are_addressed(text: str, expected: tuple[str, ...]) -> None:
    assert addressed_personas(text, NAMES) == expected


def test_explicit_mentions_come_first() -> None:
    assert addressed_personas("Ann and Hana, thoughts?", NAMES, mentions=("kai",)) == ("kai", "ann", "hana")


def test_a_persona_both_mentioned_and_named_is_listed_once() -> None:
    assert addressed_personas("Kai?", NAMES, mentions=("kai",)) == ("kai",)


def test_a_persona_mentioned_twice_is_listed_once() -> None:
    assert addressed_personas("hey", NAMES, mentions=("kai", "kai")) == ("kai",)


def test_unknown_mentions_are_ignored() -> None:
    assert addressed_personas("hi all", NAMES, mentions=("someone-else", "hana")) == ("hana",)


def test_the_persona_id_itself_counts_as_a_name() -> None:
    assert addressed_personas("ping mio", {"mio": ()}) == ("mio",)


def test_an_empty_alias_matches_nothing() -> None:
    assert addressed_personas("anything at all", {"x1": ("",)}) == ()
