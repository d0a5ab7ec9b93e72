"""The worker's step: what a persona in a channel knows and does, as plain tables of (state, event, now) -> (state,
actions). No servers, no tasks: a fake clock (``tests.support.clock``), seeded chance, statuses made by the arbiter's
own view of a real core state."""

from __future__ import annotations

import logging
import random
from dataclasses import fields, replace

import pytest

from arbiter import contract as wire
from arbiter.contract import AuthorKind, RefusalReason, SpendState, Tier
from arbiter.core.models import ChannelSettings, ChannelState, Priority
from arbiter.views import status_view
from bots.llm.base import Decision
from bots.runtime import RuntimeStats
from bots.worker import actions as act
from bots.worker import events as ev
from bots.worker.config import RuntimeConfig
from bots.worker.following import ignores, on_frame
from bots.worker.overtaking import Overtaking
from bots.worker.state import Turn, WorkerState
from bots.worker.step import Seat, step
from tests.support.clock import FakeClock
from tests.support.fleet import make_persona

ME = "aoi"
CHANNEL = "lounge"
CLOCK = FakeClock()
NOW = CLOCK()
SEAT = Seat(make_persona(ME), RuntimeConfig(), random.Random(7))


def said(
    seq: int, author: str = "yui", *, tier: Tier | None = None, addressed: tuple[str, ...] = ()
) -> wire.MessageView:
    human = tier is None and author != ME
    return wire.MessageView(
        seq=seq,
        author_id=author,
        author_kind=AuthorKind.HUMAN if human else AuthorKind.PERSONA,
        author_name=author.title(),
        text=f"message {seq} from {author}",
        at=NOW - 1.0,
        tier=tier,
        addressed=list(addressed),
    )


def frame(message: wire.MessageView) -> ev.Frame:
    return ev.Frame(wire.MessageEvent(channel_id=CHANNEL, message=message))


def status(*, asked: tuple[str, ...] = (), paused: bool = False, last_seq: int = 1) -> wire.StatusView:
    state = ChannelState(CHANNEL, ChannelSettings(paused=paused), last_seq=last_seq)
    if asked:
        state = replace(state, priority=Priority(frozenset(asked), NOW + 20.0, last_seq))
    return status_view(state, NOW, persona_id=ME, display_name="Aoi")


ARRIVED = WorkerState(arrived=True, looking=True)


def run(state: WorkerState, *events: ev.Event, now: float = NOW) -> tuple[WorkerState, list[act.Action]]:
    done: list[act.Action] = []
    for event in events:
        state, actions = step(state, event, now, SEAT)
        done += actions
    return state, done


def kinds(actions: list[act.Action]) -> list[str]:
    return [type(action).__name__ for action in actions]


def granted(tier: Tier = Tier.REMARK) -> wire.ClaimResult:
    claim = wire.ClaimView(claim_id="c1", persona=ME, tier=tier, cost=60, state=SpendState.HELD, expires_at=NOW + 30)
    return wire.ClaimResult(granted=True, level=40, capacity=100, claim=claim)


def refused(reason: RefusalReason, retry_after: float | None = None) -> wire.ClaimResult:
    return wire.ClaimResult(granted=False, level=0, capacity=100, reason=reason, retry_after=retry_after)


def looking_at(*window: wire.MessageView, asked: tuple[str, ...] = ()) -> WorkerState:
    """A worker that has looked at ``window`` and claimed a remark for it."""
    begun = Turn(due=NOW, pause=0.5, begun=True, claimed=Tier.REMARK)
    state = ARRIVED._replace(window=window, last_seq=window[-1].seq, turn=begun)
    state, _ = run(state, ev.StatusRead(status(asked=asked, last_seq=window[-1].seq), NOW))
    return state._replace(turn=state.turn._replace(claimed=Tier.REMARK)) if state.turn else state


def writing(*window: wire.MessageView, asked: tuple[str, ...] = (ME,)) -> WorkerState:
    state, actions = run(looking_at(*window, asked=asked), ev.ClaimAnswered(granted()))
    assert kinds(actions)[-1] == "Decide", actions
    return state


# --- the stream ---------------------------------------------------------------------------------------------


def test_what_is_said_before_the_replay_ends_is_context_not_a_cue() -> None:
    state, actions = run(WorkerState(), frame(said(1)), frame(said(2)))
    assert (state.window[-1].seq, state.woken, actions) == (2, True, [])  # woken, but no looks before arrival

    state, actions = run(state, ev.Frame(wire.LevelEvent(channel_id=CHANNEL, level=100, capacity=100, at=NOW)))

    assert (state.arrived, state.answered, state.woken) == (True, 2, False)
    assert kinds(actions) == ["Arrived"]


def test_what_is_said_after_the_channel_was_opened_for_it_is_a_cue_even_in_the_replay() -> None:
    # A room opened at seq 1: the person's first line (2) came before the persona followed, so it is in the replay.
    state, actions = run(WorkerState(), ev.Opened(1), frame(said(1)), frame(said(2)))
    assert actions == []  # no looks before arrival all the same

    state, actions = run(state, ev.Frame(wire.LevelEvent(channel_id=CHANNEL, level=100, capacity=100, at=NOW)))

    assert (state.arrived, state.answered, state.woken, state.looking) == (True, 1, True, True)
    assert kinds(actions) == ["Arrived", "StartLooking"]


def test_opened_after_arrival_changes_nothing() -> None:
    state, actions = run(ARRIVED._replace(last_seq=5, answered=5), ev.Opened(0))
    assert (state, actions) == (ARRIVED._replace(last_seq=5, answered=5), [])


def test_a_message_after_arrival_starts_the_looks_once() -> None:
    state, actions = run(WorkerState(arrived=True), frame(said(1)))
    assert kinds(actions) == ["StartLooking"] and state.looking and state.woken

    state, actions = run(state, frame(said(2)))
    assert actions == []  # looking already: the look under way looks again after
    assert [m.seq for m in state.window] == [1, 2]


def test_its_own_lines_are_kept_and_wake_nothing() -> None:
    state, actions = run(ARRIVED, frame(said(1, ME, tier=Tier.REMARK)))
    assert (actions, [m.seq for m in state.own], state.woken) == ([], [1], False)


@pytest.mark.parametrize(
    ("event", "window"),
    [
        pytest.param(wire.RetractedEvent(channel_id=CHANNEL, seq=2), [1, 3], id="retracted"),
        pytest.param(wire.DeletedEvent(channel_id=CHANNEL, seq=2), [1, 3], id="deleted"),
        pytest.param(wire.ClearedEvent(channel_id=CHANNEL, last_seq=2), [3], id="cleared"),
    ],
)
def test_what_leaves_the_conversation_leaves_the_window(event: wire.ArbiterEvent, window: list[int]) -> None:
    state, _ = run(ARRIVED, frame(said(1)), frame(said(2)), frame(said(3)))
    state, actions = run(state, ev.Frame(event))
    assert ([m.seq for m in state.window], actions) == (window, [])


def test_an_edit_replaces_the_text_it_reads() -> None:
    state, _ = run(ARRIVED, frame(said(1)))
    edited = said(1).model_copy(update={"text": "edited"})
    state, _ = run(state, ev.Frame(wire.EditedEvent(channel_id=CHANNEL, message=edited)))
    assert state.window[0].text == "edited"


def test_a_settings_event_has_a_blocked_persona_look_again_from_where_it_was() -> None:
    state = ARRIVED._replace(looking=False, blocked=3, answered=5)
    state, actions = run(state, ev.Frame(wire.SettingsEvent.model_construct(channel_id=CHANNEL)))  # type: ignore[call-arg]
    assert (state.answered, state.blocked, kinds(actions)) == (3, None, ["StartLooking"])


def test_a_claim_given_back_wakes_a_persona_waiting_for_the_pool() -> None:
    claim = wire.ClaimView(claim_id="x", persona="ben", tier=Tier.REMARK, cost=60, state=SpendState.RELEASED)
    given_back = ev.Frame(wire.ClaimEvent(channel_id=CHANNEL, claim=claim))
    waiting = ARRIVED._replace(looking=False, intent=(1, Tier.REMARK), timer=True)
    assert kinds(run(waiting, given_back)[1]) == ["StartLooking"]
    assert run(waiting._replace(timer=False), given_back)[1] == []  # not waiting: nothing to do


def test_a_frame_the_worker_skips_unstepped_is_one_its_step_would_change_nothing_for() -> None:
    # A worker does not step the frames ``ignores`` names (most are claims' changes): stepped, each would leave its
    # state as it is and ask for nothing.
    notes = wire.MemoryView(channel_id=CHANNEL, persona=ME, seq=4, state=wire.DialogueState(), updated_at=NOW)
    frames = [
        wire.ClaimEvent(
            channel_id=CHANNEL,
            claim=wire.ClaimView(claim_id="x", persona=persona, tier=Tier.REMARK, cost=60, state=spend),
        )
        for persona in (ME, "ben")
        for spend in SpendState
    ]
    frames += [wire.MemoryEvent(channel_id=CHANNEL, persona=persona, memory=notes) for persona in (ME, "ben")]
    frames += [
        wire.MessageEvent(channel_id=CHANNEL, message=said(9)),
        wire.LevelEvent(channel_id=CHANNEL, level=50, capacity=100, at=NOW),
    ]
    states = [
        WorkerState(),
        ARRIVED,
        ARRIVED._replace(intent=(1, Tier.REMARK)),
        ARRIVED._replace(intent=(1, Tier.REMARK), timer=True),
        ARRIVED._replace(floor_wait=True, timer=True),
        ARRIVED._replace(floor_wait=True),
    ]
    skipped = 0
    for state in states:
        for frame in frames:
            after, actions = on_frame(state, frame, SEAT)
            unchanged = after == state and not actions
            assert not ignores(state, frame, SEAT) or unchanged, (state, frame)
            skipped += ignores(state, frame, SEAT)
    assert skipped > len(states) * len(SpendState)  # it does skip: claims' changes that wake nobody


def test_its_own_notes_are_taken_newer_only() -> None:
    notes = wire.DialogueState()
    memory = wire.MemoryView(channel_id=CHANNEL, persona=ME, seq=4, state=notes, updated_at=NOW)
    state, _ = run(ARRIVED, ev.Frame(wire.MemoryEvent(channel_id=CHANNEL, persona=ME, memory=memory)))
    assert state.notes is not None and state.notes[0] == 4 and state.memory_read
    older = wire.MemoryView(channel_id=CHANNEL, persona=ME, seq=2, state=notes, updated_at=NOW)
    state, _ = run(state, ev.Frame(wire.MemoryEvent(channel_id=CHANNEL, persona=ME, memory=older)))
    assert state.notes[0] == 4


# --- waking and pausing -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "before", "starts"),
    [
        pytest.param(ev.Wake(), WorkerState(arrived=True), True, id="wake"),
        pytest.param(ev.TimerFired(), WorkerState(arrived=True, timer=True), True, id="timer"),
        pytest.param(ev.CanPost("no permission"), WorkerState(arrived=True), True, id="cannot-post"),
        pytest.param(ev.CanPost(None), WorkerState(arrived=True), False, id="can-post"),
        pytest.param(ev.Wake(), WorkerState(arrived=True, closed=True), False, id="closed"),
    ],
)
def test_what_wakes_a_worker(event: ev.Event, before: WorkerState, starts: bool) -> None:
    state, actions = run(before, event)
    assert kinds(actions) == (["StartLooking"] if starts else [])
    assert not state.timer


def test_a_woken_worker_pauses_then_looks_and_an_idle_one_stops() -> None:
    state, actions = run(ARRIVED._replace(woken=True), ev.Free(), now=NOW)
    [pause] = actions
    assert isinstance(pause, act.Pause) and pause.seconds > 0
    assert state.turn is not None and state.turn.due == NOW + pause.seconds

    state, actions = run(ARRIVED._replace(woken=False), ev.Free())
    assert (actions, state.looking) == ([], False)


def test_an_addressed_persona_pauses_briefly() -> None:
    _, actions = run(ARRIVED._replace(woken=True, window=(said(1, addressed=(ME,)),)), ev.Free())
    assert actions == [act.Pause(0.2 * SEAT.config.base_delay_s)]


@pytest.mark.parametrize(
    ("pause_over", "standing", "expected"),
    [
        pytest.param(ev.PauseOver(None, 0.0), None, ["AskStatus"], id="looks"),
        pytest.param(ev.PauseOver("no permission", 0.0), None, ["TellStanding"], id="tells-it-cannot-post"),
        pytest.param(ev.PauseOver(None, 0.0), "no permission", ["TellStanding"], id="tells-it-can-again"),
        pytest.param(ev.PauseOver(None, 5.0), None, ["ScheduleLook"], id="backing-off"),
    ],
)
def test_after_the_pause(pause_over: ev.PauseOver, standing: str | None, expected: list[str]) -> None:
    state = ARRIVED._replace(window=(said(1),), last_seq=1, turn=Turn(due=NOW, pause=1.0), standing=standing)
    state, actions = run(state, pause_over)
    assert kinds(actions) == expected
    assert not state.woken


def test_once_told_it_looks_on() -> None:
    state = ARRIVED._replace(window=(said(1),), last_seq=1, turn=Turn(due=NOW, pause=1.0))
    state, actions = run(state, ev.PauseOver("no permission", 0.0), ev.Stood("no permission", told=True))
    # It cannot post: the arbiter knows now, and everything so far counts as dealt with.
    assert (state.standing, state.answered, kinds(actions)) == ("no permission", 1, ["TellStanding"])


def test_nothing_new_from_others_is_no_turn() -> None:
    state = ARRIVED._replace(window=(said(1),), last_seq=1, answered=1, turn=Turn(due=NOW, pause=1.0))
    state, actions = run(state, ev.PauseOver(None, 0.0))
    assert actions == [] and state.turn is not None and not state.turn.begun


# --- planning and claiming ----------------------------------------------------------------------------------


def test_an_addressed_persona_plans_a_remark_and_claims_it() -> None:
    begun = ARRIVED._replace(window=(said(1, addressed=(ME,)),), last_seq=1, turn=Turn(NOW, 0.5, begun=True))
    _, actions = run(begun, ev.StatusRead(status(asked=(ME,)), NOW))

    report, _log, claim = actions
    assert report == act.ReportPlan(1, Tier.REMARK, NOW, 0.5)
    assert isinstance(claim, act.Claim)
    assert (claim.request.tier, claim.request.based_on_seq, claim.request.notes) == (Tier.REMARK, 1, True)


def test_a_paused_channel_is_no_claim_and_remembers_where_it_was() -> None:
    begun = ARRIVED._replace(window=(said(1),), last_seq=1, answered=0, turn=Turn(NOW, 0.5, begun=True))
    state, actions = run(begun, ev.StatusRead(status(paused=True), NOW))
    assert kinds(actions) == ["ReportPlan", "Log"]
    assert (state.blocked, state.answered) == (0, 1)


@pytest.mark.parametrize(
    ("result", "expected", "woken"),
    [
        pytest.param(refused(RefusalReason.STALE), ["Count", "Count", "Log"], True, id="stale-looks-again"),
        pytest.param(refused(RefusalReason.INSUFFICIENT, 3.0), ["Count", "Count", "Log"], True, id="replans-once"),
        pytest.param(refused(RefusalReason.NODDED, 2.0), ["Count", "Count", "Log", "ScheduleLook"], False, id="nod"),
        pytest.param(refused(RefusalReason.IDLE_CAP), ["Count", "Count", "Log"], False, id="waits-for-a-message"),
    ],
)
def test_a_refused_claim(result: wire.ClaimResult, expected: list[str], woken: bool) -> None:
    state, actions = run(looking_at(said(1)), ev.ClaimAnswered(result))
    assert kinds(actions) == expected
    assert state.woken is woken and state.held is None
    assert act.Count("refused_claims") in actions


def test_a_granted_claim_makes_one_model_call_with_what_it_covers() -> None:
    state, actions = run(looking_at(said(1, addressed=(ME,)), asked=(ME,)), ev.ClaimAnswered(granted()))

    count, decide = actions
    assert count == act.Count("claims")
    assert isinstance(decide, act.Decide)
    assert (decide.actions, decide.allow_pass, decide.time_left) == (("pass", "remark"), True, 27.0)
    assert (state.held, state.answered, state.writing is not None) == ("c1", 1, True)


def test_a_claim_the_conversation_moved_past_is_given_back_uncalled() -> None:
    state = looking_at(said(1))
    state, _ = run(state, frame(said(2)), frame(said(3)))  # two more after the one it answers: stale
    state, actions = run(state, ev.ClaimAnswered(granted()))
    assert kinds(actions) == ["Count", "Count", "Log", "Release"]
    assert act.Count("given_back") in actions and state.held is None


def test_a_claim_that_lapses_before_the_model_could_answer_is_given_back() -> None:
    _, actions = run(looking_at(said(1)), ev.ClaimAnswered(granted()), now=NOW + 28.0)
    assert kinds(actions) == ["Count", "Log", "Release"]
    assert actions[1] == act.Log(logging.WARNING, "the claim lapses before a model could answer; passing")


# --- writing, speaking, posting -----------------------------------------------------------------------------


def test_a_question_to_someone_else_while_it_writes_stops_the_model() -> None:
    state = writing(said(1), asked=())
    state, actions = run(state, frame(said(2, addressed=("ben",))))
    assert kinds(actions) == ["Log", "StopWriting"]
    state, actions = run(state, ev.Decided(ev.Overtaken()))
    assert actions == [act.Count("overtaken"), act.Release("c1", None)]
    assert (state.writing, state.held) == (None, None)


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        pytest.param(ev.Answer(Decision("pass")), [act.Count("passes"), act.Release("c1", None)], id="pass"),
        pytest.param(ev.Failed(), [act.Release("c1", None)], id="provider-failed"),
        pytest.param(ev.Unusable(), [act.Count("wasted"), act.Release("c1", None)], id="unusable"),
    ],
)
def test_nothing_to_say_gives_the_claim_back(
    outcome: ev.Answer | ev.Failed | ev.Unusable, expected: list[act.Action]
) -> None:
    state, actions = run(writing(said(1, addressed=(ME,))), ev.Decided(outcome))
    assert actions == expected and state.held is None


def test_a_repeat_is_dropped() -> None:
    state = writing(said(1, addressed=(ME,)))
    state, actions = run(state, ev.Decided(ev.Answer(Decision("remark", "message 1 from yui"))))
    assert kinds(actions) == ["Count", "Log", "Release"]


def _speaking() -> WorkerState:
    state, actions = run(writing(said(1, addressed=(ME,))), ev.Decided(ev.Answer(Decision("remark", "Ramen."))))
    assert actions == [act.Speak("c1", Tier.REMARK, "Ramen.", 1, None)]
    return state


def _spoken(seq: int) -> wire.SpeakResult:
    return wire.SpeakResult(granted=True, level=40, capacity=100, message=said(seq, ME, tier=Tier.REMARK))


def test_a_granted_speech_is_posted_and_linked() -> None:
    state, actions = run(_speaking(), ev.SpeakAnswered(_spoken(2), said_before=0, seen=0))
    assert actions == [act.Post(Tier.REMARK, "Ramen.", 2, seen=0)]
    assert state.held is None and state.turn is not None and state.turn.spoke

    state, actions = run(state, ev.Posted(Tier.REMARK, 2, "p-2"))
    assert actions == [act.CountPost(Tier.REMARK), act.Link(2, "p-2")]


def test_a_refused_speech_gives_the_claim_back() -> None:
    stale = wire.SpeakResult(granted=False, level=40, capacity=100, reason=RefusalReason.STALE)
    state, actions = run(_speaking(), ev.SpeakAnswered(stale, said_before=0, seen=0))
    assert kinds(actions) == ["Count", "Log", "Release"] and state.woken


def test_a_speech_granted_after_a_person_spoke_unheard_is_retracted() -> None:
    # The account saw a person say something (platform id 9) the arbiter had not recorded before the speech.
    state, actions = run(_speaking(), ev.SpeakAnswered(_spoken(2), said_before=5, seen=9))
    assert kinds(actions) == ["Count", "Log", "Retract"] and state.woken


def test_a_person_seen_between_the_grant_and_the_post_has_the_post_retracted() -> None:
    # Granted with nothing new seen; then, before the post went out, the account saw a person say platform id 9,
    # which the arbiter had not recorded before the speech: posted, it would stand between a question and its answer.
    state, actions = run(_speaking(), ev.SpeakAnswered(_spoken(2), said_before=5, seen=5))
    post = act.Post(Tier.REMARK, "Ramen.", 2, seen=5)
    assert actions == [post]
    state, actions = run(state, ev.SawBeforePosting(post, seen=9))
    assert kinds(actions) == ["Count", "Log", "Retract"] and state.woken
    assert act.Retract(2) in actions


def test_a_person_seen_before_the_post_but_recorded_before_it_lets_it_go_out() -> None:
    state, actions = run(_speaking(), ev.SpeakAnswered(_spoken(2), said_before=5, seen=5))
    recorded = said(1).model_copy(update={"platform_message_id": "9"})
    state = state._replace(window=(recorded,))
    state, actions = run(state, ev.SawBeforePosting(act.Post(Tier.REMARK, "Ramen.", 2, seen=5), seen=9))
    assert actions == [act.Post(Tier.REMARK, "Ramen.", 2, seen=9)]  # checked again as it goes, against the newest


def test_a_failed_post_is_retracted_and_the_arbiter_told_why() -> None:
    state, _ = run(_speaking(), ev.SpeakAnswered(_spoken(2), said_before=0, seen=0))
    state, actions = run(state, ev.PostFailed(2, "forbidden", "no permission to post"))
    assert kinds(actions) == ["Count", "Log", "Retract", "TellStanding"]
    assert actions[-1] == act.TellStanding("no permission to post")


# --- the end of a turn, failures, closing ----------------------------------------------------------------


def test_an_asked_persona_that_said_nothing_tries_once_more_without_a_pass() -> None:
    state, _ = run(writing(said(1, addressed=(ME,))), ev.Decided(ev.Failed()))
    state, actions = run(state, ev.Free())
    assert (actions, state.must_answer) == ([act.ScheduleLook(0.0), act.Count("looks")], 1)

    state, _ = run(
        state._replace(timer=False, turn=Turn(NOW, 0.5, begun=True), woken=False),
        ev.StatusRead(status(asked=(ME,)), NOW),
    )
    state, actions = run(state, ev.ClaimAnswered(granted()))
    decide = actions[-1]
    assert isinstance(decide, act.Decide) and not decide.allow_pass and decide.actions == ("remark",)


def test_a_failed_turn_gives_back_what_it_holds_and_counts_as_a_look() -> None:
    state, actions = run(writing(said(1)), ev.TurnFailed())
    assert actions == [act.Release("c1", None)]
    state, actions = run(state, ev.Free())
    assert actions == [act.Count("looks")]  # no second try after an error


def test_a_release_keeps_the_notes_the_arbiter_kept() -> None:
    kept = wire.MemoryUpdate(seq=1, state=wire.DialogueState())
    state, actions = run(ARRIVED, ev.Released(kept))
    assert (state.memory, actions) == (kept, [])


def test_a_turn_taken_otherwise_deals_with_what_it_saw() -> None:
    assert run(ARRIVED, ev.Dealt(7))[0].answered == 7


def test_closing_forgets_the_look_scheduled_and_stopping_gives_the_claim_back() -> None:
    state, actions = run(writing(said(1))._replace(timer=True), ev.Close())
    assert (actions, state.closed, state.timer) == ([act.CancelLook()], True, False)
    assert run(state, ev.Wake())[1] == []  # closed: no more looks
    state, actions = run(state, ev.Stopped())
    assert actions == [act.Release("c1", None)]


def test_the_counters_it_moves_are_the_runtimes() -> None:
    moved = act.Counter.__args__  # type: ignore[attr-defined]
    assert set(moved) <= {field.name for field in fields(RuntimeStats)}


def test_the_writing_rule_is_the_overtaking_one() -> None:
    state = writing(said(1), asked=())
    assert state.writing == Overtaking.from_status(ME, Tier.REMARK, status(last_seq=1))
