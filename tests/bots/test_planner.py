"""The planner: whether to take a turn and which tier to claim, before any LLM call. Pure, so plain tables.

Chance enters through the ``rng`` argument. The tables roll extreme dice - 0.0 (anything possible happens) and
0.999 (only the certain happens) - so they pin down what the planner may and may not do, not its tuning.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arbiter.contract import AuthorKind, MessageView, RefusalReason, StatusView, Tier
from arbiter.core import ledger
from arbiter.core import rules as core
from arbiter.core.models import (
    ChannelSettings,
    ChannelState,
    PersonaPolicy,
    Priority,
    Spend,
    SpendState,
    TierRule,
)
from arbiter.core.rules import Author, Refusal, utc_day
from arbiter.views import message_view, status_view
from bots.planner import STALE_AFTER_S, Plan, anchor, plan_turn, refused_outright, stale
from tests.support.fleet import make_persona

NOW = 1_785_000_000.0
ME = "aoi"


class Dice(random.Random):
    """Rolls the given numbers in order; rolling more than the test provided is an error."""

    def __init__(self, *rolls: float) -> None:
        super().__init__(0)
        self.rolls = list(rolls)

    def random(self) -> float:
        assert self.rolls, "the planner rolled more dice than the test expected"
        return self.rolls.pop(0)


ENABLED = PersonaPolicy()


def status(
    *,
    costs: tuple[int, int, int] = (5, 60, 80),
    refunds: tuple[tuple[float, int], ...] = (),
    priority: tuple[str, ...] = (),
    priority_for: float = 20.0,
    bot_streak: int = 0,
    idle_cap: int = 12,
    paused: bool = False,
    enabled: bool = True,
    you: PersonaPolicy | None = ENABLED,
    tokens_today: int = 0,
    budget: int | None = None,
    claim: Tier | None = None,
    claims_held: dict[Tier, int] | None = None,
    latest_nod: bool = False,
) -> StatusView:
    """The status the arbiter shows ``ME`` for a channel in this state: a real core state, and the arbiter's own
    view of it (so each tier's verdict is the core's, not a copy of its rules). The pool's level is what the
    refunds and claims leave of 100; ``you=None`` reads it as nobody in particular."""
    rules = {
        tier: TierRule(cost=cost, max_length=length, recovery_s=5.0)
        for tier, cost, length in zip(Tier, costs, (24, 120, 240), strict=True)
    }
    settings = ChannelSettings(
        tiers=rules, enabled=enabled, paused=paused, idle_cap=idle_cap, daily_token_budget=budget
    )
    if you is not None:
        settings = settings.with_policy(ME, you)
    spends = tuple(
        Spend(f"s{index}", "ben", Tier.REMARK, amount, SpendState.SPOKEN, NOW - 1.0, NOW + delay)
        for index, (delay, amount) in enumerate(refunds)
    )
    # Claims of others, made just now (so a nod claim is a nod on its way), and the persona's own.
    held = [(tier, f"other{index}{tier}") for tier, count in (claims_held or {}).items() for index in range(count)]
    if claim is not None:
        held.append((claim, ME))
    claims = tuple(
        Spend(f"c-{owner}", owner, tier, rules[tier].cost, SpendState.HELD, NOW - 0.5, NOW + 30.0)
        for tier, owner in held
    )
    state = ChannelState(
        "lounge",
        settings,
        spends=ledger.sort_spends(spends),
        claims=claims,
        last_seq=100,
        bot_streak=bot_streak,
        priority=Priority(frozenset(priority), NOW + priority_for, 1) if priority else None,
        recent_said=((100, latest_nod),),
        tokens_day=utc_day(NOW),
        tokens_used=tokens_today,
    )
    return status_view(state, NOW, persona_id=None if you is None else ME, display_name="Aoi")


@dataclass
class Line:
    """A message in the window, in shorthand: who said it, and in which tier (None: a human)."""

    author: str
    tier: Tier | None = None
    seq: int = 0
    addressed: list[str] = field(default_factory=list)
    age: float | None = None  # seconds before NOW it was said (default: a little over a minute and a half)
    text: str | None = None  # default: "message <seq> from <author>", a plain statement

    def view(self, seq: int) -> MessageView:
        human = self.tier is None
        return MessageView(
            seq=self.seq or seq,
            author_id=self.author,
            author_kind=AuthorKind.HUMAN if human else AuthorKind.PERSONA,
            author_name=self.author.title(),
            text=self.text or f"message {seq} from {self.author}",
            at=NOW - 100 + seq if self.age is None else NOW - self.age,
            tier=self.tier,
            addressed=self.addressed,
        )


def window(*lines: Line) -> list[MessageView]:
    return [line.view(index) for index, line in enumerate(lines, start=1)]


HUMAN = Line("yui")
NOD = Tier.AIZUCHI
REMARK = Tier.REMARK
LONG = Tier.LONG


def persona(**traits: Any) -> Any:
    return make_persona(ME, **traits)


# --- blocked: no claim whatever the persona would say --------------------------------------------------------

BLOCKS = [
    pytest.param({"enabled": False}, "not enabled", id="channel-not-enabled"),
    pytest.param({"you": PersonaPolicy(enabled=False)}, "not enabled", id="persona-not-enabled"),
    pytest.param({"you": PersonaPolicy(muted=True)}, "muted", id="muted"),
    pytest.param({"paused": True}, "paused", id="paused"),
    pytest.param({"bot_streak": 12, "idle_cap": 12}, "idle_cap", id="idle-cap"),
    pytest.param(
        {"bot_streak": 11, "idle_cap": 12, "claims_held": {Tier.REMARK: 1}}, "idle_cap", id="idle-cap-in-flight"
    ),
    pytest.param({"tokens_today": 1000, "budget": 1000}, "budget", id="budget-spent"),
]


@pytest.mark.parametrize(("conditions", "reason"), BLOCKS)
def test_a_blocked_channel_or_persona_plans_no_claim_even_when_addressed(
    conditions: dict[str, Any], reason: str
) -> None:
    seen = status(priority=(ME,), **conditions)

    plan = plan_turn(persona(), seen, window(HUMAN), Dice())  # no dice: it decides before any chance

    assert plan == Plan(None, why=plan.why)
    assert plan.final
    assert reason in plan.why
    assert reason in (refused_outright(seen) or "")


@pytest.mark.parametrize(
    "conditions",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"bot_streak": 11, "idle_cap": 12}, id="one-below-the-idle-cap"),
        pytest.param({"tokens_today": 999, "budget": 1000}, id="budget-not-yet-spent"),
        pytest.param({"tokens_today": 10**9}, id="no-budget"),
        pytest.param({"you": None}, id="status-without-the-caller"),
    ],
)
def test_nothing_blocks_an_ordinary_channel(conditions: dict[str, Any]) -> None:
    assert refused_outright(status(**conditions)) is None


# --- when there is nothing to answer -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seen", "lines"),
    [
        pytest.param(status(priority=(ME,)), (), id="empty-window"),
        pytest.param(status(), (HUMAN, Line(ME, REMARK)), id="its-own-message-is-the-newest"),
        pytest.param(
            status(priority=(ME,), claim=REMARK),
            (HUMAN,),
            id="already-holding-a-claim",
        ),
    ],
)
def test_no_claim_when_there_is_nothing_new_or_a_claim_is_already_held(
    seen: StatusView, lines: tuple[Line, ...]
) -> None:
    plan = plan_turn(persona(talkativeness=1.0), seen, window(*lines), Dice())

    assert plan.tier is None and plan.final


def test_asked_while_it_was_writing_it_answers_although_its_own_message_is_the_newest() -> None:
    # The question arrived while its earlier reply was being written; that reply does not answer it.
    plan = plan_turn(persona(openness=0.0), status(priority=(ME,)), window(HUMAN, Line(ME, REMARK)), Dice(0.999))

    assert plan.tier is REMARK


# --- stale messages: context, not a cue -----------------------------------------------------------------------

TWENTY_MINUTES = 20 * 60.0


@pytest.mark.parametrize(
    ("age", "is_stale"),
    [
        pytest.param(0.0, False, id="just-said"),
        pytest.param(60.0, False, id="a-minute-ago"),
        pytest.param(STALE_AFTER_S, False, id="at-the-threshold"),
        pytest.param(STALE_AFTER_S + 0.5, True, id="just-past-the-threshold"),
        pytest.param(TWENTY_MINUTES, True, id="twenty-minutes-ago"),
    ],
)
def test_a_message_older_than_the_threshold_is_context_not_a_cue(age: float, is_stale: bool) -> None:
    talkative = persona(talkativeness=1.0, openness=0.0)
    lines = window(Line("yui", age=age))

    plan = plan_turn(talkative, status(), lines, Dice(0.0, 0.999) if not is_stale else Dice())

    if is_stale:
        assert plan == Plan(None, why=plan.why)  # final, and not quiet: no second look either
        assert "stale" in plan.why and plan.final and not plan.quiet
        assert stale(talkative, status(), lines) == plan.why
    else:
        assert plan.tier is REMARK
        assert stale(talkative, status(), lines) is None


STALE_CASES = [
    # (id, status seen, window, dice, intent, tier claimed)
    pytest.param(
        status(),
        (Line("yui", addressed=[ME], age=TWENTY_MINUTES),),
        (),
        None,
        None,
        id="an-old-question-to-it-the-arbiter-keeps-no-floor-for",
    ),
    pytest.param(
        status(priority=(ME,)),
        (Line("yui", addressed=[ME], age=STALE_AFTER_S + 60),),
        (0.999,),
        None,
        REMARK,
        id="addressed-and-the-arbiter-still-keeps-the-floor-for-it",
    ),
    pytest.param(
        status(),
        (Line("yui", age=TWENTY_MINUTES), Line("ben", REMARK, age=TWENTY_MINUTES - 1)),
        (),
        None,
        None,
        id="an-old-exchange-between-others",
    ),
    pytest.param(
        status(),
        (Line("yui", age=TWENTY_MINUTES), Line("yui", age=5.0)),
        (0.0, 0.999),
        None,
        REMARK,
        id="a-fresh-message-after-old-ones",
    ),
    pytest.param(
        status(),
        (Line("yui", age=STALE_AFTER_S + 30),),
        (),
        REMARK,
        REMARK,
        id="following-through-on-what-it-wanted-while-the-thread-was-fresh",
    ),
]


@pytest.mark.parametrize(("seen", "lines", "dice", "intent", "tier"), STALE_CASES)
def test_stale_or_not(
    seen: StatusView, lines: tuple[Line, ...], dice: tuple[float, ...], intent: Tier | None, tier: Tier | None
) -> None:
    plan = plan_turn(persona(talkativeness=1.0, openness=0.0), seen, window(*lines), Dice(*dice), intent=intent)

    assert plan.tier is tier, plan
    if tier is None:
        assert "stale" in plan.why and plan.final


# --- the table: who wants what, and what the pool allows -----------------------------------------------------

CASES = [
    # (id, persona traits, status seen, window, dice rolled in order, tier claimed)
    (
        "addressed-answers-with-a-remark-whatever-the-dice",
        {"openness": 0.0},
        status(priority=(ME,)),
        (Line("yui", addressed=[ME]),),
        (0.999,),
        REMARK,
    ),
    (
        "addressed-open-persona-may-answer-at-length",
        {"openness": 1.0},
        status(priority=(ME,)),
        (Line("yui", addressed=[ME]),),
        (0.0,),
        LONG,
    ),
    (
        "a-human-speaks-a-talkative-persona-may-reply",
        {"talkativeness": 1.0, "openness": 0.0},
        status(),
        (HUMAN,),
        (0.0, 0.999),
        REMARK,
    ),
    (
        "a-human-speaks-the-persona-may-stay-quiet",
        {"talkativeness": 1.0, "agreeableness": 1.0},
        status(),
        (HUMAN,),
        (0.999,),
        None,
    ),
    (
        "a-dominating-persona-only-nods-to-a-human",
        {"talkativeness": 1.0, "agreeableness": 1.0},
        status(),
        (HUMAN, Line(ME, REMARK), HUMAN, Line(ME, REMARK), HUMAN),
        (0.0,),
        NOD,
    ),
    (
        "never-answers-its-own-thread-nor-nods-to-a-nod",
        {"talkativeness": 1.0, "agreeableness": 1.0},
        status(latest_nod=True),
        (HUMAN, Line(ME, REMARK), Line("ben", NOD)),
        (0.0,),
        None,
    ),
    (
        "one-nod-on-its-way-is-acknowledgement-enough",
        {"talkativeness": 1.0, "agreeableness": 1.0},
        status(claims_held={Tier.AIZUCHI: 1}),
        (HUMAN, Line(ME, REMARK), HUMAN, Line(ME, REMARK), HUMAN),
        (0.0,),
        None,
    ),
    (
        "a-quiet-agreeable-persona-nods-to-a-human",
        {"talkativeness": 0.0, "agreeableness": 1.0},
        status(),
        (HUMAN,),
        (0.5,),
        NOD,
    ),
    (
        "no-nod-while-someone-is-about-to-speak",
        {"talkativeness": 0.0, "agreeableness": 1.0},
        status(claims_held={Tier.REMARK: 1}),
        (HUMAN,),
        (0.5,),
        None,
    ),
    (
        "someone-else-was-addressed-so-it-waits-without-even-a-nod",
        {"talkativeness": 1.0, "agreeableness": 1.0},
        status(priority=("ben",)),
        (Line("yui", addressed=["ben"]),),
        (),
        None,
    ),
    (
        "asked-to-explain-it-answers-at-length",
        {"openness": 0.0},
        status(priority=(ME,)),
        (Line("yui", addressed=[ME], text="Aoi, why do you like mornings?"),),
        (),
        LONG,
    ),
    (
        "a-question-to-everyone-is-likely-answered",
        {"talkativeness": 0.0, "agreeableness": 0.0, "openness": 0.0},
        status(),
        (HUMAN, Line(ME, REMARK), Line("ben", NOD), Line("yui", text="Does anyone here play chess?")),
        (0.5, 0.999),
        REMARK,
    ),
    (
        "a-long-remark-too-dear-a-remark-will-do",
        {"talkativeness": 1.0, "openness": 1.0},
        status(refunds=((1.0, 30),)),
        (HUMAN,),
        (0.0, 0.0),
        REMARK,
    ),
    (
        "an-agreeable-persona-nods-while-the-pool-refills",
        {"talkativeness": 1.0, "openness": 0.0, "agreeableness": 1.0},
        status(refunds=((2.0, 60),)),
        (HUMAN,),
        (0.0, 0.999, 0.0),
        NOD,
    ),
]


@pytest.mark.parametrize(
    ("traits", "seen", "lines", "dice", "tier"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_the_tier_a_persona_claims(
    traits: dict[str, float], seen: StatusView, lines: tuple[Line, ...], dice: tuple[float, ...], tier: Tier | None
) -> None:
    plan = plan_turn(persona(**traits), seen, window(*lines), Dice(*dice))

    assert plan.tier is tier, plan
    if tier is not None:
        assert seen.tiers[tier].may_claim  # it never plans a claim the arbiter would refuse


def test_a_persona_that_cannot_afford_what_it_wants_waits_for_the_refund_that_allows_it() -> None:
    seen = status(refunds=((0.5, 5), (2.0, 55)))  # 40 now, 45 in half a second, 100 in two

    plan = plan_turn(persona(talkativeness=1.0, openness=0.0), seen, window(HUMAN), Dice(0.0, 0.999, 0.999))

    assert (plan.tier, plan.wanted) == (None, REMARK)
    assert plan.retry_after == pytest.approx(2.0)
    assert not plan.final


def test_an_addressed_persona_waits_for_the_pool_rather_than_just_nodding() -> None:
    seen = status(priority=(ME,), refunds=((1.5, 60),))

    plan = plan_turn(persona(agreeableness=1.0), seen, window(Line("yui", addressed=[ME])), Dice(0.999))

    assert (plan.tier, plan.wanted) == (None, REMARK)
    assert plan.retry_after == pytest.approx(1.5)


def test_a_quiet_choice_is_marked_so_the_persona_may_look_again() -> None:
    plan = plan_turn(persona(talkativeness=0.0, agreeableness=0.0), status(), window(HUMAN), Dice(0.999))

    assert plan.tier is None and plan.quiet and plan.final


def test_an_intent_is_followed_through_without_new_dice() -> None:
    # A persona that waited for the pool to afford a remark claims it once it can, not deciding afresh.
    plan = plan_turn(persona(talkativeness=0.0), status(), window(HUMAN), Dice(), intent=REMARK)

    assert plan.tier is REMARK


def test_talkative_personas_claim_more_often_than_reserved_ones() -> None:
    def claims(talkativeness: float) -> int:
        rng = random.Random(7)
        traits = {"talkativeness": talkativeness, "agreeableness": 0.0}
        return sum(plan_turn(persona(**traits), status(), window(HUMAN), rng).tier is not None for _ in range(1000))

    quiet, talkative = claims(0.0), claims(1.0)
    assert 0 < quiet < talkative < 1000


def test_bots_talk_less_the_longer_no_human_speaks() -> None:
    def speaks(bot_streak: int) -> int:
        rng = random.Random(11)
        seen = status(bot_streak=bot_streak, idle_cap=10)
        lines = window(HUMAN, Line("ben", REMARK))
        return sum(plan_turn(persona(agreeableness=0.0), seen, lines, rng).tier is not None for _ in range(1000))

    assert speaks(0) > speaks(5) > speaks(9)


# --- anchor ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "anchored"),
    [
        pytest.param((HUMAN, Line("ben", NOD), Line("cho", NOD)), 1, id="nods-do-not-move-the-thread"),
        pytest.param((HUMAN, Line("ben", REMARK), Line("cho", NOD)), 2, id="a-remark-does"),
        pytest.param((HUMAN, Line("ben", LONG)), 2, id="a-long-remark-does"),
        pytest.param((Line("ben", NOD), Line("cho", NOD)), 2, id="only-nods-the-newest"),
    ],
)
def test_anchor_is_the_newest_human_message_or_remark(lines: tuple[Line, ...], anchored: int) -> None:
    assert anchor(window(*lines)).seq == anchored


def test_while_another_persona_has_the_floor_the_others_wait_until_it_ends() -> None:
    seen = status(priority=("ben",), priority_for=12.5)

    plan = plan_turn(persona(talkativeness=1.0), seen, window(Line("yui", addressed=["ben"])), Dice())

    assert (plan.tier, plan.retry_after, plan.floor) == (None, 12.5, True)


@pytest.mark.parametrize(("second_look", "tier"), [(False, None), (True, REMARK)])
def test_a_question_to_everyone_still_unanswered_after_a_silence_is_answered(
    second_look: bool, tier: Tier | None
) -> None:
    question = Line("yui", text="What should I cook tonight?")
    quiet = persona(talkativeness=0.0, agreeableness=0.0, openness=0.0)

    plan = plan_turn(quiet, status(), window(question), Dice(0.9, 0.999), second_look=second_look)

    assert plan.tier is tier, plan


def test_a_question_someone_answered_already_is_not_answered_again_on_the_second_look() -> None:
    lines = window(Line("yui", text="What should I cook tonight?"), Line("ben", REMARK))
    quiet = persona(talkativeness=0.0, agreeableness=0.0, openness=0.0)

    plan = plan_turn(quiet, status(), lines, Dice(0.9), second_look=True)

    assert plan.tier is None


# --- the planner and the arbiter agree -------------------------------------------------------------------------

_BEN = Author("ben", "Ben")
_YUI = Author("yui", "Yui", AuthorKind.HUMAN)
_STEPS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "yui",
                "yui asks aoi",
                "yui asks ben",
                "ben nods",
                "ben remarks",
                "ben claims a nod",
                "ben claims a remark",
                "ben passes",
            ]
        ),
        st.floats(min_value=0.0, max_value=8.0),
    ),
    min_size=1,
    max_size=12,
)


def _play(steps: list[tuple[str, float]]) -> tuple[ChannelState, list[MessageView], float]:
    """A channel after these steps, run through the core as the arbiter runs them, and what was said."""
    state, said, now = ChannelState("lounge", ChannelSettings()), [], NOW
    for index, (step, pause) in enumerate(steps):
        now += pause
        claim = state.claim_of("ben", now)
        if step.startswith("yui"):
            addressed = (step.rsplit(" ", 1)[1],) if "asks" in step else ()
            transition = core.observe(state, _YUI, f"line {index}", now, addressed=addressed)
        elif step in ("ben nods", "ben remarks"):
            tier = Tier.AIZUCHI if step == "ben nods" else Tier.REMARK
            transition = core.consume(state, _BEN, f"line {index}", now, spend_id=f"s{index}", tier=tier)
        elif step.startswith("ben claims") and claim is None:
            tier = Tier.AIZUCHI if step.endswith("nod") else Tier.REMARK
            transition = core.claim(state, "ben", tier, now, claim_id=f"c{index}")
        elif step == "ben passes" and claim is not None:
            transition = core.release(state, "ben", claim.id, now)
        else:
            continue
        state = transition.state
        said += [message_view(message) for message in transition.new_messages]
    return state, said, now


_TRAIT = st.floats(min_value=0.0, max_value=1.0)


@settings(max_examples=400, deadline=None)
@given(steps=_STEPS, seed=st.integers(0, 2**16), talk=_TRAIT, agree=_TRAIT, intent=st.sampled_from([None, *Tier]))
def test_the_planner_plans_only_claims_the_arbiter_grants(
    steps: list[tuple[str, float]], seed: int, talk: float, agree: float, intent: Tier | None
) -> None:
    state, said, now = _play(steps)
    seen = status_view(state, now, persona_id=ME, display_name="Aoi")
    aoi = make_persona(ME, talkativeness=talk, agreeableness=agree, openness=1.0)

    plan = plan_turn(aoi, seen, said, random.Random(seed), intent=intent)

    if plan.tier is not None:
        based_on = said[-1].seq if said else None
        outcome = core.claim(state, ME, plan.tier, now, claim_id="mine", based_on_seq=based_on).outcome
        assert not isinstance(outcome, Refusal), (plan, outcome)
    elif plan.floor:
        # It waits for another's floor exactly when the arbiter would refuse it even a nod for that floor.
        outcome = core.claim(state, ME, Tier.AIZUCHI, now, claim_id="mine").outcome
        assert isinstance(outcome, Refusal) and outcome.reason is RefusalReason.PRIORITY
