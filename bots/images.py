"""Which of the conversation's images a persona's model is shown (what they cost: ``bots.llm.images``; whether they
can be had: ``bots.image_fetch``).

The arbiter keeps each image as a reference (``MessageView.images``); the model is given its address and the
provider fetches it, or its bytes inline when the address is one only this machine reaches (``local``: the room's).
Shown: only the images of the last few messages, the newest first, within a count and a byte total per prompt
(``RuntimeConfig``). An image whose address has expired (Discord's signed attachment addresses last about a day)
would make the provider refuse the whole request, so it is skipped, with one line in the log, and the message is
read as its text alone (which still names the file)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from arbiter.contract import AuthorKind
from bots.llm.base import ImageInput

if TYPE_CHECKING:
    from collections.abc import Sequence

    from arbiter.contract import MessageView
    from bots.worker.config import RuntimeConfig

__all__ = ("ChosenImage", "prompt_images")

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChosenImage:
    """An image chosen for the prompt: what the model is to be shown, the message it came with, its size (bytes,
    when known) and whether only this machine reaches its address (``local``: sent inline)."""

    image: ImageInput
    seq: int
    size: int | None = None
    local: bool = False


def prompt_images(
    window: Sequence[MessageView], now: float, config: RuntimeConfig, *, persona: str
) -> tuple[ChosenImage, ...]:
    """The images of ``window``'s last ``config.image_messages`` messages the model is shown, oldest first."""
    groups: list[list[ChosenImage]] = []  # per message, newest message first
    count = total = 0
    for message in reversed(window[-config.image_messages :] if config.image_messages > 0 else []):
        if message.author_kind is not AuthorKind.HUMAN:
            continue  # a person's pictures; a bot's are its own business
        kept: list[ChosenImage] = []
        for image in message.images:
            if image.expires_at is not None and now >= image.expires_at:
                _log.info(
                    "persona=%s: skipping an image of message %d: its address expired %.0f s ago",
                    persona,
                    message.seq,
                    now - image.expires_at,
                )
                continue
            size = image.size or 0
            if count >= config.images_per_prompt or total + size > config.image_bytes_per_prompt:
                continue
            count, total = count + 1, total + size
            shown = ImageInput(image.url, image.content_type, image.width, image.height)
            kept.append(ChosenImage(shown, message.seq, image.size, image.local))
        groups.append(kept)
    return tuple(image for kept in reversed(groups) for image in kept)
