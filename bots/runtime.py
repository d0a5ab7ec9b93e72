"""The persona runtime: on each new message, wait a moment, plan, claim, make one LLM call, speak or release, post.

One ``PersonaRuntime`` per persona; inside it one ``ChannelWorker`` per channel it takes part in. A worker
hears about messages on the arbiter's event stream (so every platform works the same way). Messages that
arrive while it waits or generates are never dropped: they wake it again, and it looks once more with fresh
context when it is done (coalescing: ten messages in a burst make one more look, not ten).

Invariants: no LLM call unless a claim was granted first and the platform would take the post; the call
ends (or is cut off) while the claim still holds, leaving time to speak and post; a claim is always spoken or
released (also on errors and shutdown); nothing posted can ping anyone; provider errors back off and skip the
turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, assert_never

from arbiter import contract as wire
from arbiter.contract import Tier
from bots.errors import ArbiterRejected, BotError, PostFailed
from bots.follower import StreamFollower
from bots.language.text import clean_reply, is_emoji, nod_repeats, repeats
from bots.llm.base import (
    DecisionRequest,
    DecisionResult,
    LLMAuthError,
    LLMBadOutput,
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    Usage,
)
from bots.llm.tool_rounds import DEFAULT_ROUNDS, decide_with_tools
from bots.memory import MEMORY_SCHEMA, fit_state
from bots.planner import anchor, plan_turn, refused_outright
from bots.platforms.base import Posted
from bots.prompt import OWN_LINES, persona_prompt, rules_prompt, transcript_turn
from bots.scene import scene_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Coroutine, Iterable

    from bots.arbiter_client import ArbiterClient
    from bots.llm.base import ChatProvider, ToolSpec
    from bots.mcp_host import ToolHost
    from bots.persona import Persona
    from bots.platforms.base import Platform

__all__ = ("ChannelWorker", "LookPlanned", "PersonaRuntime", "RuntimeConfig", "RuntimeStats", "personas_stream")

_log = logging.getLogger(__name__)

# How much history a worker reads on arrival: its window, and its own recent lines among them.
_ARRIVAL_READ = 100
# How long a look waits for its status on the stream before it reads it over HTTP (a stream that is down answers at
# once: none).
_STATUS_WAIT_S = 2.0
# Refusals after which a persona looks again soon: another's claim took what it planned on (the pool, the floor),
# and something else may be open.
_REPLANNED = (wire.RefusalReason.INSUFFICIENT, wire.RefusalReason.PRIORITY)
# How often a persona looks whether the arbiter has recorded a message its own account saw (see _hear_what_was_said).
_HEARING_POLL_S = 0.02
# The kinds of events a persona does without: it plans from the status it asks for as it looks, not from the level.
_UNUSED_EVENTS: tuple[wire.EventType, ...] = ("level",)
# A claim that ends with its cost back in the pool at once, before any retry planned for a refund (and, for an asked
# persona, perhaps its floor: a second pass, a post the platform refused).
_GIVEN_BACK = (wire.SpendState.RELEASED, wire.SpendState.RETRACTED, wire.SpendState.CLEARED)
# Why a persona cannot speak, as it tells the arbiter: within what a channel's standing holds.
_REASON_CHARS = 200
_FIX_KEY = "; put a valid key in .env and start again"


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
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


@dataclass
class RuntimeStats:
    """What a persona did; the tests and the conversation benchmark read these."""

    llm_requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
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
            self.prompt_sizes.append(usage.prompt_tokens)


@dataclass(frozen=True, slots=True)
class LookPlanned:
    """A look's plan, as it is made (``PersonaRuntime``'s ``on_decision`` hook, for measuring)."""

    channel_id: str
    seq: int  # the newest message it had seen
    tier: Tier | None  # what it is about to claim, or None for no claim now
    due: float  # when the look was meant to be (the runtime's clock): once the persona's pause was over
    pause: float  # that pause: the moment it took on purpose, as a person reads before answering


@dataclass
class Overtaking:
    """What would make the arbiter refuse the answer ``persona_id`` is writing on a claim of ``tier``, fed the
    messages that arrive meanwhile. A nod is for the latest message; a remark is stale after more than
    ``tolerance`` remarks or human messages came after the one it answers; and a person asking others something
    gives them the floor, unless this persona was asked too (then its answer is one of those awaited)."""

    persona_id: str
    tier: Tier
    addressed: bool
    tolerance: int
    newer: int = 0  # remarks and human messages by others after the one it answers, so far

    def __call__(self, message: wire.MessageView) -> bool:
        if message.author_id == self.persona_id:
            return False
        if self.tier is Tier.AIZUCHI:
            return True
        human = message.author_kind is wire.AuthorKind.HUMAN
        if human or message.tier in (Tier.REMARK, Tier.LONG):
            self.newer += 1
        if self.newer > self.tolerance:
            return True
        return not self.addressed and human and bool(message.addressed) and self.persona_id not in message.addressed


def _addressing(persona_id: str, window: list[wire.MessageView]) -> int | None:
    """The seq of the newest message in ``window`` that addressed ``persona_id``."""
    return next((m.seq for m in reversed(window) if persona_id in m.addressed), None)


def _shortened(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1].rstrip() + "…"


def _keep_last(messages: list[wire.MessageView], message: wire.MessageView, most: int) -> None:
    messages.append(message)
    if len(messages) > most:
        del messages[: len(messages) - most]


def _replace(messages: list[wire.MessageView], message: wire.MessageView) -> None:
    """Put ``message`` in the place of the one with its seq, if ``messages`` holds it."""
    for index, held in enumerate(messages):
        if held.seq == message.seq:
            messages[index] = message
            return


def _drop(messages: list[wire.MessageView], gone: Callable[[wire.MessageView], bool]) -> None:
    messages[:] = [message for message in messages if not gone(message)]


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
    ) -> None:
        """``follower``: the event stream of the process's personas (``personas_stream``), which it then shares with
        them; by default a stream of its own. ``on_decision``: told of every look's plan as it is made, before the
        claim goes out; for measuring (``aizuchi bench fleet``)."""
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
        # One multiplexed event stream for every channel it takes part in (GET /v1/events), shared with the other
        # personas of the process when they run together.
        self._owns_follower = follower is None
        self.follower = follower or personas_stream(arbiter, name=f"persona={persona.id}", config=config, sleep=sleep)
        self._workers: dict[str, ChannelWorker] = {}
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


class ChannelWorker:
    """One persona in one channel: follows the channel's events (its share of the process's multiplexed stream, as
    a ``bots.follower.ChannelListener``) and takes turns."""

    # Slots: a persona process keeps one worker per persona and channel, six thousand for six personas in a thousand.
    __slots__ = (
        "_arrival",
        "_arrived",
        "_blocked",
        "_closed",
        "_floor_wait",
        "_held",
        "_intent",
        "_memory_read",
        "_must_answer",
        "_new_memory",
        "_notes",
        "_overtaken",
        "_overtakes",
        "_own",
        "_own_read",
        "_replanned",
        "_retry",
        "_said_heard",
        "_second_look",
        "_settling",
        "_speaking",
        "_standing",
        "_task",
        "_turning",
        "_woken",
        "answered",
        "channel_id",
        "last_seq",
        "runtime",
        "window",
    )

    def __init__(self, runtime: PersonaRuntime, channel_id: str) -> None:
        self.runtime = runtime
        self.channel_id = channel_id
        # Lists, trimmed as they grow (``_keep_last``): an empty deque takes a block of 64 slots, twelve per channel.
        self.window: list[wire.MessageView] = []
        self.last_seq = 0
        self.answered = 0  # the newest seq by someone else this persona has dealt with
        # A worker in a quiet channel holds no task: one runs while there is something to look at (``wake``), and
        # ends when there is not. A persona in a thousand channels is mostly quiet in most of them.
        self._woken = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._arrival: asyncio.Event | None = asyncio.Event()  # set (and let go) once the recent history is in
        self._retry: asyncio.TimerHandle | None = None
        self._turning = False
        self._held: str | None = None  # claim id while one is held
        self._speaking: asyncio.Task[bool] | None = None  # a speech sent, until it is posted (or retracted)
        # A claim or a release sent, until the arbiter has answered it and any claim it granted is given back.
        self._settling: asyncio.Future[None] | None = None
        self._second_look: int | None = None  # seq a quiet persona will look at once more after a pause
        self._intent: tuple[int, Tier] | None = None  # (thread's seq, tier) it waits for the pool to afford
        self._floor_wait = False  # waiting while another persona has the floor
        # What it had answered before a look the arbiter refused outright (a pause, a mute, the idle cap): a settings
        # change can lift that with no new message, so the settings event has it look again from there.
        self._blocked: int | None = None
        # The addressing message's seq after a first try that said nothing (a pass, a failure): one more look,
        # with no pass offered, before the floor is given up.
        self._must_answer: int | None = None
        self._own: list[wire.MessageView] = []  # what it said here lately, oldest first
        # Its own last lines as the arbiter keeps them come with its first granted claim here: the recent history it
        # reads on arrival may not reach back to them (others said more since, or it was away).
        self._own_read = False
        # While the model writes: what would make its answer unpostable, and the event that then stops the call.
        self._overtakes: Callable[[wire.MessageView], bool] | None = None
        self._overtaken: asyncio.Event | None = None  # made for the call it may stop
        # Its notes on this channel (its dialogue state) as the arbiter keeps them, and the update of the turn under
        # way, given to the arbiter with its speech or its release.
        self._notes: tuple[int, str] | None = None  # ``memory``, as (seq, the state's JSON): a third of it parsed
        self._memory_read = False  # given with its first granted claim here (or heard of before)
        self._new_memory: wire.MemoryUpdate | None = None
        self._arrived = False  # the recent history is in (the stream's replay ended with the level)
        self._said_heard = 0  # the newest message a person said here that the stream brought (a platform id)
        self._standing: str | None = None  # why it last told the arbiter it cannot post here (None: it has not)
        self._replanned = -1  # the seq a refused claim was planned again for, at once (once per message)

    @property
    def memory(self) -> wire.MemoryUpdate | None:
        """Its notes on this channel (its dialogue state) as the arbiter keeps them."""
        if self._notes is None:
            return None
        seq, state = self._notes
        return wire.MemoryUpdate(
            seq=seq, state=wire.DialogueState.model_validate_json(state, context=wire.FROM_THE_ARBITER)
        )

    @memory.setter
    def memory(self, memory: wire.MemoryUpdate | None) -> None:
        self._notes = None if memory is None else (memory.seq, memory.state.model_dump_json())

    @property
    def _notes_seq(self) -> int | None:
        return None if self._notes is None else self._notes[0]

    @property
    def persona(self) -> Persona:
        return self.runtime.persona

    @property
    def own_lines(self) -> list[str]:
        """What this persona said here lately, oldest first, as it reads now (after any edit)."""
        return [message.text for message in self._own]

    def start(self) -> None:
        self.runtime.follower.follow(self.channel_id, self.persona.id, self)

    async def ready(self) -> None:
        """Wait until the worker has read the channel's recent history and follows its events."""
        if self._arrival is not None:
            await self._arrival.wait()

    @property
    def idle(self) -> bool:
        """Nothing under way and nothing scheduled: no turn running, no wake-up and no retry pending."""
        return not self._turning and not self._woken and self._retry is None

    async def close(self) -> None:
        self._closed = True
        self.runtime.follower.leave(self.channel_id, self.persona.id)
        if self._retry is not None:
            self._retry.cancel()
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # What was already sent is seen through: a speech the arbiter granted is posted (or retracted), never left in
        # the history unsaid; a claim or a release on its way is settled, so that no claim keeps its cost from the
        # others until it lapses.
        for under_way in (self._speaking, self._settling):
            if under_way is not None:
                await asyncio.gather(under_way, return_exceptions=True)
        if self._held is not None:
            await self._release(self._held)

    def wake(self) -> None:
        """Something to look at: a look after the persona's pause (the one under way, if any, looks again after)."""
        self._woken = True
        if self._task is None and self._arrival is None and not self._closed:
            self._task = asyncio.create_task(self._loop(), name=f"turns {self.persona.id}@{self.channel_id}")

    # --- following the channel -------------------------------------------------------------------------

    def subscription(self) -> wire.Subscribe:
        """Where its channel's stream starts: on arrival, the recent history (context, not cues); after that, the
        message after the last it saw, so a reconnection loses nothing and repeats nothing."""
        if self._arrived or self.last_seq:
            return wire.Subscribe(channel=self.channel_id, after=self.last_seq)
        return wire.Subscribe(channel=self.channel_id, recent=_ARRIVAL_READ)

    def on_refused(self, detail: str) -> None:
        _log.warning("persona=%s channel=%s: stream refused (%s); leaving", self.persona.id, self.channel_id, detail)

    def on_frame(self, frame: wire.ArbiterEvent) -> None:
        self._on_event(frame)
        if not self._arrived and isinstance(frame, wire.LevelEvent):
            # The replay is over. Start fresh: what was said before the persona arrived is context, not a cue.
            self._arrived = True
            self.answered = self.last_seq
            self._woken = False
            if self._arrival is not None:
                self._arrival.set()
                self._arrival = None
            if self.runtime.cannot_post(self.channel_id) is not None:
                self.wake()  # the arbiter learns it before anyone asks this persona something here

    async def _current_status(self) -> wire.StatusView:
        """The status to plan from, as the arbiter has it now: asked on the stream, or read over HTTP when the stream
        cannot answer."""
        runtime = self.runtime
        status = await runtime.follower.status(self.channel_id, self.persona.id, within=_STATUS_WAIT_S)
        if status is not None:
            runtime.stats.statuses_streamed += 1
            return status
        runtime.stats.statuses_read += 1
        return await runtime.arbiter.status(self.channel_id)

    def _on_event(self, event: wire.ArbiterEvent) -> None:
        match event:
            case wire.MessageEvent(message=message):
                self._on_message(message)
            case wire.EditedEvent(message=message):
                # What the model reads must be what the channel shows now: the new text replaces the old.
                _replace(self.window, message)
                _replace(self._own, message)
            case wire.RetractedEvent(seq=seq) | wire.DeletedEvent(seq=seq):
                # No longer part of the conversation (a post that failed and was taken back, a message deleted on
                # the platform): it leaves the window. A line of its own stays among its own lines all the same:
                # one that was deleted is no better to say again.
                _drop(self.window, lambda held: held.seq == seq)
            case wire.ClearedEvent(last_seq=last_seq):
                # Everything up to last_seq is gone, and only that: seqs go on after it, and a stream that resumed
                # (?after=) may bring the clear after messages said since, which stay.
                _drop(self.window, lambda held: held.seq <= last_seq)
                self.last_seq = max(self.last_seq, last_seq)
                self.answered = max(self.answered, last_seq)
                if self._new_memory is not None and self._new_memory.seq <= last_seq:
                    self._new_memory = None  # notes on what was cleared: the arbiter would refuse them
            case wire.LevelEvent():
                pass  # the end of the replay (see on_frame); a look reads the pool from its status
            case wire.MemoryEvent(persona=persona, memory=memory) if persona == self.persona.id:
                # Its own notes: stored by this worker, by another of the same persona, or reset by a moderator (or
                # with the history). A newer state wins; an older one arriving late does not take it back.
                if memory is None:
                    self.memory = None
                elif self._notes is None or memory.seq >= self._notes[0]:
                    self.memory = wire.MemoryUpdate(seq=memory.seq, state=memory.state)
                self._memory_read = True
            case wire.SettingsEvent():
                # A look reads the settings that matter from the status, fresh; but a resume, an unmute or a higher
                # cap is no message, and what was said while it held the persona back is still unanswered.
                if self._blocked is not None:
                    self.answered, self._blocked = self._blocked, None
                    self.wake()
                elif self._floor_wait and self._retry is not None:
                    self.wake()  # the floor it waits for may be open now (the asked persona cannot post here)
            case wire.ClaimEvent(claim=claim):
                given_back = claim.state in _GIVEN_BACK and claim.persona != self.persona.id
                if given_back and (self._intent is not None or self._floor_wait) and self._retry is not None:
                    # Waiting for the pool, or for another's floor: a claim given back (a pass) refills the pool, and
                    # may give the floor up, long before the retry planned, with no message to say so.
                    self.wake()
            case wire.MemoryEvent():
                pass  # others' notes are theirs
            case _:
                assert_never(event)

    def _on_message(self, message: wire.MessageView) -> None:
        if message.seq <= self.last_seq:
            return
        _keep_last(self.window, message, self.runtime.config.window)
        self.last_seq = message.seq
        said = message.platform_message_id
        if message.author_kind is wire.AuthorKind.HUMAN and said is not None and said.isdigit():
            self._said_heard = max(self._said_heard, int(said))
        if message.author_id == self.persona.id:
            _keep_last(self._own, message, OWN_LINES)
            return
        if self._overtakes is not None and self._overtakes(message):
            _log.info(
                "persona=%s: message %d from %s came while the model wrote; stopping it",
                self.persona.id,
                message.seq,
                message.author_id,
            )
            if self._overtaken is not None:
                self._overtaken.set()
        self.wake()

    # --- taking turns ----------------------------------------------------------------------------------

    def _pending(self) -> bool:
        """Is there a message from someone else this persona has not dealt with yet (or a second look due)?"""
        if self._second_look is not None and self._second_look == self.last_seq:
            return True
        if self._must_answer is not None:
            return True
        return any(m.seq > self.answered and m.author_id != self.persona.id for m in self.window)

    def _delay(self) -> float:
        """A person's moment of reading before replying: shorter for talkative, extraverted personas."""
        persona = self.persona
        latest = self.window[-1] if self.window else None
        if latest is not None and persona.id in latest.addressed:
            return 0.2 * self.runtime.config.base_delay_s
        eagerness = (persona.talkativeness + persona.big_five.extraversion) / 2
        return self.runtime.config.base_delay_s * (1.5 - eagerness) * self.runtime.rng.uniform(0.6, 1.4)

    async def _loop(self) -> None:
        try:
            await self._looks()
        finally:
            self._task = None

    async def _looks(self) -> None:
        while self._woken:
            pause = self._delay()
            due = self.runtime.clock() + pause
            await self.runtime.sleep(pause)
            self._woken = False  # whatever arrived during the pause is in the window now
            cannot_post = self.runtime.cannot_post(self.channel_id)
            await self._keep_standing(cannot_post)
            if cannot_post is not None:
                self.answered = self.last_seq  # the platform said why (once); nothing to do until that changes
                continue
            if not self._pending():
                continue
            backoff = self.runtime.backing_off()
            if backoff > 0:
                self._retry_in(backoff)
                continue
            self._cancel_retry()  # this look supersedes any look scheduled before
            self._turning = True
            try:
                await self._turn(due, pause)
            except asyncio.CancelledError:
                raise
            except BotError as error:
                _log.warning("persona=%s channel=%s: turn skipped: %s", self.persona.id, self.channel_id, error)
            except Exception:
                _log.exception("persona=%s channel=%s: turn failed", self.persona.id, self.channel_id)
            finally:
                self._turning = False
            self.runtime.stats.looks += 1

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None

    def _reaction(self) -> float:
        """How long after a wait ends the persona notices: the eager sooner, and never all at the same moment."""
        persona = self.persona
        eagerness = (persona.talkativeness + persona.big_five.extraversion) / 2
        return self.runtime.config.reaction_s * (1.5 - eagerness) * self.runtime.rng.random()

    def _retry_in(self, seconds: float) -> None:
        self._cancel_retry()
        self._retry = asyncio.get_running_loop().call_later(max(0.05, seconds), self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.wake()

    async def _turn(self, due: float, pause: float) -> None:
        runtime = self.runtime
        status = await self._status_to_plan_from()
        read_at = runtime.clock()
        window = list(self.window)
        newest = window[-1].seq if window else 0
        thread = anchor(window).seq if window else 0
        intent = self._intent[1] if self._intent is not None and self._intent[0] == thread else None
        if self.persona.id not in status.priority:
            self._must_answer = None  # answered, given up, or the floor's time passed: a look like any other
        second_look = self._second_look == newest
        plan = plan_turn(self.persona, status, window, runtime.rng, intent=intent, second_look=second_look)
        if runtime.on_decision is not None:
            runtime.on_decision(LookPlanned(self.channel_id, newest, plan.tier, due, pause))
        self._intent = (thread, plan.wanted) if plan.wanted is not None else None
        self._floor_wait = plan.floor
        _log.debug(
            "persona=%s channel=%s seq=%d level=%d priority=%s held=%s plan=%s",
            self.persona.id,
            self.channel_id,
            newest,
            status.level,
            status.priority,
            status.claims_held,
            plan,
        )
        self._second_look = None
        blocked = refused_outright(status) is not None
        if not blocked:
            self._blocked = None
        elif self._blocked is None:
            self._blocked = self.answered
        if plan.tier is None:
            if plan.retry_after is not None:
                self._retry_in(plan.retry_after + self._reaction())
                return
            self.answered = newest
            if plan.quiet and not second_look:
                # A silence is a cue too: look once more after a pause, if nobody else spoke meanwhile.
                self._second_look = newest
                self._retry_in(self.runtime.config.base_delay_s * self.runtime.rng.uniform(2.0, 4.0))
            return
        granted = await self._claim(plan.tier, newest, thread)
        if granted is None:
            return
        self.answered = newest
        self._held = granted.claim_id
        # The claim lapses at expires_at on the arbiter's clock, which read status.now about when this one read read_at.
        lapses = None if granted.expires_at is None else read_at + granted.expires_at - status.now
        addressed_by = _addressing(self.persona.id, window) if self.persona.id in status.priority else None
        second_try = addressed_by is not None and self._must_answer == addressed_by
        spoke = False
        try:
            spoke = await self._generate_and_speak(status, window, granted, lapses, allow_pass=not second_try)
        finally:
            if self._held is not None and self._speaking is None:  # (a speech under way settles the claim itself)
                await self._release(self._held)
        if addressed_by is not None and not spoke and not second_try:
            # Asked, and nothing came of it (a pass, a failure, an unusable answer): one more look, with no pass
            # offered. Its release counted as a try; the arbiter opens the floor after a second.
            self._must_answer = addressed_by
            self._retry_in(0.0)
        elif second_try:
            self._must_answer = None

    def _take_notes(self, found: wire.MemoryView | None) -> None:
        """Its notes here as the arbiter had them when it granted its first claim (not read on arrival: a persona in
        a thousand channels would make a thousand reads at once); the memory events keep them current after that,
        and one of those that came meanwhile is not taken back by an older read."""
        if self._notes is None or (found is not None and found.seq >= self._notes[0]):
            self.memory = None if found is None else wire.MemoryUpdate(seq=found.seq, state=found.state)
        self._memory_read = True

    async def _status_to_plan_from(self) -> wire.StatusView:
        """The status, once the arbiter has recorded what the persona's account saw said here; and the arbiter told
        if it still thinks the persona cannot post here (it was told so before the persona restarted)."""
        await self._hear_what_was_said()
        status = await self._current_status()
        if status.you is not None and status.you.cannot_post is not None:
            await self._tell_standing(None)
        return status

    async def _hear_what_was_said(self) -> None:
        """Wait until the arbiter has recorded every message a person said here that the persona's own account has
        seen on the platform (at most ``config.hear_wait_s``). The arbiter's bot may hear the platform later than the
        persona's account: a persona that claimed and spoke meanwhile would post between a question and the asked
        persona's answer, and the history would not keep the channel's order."""
        runtime = self.runtime
        seen = runtime.platform.latest_said(self.channel_id)
        if seen <= self._said_heard:
            return
        deadline = runtime.clock() + runtime.config.hear_wait_s
        while seen > self._said_heard and runtime.clock() < deadline:
            await runtime.sleep(_HEARING_POLL_S)
        if seen > self._said_heard:
            _log.info(
                "persona=%s channel=%s: message %d is not in the arbiter's history after %.1fs; going on",
                self.persona.id,
                self.channel_id,
                seen,
                runtime.config.hear_wait_s,
            )

    def _take_own_lines(self, said: list[wire.MessageView]) -> None:
        """Its own last lines as the arbiter had them when it granted its first claim, with those heard since."""
        known = {message.seq: message for message in said}
        known.update((message.seq, message) for message in self._own)  # heard on the stream: as fresh or fresher
        self._own = [known[seq] for seq in sorted(known)][-OWN_LINES:]
        self._own_read = True

    async def _claim(self, tier: Tier, based_on: int, thread: int) -> wire.ClaimView | None:
        runtime = self.runtime
        notes = not self._memory_read  # its notes come with its first granted claim here
        own_lines = 0 if self._own_read else OWN_LINES
        request = wire.ClaimRequest(tier=tier, based_on_seq=based_on, notes=notes, own_lines=own_lines)
        sent = asyncio.ensure_future(runtime.arbiter.claim(self.channel_id, request))
        try:
            result = await asyncio.shield(sent)
        except asyncio.CancelledError:
            # Stopped with the claim on its way: the arbiter may grant it all the same, and it is then given back.
            self._settle(self._give_back_if_granted(sent))
            raise
        runtime.stats.claims += 1
        if result.granted and result.claim is not None:
            if notes and not self._memory_read:
                self._take_notes(result.memory)
            if result.own_lines is not None and not self._own_read:
                self._take_own_lines(result.own_lines)
            return result.claim
        runtime.stats.refused_claims += 1
        _log.debug("persona=%s claim of %s refused: %s", self.persona.id, tier, result.reason)
        if result.reason is wire.RefusalReason.NODDED and tier is not Tier.AIZUCHI:
            self._intent = (thread, tier)  # someone nods first; then it says what it meant to (the nod wakes it)
        if result.reason is wire.RefusalReason.STALE:
            self.wake()  # look again with fresh context
        elif result.reason in _REPLANNED and self._replanned != based_on:
            # Another's claim took what it planned on since it read its status (the pool drained, the floor taken):
            # it looks once more, which may find a cheaper tier open, or say how long to wait.
            self._replanned = based_on
            self.wake()
        elif result.retry_after is not None:
            self._retry_in(result.retry_after + self._reaction())
        # Otherwise (the idle cap, a pause, a mute) only a new message can change things: wait for one.
        return None

    async def _generate_and_speak(
        self,
        status: wire.StatusView,
        window: list[wire.MessageView],
        claim: wire.ClaimView,
        lapses: float | None,
        *,
        allow_pass: bool = True,
    ) -> bool:
        """One model call on the claim; whether a message was granted (and so the claim spoken)."""
        runtime = self.runtime
        # A nod is claimed as a nod: a claim for a remark (or a long one) says something, or passes. A nod from it
        # would have been planned without the one-nod-per-message check, and be refused for it.
        allowed = (
            (Tier.AIZUCHI,)
            if claim.tier is Tier.AIZUCHI
            else tuple(tier for tier in Tier if Tier.AIZUCHI.rank < tier.rank <= claim.tier.rank)
        )
        lengths = {str(tier): status.tiers[tier].max_length for tier in allowed}
        actions = ("pass", *(str(tier) for tier in allowed)) if allow_pass else tuple(str(tier) for tier in allowed)
        rules = rules_prompt(self.persona, actions, lengths, status.topic, keeps_notes=True)
        shown = self._shown(window)
        request = DecisionRequest(
            system=persona_prompt(self.persona) + "\n\n" + rules,
            turns=(transcript_turn(self.persona, shown, status, self.own_lines, memory=self.memory, keeps_notes=True),),
            actions=actions,  # type: ignore[arg-type]
            max_lengths=lengths,
            time_left_s=self._time_left(lapses),
            allow_pass=allow_pass,
            memory_schema=MEMORY_SCHEMA,
            scene=scene_of(self.persona, shown, status, self.own_lines, self.memory),
        )
        if request.time_left_s is not None and request.time_left_s <= 0:
            _log.warning("persona=%s: the claim lapses before a model could answer; passing", self.persona.id)
            return False
        overtaking = Overtaking(self.persona.id, claim.tier, self.persona.id in status.priority, status.stale_tolerance)
        based_on = window[-1].seq if window else 0
        # What came since the turn began counts too: the arbiter counts from the message the answer is based on.
        if any([overtaking(m) for m in self.window if m.seq > based_on]):
            runtime.stats.given_back += 1
            _log.info("persona=%s: the conversation moved on while it claimed; no call", self.persona.id)
            return False
        # Tools to look things up are for saying something: a nod needs none, and its claim is short.
        tools = runtime.tools.specs if runtime.tools is not None and claim.tier is not Tier.AIZUCHI else ()
        async with runtime.platform.typing(self.channel_id):
            try:
                # The provider keeps to time_left_s itself; this only makes sure of it, whatever the provider (and
                # whatever the tools do).
                async with asyncio.timeout(None if request.time_left_s is None else request.time_left_s + 0.5):
                    result = await self._decide_unless_overtaken(request, overtaking, tools)
                if result is None:
                    runtime.stats.overtaken += 1
                    return False
            except TimeoutError:
                await self._provider_failed(LLMTimeout("no answer while the claim held"))
                return False
            except LLMBadOutput as error:
                runtime.stats.count_usage(error.usage)
                runtime.stats.wasted += 1
                await self._report_usage(error.usage)
                _log.warning("persona=%s: unusable model output: %s", self.persona.id, error)
                return False
            except LLMError as error:
                await self._provider_failed(error)
                return False
            await self._provider_answered(result.usage)
            decision = result.decision
            state = fit_state(decision.memory)
            # Given to the arbiter with the speech, or with the release when nothing is said (or it is refused).
            self._new_memory = None if state is None else wire.MemoryUpdate(seq=based_on, state=state)
            if decision.action == "pass":
                runtime.stats.passes += 1
                return False
            tier = Tier(decision.action)
            text = clean_reply(decision.text, self.persona.names, status.tiers[tier].max_length)
            # Not what was just said, nor one of its own recent lines (a model copies, and so does a script); a nod only
            # not its last nod again, nor an echo (see bots.language.text).
            if tier is Tier.AIZUCHI:
                # Its latest nod in the conversation the model was shown: the one its next nod must not be again.
                mine = (m.text for m in reversed(shown) if m.author_id == self.persona.id and m.tier is Tier.AIZUCHI)
                again = nod_repeats(text, last_nod=next(mine, None), answering=window[-1].text if window else None)
            else:
                again = repeats(text, [*(m.text for m in window), *self.own_lines])
            if not text or again:
                runtime.stats.wasted += 1
                _log.info("persona=%s: dropped a repeat or empty reply: %r", self.persona.id, text)
                return False
            return await self._speak(claim, tier, text, window[-1].seq if window else 0)

    def _shown(self, window: list[wire.MessageView]) -> list[wire.MessageView]:
        """What the model is shown of ``window``: every message its notes do not take in yet (the window holds at most
        ``config.window``), and at least the last ``config.recent`` for context."""
        seen = self._notes_seq
        unseen = len(window) if seen is None else sum(1 for message in window if message.seq > seen)
        shown = max(unseen, self.runtime.config.recent)
        return window[-shown:] if shown < len(window) else window

    async def _decide_unless_overtaken(
        self,
        request: DecisionRequest,
        overtakes: Callable[[wire.MessageView], bool],
        tools: tuple[ToolSpec, ...] = (),
    ) -> DecisionResult | None:
        """The model's decision; or None, the call stopped, when a message arrives that ``overtakes`` it: the
        arbiter would refuse the answer, so generating the rest of it would be spent for nothing."""
        self._overtaken = overtaken = asyncio.Event()
        self._overtakes = overtakes
        call = asyncio.ensure_future(self._decide(request, tools))
        stop = asyncio.ensure_future(overtaken.wait())
        try:
            await asyncio.wait((call, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._overtakes, self._overtaken = None, None
            stop.cancel()
            if not call.done():
                call.cancel()
            await asyncio.gather(call, stop, return_exceptions=True)
        if call.cancelled():
            return None
        # Finished, though perhaps overtaken at the same moment: then the arbiter refuses it, and it counts as wasted.
        return call.result()

    async def _decide(self, request: DecisionRequest, tools: tuple[ToolSpec, ...]) -> DecisionResult:
        """One forced decision; or, offered tools, a few rounds of tool calls and then the decision (each round an
        LLM request, its tokens counted and reported as it is answered)."""
        runtime = self.runtime
        if not tools or runtime.tools is None:
            runtime.stats.llm_requests += 1
            return await runtime.provider.decide(request)

        def counted() -> None:
            runtime.stats.llm_requests += 1

        return await decide_with_tools(
            runtime.provider,
            request,
            tools,
            runtime.tools.call,
            rounds=runtime.config.tool_rounds,
            on_request=counted,
            on_answer=self._provider_answered,
        )

    def _time_left(self, lapses: float | None) -> float | None:
        """Seconds the model may take: up to the claim's lapse (on this clock), less the margin for speaking and
        posting; None when the claim says no lapse."""
        if lapses is None:
            return None
        return round(lapses - self.runtime.config.speak_margin_s - self.runtime.clock(), 3)

    async def _speak(self, claim: wire.ClaimView, tier: Tier, text: str, based_on: int) -> bool:
        """Speak on the claim and post; whether the arbiter granted the message (a failed post is retracted). Once
        sent, the speech is seen through even if the persona is closed meanwhile (``close`` waits for it)."""
        self._speaking = speaking = asyncio.ensure_future(self._speak_and_post(claim, tier, text, based_on))
        return await asyncio.shield(speaking)

    async def _speak_and_post(self, claim: wire.ClaimView, tier: Tier, text: str, based_on: int) -> bool:
        try:
            return await self._speak_now(claim, tier, text, based_on)
        finally:
            self._speaking = None

    async def _speak_now(self, claim: wire.ClaimView, tier: Tier, text: str, based_on: int) -> bool:
        runtime = self.runtime
        await self._hear_what_was_said()  # said while the model wrote: the arbiter judges the speech with it
        said_before = runtime.platform.latest_said(self.channel_id)
        memory = self._new_memory
        request = wire.SpeakRequest(text=text, tier=tier, based_on_seq=based_on, memory=memory)
        result = await runtime.arbiter.speak(self.channel_id, claim.claim_id, request)
        if result.granted and memory is not None:
            self._new_memory, self.memory = None, memory  # stored with the message
        if not result.granted or result.message is None:
            runtime.stats.wasted += 1
            _log.info("persona=%s: speak refused (%s)", self.persona.id, result.reason)
            if result.reason is wire.RefusalReason.STALE:
                self.wake()
            return False
        self._held = None
        seq = result.message.seq
        if not self._in_order(seq, said_before):
            runtime.stats.wasted += 1
            _log.info(
                "persona=%s: someone spoke as message %d was granted; retracting it unposted", self.persona.id, seq
            )
            with contextlib.suppress(BotError):
                await runtime.arbiter.retract(self.channel_id, seq)
            self.wake()
            return True
        try:
            posted = await self._deliver(tier, text, seq)
        except PostFailed as error:
            runtime.stats.wasted += 1
            _log.warning("persona=%s: post failed (%s); retracting message %d", self.persona.id, error, seq)
            with contextlib.suppress(BotError):
                await runtime.arbiter.retract(self.channel_id, seq)
            # Refused for want of a permission: the floor opens for the others at once.
            await self._keep_standing(runtime.cannot_post(self.channel_id))
            return True  # granted: the answer was given, though the platform lost it
        runtime.stats.posted[str(tier)] += 1
        with contextlib.suppress(BotError):
            await runtime.arbiter.link(self.channel_id, seq, posted.platform_message_id)
        return True

    def _in_order(self, seq: int, said_before: int) -> bool:
        """Whether message ``seq``, just granted, may still be posted: every message a person said here that the
        account has seen since ``said_before`` was recorded before it. One the arbiter records later would come
        after it in the history, but before it in the channel: a question put to someone else, say, answered first by
        this persona."""
        seen = self.runtime.platform.latest_said(self.channel_id)
        if seen <= said_before:
            return True
        return any(
            m.seq < seq
            and m.author_kind is wire.AuthorKind.HUMAN
            and (said := m.platform_message_id) is not None
            and said.isdigit()
            and int(said) >= seen
            for m in self.window
        )

    async def _deliver(self, tier: Tier, text: str, seq: int) -> Posted:
        """Post the message; or, for a persona that nods with emoji, react to the message it answers."""
        platform = self.runtime.platform
        if tier is Tier.AIZUCHI and self.persona.react_with_emoji and is_emoji(text):
            others = (m for m in reversed(self.window) if m.author_id != self.persona.id)
            target = next((m.platform_message_id for m in others if m.platform_message_id), None)
            if target is not None and await platform.react(self.channel_id, target, text):
                return Posted(f"reaction-{target}-{seq}")
        return await platform.post(self.channel_id, text)

    async def _release(self, claim_id: str) -> None:
        """Give the claim back, with the notes the turn updated (if any). Once sent, the release is seen through even
        if the persona is stopped meanwhile (``close`` waits for it)."""
        self._held = None
        memory, self._new_memory = self._new_memory, None
        releasing = self._settle(self._give_back(claim_id, memory))
        try:
            await asyncio.shield(releasing)
        except asyncio.CancelledError:
            _log.info("persona=%s: stopped while giving claim %s back; the release goes on", self.persona.id, claim_id)
            raise

    def _settle(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``work`` (a claim or a release already sent) to its end whatever happens to the turn that sent it."""
        self._settling = settling = asyncio.ensure_future(work)
        settling.add_done_callback(self._settled)
        return settling

    def _settled(self, settling: asyncio.Future[None]) -> None:
        if self._settling is settling:
            self._settling = None

    async def _give_back_if_granted(self, sent: asyncio.Future[wire.ClaimResult]) -> None:
        try:
            result = await sent
        except BotError:
            return  # not granted, or no answer: a claim the arbiter granted unheard lapses at its time-to-live
        if result.granted and result.claim is not None:
            await self._give_back(result.claim.claim_id, None)

    async def _give_back(self, claim_id: str, memory: wire.MemoryUpdate | None) -> None:
        try:
            kept = await self._send_release(claim_id, memory)
        except BotError as error:
            if isinstance(error, ArbiterRejected) and error.code == "claim_closed":
                # Settled meanwhile (spoken, or lapsed at its time-to-live): nothing to give back.
                _log.info("persona=%s: claim %s was settled before its release: %s", self.persona.id, claim_id, error)
            else:
                # The claim lapses at its time-to-live anyway; the arbiter never keeps it.
                why = str(error) or type(error).__name__
                _log.warning("persona=%s: could not release claim %s: %s", self.persona.id, claim_id, why)
            return
        if kept is not None:
            self.memory = kept

    async def _send_release(self, claim_id: str, memory: wire.MemoryUpdate | None) -> wire.MemoryUpdate | None:
        """Release the claim with ``memory``; the notes the arbiter kept (None if it would not take them)."""
        try:
            await self.runtime.arbiter.release(self.channel_id, claim_id, memory)
        except ArbiterRejected as error:
            if memory is None or not (error.field or "").startswith("memory"):
                raise
            # Notes the arbiter will not take must not keep the claim: give it back without them. (Notes on a history
            # cleared meanwhile are no surprise: the clear was heard of after they were made.)
            log = _log.info if error.code == "history_cleared" else _log.warning
            log("persona=%s: notes refused (%s); releasing without them", self.persona.id, error)
            await self.runtime.arbiter.release(self.channel_id, claim_id)
            return None
        return memory

    def permissions_changed(self) -> None:
        """Its permissions here may have changed on the platform: look whether it can post, and tell the arbiter."""
        self.wake()

    async def _keep_standing(self, cannot_post: str | None) -> None:
        """Tell the arbiter when the persona cannot post here, and when it can again. One that cannot is given no
        floor, and hands back any it has: the others answer at once instead of waiting for an answer that cannot
        come."""
        if cannot_post != self._standing:
            await self._tell_standing(cannot_post)

    async def _tell_standing(self, cannot_post: str | None) -> None:
        try:
            await self.runtime.arbiter.stand(self.channel_id, cannot_post)
            self._standing = cannot_post
        except BotError as error:
            _log.warning(
                "persona=%s channel=%s: could not tell the arbiter whether it can post: %s",
                self.persona.id,
                self.channel_id,
                error,
            )

    async def _provider_failed(self, error: LLMError) -> None:
        """Back off, or stop calling for good when the key was refused; what the failed call spent (if the API
        answered at all) still counts."""
        self.runtime.stats.count_usage(error.usage)
        if isinstance(error, LLMAuthError):
            await self.runtime.stop_calling(error)
        else:
            self.runtime.provider_failed(error)
        await self._report_usage(error.usage)

    async def _provider_answered(self, usage: Usage) -> None:
        self.runtime.provider_ok()
        self.runtime.stats.count_usage(usage)
        await self._report_usage(usage)

    async def _report_usage(self, usage: Usage | None) -> None:
        if usage is None or (usage.prompt_tokens == 0 and usage.completion_tokens == 0):
            return
        report = wire.UsageReport(prompt_tokens=usage.prompt_tokens, completion_tokens=usage.completion_tokens)
        try:
            await self.runtime.arbiter.report_usage(self.channel_id, report)
        except BotError as error:
            _log.warning("persona=%s: could not report usage: %s", self.persona.id, error)
