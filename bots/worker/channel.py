"""One persona in one channel, as I/O around ``bots.worker.step``: it feeds the step the channel's frames, its timers
and the answers to what it asked, and carries out the actions the step returns.

A worker in a quiet channel holds no task: one runs the looks while there is something to look at, and ends when
there is not. Actions that take time run one after another in that task; a speech once sent, and a release, are
seen through even if the worker is closed meanwhile (``close`` waits for them).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, assert_never, get_args

from arbiter import contract as wire
from bots.errors import BotError
from bots.worker import looking, releasing, turn
from bots.worker.actions import (
    Arrived,
    AskStatus,
    CancelLook,
    Claim,
    Count,
    CountPost,
    Decide,
    Instant,
    Link,
    Log,
    LookPlanned,
    Pause,
    Post,
    Release,
    ReportPlan,
    Retract,
    ScheduleLook,
    Speak,
    StartLooking,
    StopWriting,
    TellStanding,
)
from bots.worker.events import (
    CanPost,
    ClaimAnswered,
    Close,
    Dealt,
    Frame,
    Free,
    Opened,
    PauseOver,
    Released,
    StatusRead,
    Stood,
    Stopped,
    TimerFired,
    TurnFailed,
    Wake,
)
from bots.worker.following import ignores
from bots.worker.state import WorkerState
from bots.worker.step import reading_pause, step

if TYPE_CHECKING:
    from collections.abc import Coroutine
    from typing import Any

    from bots.persona import Persona
    from bots.runtime import PersonaRuntime
    from bots.worker.actions import Awaited, Carried
    from bots.worker.events import Event
    from bots.worker.step import PauseRule

__all__ = ("ChannelWorker",)

_log = logging.getLogger(__name__)

# The instant actions' classes: a set's look-up, where isinstance of the Instant union tries each in turn.
_INSTANT: frozenset[type] = frozenset(get_args(Instant))
# How much history a worker reads on arrival: its window, and its own recent lines among them.
_ARRIVAL_READ = 100


class ChannelWorker:
    """One persona in one channel: follows the channel's events (its share of the process's multiplexed stream, as
    a ``bots.follower.ChannelListener``) and takes turns, as its ``state`` and ``bots.worker.step`` decide."""

    # Slots: a persona process keeps one worker per persona and channel, six thousand for six personas in a thousand.
    __slots__ = (
        "_arrival",
        "_overtaken",
        "_settling",
        "_speaking",
        "_task",
        "_timer",
        "channel_id",
        "runtime",
        "seat",
        "state",
    )

    def __init__(self, runtime: PersonaRuntime, channel_id: str) -> None:
        self.runtime = runtime
        self.channel_id = channel_id
        self.seat = runtime.seat(self.pause_rule())
        self.state = WorkerState()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._arrival: asyncio.Event | None = asyncio.Event()  # set (and let go) once the recent history is in
        self._speaking: asyncio.Future[None] | None = None  # a speech sent, until it is posted (or retracted)
        # A claim or a release sent, until the arbiter has answered it and any claim it granted is given back.
        self._settling: asyncio.Future[None] | None = None
        self._overtaken: asyncio.Event | None = None  # stops the model's call under way

    def pause_rule(self) -> PauseRule:
        """How long the persona pauses before a look (a subclass may pause otherwise)."""
        return reading_pause

    # --- what it knows ---------------------------------------------------------------------------------------

    @property
    def persona(self) -> Persona:
        return self.runtime.persona

    @property
    def window(self) -> tuple[wire.MessageView, ...]:
        return self.state.window

    @property
    def last_seq(self) -> int:
        return self.state.last_seq

    @property
    def answered(self) -> int:
        """The newest seq by someone else this persona has dealt with."""
        return self.state.answered

    @property
    def memory(self) -> wire.MemoryUpdate | None:
        """Its notes on this channel (its dialogue state) as the arbiter keeps them."""
        return self.state.memory

    @property
    def own_lines(self) -> list[str]:
        """What this persona said here lately, oldest first, as it reads now (after any edit)."""
        return [message.text for message in self.state.own]

    @property
    def idle(self) -> bool:
        """Nothing under way and nothing scheduled: no turn running, no wake-up and no retry pending."""
        return self.state.idle

    # --- its life --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self.runtime.follower.follow(self.channel_id, self.persona.id, self)

    async def ready(self) -> None:
        """Wait until the worker has read the channel's recent history and follows its events."""
        if self._arrival is not None:
            await self._arrival.wait()

    def wake(self) -> None:
        """Something to look at: a look after the persona's pause (the one under way, if any, looks again after)."""
        self.feed(Wake())

    def permissions_changed(self) -> None:
        """Its permissions here may have changed on the platform: look whether it can post, and tell the arbiter."""
        self.wake()

    def opened(self, seq: int) -> None:
        """Its channel was opened for it when the history ended at ``seq``: what comes after is to answer, even if
        the persona arrives after it was said."""
        self.feed(Opened(seq))

    def dealt_with(self, seq: int) -> None:
        """A turn taken some other way dealt with everything up to ``seq``."""
        self.feed(Dealt(seq))

    async def close(self) -> None:
        self.feed(Close())
        self.runtime.follower.leave(self.channel_id, self.persona.id)
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
        await self._run(self.feed(Stopped()))

    # --- following the channel (``bots.follower.ChannelListener``) -------------------------------------------

    def subscription(self) -> wire.Subscribe:
        """Where its channel's stream starts: on arrival, the recent history (context, not cues); after that, the
        message after the last it saw, so a reconnection loses nothing and repeats nothing."""
        if self.state.arrived or self.state.last_seq:
            return wire.Subscribe(channel=self.channel_id, after=self.state.last_seq)
        return wire.Subscribe(channel=self.channel_id, recent=_ARRIVAL_READ)

    def on_refused(self, detail: str) -> None:
        _log.warning("persona=%s channel=%s: stream refused (%s); leaving", self.persona.id, self.channel_id, detail)

    def on_frame(self, frame: wire.ArbiterEvent) -> None:
        if ignores(self.state, frame, self.seat):
            return  # its step would change nothing and do nothing: none is made
        self.feed(Frame(frame))

    # --- stepping --------------------------------------------------------------------------------------------

    def feed(self, event: Event) -> list[Awaited]:
        """Step ``event``: the instant actions are done at once; those that take time are handed back, in order."""
        self.state, actions = step(self.state, event, self.runtime.clock(), self.seat)
        awaited: list[Awaited] = []
        for action in actions:
            # Told by class, not narrowed for the type checker: no call to typing.cast for each action.
            if type(action) in _INSTANT:
                self._instant(action)  # type: ignore[arg-type]
            else:
                awaited.append(action)  # type: ignore[arg-type]
        return awaited

    def _instant(self, action: Instant) -> None:
        # The most frequent first: each case is an isinstance check (per person's message, some 30 counts, 25 log
        # lines, 23 plans reported, 23 looks started, 17 scheduled).
        match action:
            case Count(counter=counter):
                stats = self.runtime.stats
                setattr(stats, counter, getattr(stats, counter) + 1)
            case Log(level=level, message=message, args=args):
                if _log.isEnabledFor(level):
                    _log.log(level, "persona=%s channel=%s: " + message, self.persona.id, self.channel_id, *args)
            case ReportPlan(seq=seq, tier=tier, due=due, pause=pause):
                if self.runtime.on_decision is not None:
                    self.runtime.on_decision(LookPlanned(self.channel_id, seq, tier, due, pause))
            case StartLooking():
                name = f"turns {self.persona.id}@{self.channel_id}"
                self._task = asyncio.create_task(self._looks(), name=name)
            case ScheduleLook(seconds=seconds):
                self._cancel_timer()
                self._timer = asyncio.get_running_loop().call_later(max(0.05, seconds), self._timer_fired)
            case CancelLook():
                self._cancel_timer()
            case Arrived():
                if self._arrival is not None:
                    self._arrival.set()
                    self._arrival = None
                self.feed(CanPost(self.runtime.cannot_post(self.channel_id)))
            case CountPost(tier=tier):
                self.runtime.stats.posted[str(tier)] += 1
            case StopWriting():
                if self._overtaken is None:
                    self._overtaken = asyncio.Event()  # stopped before the call began: it will not begin
                self._overtaken.set()
            case _:
                assert_never(action)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timer_fired(self) -> None:
        self._timer = None
        self.feed(TimerFired())

    # --- the looks ------------------------------------------------------------------------------------------

    # A look under way holds its coroutines' frames through its pause, and a persona process has one under way in
    # about a third of its workers: no frame more than it needs (``_looks`` runs each look itself, ``_run`` sleeps
    # through the pause itself), nor a deque (a block of 64 slots, some 770 bytes) for its few actions.

    async def _looks(self) -> None:
        try:
            while todo := self.feed(Free()):
                try:
                    await self._run(todo)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    await self._failed(error)
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _failed(self, error: Exception) -> None:
        self._skipped(error)
        try:
            await self._run(self.feed(TurnFailed()))  # what it holds is given back
        except asyncio.CancelledError:
            raise
        except Exception as again:
            self._skipped(again)

    def _skipped(self, error: Exception) -> None:
        if isinstance(error, BotError):
            _log.warning("persona=%s channel=%s: turn skipped: %s", self.persona.id, self.channel_id, error)
        else:
            _log.error("persona=%s channel=%s: turn failed", self.persona.id, self.channel_id, exc_info=error)

    async def _run(self, todo: list[Awaited], *, seeing_through: bool = False) -> None:
        """Carry out ``todo`` (a list of its own, used up) in order, and what the step asks for as each answers."""
        runtime = self.runtime
        while todo:
            action = todo.pop(0)
            if isinstance(action, Speak) and not seeing_through:
                # Once sent, the speech is seen through even if the worker is closed meanwhile: posted or retracted,
                # the claim given back if refused.
                self._speaking = speaking = asyncio.ensure_future(self._see_through([action, *todo]))
                await asyncio.shield(speaking)
                return
            event: Event | None
            if isinstance(action, Pause):
                await runtime.sleep(action.seconds)
                event = PauseOver(runtime.cannot_post(self.channel_id), runtime.backing_off())
            else:
                event = await self._carry_out(action)
            if event is not None:
                todo.extend(self.feed(event))

    async def _see_through(self, todo: list[Awaited]) -> None:
        try:
            await self._run(todo, seeing_through=True)
        finally:
            self._speaking = None

    async def _carry_out(self, action: Carried) -> Event | None:
        runtime, channel_id = self.runtime, self.channel_id
        match action:
            case TellStanding(cannot_post=cannot_post):
                return Stood(cannot_post, await looking.tell_standing(runtime, channel_id, cannot_post))
            case AskStatus():
                return await self.look()
            case Claim(request=request):
                return await self._claim(request)
            case Decide():
                overtaken = self._overtaken = self._overtaken or asyncio.Event()
                try:
                    return await turn.decide(runtime, channel_id, action, overtaken)
                finally:
                    self._overtaken = None
            case Speak():
                return await turn.speak(runtime, channel_id, action, self._said_heard)
            case Post():
                return await turn.post(runtime, channel_id, action)
            case Retract(seq=seq):
                await turn.retract(runtime, channel_id, seq)
            case Link(seq=seq, platform_message_id=posted):
                await turn.link(runtime, channel_id, seq, posted)
            case Release(claim_id=claim_id, memory=memory):
                await self._release(claim_id, memory)
            case _:
                assert_never(action)
        return None

    def _said_heard(self) -> int:
        return self.state.said_heard

    async def look(self) -> Event | None:
        """A look past its checks: the status to plan from (a subclass may take its turn otherwise, and answer
        None)."""
        await looking.hear_what_was_said(self.runtime, self.channel_id, self._said_heard)
        status = await looking.current_status(self.runtime, self.channel_id)
        return StatusRead(status, self.runtime.clock())

    async def _claim(self, request: wire.ClaimRequest) -> ClaimAnswered:
        return ClaimAnswered(await releasing.claim(self.runtime, self.channel_id, request, self._settle))

    async def _release(self, claim_id: str, memory: wire.MemoryUpdate | None) -> None:
        async def give_back() -> None:
            self.feed(Released(await releasing.give_back(self.runtime, self.channel_id, claim_id, memory)))

        await releasing.seen_through(self.runtime, claim_id, self._settle(give_back()))

    def _settle(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """Run ``work`` (a claim or a release already sent) to its end whatever happens to the turn that sent it."""
        self._settling = settling = asyncio.ensure_future(work)
        settling.add_done_callback(self._settled)
        return settling

    def _settled(self, settling: asyncio.Future[None]) -> None:
        if self._settling is settling:
            self._settling = None
