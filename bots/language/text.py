"""What a persona's text must be before it is posted: no pings, no name prefix, within its tier, not a repeat.

The no-repeat rule, one rule for the runtime (what it drops before posting) and the scripted stand-in (what it
chooses), by tier:

- A remark (``remark`` or ``long``) says something, so it must not say again what a line shown said (the
  conversation window), nor one of the persona's own last ``bots.prompt.OWN_LINES`` lines, nods included
  (:func:`repeats`).
- A nod (``aizuchi``) is not a sentence: saying "Hm." or "🙂" again is what people do. It is exempt from the
  30-line rule, and from what others said in the window; it repeats only when it is the persona's own previous
  nod again (not the same nod twice running, whatever it said in between) or the words of the message it answers
  (an echo, not a nod) (:func:`nod_repeats`).

Both compare lines by :func:`line_key`: words without case, width or punctuation; a line of emoji only by its
emoji, each its own (👍 and 🙂 differ, 👍 and 👍🏽 do not).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from difflib import SequenceMatcher
from typing import TYPE_CHECKING

from arbiter.contract import display_length

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = (
    "clean_reply",
    "cut_to_length",
    "has_mention",
    "is_emoji",
    "line_key",
    "neutralize_mentions",
    "nod_repeats",
    "repeats",
)

# Discord's mention syntax: users <@123> / <@!123>, roles <@&123>, and the mass pings.
_MENTION_TOKENS = re.compile(r"<@[!&]?\d+>")
_MASS_PINGS = re.compile(r"@(everyone|here)\b", re.IGNORECASE)
# "Name: ", "[Name]: ", and the transcript's own "[Name] " / "[Name (you)] ", which models like to echo.
_PREFIX = re.compile(r"^\s*(?:\[(?P<bracketed>[^\]\n]{1,46})\]\s*[:：]?|(?P<name>[^\[\]\n:：]{1,40})\s*[:：])\s*")
_QUOTES = "\"'「」『』“”‘’"


def neutralize_mentions(text: str) -> str:
    """Remove anything that could ping: mention tokens vanish, @everyone/@here lose their @."""
    # Until nothing changes: removing one token can join its neighbours into another ("<@<@1>2>", "@@everyone").
    while True:
        cleaned = _MASS_PINGS.sub(lambda match: match.group(1), _MENTION_TOKENS.sub("", text))
        if cleaned == text:
            return cleaned
        text = cleaned


def has_mention(text: str) -> bool:
    return bool(_MENTION_TOKENS.search(text) or _MASS_PINGS.search(text))


def clean_reply(text: str, names: Iterable[str], limit: int) -> str:
    """A model's reply made postable: one paragraph, no "Name:" prefix or wrapping quotes, no pings, within
    ``limit`` display columns."""
    text = " ".join(text.split())
    match = _PREFIX.match(text)
    if match is not None:
        prefix = (match.group("bracketed") or match.group("name")).removesuffix("(you)").strip()
        if prefix.casefold() in {name.casefold() for name in names}:
            text = text[match.end() :]
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    text = " ".join(neutralize_mentions(text).split())
    return cut_to_length(text, limit)


# Where a sentence ends: the wide marks anywhere, the narrow ones before a space, the end, or a wide character.
_WIDE_ENDS = "。．！？"
_NARROW_ENDS = ".!?"
_CLOSERS = "\"')]}」』）】〕”’"
_WIDE_CLAUSE_MARKS = "、，；："
_NARROW_CLAUSE_MARKS = ",;:"
# Words an English cut should not end on ("... the best part is the").
_DANGLING_TEXT = "a an the and or but so to of for with in on at by from as that than my your our their its is are was"
_DANGLING = frozenset(_DANGLING_TEXT.split())


def cut_to_length(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` display columns where a person would stop, with no ellipsis.

    Preferably after a sentence (。！？.!?), else at a clause mark (、，,;:), either only if it keeps at least a
    third of the room; else, for text with spaces, at the last space that fits (never mid-word); else at a character
    boundary (a character with its combining marks, an emoji sequence, stays whole). Empty only when ``text``
    is, or when not even its first character fits.
    """
    if display_length(text) <= limit:
        return text
    sentences, clauses, spaces, characters = _cut_points(text)
    fits = _longest_fitting(text, limit)
    for points in (sentences, clauses):
        best = fits(points)
        if best is not None and display_length(best) * 3 >= limit:
            return best
    wide = sum(1 for char in text if unicodedata.east_asian_width(char) in ("W", "F"))
    if wide * 2 < len(text):  # mostly spaced text: words stay whole
        best = fits(spaces)
        if best is not None:
            return _without_dangling_words(best)
    return fits(characters) or ""


def _cut_points(text: str) -> tuple[list[int], list[int], list[int], list[int]]:
    """Where ``text`` may be cut, by kind: after a sentence, before a clause mark, before a space, and between
    any two characters that do not belong together."""
    sentences: list[int] = []
    clauses: list[int] = []
    spaces: list[int] = []
    characters: list[int] = []
    length = len(text)
    for index, char in enumerate(text):
        after = text[index + 1] if index + 1 < length else ""
        before = text[index - 1] if index else ""
        if index and _may_cut_before(text, index):
            characters.append(index)
        if char == " ":
            spaces.append(index)
        elif char == "…" or (char == "." and (after == "." or before == ".")):
            # An ellipsis is a pause, not an end: cut before it, and never leave one at the end.
            if before not in ".…":
                clauses.append(index)
        elif char in _WIDE_ENDS or (
            char in _NARROW_ENDS
            and (not after or after.isspace() or after in _CLOSERS or _is_wide(after) or after in _NARROW_ENDS)
        ):
            end = index + 1
            while end < length and (text[end] in _CLOSERS or text[end] in _WIDE_ENDS + _NARROW_ENDS):
                end += 1
            if end == index + 1 or text[end - 1] in _CLOSERS:
                sentences.append(end)
        elif char in _WIDE_CLAUSE_MARKS or (char in _NARROW_CLAUSE_MARKS and (not after or after.isspace())):
            clauses.append(index)
    return sentences, clauses, spaces, characters


def _may_cut_before(text: str, index: int) -> bool:
    char, before = text[index], text[index - 1]
    if before == "\u200d" or char in "\u200d\ufe0f\ufe0e" or 0x1F3FB <= ord(char) <= 0x1F3FF:
        return False
    return unicodedata.category(char) not in ("Mn", "Me")


def _is_wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _longest_fitting(text: str, limit: int) -> Callable[[list[int]], str | None]:
    """A function of cut points: the longest head of ``text`` that fits ``limit`` (tidied), or None."""
    content = any(char.isalnum() for char in text)

    def head_at(point: int) -> str:
        head = text[:point].rstrip()
        # No ellipsis and no dangling clause mark at the end.
        while head and (head.endswith(("...", "…", "..")) or head[-1] in _WIDE_CLAUSE_MARKS + _NARROW_CLAUSE_MARKS):
            head = head.rstrip(".…" + _WIDE_CLAUSE_MARKS + _NARROW_CLAUSE_MARKS).rstrip()
        return head

    def usable(head: str) -> bool:
        return bool(head) and (not content or any(char.isalnum() for char in head))

    def fits(points: list[int]) -> str | None:
        # Display length grows with the point: find the last point that fits by bisection.
        low, high = 0, len(points)
        while low < high:
            middle = (low + high) // 2
            if display_length(head_at(points[middle])) <= limit:
                low = middle + 1
            else:
                high = middle
        for point in reversed(points[:low]):
            head = head_at(point)
            if usable(head):
                return head
        return None

    return fits


def _without_dangling_words(head: str) -> str:
    words = head.split(" ")
    while len(words) > 3 and words[-1].casefold() in _DANGLING:
        words.pop()
    return " ".join(words).rstrip(_WIDE_CLAUSE_MARKS + _NARROW_CLAUSE_MARKS + " -")


# Each line is compared with every line of a persona's window and its own recent lines, at each of its turns: the
# same few hundred lines over and over.
@functools.lru_cache(maxsize=4096)
def line_key(text: str) -> str:
    """What ``text`` says, to tell repeats by: its words without case, width or punctuation; for a line of emoji
    only, its emoji without skin tones or joiners (a nod of 👍 says something, the same as another 👍 and not the
    same as 🙂). Empty for a line that says nothing (only punctuation, or nothing at all)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = "".join(char for char in folded if char.isalnum())
    if words or not is_emoji(folded):
        return words
    return "".join(char for char in folded if unicodedata.category(char) == "So")


def repeats(text: str, earlier: Iterable[str]) -> bool:
    """Whether ``text`` says again what one of ``earlier`` said: the same words, or nearly so for longer lines.
    A line that says nothing counts as a repeat. The rule for a remark (see the module's docstring)."""
    normal = line_key(text)
    if not normal:
        return True
    others = [line_key(other) for other in earlier]
    # The exact check over every line first: a repeat of the same words is the common one, and it costs a set's
    # look-up where the fuzzy one costs a comparison of characters.
    if normal in others:
        return True
    size = len(normal)
    if size < _FUZZY_MIN:
        return False
    for other in others:
        length = len(other)
        # Most lines are told apart by their lengths alone (_nearly_same's first bound), here without a cache miss:
        # a line compared is often new (a person's message), each with the window's and its own recent lines.
        if length >= _FUZZY_MIN and 2.0 * min(size, length) / (size + length) > _NEARLY and _nearly_same(normal, other):
            return True
    return False


def nod_repeats(text: str, *, last_nod: str | None, answering: str | None) -> bool:
    """Whether the nod ``text`` says again what a nod must not (see the module's docstring): ``last_nod``, the
    persona's own previous nod (None when it has not nodded lately), or ``answering``, the message it nods to.
    Anything else may come again: a nod is exempt from the rule of a persona's last 30 lines. A nod that says
    nothing counts as a repeat, as for :func:`repeats`."""
    return repeats(text, [line for line in (last_nod, answering) if line is not None])


# Lines shorter than this (in line_key characters) repeat only word for word.
_FUZZY_MIN = 12
_NEARLY = 0.85


@functools.lru_cache(maxsize=8192)
def _nearly_same(a: str, b: str) -> bool:
    """difflib's ratio above 0.85, its upper bounds tried first: most lines are told apart by their lengths alone
    (``real_quick_ratio``), most others by the characters they share (``quick_ratio``, reckoned here from each
    line's counted characters, kept per line); only the few left build a matcher. Cached: a persona's turn
    compares its line with the same window and the same own lines as its last turn did."""
    total = len(a) + len(b)
    if 2.0 * min(len(a), len(b)) / total <= _NEARLY:
        return False
    if 2.0 * _shared(_characters(a), _characters(b)) / total <= _NEARLY:
        return False
    return SequenceMatcher(None, a, b).ratio() > _NEARLY


def _shared(a: Counter[str], b: Counter[str]) -> int:
    """How many characters two lines share, counted with repeats: ``sum((a & b).values())`` without building the
    intersection (a Counter of its own, several times slower; most lines compared are told apart here)."""
    if len(a) > len(b):
        a, b = b, a
    found = b.get
    shared = 0
    for char, count in a.items():
        other = found(char)
        if other is not None:
            shared += count if count < other else other
    return shared


@functools.lru_cache(maxsize=4096)
def _characters(key: str) -> Counter[str]:
    """How often each character occurs in a line's key: what difflib's ``quick_ratio`` counts."""
    return Counter(key)


# Joiners, variation selectors and skin tones that glue emoji sequences together.
_EMOJI_GLUE = {"\u200d", "\ufe0f", "\ufe0e", *(chr(code) for code in range(0x1F3FB, 0x1F400))}


def is_emoji(text: str) -> bool:
    """Whether ``text`` is only emoji (what a platform can show as a reaction)."""
    stripped = text.strip()
    return (
        bool(stripped)
        and all(char in _EMOJI_GLUE or unicodedata.category(char) == "So" for char in stripped)
        and any(unicodedata.category(char) == "So" for char in stripped)
    )
