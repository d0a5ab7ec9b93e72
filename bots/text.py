"""What a persona's text must be before it is posted: no pings, no name prefix, within its tier, not a repeat."""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher
from typing import TYPE_CHECKING

from arbiter.contract import trim_to_length

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ("clean_reply", "has_mention", "is_emoji", "neutralize_mentions", "repeats")

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
    return trim_to_length(text, limit)


def _normal(text: str) -> str:
    """The words of ``text`` without case, width or punctuation; for a line of emoji only, its emoji (a nod of
    👍 says something, and says the same as another 👍)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    words = "".join(char for char in folded if char.isalnum())
    if words or not is_emoji(folded):
        return words
    return "".join(char for char in folded if unicodedata.category(char) == "So")


def repeats(text: str, earlier: Iterable[str]) -> bool:
    """Whether ``text`` says again what one of ``earlier`` said: the same words, or nearly so for longer lines."""
    normal = _normal(text)
    if not normal:
        return True
    for other in earlier:
        other_normal = _normal(other)
        if normal == other_normal:
            return True
        if min(len(normal), len(other_normal)) >= 12 and SequenceMatcher(None, normal, other_normal).ratio() > 0.85:
            return True
    return False


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
