"""The scripted provider: offline, deterministic for a seed, speaking a persona's sample lines where they fit.

It stands in for an LLM in the local room, in demos and in tests, so it answers the way a person in the room
would, from the facts the runtime hands it rather than the prompt's words. In parts:

- :mod:`.cue`: which message it answers, and what a fitting reply to it is;
- :mod:`.choosing`: a move and a fresh line of the set that fits;
- :mod:`.lines`: the sets, the persona's and the generic ones; :mod:`.words`: a word to build on, arithmetic;
- :mod:`.notes`: the notes it keeps; :mod:`.loop`: the reference design's tool loop;
- :mod:`.provider`: all of it behind the provider interface; :mod:`.tokens`: what a real model would be sent.
"""

from __future__ import annotations

from bots.llm.scripted.lines import DEFAULT_AIZUCHI, DEFAULT_REMARKS, GENERIC, Lines
from bots.llm.scripted.notes import kept_notes
from bots.llm.scripted.provider import SampleSets, ScriptedProvider, Speaker
from bots.llm.scripted.tokens import estimate_prompt_tokens, estimate_tokens
from bots.llm.scripted.words import arithmetic, content_word

__all__ = (
    "DEFAULT_AIZUCHI",
    "DEFAULT_REMARKS",
    "GENERIC",
    "Lines",
    "SampleSets",
    "ScriptedProvider",
    "Speaker",
    "arithmetic",
    "content_word",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "kept_notes",
)
