"""Text length in display columns, so one limit suits Japanese and English alike.

A wide character (CJK, full-width forms, most emoji) carries roughly twice the content of a Latin letter
and takes two columns on screen, so it counts 2; everything else counts 1. What draws no column of its own
counts 0: combining and enclosing marks, format characters, skin-tone modifiers, and every part of an emoji
sequence joined with a zero-width joiner after the first, so a family emoji counts 2 like any other. A
narrow symbol followed by the emoji variation selector (❤️) is drawn as an emoji and counts 2.
"""

from __future__ import annotations

import functools
import math
import unicodedata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ("display_length", "estimate_tokens", "trim_to_length")

_ZERO_WIDTH_CATEGORIES = frozenset({"Mn", "Me", "Cf"})
_JOINER = "\u200d"
_EMOJI_PRESENTATION = "\ufe0f"
_SKIN_TONES = range(0x1F3FB, 0x1F400)


def _widths(text: str) -> Iterator[int]:
    """Each character's columns, in order; a character's width depends on the ones before it."""
    joined = False  # the previous character was a zero-width joiner
    cluster = 0  # columns of the character the current marks and modifiers belong to
    for char in text:
        if char == _EMOJI_PRESENTATION:
            width = 1 if cluster == 1 else 0
            cluster += width
        elif joined or ord(char) in _SKIN_TONES or unicodedata.category(char) in _ZERO_WIDTH_CATEGORIES:
            width = 0
        else:
            width = cluster = 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1
        joined = char == _JOINER
        yield width


# Both run on the same lines again and again (every tier check, every note of a persona's notes, at both ends of
# the API): remembered for the last few thousand.
@functools.lru_cache(maxsize=2048)
def display_length(text: str) -> int:
    if text.isascii():
        return len(text)
    return sum(_widths(text))


@functools.lru_cache(maxsize=2048)
def estimate_tokens(text: str) -> int:
    """About how many tokens ``text`` takes in an LLM, without a tokenizer: a token per four narrow characters
    (English words run about that), one per wide (CJK) character. Caps stated in tokens are checked with this, the
    same at both ends of the API, whatever model a persona runs on."""
    if text.isascii():
        return math.ceil(len(text) / 4)
    narrow = wide = 0
    for width in _widths(text):
        if width == 2:
            wide += 1
        elif width == 1:
            narrow += 1
    return math.ceil(narrow / 4 + wide)


def trim_to_length(text: str, limit: int, ellipsis: str = "…") -> str:
    """Cut ``text`` to at most ``limit`` columns, at a word boundary when one is near, marking the cut."""
    if display_length(text) <= limit:
        return text
    budget = limit - display_length(ellipsis)
    if budget <= 0:
        return ""
    used = 0
    cut = 0
    for index, width in enumerate(_widths(text)):
        used += width
        if used > budget:
            break
        cut = index + 1
    head = text[:cut]
    # Prefer a word boundary if it costs less than a fifth of the room; CJK text has no spaces to wait for.
    space = head.rfind(" ")
    if space > 0 and len(head) - space < max(4, cut // 5):
        head = head[:space]
    return head.rstrip(" ,、。.;:") + ellipsis
