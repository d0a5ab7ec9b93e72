"""A worker's decisions as one pure function: ``step(state, event, now, seat)`` gives the next state and the actions
to carry out. Everything a persona decides in a channel - when to look, what to claim, whether the model is stopped,
what it says, when it gives a claim back - is decided here, from values: time comes as ``now``, chance from the
seat's ``rng``; no I/O. ``bots.worker.channel`` feeds it events and carries its actions out.

Invariants kept here: no model call unless a claim was granted first and the platform would take the post; a claim
is always spoken or given back (``Release``), also when a turn fails and when the worker stops; a message the
arbiter granted is posted or retracted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, assert_never

from arbiter import contract as wire
from arbiter.contract import Tier
from bots.language.text import clean_reply, is_emoji, nod_repeats, repeats
from bots.memory import fit_state
from bots.planner import anchor, plan_turn, refused_outright
from bots.prompt import OWN_LINES
from bots.worker.actions import (
    AskStatus,
    CancelLook,
    Claim,
    Count,
    CountPost,
    Decide,
    Link,
    Log,
    Pause,
    Post,
    Release,
    ReportPlan,
    Retract,
    ScheduleLook,
    Speak,
    TellStanding,
)
from bots.worker.events import (
    Answer,
    CanPost,
    ClaimAnswered,
    Close,
    Dealt,
    Decided,
    Failed,
    Frame,
    Free,
    Opened,
    Overtaken,
    PauseOver,
    Posted,
    PostFailed,
    Released,
    SawBeforePosting,
    SpeakAnswered,
    StatusRead,
    Stood,
    Stopped,
    TimerFired,
    TurnFailed,
    Unusable,
    Wake,
)
from bots.worker.following import on_frame, wake
from bots.worker.overtaking import Overtaking
from bots.worker.state import Turn, WorkerState, kept_notes

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Sequence
    from typing import TypeAlias

    from bots.persona import Persona
    from bots.worker.actions import Action
    from bots.worker.config import RuntimeConfig
    from bots.worker.events import Event

    # How long a persona pauses before a look, from what it read.
    PauseRule: TypeAlias = Callable[[Persona, RuntimeConfig, Sequence[wire.MessageView], random.Random], float]

__all__ = ("Seat", "reading_pause", "step")

Stepped = tuple[WorkerState, list["Action"]]

# Refusals after which a persona looks again soon: another's claim took what it planned on (the pool, the floor),
# and something else may be open.
_REPLANNED = (wire.RefusalReason.INSUFFICIENT, wire.RefusalReason.PRIORITY)


def reading_pause(
    persona: Persona, config: RuntimeConfig, window: Sequence[wire.MessageView], rng: random.Random
) -> float:
    """A person's moment of reading before replying: shorter for talkative, extraverted personas, short when asked."""
    latest = window[-1] if window else None
    if latest is not None and persona.id in latest.addressed:
        return 0.2 * config.base_delay_s
    eagerness = (persona.talkativeness + persona.big_five.extraversion) / 2
    return config.base_delay_s * (1.5 - eagerness) * rng.uniform(0.6, 1.4)


@dataclass(frozen=True, slots=True)
class Seat:
    """Who takes turns, and how: what a step reads besides the state (chance included). One for all the channels of
    a persona (``PersonaRuntime.seat``): it names none."""

    persona: Persona
    config: RuntimeConfig
    rng: random.Random
    pause: PauseRule = reading_pause


def step(state: WorkerState, event: Event, now: float, seat: Seat) -> Stepped:
    """The state after ``event`` at ``now`` (the runtime's clock), and what to do about it, in order."""
    match event:
        case Frame(frame=frame):
            return on_frame(state, frame, seat)
        case CanPost(cannot_post=cannot_post):
            return wake(state) if cannot_post is not None else (state, [])
        case Wake():
            return wake(state)
        case Opened(seq=seq):
            return (state, []) if state.arrived else (state._replace(cues_after=seq), [])
        case TimerFired():
            return wake(state._replace(timer=False))
        case Free():
            return _next_look(state, now, seat)
        case PauseOver(cannot_post=cannot_post, backoff=backoff):
            return _pause_over(state, cannot_post, backoff, seat)
        case Stood(cannot_post=cannot_post, told=told):
            if told:
                state = state._replace(standing=cannot_post)
            if state.turn is not None and not state.turn.begun:
                return _check(state, state.turn, seat, woken=state.woken)  # the look began by telling it
            return state, []
        case StatusRead(status=status, read_at=read_at):
            return _plan(state, status, read_at, seat)
        case ClaimAnswered(result=result):
            return _claimed(state, result, now, seat)
        case Decided(outcome=outcome):
            return _decided(state._replace(writing=None), outcome, seat)
        case SpeakAnswered(result=result, said_before=said_before, seen=seen):
            return _spoken(state, result, said_before, seen, seat)
        case SawBeforePosting(post=post, seen=seen):
            return _post_in_order(state, replace(post, seen=seen), post.seen)
        case Posted(tier=tier, seq=seq, platform_message_id=posted):
            return state, [CountPost(tier), Link(seq, posted)]
        case PostFailed(seq=seq, error=error, cannot_post=cannot_post):
            actions: list[Action] = [
                Count("wasted"),
                Log(logging.WARNING, "post failed (%s); retracting message %d", (error, seq)),
                Retract(seq),
            ]
            if cannot_post != state.standing:
                # Refused for want of a permission: the floor opens for the others at once.
                actions.append(TellStanding(cannot_post))
            return state, actions
        case Released(kept=kept):
            return (state, []) if kept is None else (state._replace(notes=kept_notes(kept)), [])
        case TurnFailed():
            turn = state.turn
            failed = state._replace(writing=None, turn=None if turn is None else turn._replace(failed=True))
            return _give_back(failed, [])
        case Dealt(seq=seq):
            return state._replace(answered=seq), []
        case Close():
            closed = state._replace(closed=True, timer=False)
            return closed, [CancelLook()] if state.timer else []
        case Stopped():
            return _give_back(state, [])
        case _:
            assert_never(event)


# --- looking -----------------------------------------------------------------------------------------------


def _retry_in(state: WorkerState, seconds: float) -> Stepped:
    """Look again after ``seconds``, instead of any look scheduled before."""
    if state.closed:
        return state, []
    return state._replace(timer=True), [ScheduleLook(seconds)]


def _reaction(seat: Seat) -> float:
    """How long after a wait ends the persona notices: the eager sooner, and never all at the same moment."""
    persona = seat.persona
    eagerness = (persona.talkativeness + persona.big_five.extraversion) / 2
    return seat.config.reaction_s * (1.5 - eagerness) * seat.rng.random()


def _next_look(state: WorkerState, now: float, seat: Seat) -> Stepped:
    """The look before (if any) is over: what came of it, and the next look if something woke the worker."""
    actions: list[Action] = []
    turn = state.turn
    if turn is not None and turn.begun:
        if not turn.failed:
            state, actions = _after_turn(state, turn)  # which reads nothing of the look, ended below
        actions.append(Count("looks"))
    # The look before ends with the one state made here (a step for each look, some 23 per person's message).
    if state.closed or not state.woken:
        return state._replace(turn=None, looking=False), actions
    pause = seat.pause(seat.persona, seat.config, state.window, seat.rng)
    return state._replace(turn=Turn(due=now + pause, pause=pause)), [*actions, Pause(pause)]


def _after_turn(state: WorkerState, turn: Turn) -> Stepped:
    if turn.addressed_by is not None and not turn.spoke and not turn.second_try:
        # Asked, and nothing came of it (a pass, a failure, an unusable answer): one more look, with no pass
        # offered. Its release counted as a try; the arbiter opens the floor after a second.
        return _retry_in(state._replace(must_answer=turn.addressed_by), 0.0)
    if turn.second_try:
        return state._replace(must_answer=None), []
    return state, []


def _pause_over(state: WorkerState, cannot_post: str | None, backoff: float, seat: Seat) -> Stepped:
    turn = state.turn
    assert turn is not None, "a pause is always a look's"
    turn = turn._replace(cannot_post=cannot_post, backoff=backoff)
    if cannot_post != state.standing:
        # The arbiter learns it before anyone asks this persona something here; and learns it can again.
        return state._replace(woken=False, turn=turn), [TellStanding(cannot_post)]
    return _check(state, turn, seat, woken=False)


def _pending(state: WorkerState, persona_id: str) -> bool:
    """Is there a message from someone else this persona has not dealt with yet (or a second look due)?"""
    if state.second_look is not None and state.second_look == state.last_seq:
        return True
    if state.must_answer is not None:
        return True
    return any(m.seq > state.answered and m.author_id != persona_id for m in state.window)


def _check(state: WorkerState, turn: Turn, seat: Seat, *, woken: bool) -> Stepped:
    """Whether the look goes on to a turn: the persona can post, something waits for it, its provider is not
    backing off. ``turn`` and ``woken`` are the look and the wake-up as they now are, which ``state`` takes with the
    rest (one new state for the lot, as a look takes this step each time)."""
    if turn.cannot_post is not None:
        # The platform said why (once): nothing to do till then.
        return state._replace(answered=state.last_seq, woken=woken, turn=turn), []
    if not _pending(state, seat.persona.id):
        return state._replace(woken=woken, turn=turn), []
    if turn.backoff > 0:
        return _retry_in(state._replace(woken=woken, turn=turn), turn.backoff)
    begun = state._replace(timer=False, woken=woken, turn=turn._replace(begun=True))
    # This look supersedes any look scheduled before.
    return begun, [CancelLook(), AskStatus()] if state.timer else [AskStatus()]


def _plan(state: WorkerState, status: wire.StatusView, read_at: float, seat: Seat) -> Stepped:
    turn = state.turn
    assert turn is not None
    persona = seat.persona
    window = state.window
    newest = window[-1].seq if window else 0
    thread = anchor(window).seq if window else 0
    intent = state.intent[1] if state.intent is not None and state.intent[0] == thread else None
    # Not asked (any more): answered, given up, or the floor's time passed: a look like any other.
    must_answer = state.must_answer if persona.id in status.priority else None
    second_look = state.second_look == newest
    plan = plan_turn(persona, status, window, seat.rng, intent=intent, second_look=second_look)
    actions: list[Action] = []
    if status.you is not None and status.you.cannot_post is not None:
        # The arbiter still thinks it cannot post here (it was told so before the persona restarted): it can.
        actions.append(TellStanding(None))
    actions += [
        ReportPlan(newest, plan.tier, turn.due, turn.pause),
        Log(
            logging.DEBUG,
            "seq=%d level=%d priority=%s held=%s plan=%s",
            (newest, status.level, status.priority, status.claims_held, plan),
        ),
    ]
    blocked = None if refused_outright(status) is None else state.answered if state.blocked is None else state.blocked
    # What comes of the plan, in one new state (a look plans each time, some 23 per person's message): a claim, a
    # retry, or nothing to do about the messages up to the newest; and after a silence, a second look.
    settled = plan.tier is None and plan.retry_after is None
    # A silence is a cue too: look once more after a pause, if nobody else spoke meanwhile.
    look_again = settled and plan.quiet and not second_look
    notes = not state.memory_read  # its notes come with its first granted claim here
    state = state._replace(
        must_answer=must_answer,
        intent=(thread, plan.wanted) if plan.wanted is not None else None,
        floor_wait=plan.floor,
        second_look=newest if look_again else None,
        blocked=blocked,
        answered=newest if settled else state.answered,
        turn=turn._replace(
            status=status,
            read_at=read_at,
            window=window,
            claimed=plan.tier,
            asked_notes=turn.asked_notes if plan.tier is None else notes,
        ),
    )
    if plan.tier is None:
        if plan.retry_after is not None:
            state, later = _retry_in(state, plan.retry_after + _reaction(seat))
            return state, actions + later
        if look_again:
            state, later = _retry_in(state, seat.config.base_delay_s * seat.rng.uniform(2.0, 4.0))
            actions += later
        return state, actions
    own_lines = 0 if state.own_read else OWN_LINES
    request = wire.ClaimRequest(tier=plan.tier, based_on_seq=newest, notes=notes, own_lines=own_lines)
    return state, [*actions, Claim(request)]


# --- the claim ---------------------------------------------------------------------------------------------


def _take_notes(state: WorkerState, found: wire.MemoryView | None) -> WorkerState:
    """Its notes here as the arbiter had them when it granted its first claim (not read on arrival: a persona in a
    thousand channels would make a thousand reads at once); the memory events keep them current after that, and one
    of those that came meanwhile is not taken back by an older read."""
    notes = state.notes
    if notes is None or (found is not None and found.seq >= notes[0]):
        notes = None if found is None else kept_notes(wire.MemoryUpdate(seq=found.seq, state=found.state))
    return state._replace(notes=notes, memory_read=True)


def _take_own_lines(state: WorkerState, said: list[wire.MessageView]) -> WorkerState:
    """Its own last lines as the arbiter had them when it granted its first claim, with those heard since."""
    known = {message.seq: message for message in said}
    known.update((message.seq, message) for message in state.own)  # heard on the stream: as fresh or fresher
    return state._replace(own=tuple(known[seq] for seq in sorted(known))[-OWN_LINES:], own_read=True)


def _addressing(persona_id: str, window: Sequence[wire.MessageView]) -> int | None:
    """The seq of the newest message in ``window`` that addressed ``persona_id``."""
    return next((m.seq for m in reversed(window) if persona_id in m.addressed), None)


def _claimed(state: WorkerState, result: wire.ClaimResult, now: float, seat: Seat) -> Stepped:
    turn = state.turn
    assert turn is not None and turn.status is not None and turn.claimed is not None
    actions: list[Action] = [Count("claims")]
    persona_id = seat.persona.id
    if result.granted and result.claim is not None:
        if turn.asked_notes and not state.memory_read:
            state = _take_notes(state, result.memory)
        if result.own_lines is not None and not state.own_read:
            state = _take_own_lines(state, result.own_lines)
        claim, status = result.claim, turn.status
        # The claim lapses at expires_at on the arbiter's clock, which read status.now about when this one read read_at.
        lapses = None if claim.expires_at is None else turn.read_at + claim.expires_at - status.now
        addressed_by = _addressing(persona_id, turn.window) if persona_id in status.priority else None
        second_try = addressed_by is not None and state.must_answer == addressed_by
        turn = turn._replace(claim=claim, addressed_by=addressed_by, second_try=second_try)
        state = state._replace(answered=turn.newest, held=claim.claim_id, turn=turn)
        return _generate(state, turn, lapses, seat, now=now, actions=actions)
    tier = turn.claimed
    assert tier is not None
    actions += [Count("refused_claims"), Log(logging.DEBUG, "claim of %s refused: %s", (tier, result.reason))]
    if result.reason is wire.RefusalReason.NODDED and tier is not Tier.AIZUCHI:
        thread = anchor(turn.window).seq if turn.window else 0
        state = state._replace(intent=(thread, tier))  # someone nods first; then it says what it meant to
    later: list[Action] = []
    if result.reason is wire.RefusalReason.STALE:
        state, later = wake(state)  # look again with fresh context
    elif result.reason in _REPLANNED and state.replanned != turn.newest:
        # Another's claim took what it planned on since it read its status (the pool drained, the floor taken): it
        # looks once more, which may find a cheaper tier open, or say how long to wait.
        state, later = wake(state._replace(replanned=turn.newest))
    elif result.retry_after is not None:
        state, later = _retry_in(state, result.retry_after + _reaction(seat))
    # Otherwise (the idle cap, a pause, a mute) only a new message can change things: wait for one.
    return state, actions + later


def _shown(
    state: WorkerState, window: tuple[wire.MessageView, ...], config: RuntimeConfig
) -> tuple[wire.MessageView, ...]:
    """What the model is shown of ``window``: every message its notes do not take in yet (the window holds at most
    ``config.window``), and at least the last ``config.recent`` for context."""
    seen = None if state.notes is None else state.notes[0]
    unseen = len(window) if seen is None else sum(1 for message in window if message.seq > seen)
    shown = max(unseen, config.recent)
    return window[-shown:] if shown < len(window) else window


def _give_back(state: WorkerState, actions: list[Action]) -> Stepped:
    """Give the claim held back, with the notes the turn updated (if any)."""
    if state.held is None:
        return state, actions
    return state._replace(held=None, new_memory=None), [*actions, Release(state.held, state.new_memory)]


def _generate(
    state: WorkerState, turn: Turn, lapses: float | None, seat: Seat, *, now: float, actions: list[Action]
) -> Stepped:
    """One model call on the claim, unless the claim lapses first or the conversation has moved on already."""
    claim, status, persona = turn.claim, turn.status, seat.persona
    assert claim is not None and status is not None
    # A nod is claimed as a nod: a claim for a remark (or a long one) says something, or passes. A nod from it would
    # have been planned without the one-nod-per-message check, and be refused for it.
    allowed = (
        (Tier.AIZUCHI,)
        if claim.tier is Tier.AIZUCHI
        else tuple(tier for tier in Tier if Tier.AIZUCHI.rank < tier.rank <= claim.tier.rank)
    )
    lengths = {str(tier): status.tiers[tier].max_length for tier in allowed}
    allow_pass = not turn.second_try
    moves = ("pass", *(str(tier) for tier in allowed)) if allow_pass else tuple(str(tier) for tier in allowed)
    # Seconds the model may take: up to the claim's lapse, less the margin for speaking and posting.
    time_left = None if lapses is None else round(lapses - seat.config.speak_margin_s - now, 3)
    if time_left is not None and time_left <= 0:
        actions.append(Log(logging.WARNING, "the claim lapses before a model could answer; passing"))
        return _give_back(state, actions)
    overtaking = Overtaking.from_status(persona.id, claim.tier, status)
    # What came since the turn began counts too: the arbiter counts from the message the answer is based on.
    overtaking = overtaking.after_all(m for m in state.window if m.seq > turn.newest)
    if overtaking.overtaken:
        actions += [Count("given_back"), Log(logging.INFO, "the conversation moved on while it claimed; no call")]
        return _give_back(state, actions)
    shown = _shown(state, turn.window, seat.config)
    own_lines = tuple(message.text for message in state.own)
    decide = Decide(status, claim, shown, moves, lengths, time_left, allow_pass, state.memory, own_lines)
    return state._replace(writing=overtaking, turn=turn._replace(shown=shown)), [*actions, decide]


# --- the decision, the speech, the post --------------------------------------------------------------------


def _decided(state: WorkerState, outcome: Overtaken | Failed | Unusable | Answer, seat: Seat) -> Stepped:
    turn = state.turn
    assert turn is not None and turn.status is not None and turn.claim is not None
    match outcome:
        case Overtaken():
            return _give_back(state, [Count("overtaken")])
        case Failed():
            return _give_back(state, [])
        case Unusable():
            return _give_back(state, [Count("wasted")])
        case Answer(decision=decision):
            pass
        case _:
            assert_never(outcome)
    persona, window = seat.persona, turn.window
    based_on = turn.newest
    fitted = fit_state(decision.memory)
    # Given to the arbiter with the speech, or with the release when nothing is said (or it is refused).
    state = state._replace(new_memory=None if fitted is None else wire.MemoryUpdate(seq=based_on, state=fitted))
    if decision.action == "pass":
        return _give_back(state, [Count("passes")])
    tier = Tier(decision.action)
    text = clean_reply(decision.text, persona.names, turn.status.tiers[tier].max_length)
    # Not what was just said, nor one of its own recent lines (a model copies, and so does a script); a nod only not
    # its last nod again, nor an echo (see bots.language.text).
    if tier is Tier.AIZUCHI:
        # Its latest nod in the conversation the model was shown: the one its next nod must not be again.
        mine = (m.text for m in reversed(turn.shown) if m.author_id == persona.id and m.tier is Tier.AIZUCHI)
        again = nod_repeats(text, last_nod=next(mine, None), answering=window[-1].text if window else None)
    else:
        again = repeats(text, [*(m.text for m in window), *(m.text for m in state.own)])
    if not text or again:
        return _give_back(state, [Count("wasted"), Log(logging.INFO, "dropped a repeat or empty reply: %r", (text,))])
    state = state._replace(turn=turn._replace(speech=(tier, text)))
    return state, [Speak(turn.claim.claim_id, tier, text, based_on, state.new_memory)]


def _in_order(state: WorkerState, seq: int, said_before: int, seen: int) -> bool:
    """Whether message ``seq``, just granted, may still be posted: every message a person said here that the account
    has seen since ``said_before`` was recorded before it. One the arbiter records later would come after it in the
    history, but before it in the channel: a question put to someone else, say, answered first by this persona."""
    if seen <= said_before:
        return True
    return any(
        m.seq < seq
        and m.author_kind is wire.AuthorKind.HUMAN
        and (said := m.platform_message_id) is not None
        and said.isdigit()
        and int(said) >= seen
        for m in state.window
    )


def _react_to(state: WorkerState, tier: Tier, text: str, seat: Seat) -> str | None:
    """The message a persona that nods with emoji reacts to instead of posting its nod: a Unicode emoji, or one of
    its own by name (the platform posts it as text if it cannot react with it)."""
    persona = seat.persona
    if tier is not Tier.AIZUCHI or not persona.react_with_emoji:
        return None
    if not is_emoji(text) and text.strip() not in persona.emoji_nods:
        return None
    others = (m for m in reversed(state.window) if m.author_id != seat.persona.id)
    return next((m.platform_message_id for m in others if m.platform_message_id), None)


def _spoken(state: WorkerState, result: wire.SpeakResult, said_before: int, seen: int, seat: Seat) -> Stepped:
    turn = state.turn
    assert turn is not None and turn.speech is not None
    memory = state.new_memory
    if result.granted and memory is not None:
        state = state._replace(new_memory=None, notes=kept_notes(memory))  # stored with the message
    if not result.granted or result.message is None:
        actions: list[Action] = [Count("wasted"), Log(logging.INFO, "speak refused (%s)", (result.reason,))]
        if result.reason is wire.RefusalReason.STALE:
            state, woken = wake(state)
            actions += woken
        return _give_back(state, actions)
    state = state._replace(held=None, turn=turn._replace(spoke=True))
    seq = result.message.seq
    tier, text = turn.speech
    return _post_in_order(state, Post(tier, text, seq, _react_to(state, tier, text, seat), seen), said_before)


def _post_in_order(state: WorkerState, post: Post, said_before: int) -> Stepped:
    """``post``, if nothing the account saw said since ``said_before`` (up to ``post.seen``) would come after it in
    the history; else the message is retracted unposted."""
    if not _in_order(state, post.seq, said_before, post.seen):
        why = "someone spoke as message %d was granted; retracting it unposted"
        state, woken = wake(state)
        return state, [Count("wasted"), Log(logging.INFO, why, (post.seq,)), Retract(post.seq), *woken]
    return state, [post]
