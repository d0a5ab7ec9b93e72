"""The worker's tunables: how long a persona pauses, how much of the conversation the model reads, how it backs
off. One value per runtime, shared by its workers."""

from __future__ import annotations

from dataclasses import dataclass

from bots.llm.tool_rounds import DEFAULT_ROUNDS

__all__ = ("RuntimeConfig",)


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """How a persona takes turns: the same for each channel it takes part in."""

    # What the model sees of the conversation besides its notes: the messages since the notes, at most ``window``
    # (a persona silent for long folds that many in one go; older ones it never saw are gone for it), and at least
    # the last ``recent``, for context.
    window: int = 24
    recent: int = 8
    base_delay_s: float = 1.5  # how long a persona of average temperament waits before it looks
    # Of a claim's time-to-live, what the model may not use: speaking and posting come after it.
    speak_margin_s: float = 3.0
    backoff_s: float = 2.0  # first wait after a provider error; doubles per error in a row
    max_backoff_s: float = 60.0
    reconnect_s: float = 1.0  # first wait before reconnecting the event stream
    # At most this long (times 1.5 for the least eager) before a persona looks again when a wait ends: those waiting
    # for the same refund would otherwise all claim it at the same moment, and all but one be refused.
    reaction_s: float = 0.25
    # A persona with MCP tools: at most this many LLM requests in a turn, tool rounds and the decision together.
    tool_rounds: int = DEFAULT_ROUNDS
    # The longest a persona waits, before it claims and before it speaks, for the arbiter to record what a person said
    # that the persona's own account has seen on the platform (the arbiter's bot may hear it later).
    hear_wait_s: float = 2.0
    # Images the model is shown (a profile with images on): those of the last ``image_messages`` messages only, at
    # most ``images_per_prompt`` of them, newest first, and ``image_bytes_per_prompt`` bytes in all.
    image_messages: int = 3
    images_per_prompt: int = 4
    image_bytes_per_prompt: int = 20 * 1024 * 1024
