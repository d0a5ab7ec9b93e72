"""The persona runtime: one persona across the channels it joins, and what its workers share (its provider, its
arbiter client, its platform, its stats, its back-off after provider errors).

Each channel has a worker (``bots.worker``): on each new message it waits a moment, plans, claims, makes one LLM
call, speaks or releases, posts. Messages that arrive while it waits or generates are never dropped: they wake it
again, and it looks once more with fresh context when it is done (coalescing: ten messages in a burst make one more
look, not ten).

Invariants: no LLM call unless a claim was granted first and the platform would take the post; the call ends (or is
cut off) while the claim still holds, leaving time to speak and post; a claim is always spoken or released (also on
errors and shutdown); nothing posted can ping anyone; provider errors back off and skip the turn.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from arbiter import contract as wire
from bots.errors import BotError
from bots.follower import StreamFollower
from bots.llm.base import LLMRateLimited
from bots.worker.actions import LookPlanned
from bots.worker.channel import ChannelWorker
from bots.worker.config import RuntimeConfig
from bots.worker.step import Seat

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable

    from bots.arbiter_client import ArbiterClient
    from bots.image_fetch import ImageFetcher
    from bots.llm.base import ChatProvider, LLMAuthError, LLMError, Usage
    from bots.mcp_host import ToolHost
    from bots.persona import Persona
    from bots.platforms.base import Platform
    from bots.worker.step import PauseRule

__all__ = ("ChannelWorker", "LookPlanned", "PersonaRuntime", "RuntimeConfig", "RuntimeStats", "personas_stream")

_log = logging.getLogger(__name__)

# The kinds of events a persona does without: it plans from the status it asks for as it looks, not from the level.
_UNUSED_EVENTS: tuple[wire.EventType, ...] = ("level",)
# Why a persona cannot speak, as it tells the arbiter: within what a channel's standing holds.
_REASON_CHARS = 200
_FIX_KEY = "; put a valid key in .env and start again"


@dataclass
class RuntimeStats:
    """What a persona did; the tests and the conversation benchmark read these."""

    llm_requests: int = 0
    prompt_tokens: int = 0  # every input token, those of the provider's prompt cache included
    completion_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    claims: int = 0
    refused_claims: int = 0
    posted: Counter[str] = field(default_factory=Counter)  # by tier
    passes: int = 0  # the model chose to say nothing
    wasted: int = 0  # generated but not posted (refused at speak, a repeat, the post failed)
    # Calls stopped while the model wrote, because a message came that the answer could no longer be posted after
    # (a nod's message is no longer the latest; a person asked someone else).
    overtaken: int = 0
    given_back: int = 0  # claims given back before any call: the conversation moved on while claiming
    provider_errors: int = 0
    looks: int = 0  # turns looked at and finished (status, plan, maybe claim and generation), whatever came of them
    statuses_streamed: int = 0  # looks planned from a status asked on the event stream
    statuses_read: int = 0  # looks that read the status over HTTP (the stream was down, or slow to answer)
    prompt_sizes: list[int] = field(default_factory=list)  # prompt tokens of each request, in order

    def count_usage(self, usage: Usage | None) -> None:
        if usage is not None:
            self.prompt_tokens += usage.prompt_tokens
            self.completion_tokens += usage.completion_tokens
            self.cache_read_tokens += usage.cache_read_tokens
            self.cache_write_tokens += usage.cache_write_tokens
            self.prompt_sizes.append(usage.prompt_tokens)


def _shortened(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


def personas_stream(
    arbiter: ArbiterClient,
    *,
    tokens: Iterable[str] = (),
    name: str = "personas",
    config: RuntimeConfig | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> StreamFollower:
    """The event stream of the personas of a process: opened with ``arbiter``'s token, acting for the personas whose
    ``tokens`` are given too. Pass it to each one's runtime; close it once they are closed."""
    reconnect_s = (config or RuntimeConfig()).reconnect_s
    return StreamFollower(arbiter, name=name, tokens=tokens, skip=_UNUSED_EVENTS, sleep=sleep, reconnect_s=reconnect_s)


class PersonaRuntime:
    """One persona across the channels it joins."""

    def __init__(
        self,
        persona: Persona,
        provider: ChatProvider,
        arbiter: ArbiterClient,
        platform: Platform,
        *,
        config: RuntimeConfig | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        tools: ToolHost | None = None,
        follower: StreamFollower | None = None,
        on_decision: Callable[[LookPlanned], None] | None = None,
        images: ImageFetcher | None = None,
    ) -> None:
        """``follower``: the event stream of the process's personas (``personas_stream``), which it then shares with
        them; by default a stream of its own. ``on_decision``: told of every look's plan as it is made, before the
        claim goes out; for measuring (``aizuchi bench fleet``). ``images``: checks and fetches the images a prompt
        shows (shared by the process's personas); without, they go by address unchecked, and the room's not at
        all."""
        self.persona = persona
        self.provider = provider
        self.tools = tools  # its MCP servers' tools, connected (None or empty: a decision alone, one request)
        self.arbiter = arbiter
        self.platform = platform
        self.config = config or RuntimeConfig()
        self.rng = rng or random.Random()
        self.clock = clock or (lambda: asyncio.get_running_loop().time())
        self.sleep = sleep
        self.stats = RuntimeStats()
        self.on_decision = on_decision
        self.images = images
        # One multiplexed event stream for every channel it takes part in (GET /v1/events), shared with the other
        # personas of the process when they run together.
        self._owns_follower = follower is None
        self.follower = follower or personas_stream(arbiter, name=f"persona={persona.id}", config=config, sleep=sleep)
        arbiter.carry_calls_on(self.follower, persona.id)  # claims and speeches on the stream while it is open
        self._workers: dict[str, ChannelWorker] = {}
        self._seats: dict[PauseRule, Seat] = {}
        self.closed = False  # stopped: it takes part nowhere any more
        self._errors_in_a_row = 0
        self._backoff_until = 0.0
        self.cannot_speak: str | None = None  # why it stopped calling its model for good (its key was refused)

    async def start(self) -> None:
        """Tell the arbiter how the persona presents itself: its names (people who name it give it the floor),
        its colour, its account on the platform (so its own posts there are recognised), and whether it can speak."""
        registration = wire.PersonaRegistration(
            display_name=self.persona.display_name,
            aliases=self.persona.aliases,
            color=self.persona.color,
            platform_user_id=self.platform.user_id,
            cannot_speak=self.cannot_speak,
        )
        await self.arbiter.register(self.persona.id, registration)

    def cannot_post(self, channel_id: str) -> str | None:
        """Why it cannot post in ``channel_id`` now (its model refused its key; the platform refuses it), or None."""
        return self.cannot_speak or self.platform.cannot_post(channel_id)

    def join(self, channel_id: str) -> ChannelWorker:
        worker = self._workers.get(channel_id)
        if worker is None:
            worker = self._workers[channel_id] = self._make_worker(channel_id)
            worker.start()
        return worker

    def _make_worker(self, channel_id: str) -> ChannelWorker:
        return ChannelWorker(self, channel_id)

    def seat(self, pause: PauseRule) -> Seat:
        """What its workers' steps read besides their state: one for all its channels (a persona process keeps a
        worker per persona and channel, and a seat each would be some 90 bytes more a worker)."""
        seat = self._seats.get(pause)
        if seat is None:
            seat = self._seats[pause] = Seat(self.persona, self.config, self.rng, pause)
        return seat

    @property
    def channels(self) -> list[str]:
        return list(self._workers)

    async def close(self) -> None:
        """Stop every worker; claims in flight are released on the way out. (A stream shared with other personas
        goes on: it is theirs to close.)"""
        self.closed = True
        if self._owns_follower:
            await self.follower.close()
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(worker.close() for worker in workers), return_exceptions=True)

    # --- provider errors: back off, skip the turn ------------------------------------------------------

    def backing_off(self) -> float:
        """Seconds left to wait after provider errors (0 when none)."""
        return max(0.0, self._backoff_until - self.clock())

    def provider_failed(self, error: LLMError) -> None:
        self._errors_in_a_row += 1
        wait = min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (self._errors_in_a_row - 1))
        if isinstance(error, LLMRateLimited) and error.retry_after is not None:
            wait = max(wait, min(self.config.max_backoff_s, error.retry_after))
        self._backoff_until = self.clock() + wait
        self.stats.provider_errors += 1
        _log.warning("persona=%s provider error (%s); skipping turns for %.1fs", self.persona.id, error, wait)

    def provider_ok(self) -> None:
        self._errors_in_a_row = 0

    async def stop_calling(self, error: LLMAuthError) -> None:
        """Its model refused its key: no call does better until the key is changed and the persona starts again. It
        says so once, and tells the arbiter, which addresses nobody's message to it meanwhile and shows why."""
        if self.cannot_speak is not None:
            return
        self.stats.provider_errors += 1
        self.cannot_speak = _shortened(error.message, _REASON_CHARS - len(_FIX_KEY)) + _FIX_KEY
        _log.error("persona=%s stops calling its model: %s%s", self.persona.id, error, _FIX_KEY)
        try:
            await self.start()
        except BotError as failed:
            _log.warning("persona=%s: could not tell the arbiter it cannot speak: %s", self.persona.id, failed)
        for worker in self._workers.values():
            worker.wake()  # each tells its channel, handing back any floor it has there
