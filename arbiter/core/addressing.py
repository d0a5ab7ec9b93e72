"""Who a message speaks to: explicit mentions, or a persona's name in the text."""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ("addressed_personas",)

# A letter or digit that would continue a Latin word: any word character except kana, CJK ideographs and
# hangul, which sit right next to Latin names in Japanese text ("Kaiさん") without a space.
_LATIN_WORD = r"[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af]"


@functools.lru_cache(maxsize=4096)
def _latin_name(name: str) -> re.Pattern[str]:
    # Compiling costs milliseconds per name; a fleet's names are few and fixed, so each is compiled once.
    return re.compile(rf"(?<!{_LATIN_WORD}){re.escape(name)}(?!{_LATIN_WORD})", re.IGNORECASE)


def _named(text: str, name: str) -> bool:
    if not name:
        return False
    if name.isascii():
        # Latin names need word boundaries ("Ann" is not in "Annual"); CJK names have no spaces around them.
        return _latin_name(name).search(text) is not None
    return name.casefold() in text.casefold()


def addressed_personas(text: str, names: Mapping[str, Iterable[str]], mentions: Iterable[str] = ()) -> tuple[str, ...]:
    """Persona ids the message addresses, in a stable order: mentioned ones, then named ones."""
    found = list(dict.fromkeys(persona_id for persona_id in mentions if persona_id in names))
    for persona_id, aliases in names.items():
        if persona_id not in found and any(_named(text, alias) for alias in (persona_id, *aliases)):
            found.append(persona_id)
    return tuple(found)
