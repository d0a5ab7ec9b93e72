"""The scene of a decision: the conversation shown to the persona as facts, built from the same window and status
as its prompt (:mod:`bots.prompt`). Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from bots.llm.scene import Role, Scene, SceneLine

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from arbiter.contract import MemoryUpdate, MessageView, StatusView
    from bots.persona import Persona

__all__ = ("asking_index", "scene_of")

_ROLES: dict[AuthorKind, Role] = {AuthorKind.HUMAN: "person", AuthorKind.PERSONA: "persona", AuthorKind.BOT: "bot"}


def asking_index(persona: Persona, window: Sequence[MessageView], status: StatusView) -> int | None:
    """The index in ``window`` of the message that asked ``persona`` (or told it something) directly, while it has
    the floor to answer; None when it has not, or the message is no longer shown."""
    if persona.id not in status.priority:
        return None
    return next((i for i in range(len(window) - 1, -1, -1) if persona.id in window[i].addressed), None)


def scene_of(
    persona: Persona,
    window: Sequence[MessageView],
    status: StatusView,
    own_lines: Sequence[str] = (),
    memory: MemoryUpdate | None = None,
    *,
    emoji_nods: Sequence[str] = (),
    images: Collection[str] = (),
    moves: Sequence[str] = (),
) -> Scene:
    """What ``persona`` is shown of ``window`` (oldest first), with its own ``own_lines`` not among it; and
    ``emoji_nods``, its own emojis it may nod with here. ``images``: the addresses of the images the model is
    given (``bots.images.prompt_images``). ``moves``: what it may do this time."""
    shown = {message.text for message in window}
    return Scene(
        names=(persona.display_name, *persona.aliases),
        lines=tuple(_line(message, persona, frozenset(images)) for message in window),
        asked=asking_index(persona, window, status),
        earlier_own=tuple(line for line in own_lines if line not in shown),
        topic=status.topic,
        notes=None if memory is None else memory.state.model_dump(),
        emoji_nods=tuple(emoji_nods),
        moves=tuple(moves),
    )


def _line(message: MessageView, persona: Persona, images: frozenset[str]) -> SceneLine:
    mine = message.author_id == persona.id
    return SceneLine(
        speaker=message.author_name,
        role="you" if mine else _ROLES.get(message.author_kind, "bot"),
        text=message.text,
        to_you=persona.id in message.addressed,
        to_others=bool(message.addressed) and persona.id not in message.addressed,
        nod=message.tier is Tier.AIZUCHI,
        images=tuple(image.content_type for image in message.images if image.url in images),
    )
