"""Giving a claim back: with the turn's notes, or without them when the arbiter will not take them (they must not
keep the claim); and a claim the arbiter granted after the persona stopped waiting for it."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from bots.errors import ArbiterRejected, BotError

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine
    from typing import Any

    from arbiter import contract as wire
    from bots.runtime import PersonaRuntime

__all__ = ("claim", "give_back", "give_back_if_granted", "seen_through")

_log = logging.getLogger(__name__)


async def give_back(
    runtime: PersonaRuntime, channel_id: str, claim_id: str, memory: wire.MemoryUpdate | None
) -> wire.MemoryUpdate | None:
    """Release the claim with ``memory``; the notes the arbiter kept (None: none given, none taken, or the release
    failed: a claim the arbiter never hears of again lapses at its time-to-live)."""
    persona_id = runtime.persona.id
    try:
        return await _send_release(runtime, channel_id, claim_id, memory)
    except BotError as error:
        if isinstance(error, ArbiterRejected) and error.code == "claim_closed":
            # Settled meanwhile (spoken, or lapsed at its time-to-live): nothing to give back.
            _log.info("persona=%s: claim %s was settled before its release: %s", persona_id, claim_id, error)
        else:
            # The claim lapses at its time-to-live anyway; the arbiter never keeps it.
            why = str(error) or type(error).__name__
            _log.warning("persona=%s: could not release claim %s: %s", persona_id, claim_id, why)
        return None


async def _send_release(
    runtime: PersonaRuntime, channel_id: str, claim_id: str, memory: wire.MemoryUpdate | None
) -> wire.MemoryUpdate | None:
    try:
        await runtime.arbiter.release(channel_id, claim_id, memory)
    except ArbiterRejected as error:
        if memory is None or not (error.field or "").startswith("memory"):
            raise
        # Notes the arbiter will not take must not keep the claim: give it back without them. (Notes on a history
        # cleared meanwhile are no surprise: the clear was heard of after they were made.)
        log = _log.info if error.code == "history_cleared" else _log.warning
        log("persona=%s: notes refused (%s); releasing without them", runtime.persona.id, error)
        await runtime.arbiter.release(channel_id, claim_id)
        return None
    return memory


async def give_back_if_granted(
    runtime: PersonaRuntime, channel_id: str, sent: asyncio.Future[wire.ClaimResult]
) -> None:
    """A claim sent as the persona stopped: given back if the arbiter grants it."""
    try:
        result = await sent
    except BotError:
        return  # not granted, or no answer: a claim the arbiter granted unheard lapses at its time-to-live
    if result.granted and result.claim is not None:
        await give_back(runtime, channel_id, result.claim.claim_id, None)


async def claim(
    runtime: PersonaRuntime,
    channel_id: str,
    request: wire.ClaimRequest,
    settle: Callable[[Coroutine[Any, Any, None]], asyncio.Future[None]],
) -> wire.ClaimResult:
    """Claim; stopped with the claim on its way, the arbiter may grant it all the same, and it is then given back
    (``settle`` runs that to its end)."""
    sent = asyncio.ensure_future(runtime.arbiter.claim(channel_id, request))
    try:
        return await asyncio.shield(sent)
    except asyncio.CancelledError:
        settle(give_back_if_granted(runtime, channel_id, sent))
        raise


async def seen_through(runtime: PersonaRuntime, claim_id: str, releasing: asyncio.Future[None]) -> None:
    """Wait for a release already sent; stopped meanwhile, the release goes on (whoever stops waits for it)."""
    try:
        await asyncio.shield(releasing)
    except asyncio.CancelledError:
        _log.info("persona=%s: stopped while giving claim %s back; the release goes on", runtime.persona.id, claim_id)
        raise
