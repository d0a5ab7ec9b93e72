"""A persona's memory of a conversation: its dialogue state, asked of the model in the same call as its decision.

After the multi-agent dialogue-state tracking paper this project follows, each persona keeps per channel an overall
state (what the talk is about, the questions still open, what was agreed) and a short note per speaker, written from
its own point of view. The paper spends two extra model calls per utterance on it; we spend none: the decision call
returns the state updated with the messages since the last update (:data:`MEMORY_SCHEMA` is a property of the
decision), and the prompt shows the state and only the last few messages, so it stays the same size however long the
conversation runs. Pure: no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from arbiter import contract as wire

__all__ = ("MEMORY_GUIDE", "MEMORY_SCHEMA", "fit_state", "notes_lines")

_log = logging.getLogger(__name__)

_LINE = {"type": "string"}

MEMORY_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "description": (
        "your notes on this conversation, updated with the new messages: keep what still matters, drop what is stale "
        f"(answered questions, old topics, people long gone); about {wire.MAX_MEMORY_TOKENS} tokens at most"
    ),
    "properties": {
        "topic": {**_LINE, "description": "what the conversation is about now, in a few words"},
        "open_questions": {
            "type": "array",
            "items": _LINE,
            "description": f"questions asked and not answered yet, with who asked; at most {wire.MAX_MEMORY_ITEMS}",
        },
        "agreed": {
            "type": "array",
            "items": _LINE,
            "description": f"what was agreed, decided or promised; at most {wire.MAX_MEMORY_ITEMS}",
        },
        "speakers": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {**_LINE, "description": "the speaker's name as the conversation shows it"},
                    "note": {**_LINE, "description": "what they care about and said they would do, in one line"},
                },
                "required": ["name", "note"],
                "additionalProperties": False,
            },
            "description": (
                f"one short note per speaker (people and personas, you too), most recent first; "
                f"at most {wire.MAX_MEMORY_SPEAKERS}"
            ),
        },
    },
    "required": ["topic", "open_questions", "agreed", "speakers"],
    "additionalProperties": False,
}
"""The JSON schema of the state in a decision, strict-mode compatible (every object closed, every property required;
no length keywords, which strict modes do not all take: the limits are in the descriptions and :func:`fit_state`)."""

MEMORY_GUIDE = (
    "Besides your move, keep your notes (memory): update them with the messages shown, from your own point of view and "
    "with your persona and the topic in mind. They are all you will remember of what scrolled away, and they have "
    "room for the essentials only: drop what is stale (answered questions, finished topics, people long gone)."
)

_NOTE_CHARS = 160  # a note or item kept longer than this is cut when the state must shrink


def fit_state(raw: object) -> wire.DialogueState | None:
    """The model's state as the arbiter takes it: each part within its bounds and the whole within the token cap,
    shrunk the way the prompt asks (the oldest open questions and agreements first, then the least recent speakers,
    then long lines cut). None when the model gave nothing usable (the previous state then stays)."""
    if not isinstance(raw, Mapping):
        return None
    speakers = [
        {"name": _clip(entry.get("name"), 80), "note": _clip(entry.get("note"), 300)}
        for entry in _listed(raw.get("speakers"))
        if isinstance(entry, Mapping)
    ]
    state: dict[str, Any] = {
        "topic": _clip(raw.get("topic"), 300),
        "open_questions": [_clip(item, 300) for item in _listed(raw.get("open_questions"))],
        "agreed": [_clip(item, 300) for item in _listed(raw.get("agreed"))],
        "speakers": [entry for entry in speakers if entry["name"] and entry["note"]],
    }
    state["open_questions"] = [item for item in state["open_questions"] if item][-wire.MAX_MEMORY_ITEMS :]
    state["agreed"] = [item for item in state["agreed"] if item][-wire.MAX_MEMORY_ITEMS :]
    state["speakers"] = state["speakers"][: wire.MAX_MEMORY_SPEAKERS]
    while True:
        try:
            return wire.DialogueState.model_validate(state)
        except ValidationError as error:
            if not _shrink(state):
                _log.info("a dialogue state that cannot be kept: %s", error.errors()[0]["msg"])
                return None


def _shrink(state: dict[str, Any]) -> bool:
    """Drop or cut one thing, the least worth keeping first; False when nothing is left to drop."""
    for key in ("open_questions", "agreed"):
        if len(state[key]) > 2:
            state[key].pop(0)  # the oldest: the model lists them in the order they came
            return True
    if len(state["speakers"]) > 3:
        state["speakers"].pop()  # the least recent: speakers come most recent first
        return True
    lines: list[tuple[Any, Any]] = [(state, "topic")]
    lines += [(state[key], index) for key in ("open_questions", "agreed") for index in range(len(state[key]))]
    lines += [(speaker, "note") for speaker in state["speakers"]]
    holder, key = max(lines, key=lambda line: len(line[0][line[1]]))
    if len(holder[key]) > _NOTE_CHARS:
        holder[key] = _clip(holder[key], _NOTE_CHARS)
        return True
    for key in ("open_questions", "agreed", "speakers"):
        if state[key]:
            state[key].pop()
            return True
    return False


def _listed(value: object) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _clip(value: object, limit: int) -> str:
    text = " ".join(str(value).split()).replace("\x00", "") if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def notes_lines(state: wire.DialogueState) -> list[str]:
    """The state as the prompt shows it, one fact per line (the scripted provider reads it back this way)."""
    lines = [f"Topic: {state.topic or '(none yet)'}"]
    if state.open_questions:
        lines += ["Open questions:", *(f"- {item}" for item in state.open_questions)]
    if state.agreed:
        lines += ["Agreed:", *(f"- {item}" for item in state.agreed)]
    if state.speakers:
        lines += ["Speakers:", *(f"- {speaker.name}: {speaker.note}" for speaker in state.speakers)]
    return lines
