"""Display columns: one limit for Japanese and English, and trimming that never exceeds it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter.core.text import display_length, estimate_tokens, trim_to_length


@pytest.mark.parametrize(
    ("text", "columns"),
    [
        ("", 0),
        ("hello", 5),
        ("hello, world!", 13),
        ("こんにちは", 10),  # hiragana are wide
        ("日本語", 6),
        ("カタカナ", 8),
        ("ｶﾀｶﾅ", 4),  # half-width katakana are narrow
        ("ＡＢＣ", 6),  # full-width Latin is wide
        ("はい、そうです。", 16),  # so is full-width punctuation
        ("e\u0301", 1),  # a combining accent adds nothing
        ("cafe\u0301 ok", 7),
        ("👍", 2),
        ("ok 👍", 5),
        ("Kaiさん", 7),
        ("한국어", 6),
        ("\u0e2a\u0e31", 1),  # a Thai vowel mark has no combining class but draws no column
        ("👨\u200d👩\u200d👧", 2),  # a family joined with zero-width joiners is one emoji
        ("👍🏽", 2),  # a skin tone modifies the emoji before it
        ("❤\ufe0f", 2),  # a narrow heart drawn as an emoji
        ("❤", 1),
        ("👍\ufe0f", 2),  # already wide: the selector adds nothing
        ("1\ufe0f\u20e3", 2),  # keycap one
        ("🇯🇵", 2),  # a flag is two regional indicators
        ("🏴\U000e0067\U000e0062\U000e0065\U000e006e\U000e0067\U000e007f", 2),  # England: a tag sequence
        ("a\u200bb", 2),  # a zero-width space
    ],
)
def test_display_length_counts_wide_characters_twice(text: str, columns: int) -> None:
    assert display_length(text) == columns


def test_text_that_fits_is_not_trimmed() -> None:
    assert trim_to_length("hello world", 11) == "hello world"
    assert trim_to_length("こんにちは", 10) == "こんにちは"


def test_trim_prefers_a_nearby_word_boundary() -> None:
    assert trim_to_length("the quick brown fox jumps", 12) == "the quick…"


def test_trim_cuts_mid_word_when_no_boundary_is_near() -> None:
    trimmed = trim_to_length("internationalization matters", 10)
    assert trimmed == "internati…"


def test_trim_does_not_leave_trailing_punctuation_before_the_mark() -> None:
    assert trim_to_length("well, honestly I think so", 7) == "well…"


def test_trim_cuts_cjk_text_between_characters() -> None:
    assert trim_to_length("今日はいい天気ですね", 9) == "今日はい…"
    # An odd budget cannot take half of a wide character.
    assert trim_to_length("今日はいい天気ですね", 10) == "今日はい…"


def test_trim_keeps_a_combining_mark_with_its_letter() -> None:
    assert trim_to_length("cafe\u0301 au lait", 6) == "cafe\u0301…"


def test_trim_keeps_an_emoji_sequence_whole() -> None:
    family = "👨\u200d👩\u200d👧"
    assert trim_to_length(f"{family} ok {family} and more", 8) == f"{family} ok…"
    assert trim_to_length(f"ab{family}cd", 4) == "ab…"


def test_trim_to_less_than_the_mark_gives_nothing() -> None:
    assert trim_to_length("hello", 0) == ""
    assert trim_to_length("こんにちは", 1) == ""


# Pieces rather than characters, so a combining accent always follows its letter, as in real text.
_PIECES = [
    *"ab ,.。、あいう日本語ＡｶüÉ👍",
    "e\u0301",
    "hello ",
    "そうだね",
    "👨\u200d👩\u200d👧",
    "❤\ufe0f",
    "👍🏽",
    "🇯🇵",
]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


@settings(derandomize=True, database=None, max_examples=400)
@given(_TEXT, st.integers(0, 80))
def test_trim_never_exceeds_the_limit(text: str, limit: int) -> None:
    trimmed = trim_to_length(text, limit)
    assert display_length(trimmed) <= limit
    if display_length(text) <= limit:
        assert trimmed == text
    elif trimmed:
        # What is kept is the start of the text, marked as cut.
        assert trimmed.endswith("…")
        assert text.startswith(trimmed[:-1])


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("tea", 1),  # a short word is one token
        ("Who brings the tea?", 5),  # 19 characters, about four per token
        ("お茶は誰が持ってくる？", 11),  # a token per wide character
        ("Yuki: お茶", 4),  # 6 narrow (1.5) and 2 wide, rounded up
        ("café", 1),  # a narrow accented letter counts like any narrow one
    ],
)
def test_estimate_tokens_counts_four_narrow_characters_or_one_wide_one_per_token(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens
