"""What a persona's text must be before it is posted: no pings, no name prefix, within its tier, not a repeat."""

from __future__ import annotations

import re
from difflib import SequenceMatcher

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arbiter.contract import display_length
from bots.language.text import (
    clean_reply,
    cut_to_length,
    has_mention,
    line_key,
    neutralize_mentions,
    nod_repeats,
    repeats,
)

NAMES = ("Aoi", "あおい")
# What Discord turns into a ping, written independently of bots.language.text.
PING = re.compile(r"<@[!&]?\d+>|@(everyone|here)\b", re.IGNORECASE)


# --- mentions ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("@everyone hello", "everyone hello", id="everyone"),
        pytest.param("hi @here!", "hi here!", id="here"),
        pytest.param("@EVERYONE loud", "EVERYONE loud", id="any-case"),
        pytest.param("ask <@123> now", "ask  now", id="user"),
        pytest.param("ask <@!123> now", "ask  now", id="user-nickname-form"),
        pytest.param("ask <@&456> now", "ask  now", id="role"),
        pytest.param("@@everyone", "everyone", id="doubled-at"),
        pytest.param("<@<@1>2>", "", id="nested-token"),
        pytest.param("<@&<@!1>2>", "", id="nested-role"),
        pytest.param("mail me at a@example.com", "mail me at a@example.com", id="an-e-mail-is-no-ping"),
        pytest.param("<#123> is a channel", "<#123> is a channel", id="a-channel-link-is-no-ping"),
        pytest.param("＠everyone", "＠everyone", id="full-width-at-does-not-ping"),
    ],
)
def test_neutralize_mentions(text: str, expected: str) -> None:
    assert neutralize_mentions(text) == expected


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("@everyone", True),
        ("hey @here", True),
        ("<@1>", True),
        ("<@&1>", True),
        ("<@!1>", True),
        ("everyone here", False),
        ("a@example.com", False),
        ("<@abc>", False),
    ],
)
def test_has_mention(text: str, mentions: bool) -> None:
    assert has_mention(text) is mentions


@given(st.text(alphabet="<@&!>0123 everyonhr", max_size=40))
def test_neutralized_text_never_pings_and_is_stable(text: str) -> None:
    cleaned = neutralize_mentions(text)

    assert PING.search(cleaned) is None, cleaned
    assert not has_mention(cleaned)
    assert neutralize_mentions(cleaned) == cleaned


# --- clean_reply -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("Sounds good.", "Sounds good.", id="plain"),
        pytest.param("  Sounds\n\ngood.  ", "Sounds good.", id="one-paragraph"),
        pytest.param("Aoi: Sounds good.", "Sounds good.", id="own-name-prefix"),
        pytest.param("aoi : Sounds good.", "Sounds good.", id="own-name-any-case"),
        pytest.param("[Aoi]: Sounds good.", "Sounds good.", id="bracketed-prefix"),
        pytest.param("[Aoi] Sounds good.", "Sounds good.", id="the-transcript-format"),
        pytest.param("[Aoi (you)] Sounds good.", "Sounds good.", id="the-transcript-format-of-oneself"),
        pytest.param("あおい：いいね!", "いいね!", id="full-width-colon"),
        pytest.param("Ben: you first.", "Ben: you first.", id="another-name-is-kept"),
        pytest.param('"Sounds good."', "Sounds good.", id="wrapping-quotes"),
        pytest.param("「いいね」", "いいね", id="japanese-quotes"),
        pytest.param("Aoi: @everyone look!", "everyone look!", id="prefix-and-ping"),
        pytest.param("<@123>", "", id="only-a-ping"),
    ],
)
def test_clean_reply(text: str, expected: str) -> None:
    assert clean_reply(text, NAMES, 100) == expected


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param(
            "Sure! That works for me, as long as we leave early enough to catch the train.",
            30,
            "Sure! That works for me",
            id="en-clause",
        ),
        pytest.param(
            "I love it. The real trouble with distributed systems is that every node believes it is right.",
            60,
            "I love it. The real trouble with distributed systems",
            id="en-a-tiny-sentence-gives-way-to-the-last-whole-word",
        ),
        pytest.param(
            "Honestly, I think so. But then again who knows what happens next week with all of this.",
            40,
            "Honestly, I think so.",
            id="en-sentence",
        ),
        pytest.param(
            "Well... I think the best part is the ending, really.",
            30,
            "Well... I think the best part",
            id="en-ellipsis-kept-inside",
        ),
        pytest.param("The quick brown fox jumps over the lazy dog again.", 24, "The quick brown fox", id="en-word"),
        pytest.param("I went there and", 12, "I went there", id="en-no-dangling-and"),
        pytest.param("Supercalifragilistic", 10, "Supercalif", id="en-one-long-word"),
        pytest.param("山に行くのが一番。だと思うけど、海もいいよね。", 20, "山に行くのが一番。", id="ja-sentence"),
        pytest.param(
            "山に行くのが一番だと思うけど、海もいいよね。", 30, "山に行くのが一番だと思うけど", id="ja-clause"
        ),
        pytest.param("えっ、マジ?それ絶対締め切り前にやるやつじゃん!", 24, "えっ、マジ?", id="ja-narrow-question-mark"),
        pytest.param(
            "山に行くのが一番だと思うけど海もいいよね", 20, "山に行くのが一番だと", id="ja-no-boundary-whole-characters"
        ),
        pytest.param("そうだね……でも海のほうが好きかな、やっぱり。", 16, "そうだね", id="ja-no-trailing-ellipsis"),
        pytest.param(
            "<@1> The quick brown fox jumps over the lazy dog again and again.",
            30,
            "The quick brown fox jumps over",
            id="ping-then-cut",
        ),
    ],
)
def test_a_reply_too_long_is_cut_where_a_person_would_stop(text: str, limit: int, expected: str) -> None:
    cleaned = clean_reply(text, NAMES, limit)

    assert cleaned == expected
    assert display_length(cleaned) <= limit
    assert not cleaned.endswith(("…", "..."))


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        pytest.param("cafe\u0301 au lait", 5, "cafe\u0301", id="a-combining-accent-stays"),
        pytest.param(
            "ab\U0001f468\u200d\U0001f469\u200d\U0001f467cd",
            4,
            "ab\U0001f468\u200d\U0001f469\u200d\U0001f467",
            id="an-emoji-family-stays-whole",
        ),
        pytest.param("あいうえお", 1, "", id="not-even-one-character-fits"),
    ],
)
def test_a_cut_keeps_characters_whole(text: str, limit: int, expected: str) -> None:
    assert cut_to_length(text, limit) == expected


def test_clean_reply_keeps_a_reply_that_fits_exactly() -> None:
    text = "あ" * 10  # 20 columns

    assert clean_reply(text, NAMES, 20) == text


@given(st.text(max_size=300), st.integers(min_value=1, max_value=200))
def test_clean_reply_always_fits_and_never_pings(text: str, limit: int) -> None:
    cleaned = clean_reply(text, NAMES, limit)

    assert display_length(cleaned) <= limit
    assert not has_mention(cleaned)
    assert "\n" not in cleaned


@given(
    st.text(alphabet=st.sampled_from("abc xyz.,!?、。！？あいう漢字…"), min_size=1, max_size=200), st.integers(2, 80)
)
def test_a_cut_never_empties_a_reply_or_ends_in_an_ellipsis(text: str, limit: int) -> None:
    cut = cut_to_length(text, limit)

    assert display_length(cut) <= limit
    if text[:1].isalnum():
        assert cut  # something was said and its first character fits: something is left
    if cut != text:
        assert not cut.endswith(("…", "..")), cut
        assert text.startswith(cut)


# --- repeats -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "earlier", "repeated"),
    [
        pytest.param("I love ramen.", ["I love ramen."], True, id="the-same"),
        pytest.param("i LOVE ramen!!", ["I love ramen."], True, id="case-and-punctuation"),
        pytest.param("ＡＢＣ１２３", ["abc123"], True, id="full-width-forms"),
        pytest.param(
            "We should bake some bread together this weekend!",
            ["We should bake bread together this weekend."],
            True,
            id="nearly-the-same-long-line",
        ),
        pytest.param("I see.", ["I see it."], False, id="short-lines-must-match-exactly"),
        pytest.param("Udon, for once.", ["I love ramen.", "Soba?"], False, id="something-new"),
        pytest.param("", [], True, id="nothing-to-say"),
        pytest.param("!!!", ["anything"], True, id="only-punctuation"),
        pytest.param("Hello there.", [], False, id="nothing-earlier"),
        pytest.param("👍", ["Sounds good."], False, id="an-emoji-nod"),
        pytest.param("👍🏽", ["👍"], True, id="the-same-emoji-in-another-skin-tone"),
        pytest.param("👀", ["👍", "🙂"], False, id="another-emoji"),
    ],
)
def test_repeats(text: str, earlier: list[str], repeated: bool) -> None:
    assert repeats(text, earlier) is repeated


def test_a_line_said_word_for_word_earlier_repeats_whatever_comes_before_it() -> None:
    # The exact check goes over every earlier line before any fuzzy one: a long line near-missing the text first,
    # then the text itself in other case and punctuation.
    earlier = ["We should bake some cakes together next weekend", "Soba?", "WE SHOULD BAKE BREAD, THIS WEEKEND!"]
    assert repeats("We should bake bread this weekend.", earlier)
    assert not repeats("We should bake bread this weekend.", earlier[:2])


def _difflib_repeats(text: str, earlier: list[str]) -> bool:
    """The remark rule as its docstring states it, with difflib's ratio computed in full for every pair."""
    key = line_key(text)
    if not key:
        return True
    for other in map(line_key, earlier):
        if key == other:
            return True
        if min(len(key), len(other)) >= 12 and SequenceMatcher(None, key, other).ratio() > 0.85:
            return True
    return False


# Lines of a few letters, so that near repeats (and exact ones) come up often.
_LINES = st.text(alphabet="abcde .!", min_size=0, max_size=24)


@given(text=_LINES, earlier=st.lists(_LINES, max_size=8))
def test_the_repeat_check_says_what_difflib_says(text: str, earlier: list[str]) -> None:
    assert repeats(text, earlier) is _difflib_repeats(text, earlier)


@pytest.mark.parametrize(
    ("text", "last_nod", "answering", "repeated"),
    [
        pytest.param("Hm.", "Hm.", "I moved to Osaka.", True, id="its-previous-nod-again"),
        pytest.param("hm!", "Hm.", None, True, id="its-previous-nod-in-other-case-and-punctuation"),
        pytest.param("👍🏽", "👍", None, True, id="its-previous-emoji-in-another-skin-tone"),
        pytest.param("🙂", "👍", "I moved to Osaka.", False, id="another-emoji-than-its-previous-nod"),
        pytest.param("👍", "Hm.", "I moved to Osaka.", False, id="an-emoji-after-a-word"),
        pytest.param("No way!", "Hm.", "no way", True, id="an-echo-of-the-message-it-answers"),
        pytest.param("🙂", "Hm.", "🙂", True, id="an-emoji-echo-of-the-message-it-answers"),
        pytest.param("Fair.", None, None, False, id="no-nod-yet"),
        pytest.param("", None, None, True, id="nothing-to-say"),
        pytest.param("...", "Hm.", "So?", True, id="only-punctuation"),
    ],
)
def test_nod_repeats(text: str, last_nod: str | None, answering: str | None, repeated: bool) -> None:
    assert nod_repeats(text, last_nod=last_nod, answering=answering) is repeated


OWN_LINES = ["Hm.", "🙂", "I'd want to see the numbers first.", "👍", "Fair.", "Rollbacks are the real test."]


@pytest.mark.parametrize("text", ["Hm.", "🙂", "👍"])
def test_a_line_among_its_last_30_repeats_as_a_remark_but_not_as_a_nod(text: str) -> None:
    # A nod is not a sentence: "Hm." or 🙂 again is what people do, so only a remark keeps the 30-line rule.
    assert repeats(text, OWN_LINES)
    assert not nod_repeats(text, last_nod=OWN_LINES[-2], answering="The deploy went fine.")


def test_a_nod_may_repeat_a_line_the_window_shows_but_a_remark_may_not() -> None:
    window = ["Yui: I baked bread.", "Right!", "Yui: It took six hours."]
    assert repeats("Right!", window)
    assert not nod_repeats("Right!", last_nod=None, answering=window[-1])


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param("👍", "🙂", False, id="two-emoji-differ"),
        pytest.param("👍", "👍🏽", True, id="a-skin-tone-is-the-same-emoji"),
        pytest.param("たしかに!", "たしかに。", True, id="punctuation-and-width-ignored"),
        pytest.param("Fair.", "fair", True, id="case-ignored"),
    ],
)
def test_line_key(a: str, b: str, same: bool) -> None:
    assert line_key(a)
    assert (line_key(a) == line_key(b)) is same


def test_a_line_that_says_nothing_has_an_empty_key() -> None:
    assert line_key("...") == line_key("") == ""
