"""Who a message speaks to: explicit mentions, or a persona's name in the text."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("addressed_personas",)


def _named(text: str, name: str) -> bool:
    if not name:
        return False
    if name.isascii():
        # Latin names need word boundaries ("Ann" is not in "Annual"); CJK names have no spaces around them.
        return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text, re.IGNORECASE) is not None
    return name.casefold() in text.casefold()


def addressed_personas(text: str, names: Mapping[str, Iterable[str]], mentions: Iterable[str] = ()) -> tuple[str, ...]:
    """Persona ids the message addresses, in a stable order: mentioned ones, then named ones."""
    found = [persona_id for persona_id in mentions if persona_id in names]
    for persona_id, aliases in names.items():
        if persona_id not in found and any(_named(text, alias) for alias in (persona_id, *aliases)):
            found.append(persona_id)
    return tuple(found)
