"""Which of a persona's sets of lines a reply comes from, for the tests of what the offline stand-in says."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from bots.llm.scripted import GENERIC

if TYPE_CHECKING:
    from collections.abc import Iterable

    from bots.persona import Persona

__all__ = ("SETS", "built_from", "set_of", "sets_of")

SETS = ("aizuchi", "remarks", "greetings", "farewells", "thanks", "answers", "unsure", "questions", "echoes", "numbers")


def built_from(text: str, lines: Iterable[str], *, then_more: bool = False) -> bool:
    """Whether ``text`` is one of ``lines`` with its placeholders filled in (any name, word or number); with
    ``then_more``, maybe followed by another line (a long remark is two)."""
    for line in lines:
        pattern = re.escape(line)
        for placeholder in ("name", "word", "n"):
            pattern = pattern.replace(re.escape("{" + placeholder + "}"), ".+?")
        if re.fullmatch(pattern + (r"(?:\s?.+)?" if then_more else ""), text, re.IGNORECASE | re.DOTALL):
            return True
    return False


def set_of(persona: Persona, name: str) -> list[str]:
    """The persona's set ``name``, then the generic one in its language it falls back on."""
    return [*getattr(persona.samples, name, ()), *getattr(GENERIC[persona.language], name)]


def sets_of(text: str, persona: Persona) -> set[str]:
    """Every set ``text`` (a reply, maybe a long one) comes from."""
    return {name for name in SETS if built_from(text, set_of(persona, name), then_more=True)}
