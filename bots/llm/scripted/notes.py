"""The notes the offline stand-in keeps on a conversation (its dialogue state, :mod:`bots.memory`), made by rule
from the scene: deterministic, whatever the seed. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bots.language.kinds import Kind, message_kind

if TYPE_CHECKING:
    from collections.abc import Mapping

    from bots.llm.scene import Scene

__all__ = ("kept_notes",)

_QUESTIONS_KEPT = 4  # the newest questions still open (one per speaker)
_NOTE_CHARS = 80


def kept_notes(scene: Scene) -> dict[str, Any]:
    """The notes a model would keep: the notes it had, updated with the conversation shown. Each speaker's note is
    its latest line ("asked: ..." for a question, else "said: ..."), the most recent speaker first; the open
    questions are each speaker's latest question, newest first; the topic is the one noted before, else the
    moderators'; what was agreed stays as it was."""
    notes: Mapping[str, Any] = scene.notes or {}
    topic = str(notes.get("topic") or "") or scene.topic
    agreed = [str(item) for item in notes.get("agreed") or ()]
    speakers: dict[str, str] = {}
    for entry in notes.get("speakers") or ():
        if isinstance(entry, dict) and "name" in entry and "note" in entry:
            speakers[str(entry["name"])] = str(entry["note"])
    questions: dict[str, str] = {}
    for item in reversed(notes.get("open_questions") or ()):  # the notes list them oldest first
        name, _, question = str(item).partition(": ")
        questions[name] = question
    # Oldest first as shown, so that a later line moves its speaker (and its question) to the front.
    for line in scene.lines:
        asked = message_kind(line.text) is Kind.QUESTION
        speakers.pop(line.speaker, None)
        speakers = {line.speaker: f"{'asked' if asked else 'said'}: {_short(line.text)}", **speakers}
        if asked:
            questions.pop(line.speaker, None)
            questions = {line.speaker: _short(line.text), **questions}
    return {
        "topic": topic,
        "open_questions": [f"{name}: {text}" for name, text in list(questions.items())[:_QUESTIONS_KEPT]][::-1],
        "agreed": agreed,
        "speakers": [{"name": name, "note": note} for name, note in speakers.items()],
    }


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 1].rstrip() + "…"
