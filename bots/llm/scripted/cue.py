"""What the offline stand-in answers, read from the scene the runtime hands it (never from the prompt's words).

It answers as a person in a group would: a message it was asked directly first; else the latest message from a
person that it has not answered yet (a greeting, a question or a goodbye to everyone is answered by each in turn,
each greeting the person, not the persona who greeted before it); else the latest message from anyone else. A
message between others (to another persona, or a persona's hello, thanks or goodbye) gets a nod at most; one put
to another persona that nobody has answered gets a nod, or, when the floor has come to this one instead, the
answer. Once the person has said goodbye and it has answered, nothing is left to say: the goodbyes stop there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bots.language.kinds import Kind, asks_yes_or_no, message_kind
from bots.llm.scripted.words import arithmetic, content_word

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from bots.llm.scene import Scene, SceneLine
    from bots.llm.scripted.words import Language

__all__ = ("NOTHING", "Cue", "cue_of", "read_scene")

# The kinds a message says to whom it is for: answered by the one it was for, nodded at by the others.
_SOCIAL = frozenset({Kind.GREETING, Kind.FAREWELL, Kind.THANKS})


@dataclass(frozen=True, slots=True)
class Cue:
    """The message a reply answers, and what a fitting reply to it is."""

    text: str = ""  # the message; "" when there is none (nobody else has spoken)
    speaker: str | None = None  # whom the reply answers: ``{name}`` in a line
    kind: Kind = Kind.STATEMENT
    open: bool = False  # a question that a yes or a no does not answer
    word: str | None = None  # a word of a person's message, in the persona's language: ``{word}`` in a line
    result: str | None = None  # the result of the arithmetic it asks: ``{n}`` in a line
    aside: bool = False  # between others: a nod at most
    for_another: bool = False  # put to another persona, who has not answered: a nod, or the answer it did not give
    done: bool = False  # nothing is left to answer
    image: str | None = None  # a person showed one: the set that notices it ("photos" or "gifs")
    emoji_nods: tuple[str, ...] = ()  # its own emojis it may nod with here (``:name:``)


NOTHING = Cue()


def read_scene(scene: Scene, language: Language) -> Cue:
    """The cue of ``scene`` for a persona speaking ``language`` (see the module's doc)."""
    lines = scene.lines
    person = _latest(lines, lambda line: line.role == "person")
    answered = person is not None and any(line.role == "you" for line in lines[person + 1 :])
    if person is not None and answered and message_kind(lines[person].text) is Kind.FAREWELL:
        return Cue(done=True)
    if scene.asked is not None:
        return cue_of(lines[scene.asked], scene.names, language)
    latest = _latest(lines, lambda line: line.role != "you")
    if latest is None:
        return NOTHING
    if person is not None and not answered:
        cue = cue_of(lines[person], scene.names, language)
        if not lines[person].to_others:
            return cue
        if person == latest:
            return replace(cue, for_another=True)
    line = lines[latest]
    cue = cue_of(line, scene.names, language)
    if line.to_others or (line.role != "person" and cue.kind in _SOCIAL and not line.to_you):
        return replace(cue, aside=True)
    return cue


def cue_of(line: SceneLine, names: Iterable[str], language: Language) -> Cue:
    """The cue of one message, whoever sent it."""
    kind = message_kind(line.text)
    question = kind is Kind.QUESTION
    result = arithmetic(line.text) if question else None
    return Cue(
        text=line.text,
        speaker=line.speaker,
        kind=kind,
        open=question and result is None and not asks_yes_or_no(line.text),
        # Only a person's words: personas building on each other's words would run an echo chain.
        word=content_word(line.text, (*names, line.speaker), language) if line.role == "person" else None,
        result=result,
        image=_image_set(line) if line.role == "person" else None,
    )


def _image_set(line: SceneLine) -> str | None:
    """What a person's images are, by kind: GIFs only, or a photo (any other kind the models take)."""
    if not line.images:
        return None
    return "gifs" if all(kind == "image/gif" for kind in line.images) else "photos"


def _latest(lines: tuple[SceneLine, ...], wanted: Callable[[SceneLine], bool]) -> int | None:
    return next((index for index in range(len(lines) - 1, -1, -1) if wanted(lines[index])), None)
