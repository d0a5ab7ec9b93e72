"""A look's I/O: the status to plan from (asked on the event stream, read over HTTP when the stream cannot answer),
once the arbiter has recorded what the persona's own account saw said; and telling the arbiter whether the persona
can post here."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from bots.errors import BotError

if TYPE_CHECKING:
    from collections.abc import Callable

    from arbiter import contract as wire
    from bots.runtime import PersonaRuntime

__all__ = ("current_status", "hear_what_was_said", "tell_standing")

_log = logging.getLogger(__name__)

# How long a look waits for its status on the stream before it reads it over HTTP (a stream that is down answers at
# once: none).
STATUS_WAIT_S = 2.0
# How often a persona looks whether the arbiter has recorded a message its own account saw (``hear_what_was_said``).
HEARING_POLL_S = 0.02


async def current_status(runtime: PersonaRuntime, channel_id: str) -> wire.StatusView:
    """The status as the arbiter has it now: asked on the stream, or read over HTTP when the stream cannot answer."""
    status = await runtime.follower.status(channel_id, runtime.persona.id, within=STATUS_WAIT_S)
    if status is not None:
        runtime.stats.statuses_streamed += 1
        return status
    runtime.stats.statuses_read += 1
    return await runtime.arbiter.status(channel_id)


async def hear_what_was_said(runtime: PersonaRuntime, channel_id: str, heard: Callable[[], int]) -> None:
    """Wait until the arbiter has recorded every message a person said here that the persona's own account has seen
    on the platform (``heard``: the newest the stream brought; at most ``config.hear_wait_s``). The arbiter's bot may
    hear the platform later than the persona's account: a persona that claimed and spoke meanwhile would post between
    a question and the asked persona's answer, and the history would not keep the channel's order."""
    seen = runtime.platform.latest_said(channel_id)
    if seen <= heard():
        return
    deadline = runtime.clock() + runtime.config.hear_wait_s
    while seen > heard() and runtime.clock() < deadline:
        await runtime.sleep(HEARING_POLL_S)
    if seen > heard():
        _log.info(
            "persona=%s channel=%s: message %d is not in the arbiter's history after %.1fs; going on",
            runtime.persona.id,
            channel_id,
            seen,
            runtime.config.hear_wait_s,
        )


async def tell_standing(runtime: PersonaRuntime, channel_id: str, cannot_post: str | None) -> bool:
    """Tell the arbiter why the persona cannot post here (None: it can); whether it heard. One that cannot is given
    no floor, and hands back any it has: the others answer at once instead of waiting for an answer that cannot
    come."""
    try:
        await runtime.arbiter.stand(channel_id, cannot_post)
    except BotError as error:
        _log.warning(
            "persona=%s channel=%s: could not tell the arbiter whether it can post: %s",
            runtime.persona.id,
            channel_id,
            error,
        )
        return False
    return True
