"""The words sent to the model: who the persona is, the rules of the room, its notes and the recent conversation.
Pure.

The conversation goes in as one transcript inside a single user turn: several people talk here, and
chat APIs only know "user" and "assistant". The persona's notes (its dialogue state, :mod:`bots.memory`) come
first, then the messages since them (or the last few, for context), each line naming its speaker and what they
are - a person, another persona, another bot, or the persona itself - and the turn ends with the message to
reply to, quoted: the question when the persona was asked one. Notes of bounded size and a bounded number of
messages keep every prompt the same size however long the conversation runs.

Lengths are stated in the arbiter's unit, display columns, in the same words everywhere
(:func:`bots.llm.base.length_limit`, :data:`bots.llm.base.COLUMNS_NOTE`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from bots.language.kinds import Kind, message_kind
from bots.llm.base import COLUMNS_NOTE, Turn, length_limit
from bots.memory import MEMORY_GUIDE, notes_lines
from bots.scene import asking_index

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from arbiter.contract import MemoryUpdate, MessageView, StatusView
    from bots.persona import Persona

__all__ = (
    "COLUMNS_NOTE",
    "LANGUAGE_NAMES",
    "MOVES",
    "OWN_LINES",
    "SPEAKER_MARKS",
    "length_limit",
    "moves_now",
    "persona_prompt",
    "rules_prompt",
    "transcript_turn",
)

LANGUAGE_NAMES = {"en": "English", "ja": "Japanese"}
# How the transcript marks each speaker after its name: "[Yui (person)] ...".
SPEAKER_MARKS = {AuthorKind.HUMAN: "person", AuthorKind.PERSONA: "persona", AuthorKind.BOT: "bot"}
_OWN_MARK = "you"
# Every move, in the order the rules list them.
MOVES = ("pass", *(str(tier) for tier in Tier))
# A quoted message longer than this is cut (it is in the transcript above in full).
_QUOTE_CHARS = 280
# A persona never says again one of its own last this many lines: the runtime keeps them and drops a reply that
# repeats one (a wasted call), so the prompt lists every one of them the transcript does not show.
OWN_LINES = 30
NOTES_HEADER = "Your notes on this conversation, as you kept them (they take in every message before the new ones):"
NO_NOTES = "You have no notes on this conversation yet: start them from the messages below."
NEW_SINCE_NOTES = "- new since your notes -"

_TIER_GUIDE = {
    "pass": "say nothing this time - right when you have nothing to add or someone else should speak",
    Tier.AIZUCHI: "a short nod or reaction (a few words) that shows you are listening, in your own voice",
    Tier.REMARK: "one or two sentences that add something: an answer, an opinion, a question, a detail, a joke",
    Tier.LONG: "a longer remark, for a new topic or when you were asked something that needs explaining",
}


def persona_prompt(persona: Persona) -> str:
    nods = " / ".join(persona.samples.aizuchi[:6])
    remarks = " / ".join(persona.samples.remarks[:3])
    aliases = f" (also called {', '.join(persona.aliases)})" if persona.aliases else ""
    return (
        f"You are {persona.display_name}{aliases}, one of several people chatting in a group channel.\n"
        f"Personality: {persona.personality}\n"
        f"Background: {persona.background}\n"
        f"How you talk: {persona.speaking_style}\n"
        f"Temperament (Big Five): {persona.big_five.describe()}.\n"
        "Your voice, for example - never reuse these lines; they only show how you sound:\n"
        f"- nods: {nods}\n"
        f"- remarks: {remarks}\n"
        f"Always write in {LANGUAGE_NAMES[persona.language]}."
    )


def rules_prompt(
    persona: Persona,
    max_lengths: Mapping[str, int],
    topic: str,
    *,
    keeps_notes: bool = False,
    emoji_nods: Sequence[str] = (),
    reactions: bool = True,
) -> str:
    """The room's rules, every move with its length (``max_lengths``: each tier's, in columns). The same whatever
    the persona may do this time (:func:`moves_now` says that, at the end of the conversation), so that the system
    prompt is the same on each of its calls in a channel and a provider can cache it. ``emoji_nods``: the persona's
    own emojis it may nod with here (``:name:``), each shown as a reaction; ``reactions``: whether the platform shows
    an emoji nod as a reaction (a webhook posts it as a message)."""

    def guide(action: str) -> str:
        line = f"- {action}: {_TIER_GUIDE[action]}"
        if action in max_lengths:
            line += f" ({length_limit(max_lengths[action])})"
        if action == Tier.AIZUCHI and persona.react_with_emoji:
            line += "; a single emoji works too" + (", shown as a reaction" if reactions else "")
            if emoji_nods:
                line += f", and so do your own emojis, written just so: {' '.join(emoji_nods)}"
        return line

    lines = [
        "The room takes turns by a shared speaking budget, so choose your move carefully. The moves (the end of the"
        " conversation says which you may make this time):",
        *(guide(action) for action in MOVES),
    ]
    if any(action in max_lengths for action in MOVES):
        lines.append(COLUMNS_NOTE)
    lines.append(
        "Rules: reply to the message you are shown, like a person in the room would: answer a question (work it "
        "out if you can), greet back a greeting, take thanks, say goodbye to a goodbye. Say something new - never "
        "repeat what you or anyone else already said, and do not greet again once the conversation is going. "
        "Plain text only: no markdown, no quotation marks around your words, no name prefix, and never @-mention "
        "anyone."
    )
    if keeps_notes:
        lines.append(MEMORY_GUIDE)
    if topic:
        lines.append(f"The moderators set the topic: {topic}")
    return "\n".join(lines)


def moves_now(moves: Sequence[str], max_lengths: Mapping[str, int]) -> str:
    """Which moves the persona may make this time (what its claim allows), each with its length: the line that ends
    the conversation's turn, after the message to reply to."""

    def move(action: str) -> str:
        return f"{action} ({length_limit(max_lengths[action])})" if action in max_lengths else action

    named = [move(action) for action in moves]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    return f"This time you may: {listed}."


def _speaker(message: MessageView, persona: Persona) -> str:
    mark = _OWN_MARK if message.author_id == persona.id else SPEAKER_MARKS.get(message.author_kind, "bot")
    return f"{message.author_name} ({mark})"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _quote(text: str) -> str:
    text = _one_line(text)
    if len(text) > _QUOTE_CHARS:
        text = text[:_QUOTE_CHARS].rstrip() + "…"
    return f'"{text}"'


def _cue(persona: Persona, window: Sequence[MessageView], status: StatusView) -> str:
    """The closing lines: the message to reply to, quoted, and what to do with it."""
    if persona.id in status.priority:
        index = asking_index(persona, window, status)
        if index is None:
            return "You were addressed directly: answer."
        asking = window[index]
        if message_kind(asking.text) is Kind.QUESTION:
            return f"{asking.author_name} asked you: {_quote(asking.text)}\nAnswer it: it is your turn to speak."
        return f"{asking.author_name} said to you: {_quote(asking.text)}\nReply to it: it is your turn to speak."
    latest = next((m for m in reversed(window) if m.author_id != persona.id), None)
    if latest is None:
        return "Nobody else has spoken yet. What is your next move? Choose one of the moves you may make now."
    return (
        f"You would be replying to {latest.author_name}: {_quote(latest.text)}\n"
        "What is your next move? Choose one of the moves you may make now."
    )


def transcript_turn(
    persona: Persona,
    window: Sequence[MessageView],
    status: StatusView,
    own_lines: Sequence[str] = (),
    *,
    memory: MemoryUpdate | None = None,
    keeps_notes: bool = False,
    moves: Sequence[str] = (),
    max_lengths: Mapping[str, int] | None = None,
) -> Turn:
    """The conversation as one user turn: the persona's notes, the transcript, oldest first, and the message to
    reply to.

    ``own_lines``: the persona's own recent lines (oldest first); those of its last ``OWN_LINES`` not in the window
    are listed so that it says something else. ``memory``: its notes and the last message they take in;
    ``keeps_notes``: whether it is asked to keep notes (then it is told it has none yet when ``memory`` is None).
    Messages the notes already take in are marked apart from the new ones. ``moves``: what the persona may do this
    time, said last (:func:`moves_now`, with ``max_lengths``).
    """
    lines = [f"[{_speaker(m, persona)}] {_one_line(m.text)}" for m in window]
    if memory is not None:
        new = next((index for index, m in enumerate(window) if m.seq > memory.seq), len(window))
        if 0 < new < len(window):
            lines.insert(new, NEW_SINCE_NOTES)
    in_window = {m.text for m in window}
    earlier = [line for line in own_lines if line not in in_window][-OWN_LINES:]
    parts: list[str] = []
    if memory is not None:
        parts += [NOTES_HEADER, *notes_lines(memory.state), ""]
    elif keeps_notes:
        parts += [NO_NOTES, ""]
    parts += [
        "Recent conversation, oldest first. Each speaker is marked (person), (persona: an AI like you), (bot) or "
        "(you):",
        *lines,
    ]
    if earlier:
        parts += ["", "Lines you said before these - say something else now:", *(f"- {_one_line(x)}" for x in earlier)]
    parts += ["", _cue(persona, window, status)]
    if moves:
        parts.append(moves_now(moves, max_lengths or {}))
    return Turn(role="user", text="\n".join(parts))
