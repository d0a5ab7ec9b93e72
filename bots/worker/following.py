"""A worker following its channel: the frames of the stream, as pure steps. What was said joins its window (its own
lines among its own), edits and deletions show in it, its notes stay current; and what calls for a look wakes it.
Part of ``bots.worker.step``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, assert_never

from arbiter import contract as wire
from bots.prompt import OWN_LINES
from bots.worker.actions import Arrived, Log, StartLooking, StopWriting
from bots.worker.state import kept_notes

if TYPE_CHECKING:
    from bots.worker.actions import Action
    from bots.worker.state import WorkerState
    from bots.worker.step import Seat

__all__ = ("ignores", "on_frame", "wake")

Stepped = tuple["WorkerState", list["Action"]]

# A claim that ends with its cost back in the pool at once, before any retry planned for a refund (and, for an asked
# persona, perhaps its floor: a second pass, a post the platform refused).
_GIVEN_BACK = (wire.SpendState.RELEASED, wire.SpendState.RETRACTED, wire.SpendState.CLEARED)


def _keep_last(
    messages: tuple[wire.MessageView, ...], message: wire.MessageView, most: int
) -> tuple[wire.MessageView, ...]:
    kept = (*messages, message)
    return kept[-most:] if len(kept) > most else kept


def _replace(messages: tuple[wire.MessageView, ...], message: wire.MessageView) -> tuple[wire.MessageView, ...]:
    """``message`` in the place of the one with its seq, if ``messages`` holds it."""
    return tuple(message if held.seq == message.seq else held for held in messages)


def wake(state: WorkerState) -> Stepped:
    """Something to look at: a look after the persona's pause (the one under way, if any, looks again after)."""
    if state.looking or not state.arrived or state.closed:
        return state._replace(woken=True), []
    return state._replace(woken=True, looking=True), [StartLooking()]


def on_frame(state: WorkerState, frame: wire.ArbiterEvent, seat: Seat) -> Stepped:
    state, actions = _on_event(state, frame, seat)
    if not state.arrived and isinstance(frame, wire.LevelEvent):
        # The replay is over. Start fresh: what was said before the persona arrived is context, not a cue; but not
        # what was said after the channel was opened for it, which the persona would have heard had it been quicker.
        cues_after = state.last_seq if state.cues_after is None else min(state.last_seq, state.cues_after)
        state = state._replace(arrived=True, answered=cues_after, woken=False)
        actions = [*actions, Arrived()]
        if cues_after < state.last_seq:
            state, looks = wake(state)
            actions += looks
    return state, actions


def ignores(state: WorkerState, frame: wire.ArbiterEvent, seat: Seat) -> bool:
    """Whether :func:`on_frame` would leave ``state`` as it is and ask for nothing, told without a step: a claim's
    change that wakes nobody, another persona's notes. Most frames are such: every change of every claim in a
    channel comes to each of its workers."""
    if isinstance(frame, wire.ClaimEvent):
        return not _woken_by(state, frame.claim, seat)
    return isinstance(frame, wire.MemoryEvent) and frame.persona != seat.persona.id


def _woken_by(state: WorkerState, claim: wire.ClaimView, seat: Seat) -> bool:
    """Waiting for the pool, or for another's floor: a claim given back (a pass) refills the pool, and may give the
    floor up, long before the retry planned, with no message to say so."""
    return (
        state.timer
        and (state.intent is not None or state.floor_wait)
        and claim.state in _GIVEN_BACK
        and claim.persona != seat.persona.id
    )


def _on_event(state: WorkerState, event: wire.ArbiterEvent, seat: Seat) -> Stepped:
    match event:
        case wire.MessageEvent(message=message):
            return _on_message(state, message, seat)
        case wire.EditedEvent(message=message):
            # What the model reads must be what the channel shows now: the new text replaces the old.
            return state._replace(window=_replace(state.window, message), own=_replace(state.own, message)), []
        case wire.RetractedEvent(seq=seq) | wire.DeletedEvent(seq=seq):
            # No longer part of the conversation (a post that failed and was taken back, a message deleted on the
            # platform): it leaves the window. A line of its own stays among its own lines all the same: one that
            # was deleted is no better to say again.
            return state._replace(window=tuple(held for held in state.window if held.seq != seq)), []
        case wire.ClearedEvent(last_seq=last_seq):
            # Everything up to last_seq is gone, and only that: seqs go on after it, and a stream that resumed
            # (?after=) may bring the clear after messages said since, which stay.
            new_memory = state.new_memory
            if new_memory is not None and new_memory.seq <= last_seq:
                new_memory = None  # notes on what was cleared: the arbiter would refuse them
            cleared = state._replace(
                window=tuple(held for held in state.window if held.seq > last_seq),
                last_seq=max(state.last_seq, last_seq),
                answered=max(state.answered, last_seq),
                new_memory=new_memory,
            )
            return cleared, []
        case wire.LevelEvent():
            return state, []  # the end of the replay (see _on_frame); a look reads the pool from its status
        case wire.MemoryEvent(persona=persona, memory=memory) if persona == seat.persona.id:
            # Its own notes: stored by this worker, by another of the same persona, or reset by a moderator (or with
            # the history). A newer state wins; an older one arriving late does not take it back.
            notes = state.notes
            if memory is None:
                notes = None
            elif notes is None or memory.seq >= notes[0]:
                notes = kept_notes(wire.MemoryUpdate(seq=memory.seq, state=memory.state))
            return state._replace(notes=notes, memory_read=True), []
        case wire.SettingsEvent():
            # A look reads the settings that matter from the status, fresh; but a resume, an unmute or a higher cap
            # is no message, and what was said while it held the persona back is still unanswered.
            if state.blocked is not None:
                return wake(state._replace(answered=state.blocked, blocked=None))
            if state.floor_wait and state.timer:
                return wake(state)  # the floor it waits for may be open now (the asked persona cannot post here)
            return state, []
        case wire.ClaimEvent(claim=claim):
            if _woken_by(state, claim, seat):
                return wake(state)
            return state, []
        case wire.MemoryEvent():
            return state, []  # others' notes are theirs
        case _:
            assert_never(event)


def _on_message(state: WorkerState, message: wire.MessageView, seat: Seat) -> Stepped:
    if message.seq <= state.last_seq:
        return state, []
    window = _keep_last(state.window, message, seat.config.window)
    said_heard = state.said_heard
    said = message.platform_message_id
    if message.author_kind is wire.AuthorKind.HUMAN and said is not None and said.isdigit():
        said_heard = max(said_heard, int(said))
    if message.author_id == seat.persona.id:
        own = _keep_last(state.own, message, OWN_LINES)
        return state._replace(window=window, last_seq=message.seq, said_heard=said_heard, own=own), []
    # One new state for the lot: a frame comes to every persona's worker in the channel.
    actions: list[Action] = []
    writing = state.writing
    if writing is not None:
        writing = writing.after(message)
        if writing.overtaken and not state.writing.overtaken:  # type: ignore[union-attr]
            why = "message %d from %s came while the model wrote; stopping it"
            actions += [Log(logging.INFO, why, (message.seq, message.author_id)), StopWriting()]
    starts = not (state.looking or not state.arrived or state.closed)
    if starts:
        actions.append(StartLooking())
    looking = state.looking or starts
    state = state._replace(
        window=window, last_seq=message.seq, said_heard=said_heard, writing=writing, woken=True, looking=looking
    )
    return state, actions
