"""The facts a decision is about, as values: who said what, to whom, and which message asked the persona.

A model reads these facts from the prompt's words; a provider that cannot read (the offline stand-in,
:mod:`bots.llm.scripted`) is handed them as they are, so rewording the prompt never changes what it answers.
The runtime builds a :class:`Scene` from the same window and status it renders the prompt from
(:func:`bots.scene.scene_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ("Role", "Scene", "SceneLine")

# What a speaker is to the persona: a person, another persona, another bot, or the persona itself.
Role = Literal["person", "persona", "bot", "you"]


@dataclass(frozen=True, slots=True)
class SceneLine:
    """One message of the conversation shown. ``to_you``: it names the persona; ``to_others``: it names other
    personas and not this one (a message naming nobody is to everyone). ``nod``: it was said as a nod."""

    speaker: str
    role: Role
    text: str
    to_you: bool = False
    to_others: bool = False
    nod: bool = False
    images: tuple[str, ...] = ()  # the media types of the images shown with it that the model is given


@dataclass(frozen=True, slots=True)
class Scene:
    """What the persona is shown, oldest line first.

    ``names``: the persona's own names (never a word to echo back). ``asked``: the index in ``lines`` of the message
    the persona was asked or told directly and has the floor to answer; None when it was not. ``earlier_own``: its
    own lines from before those shown, oldest first (not to be said again). ``notes``: its notes on the
    conversation as it kept them, None before it has any. ``emoji_nods``: its own emojis it may nod with here
    (``:name:``; each becomes a reaction), none where it cannot react with them. ``moves``: what it may do this time
    (what its claim allows, as the prompt's last line says); empty: whatever the decide tool offers.
    """

    names: tuple[str, ...]
    lines: tuple[SceneLine, ...]
    asked: int | None = None
    earlier_own: tuple[str, ...] = ()
    topic: str = ""
    notes: Mapping[str, Any] | None = field(default=None)
    emoji_nods: tuple[str, ...] = ()
    moves: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.asked is not None and not 0 <= self.asked < len(self.lines):
            raise ValueError(f"asked is line {self.asked}, but the scene has {len(self.lines)} lines")
        if self.notes is not None:
            object.__setattr__(self, "notes", MappingProxyType(dict(self.notes)))
