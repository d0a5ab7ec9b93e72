"""The words sent to the model: who the persona is, the rules of the room, and the recent conversation. Pure.

The conversation goes in as one transcript inside a single user turn: several people talk here, and
chat APIs only know "user" and "assistant". A fixed window of recent messages keeps every prompt the same
size however long the conversation runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind, Tier
from bots.llm.base import Turn

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from arbiter.contract import MessageView, StatusView
    from bots.persona import Persona

__all__ = ("LANGUAGE_NAMES", "length_in_words", "persona_prompt", "rules_prompt", "transcript_turn")

LANGUAGE_NAMES = {"en": "English", "ja": "Japanese"}

_TIER_GUIDE = {
    "pass": "say nothing this time - right when you have nothing to add or someone else should speak",
    Tier.AIZUCHI: "a short nod or reaction (a few words) that shows you are listening, in your own voice",
    Tier.REMARK: "one or two sentences that add something: an opinion, a question, a detail, a joke",
    Tier.LONG: "a longer remark, for a new topic or when you were asked something that needs explaining",
}


def length_in_words(persona: Persona, columns: int) -> str:
    """A tier's limit as the persona would count it: Japanese characters take two columns each."""
    if persona.language == "ja":
        return f"{columns // 2} Japanese characters"
    return f"{columns} characters"


def persona_prompt(persona: Persona) -> str:
    nods = " / ".join(persona.samples.aizuchi[:6])
    remarks = "\n".join(f"- {line}" for line in persona.samples.remarks[:4])
    aliases = f" (also called {', '.join(persona.aliases)})" if persona.aliases else ""
    return (
        f"You are {persona.display_name}{aliases}, one of several people chatting in a group channel.\n"
        f"Personality: {persona.personality}\n"
        f"Background: {persona.background}\n"
        f"How you talk: {persona.speaking_style}\n"
        f"Temperament (Big Five): {persona.big_five.describe()}.\n"
        f"How you nod, for example: {nods}\n"
        f"Things you might say, for example (never repeat these word for word):\n{remarks}\n"
        f"Always write in {LANGUAGE_NAMES[persona.language]}."
    )


def rules_prompt(persona: Persona, actions: Sequence[str], max_lengths: Mapping[str, int], topic: str) -> str:
    def guide(action: str) -> str:
        line = f"- {action}: {_TIER_GUIDE[action]}"
        if action in max_lengths:
            line += f" (at most {length_in_words(persona, max_lengths[action])})"
        if action == Tier.AIZUCHI and persona.react_with_emoji:
            line += "; a single emoji works too, shown as a reaction"
        return line

    lines = [
        "The room takes turns by a shared speaking budget, so choose your move carefully. You may:",
        *(guide(action) for action in actions),
        "Rules: react to what was just said, like a person in the room would. Say something new - never repeat "
        "what you or anyone else already said, and do not greet again once the conversation is going. If someone "
        "asked you something directly, answer it. Plain text only: no markdown, no quotation marks around your "
        "words, no name prefix, and never @-mention anyone.",
    ]
    if topic:
        lines.append(f"The moderators set the topic: {topic}")
    return "\n".join(lines)


def _speaker(message: MessageView, persona: Persona) -> str:
    if message.author_id == persona.id:
        return f"{message.author_name} (you)"
    if message.author_kind is AuthorKind.HUMAN:
        return message.author_name
    return message.author_name


def transcript_turn(persona: Persona, window: Sequence[MessageView], status: StatusView) -> Turn:
    lines = [f"[{_speaker(m, persona)}] {m.text}" for m in window]
    addressed = persona.id in status.priority
    ask = (
        "You were addressed directly: answer."
        if addressed
        else "What is your next move? Choose one of the moves you may make now."
    )
    return Turn(role="user", text="Recent conversation, oldest first:\n" + "\n".join(lines) + f"\n\n{ask}")
