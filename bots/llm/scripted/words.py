"""Words and numbers in a message, for the offline stand-in: the word a reply can be built on, and the result of
simple arithmetic. Pure.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from fractions import Fraction
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("Language", "arithmetic", "content_word")

Language = Literal["en", "ja"]

_EN_STOPWORD_TEXT = """
    about above actually after again against ago almost already also always another anybody anyone anything
    anyway around away back because been before being below best better between both bring came cannot come
    could didn doesn doing done down during each either else enough even ever every everybody everyone
    everything fine first from further getting give going gonna good got gotta great guess guys have having
    hello here hers herself himself hmm honestly into isn itself just keep kind know last lately later least
    less let like little long look made make many maybe mean might mine more most much must myself need never
    next nice nobody none nothing okay once only other others ours over people perhaps pretty probably quite
    rather really right said same should since some somebody someone something sometimes soon sort still such
    sure take tell than thank thanks that that's their theirs them then there these they thing things think
    this those though through today together tomorrow tonight totally tried trying very wait wanna want wasn
    well went were what what's whatever when where which while will wish with within without won't would
    wouldn yeah year years yesterday your yours yourself you're it's i'm i've i'd don't didn't doesn't isn't
    wasn't can't let's there's here's times plus minus divided multiplied equals else also everyone's
    anyone's someone's haha lol hehe wow yes nope yep question questions sound sounds happen happened
    useful stuff week weekend idea ideas point ways part bit lot lots happens works seems means goes makes
    takes gets feels looks needs wants thinks knows says tells comes gives keeps shows helps starts runs
"""
_EN_STOPWORDS = frozenset(_EN_STOPWORD_TEXT.split())
# Words a noun often follows: articles, possessives, some prepositions.
_NOUN_MAKERS = frozenset(
    {"a", "an", "the", "my", "your", "our", "their", "his", "her", "its", "this", "that", "some", "any"}
    | {"about", "of", "on", "with", "new", "old"}
)
_JA_STOP_COMPOUNDS = (
    "今日",
    "昨日",
    "明日",
    "今度",
    "最近",
    "自分",
    "本当",
    "一番",
    "時間",
    "全然",
    "普通",
    "多分",
    "絶対",
    "結構",
    "一緒",
    "大丈夫",
    "意味",
    "感じ",
    "今回",
    "今年",
    "去年",
    "来年",
    "毎日",
    "質問",
    "説明",
    "仕組",
)
_JA_RUN = re.compile(r"[\u4e00-\u9fff\u3005\u30a1-\u30fa\u30fc]{2,}")
_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]")


def content_word(text: str, names: Iterable[str] = (), language: Language = "en") -> str | None:
    """A word of ``text`` in ``language`` that says what it is about, for a reply built on it ("Sourdough? ..."):
    in Japanese the longest run of kanji and katakana (a loanword, a compound noun); in English a likely noun
    that is not a function word or a name. None when there is none: a reply never carries a word over from
    another language."""
    skip = {name.casefold() for name in names if name}
    if language == "ja":
        return _japanese_word(text, skip)
    return _english_word(text, skip)


def _japanese_word(text: str, skip: set[str]) -> str | None:
    runs: list[str] = []
    for found in _JA_RUN.findall(text):
        run = str(found)
        for stop in _JA_STOP_COMPOUNDS:
            run = run.removeprefix(stop).removesuffix(stop)
        if len(run) >= 2 and run.strip("ー") and run.casefold() not in skip:
            runs.append(run)
    return max(runs, key=len) if runs else None


def _english_word(text: str, skip: set[str]) -> str | None:
    best: tuple[bool, bool, bool, int] | None = None
    word_found: str | None = None
    previous = ""
    for index, match in enumerate(_EN_WORD.finditer(text)):
        word = match.group().replace("’", "'")
        before, previous = previous, word.casefold()
        if word.casefold().endswith("'s"):
            word = word[:-2]
        folded = word.casefold()
        if (len(word) < 4 and not (len(word) >= 3 and word.isupper())) or folded in _EN_STOPWORDS or folded in skip:
            continue
        if index == 0 and not word.isupper():
            word = word[:1].lower() + word[1:]  # capitalised only as the message's first word
        # Verbs and adverbs ("repainted", "happens", "slowly") make poor words to build on: a word after an article,
        # a possessive or a past verb is likely a noun and wins, then any word not shaped like a verb or an adverb,
        # an acronym ("API") first, then the longer the better.
        after_noun_maker = before in _NOUN_MAKERS or before.endswith("ed")
        rank = (after_noun_maker, not folded.endswith(("ed", "ing", "ly")), word.isupper(), len(word))
        if best is None or rank >= best:
            best, word_found = rank, word
    return word_found


_NUMBER = r"\d+(?:\.\d+)?"
_OPERATORS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?<=\d)-(?=\d)|(?<=\d)/(?=\d)"), " ~ "),  # 9-5, 3/4: a range or a date, not a sum
    (re.compile(r"\bmultiplied\s+by\b|\btimes\b|(?<=\d)\s*[x×]\s*(?=\d)|かける|掛ける|[×✕*]", re.IGNORECASE), " * "),
    (re.compile(r"\bdivided\s+by\b|\bover\b|÷|わる|割る|\s/\s", re.IGNORECASE), " / "),
    (re.compile(r"\bplus\b|たす|足す|\+", re.IGNORECASE), " + "),
    (re.compile(r"\bminus\b|ひく|引く|\s[-−]\s|−", re.IGNORECASE), " - "),
]
_EXPRESSION = re.compile(rf"{_NUMBER}(?:\s*[-+*/]\s*{_NUMBER}){{1,5}}")


@functools.lru_cache(maxsize=1024)  # each persona's decision reads the same message
def arithmetic(text: str) -> str | None:
    """The result of the simple arithmetic in ``text`` ("What's 17 times 3?", "17×3は?"), as it would be said:
    "51", "3.3333", "-4"; None when there is none (or it divides by zero)."""
    normal = unicodedata.normalize("NFKC", text).replace(",", "")
    for pattern, operator in _OPERATORS:
        normal = pattern.sub(operator, normal)
    match = _EXPRESSION.search(normal)
    if match is None:
        return None
    tokens = re.findall(rf"{_NUMBER}|[-+*/]", match.group())
    try:
        # Products and quotients first, then sums, left to right.
        terms: list[Fraction] = [Fraction(tokens[0])]
        signs: list[int] = [1]
        for operator, operand in zip(tokens[1::2], tokens[2::2], strict=True):
            number = Fraction(operand)
            if operator == "*":
                terms[-1] *= number
            elif operator == "/":
                terms[-1] /= number
            else:
                terms.append(number)
                signs.append(1 if operator == "+" else -1)
    except ZeroDivisionError:
        return None
    value = sum((sign * term for sign, term in zip(signs, terms, strict=True)), Fraction(0))
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.4f}".rstrip("0").rstrip(".")
