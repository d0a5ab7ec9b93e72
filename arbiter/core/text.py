"""Text length in display columns, so one limit suits Japanese and English alike.

A wide character (CJK, full-width forms, most emoji) carries roughly twice the content of a Latin letter
and takes two columns on screen, so it counts 2; everything else counts 1. Combining marks count 0.
"""

from __future__ import annotations

import unicodedata

__all__ = ("display_length", "trim_to_length")


def _width(char: str) -> int:
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def display_length(text: str) -> int:
    if text.isascii():
        return len(text)
    return sum(_width(char) for char in text)


def trim_to_length(text: str, limit: int, ellipsis: str = "…") -> str:
    """Cut ``text`` to at most ``limit`` columns, at a word boundary when one is near, marking the cut."""
    if display_length(text) <= limit:
        return text
    budget = limit - display_length(ellipsis)
    if budget <= 0:
        return ""
    used = 0
    cut = 0
    for index, char in enumerate(text):
        used += _width(char)
        if used > budget:
            break
        cut = index + 1
    head = text[:cut]
    # Prefer a word boundary if it costs less than a fifth of the room; CJK text has no spaces to wait for.
    space = head.rfind(" ")
    if space > 0 and len(head) - space < max(4, cut // 5):
        head = head[:space]
    return head.rstrip(" ,、。.;:") + ellipsis
