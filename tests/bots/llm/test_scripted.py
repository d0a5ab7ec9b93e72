"""The scripted provider: deterministic for a seed, rhythmic, never repeating, and able to play the tool loop."""

from __future__ import annotations

import json
import time
import unicodedata
from collections import Counter
from typing import Any

import pytest

from bots.llm import (
    ChatProvider,
    Completion,
    CompletionRequest,
    DecisionRequest,
    LLMTimeout,
    ScriptedProvider,
    ToolResult,
    ToolSpec,
    Turn,
)

AIZUCHI = ["Right!", "I see.", "Mm-hm.", "No way!", "Oh, nice.", "Fair point.", "Ha, true.", "Really?", "Go on."]
REMARKS = [
    "I went there last spring, the broth was amazing.",
    "Do they still do the late-night menu?",
    "Honestly I prefer soba, but I'd go.",
    "The queue is the worst part, isn't it?",
    "We could all go on Friday after work.",
    "My sister swears by their spicy miso.",
    "Is it the place with the red lanterns?",
    "I never know what to order at ramen shops.",
]
SYSTEM = "You are Hana, cheerful and curious."
LIMITS = {"aizuchi": 12, "remark": 50, "long": 100}


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


async def converse(provider: ScriptedProvider, rounds: int, actions: tuple[Any, ...] = ()) -> list[tuple[str, str]]:
    """Decide ``rounds`` times in a growing conversation; returns (action, text) pairs."""
    turns: list[Turn] = [Turn("user", "Mio: has anyone tried the new ramen place?")]
    said: list[tuple[str, str]] = []
    for index in range(rounds):
        request = DecisionRequest(
            system=SYSTEM,
            turns=tuple(turns[-12:]),
            actions=actions or ("aizuchi", "remark", "long"),
            max_lengths=LIMITS,
        )
        result = await provider.decide(request)
        said.append((result.decision.action, result.decision.text))
        if result.decision.action != "pass":
            turns.append(Turn("assistant", result.decision.text))
        turns.append(Turn("user", f"Kai: message number {index}"))
    return said


def scripted(seed: int = 7, **options: Any) -> ScriptedProvider:
    return ScriptedProvider(AIZUCHI, REMARKS, seed=seed, **options)


# --- decisions ------------------------------------------------------------------------------------------


async def test_the_same_seed_gives_the_same_conversation() -> None:
    assert await converse(scripted(seed=3), 40) == await converse(scripted(seed=3), 40)


async def test_different_seeds_give_different_conversations() -> None:
    assert await converse(scripted(seed=3), 40) != await converse(scripted(seed=4), 40)


@pytest.mark.parametrize("actions", [("aizuchi",), ("remark",), ("aizuchi", "remark"), ("pass",)], ids="+".join)
async def test_only_allowed_actions_are_chosen(actions: tuple[Any, ...]) -> None:
    said = await converse(scripted(), 60, actions)

    assert {action for action, _ in said} <= {"pass", *actions}


async def test_it_mostly_takes_the_largest_move_offered_now_and_then_a_smaller_one_or_a_pass() -> None:
    # The runtime offers moves up to the tier it claimed, so the largest offered is what it made room for; a
    # conversation's rhythm comes from which tier the runtime claims, the wording from here.
    said = await converse(scripted(seed=11), 300)

    counts = Counter(action for action, _ in said)
    assert counts["long"] / 300 >= 0.6
    assert (counts["aizuchi"] + counts["remark"]) / 300 >= 0.1
    assert 1 <= counts["pass"] <= 0.1 * 300


@pytest.mark.parametrize(("offered", "largest"), [(("aizuchi",), "aizuchi"), (("aizuchi", "remark"), "remark")])
async def test_offered_a_claimed_tier_it_nearly_always_speaks_in_it(offered: tuple[str, ...], largest: str) -> None:
    said = await converse(scripted(seed=3), 200, actions=offered)

    counts = Counter(action for action, _ in said)
    assert counts[largest] / 200 >= 0.7
    assert counts["pass"] / 200 <= 0.05


@pytest.mark.parametrize("seed", range(5))
async def test_no_line_comes_back_within_its_recent_window(seed: int) -> None:
    provider = scripted(seed=seed, recent_window=6)
    said = await converse(provider, 120)

    # A long remark is two sample remarks run together: each piece counts as said.
    pieces = [
        sorted((line for line in AIZUCHI + REMARKS if line in text), key=text.index)
        for action, text in said
        if action != "pass"
    ]
    window: list[str] = []
    for line in pieces:
        assert line, "every spoken line is made of sample lines"
        assert not set(line) & set(window), f"{line} repeats one of the last six lines said: {window}"
        window = (window + line)[-6:]


@pytest.mark.parametrize(
    "turns",
    [
        (Turn("user", "Mio: Right!"), Turn("assistant", "The queue is the worst part.")),
        (Turn("user", "Recent conversation:\n[Mio] Right!\n[you] The queue is the worst part.\n\nYour move?"),),
    ],
    ids=["turn per line", "one transcript"],
)
async def test_a_line_already_in_the_conversation_is_never_said(turns: tuple[Turn, ...]) -> None:
    provider = ScriptedProvider(["Right!", "I see."], ["The queue is the worst part."], seed=1)

    for _ in range(20):
        result = await provider.decide(DecisionRequest(system=SYSTEM, turns=turns, actions=("aizuchi", "remark")))
        assert result.decision.text not in ("Right!", "The queue is the worst part.")


async def test_with_nothing_fresh_left_it_passes() -> None:
    provider = ScriptedProvider(["Right!"], ["Sure."], seed=1, recent_window=4)
    turns = (Turn("user", "Kai: well?"),)

    results = [
        (await provider.decide(DecisionRequest(system=SYSTEM, turns=turns, actions=("aizuchi", "remark")))).decision
        for _ in range(6)
    ]

    assert [decision.text for decision in results if decision.action != "pass"] in (
        ["Right!", "Sure."],
        ["Sure.", "Right!"],
    )
    assert results[-1].action == "pass"


async def test_lines_fit_their_tier_in_display_columns() -> None:
    provider = ScriptedProvider(
        ["なるほど", "へえ、すごい!", "うんうん、それでそれで?"],
        ["それ、私も気になってた。", "今度みんなで行こうよ。", "駅前のラーメン屋さんって、あの赤いのれんのお店?"],
        seed=5,
    )
    limits = {"aizuchi": 10, "remark": 30, "long": 60}

    for _ in range(40):
        result = await provider.decide(
            DecisionRequest(system=SYSTEM, turns=(Turn("user", "ミオ:どうする?"),), max_lengths=limits)
        )
        decision = result.decision
        if decision.action != "pass":
            assert width(decision.text) <= limits[decision.action]
            assert " " not in decision.text  # Japanese sentences are joined without a space


async def test_token_counts_grow_with_the_prompt_and_the_answer() -> None:
    provider = scripted()
    short = DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), actions=("remark",))
    long = DecisionRequest(system=SYSTEM, turns=tuple(Turn("user", "a fairly long line " * 10) for _ in range(10)))

    first = await provider.decide(short)
    second = await provider.decide(long)

    assert 0 < first.usage.prompt_tokens < second.usage.prompt_tokens
    assert first.usage.completion_tokens > len(first.decision.text) // 8


async def test_latency_pauses_each_call() -> None:
    provider = scripted(latency_s=0.04)
    started = time.monotonic()

    await provider.decide(DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),)))

    assert time.monotonic() - started >= 0.03


async def test_a_call_that_would_outlast_the_time_left_times_out_when_the_time_is_up() -> None:
    provider = scripted(latency_s=5.0)
    started = time.monotonic()

    with pytest.raises(LLMTimeout):
        await provider.decide(DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), time_left_s=0.05))
    with pytest.raises(LLMTimeout):
        await provider.complete(CompletionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), time_left_s=0.05))

    assert time.monotonic() - started < 1.0


async def test_a_call_within_the_time_left_answers_and_none_left_is_a_timeout() -> None:
    provider = scripted()

    result = await provider.decide(DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), time_left_s=1.0))

    assert result.decision.action in ("pass", "aizuchi", "remark", "long")
    with pytest.raises(LLMTimeout):
        await provider.decide(DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), time_left_s=0.0))


async def test_the_base_class_decide_works_through_the_scripted_decide_tool() -> None:
    # ChatProvider.decide forces a "decide" tool call through complete(); the scripted provider answers it too.
    provider = scripted()
    request = DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), actions=("aizuchi",))

    actions = {(await ChatProvider.decide(provider, request)).decision.action for _ in range(30)}

    assert actions <= {"pass", "aizuchi"}
    assert "aizuchi" in actions


async def test_without_tools_it_answers_with_a_line() -> None:
    completion = await scripted().complete(CompletionRequest(system=SYSTEM, turns=(Turn("user", "hi"),)))

    assert completion.text in AIZUCHI + REMARKS
    assert completion.tool_calls == ()
    assert completion.stop_reason == "end_turn"


# --- the reference design's tool loop -------------------------------------------------------------------

OUR_TOOLS = (
    ToolSpec("history", "Recent messages.", {"type": "object", "properties": {}}),
    ToolSpec("status", "The pool's level and tiers.", {"type": "object", "properties": {}}),
    ToolSpec(
        "consume",
        "Spend and speak.",
        {
            "type": "object",
            "properties": {"tier": {"type": "string"}, "text": {"type": "string"}},
            "required": ["tier", "text"],
        },
    ),
)
REFERENCE_TOOLS = (
    *OUR_TOOLS[:2],
    ToolSpec(
        "consume",
        "Spend and speak.",
        {
            "type": "object",
            "properties": {"amount": {"type": "number"}, "message": {"type": "string"}, "from": {"type": "string"}},
        },
    ),
)
TIERS = {
    "aizuchi": {"cost": 5, "max_length": 12},
    "remark": {"cost": 60, "max_length": 50},
    "long": {"cost": 80, "max_length": 100},
}


class FakeTools:
    """What the runtime would return for each tool, as JSON text, recording the calls."""

    def __init__(
        self, level: int, *, grant: bool = True, history: tuple[str, ...] = (), reference: bool = False
    ) -> None:
        self.level = level
        self.grant = grant
        self.history = history
        # The reference design's result shapes ("resource", "costs", "success") instead of the arbiter's.
        self.reference = reference
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        self.calls.append((name, arguments))
        if self.reference:
            if name == "history":
                return json.dumps({"history": [{"from": "Mio", "message": text} for text in self.history]})
            if name == "status":
                costs = {tier: info["cost"] for tier, info in TIERS.items()}
                return json.dumps({"resource": self.level, "capacity": 100, "costs": costs})
            return json.dumps({"success": self.grant, "resource": self.level})
        if name == "history":
            return json.dumps({"messages": [{"author_name": "Mio", "text": text} for text in self.history]})
        if name == "status":
            return json.dumps({"level": self.level, "capacity": 100, "paused": False, "tiers": TIERS})
        return json.dumps({"granted": self.grant, "level": self.level})


async def run_loop(provider: ScriptedProvider, tools: tuple[ToolSpec, ...], fake: FakeTools) -> Completion:
    """The runtime's tool-dispatch loop, at most eight steps."""
    turns: list[Turn] = [Turn("user", "Mio: has anyone tried the new ramen place?")]
    for _ in range(8):
        completion = await provider.complete(CompletionRequest(system=SYSTEM, turns=tuple(turns), tools=tools))
        if not completion.tool_calls:
            return completion
        results = tuple(
            ToolResult(call.id, call.name, fake.run(call.name, dict(call.arguments))) for call in completion.tool_calls
        )
        turns += [Turn("assistant", tool_calls=completion.tool_calls), Turn("user", tool_results=results)]
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("seed", range(6))
async def test_the_tool_loop_goes_history_status_consume_then_text(seed: int) -> None:
    fake = FakeTools(level=100)

    final = await run_loop(scripted(seed=seed), OUR_TOOLS, fake)

    names = [name for name, _ in fake.calls]
    assert names[:2] == ["history", "status"]
    if len(names) == 3:
        _, consumed = fake.calls[2]
        assert consumed["tier"] in TIERS
        assert width(consumed["text"]) <= TIERS[consumed["tier"]]["max_length"]
        assert final.text == consumed["text"]
    else:
        assert names == ["history", "status"]  # it chose to pass
    assert final.tool_calls == ()
    assert final.stop_reason == "end_turn"


async def test_the_tool_loop_consumes_over_many_seeds_and_only_what_the_level_affords() -> None:
    tiers_spent: Counter[str] = Counter()
    for seed in range(40):
        fake = FakeTools(level=30)
        await run_loop(scripted(seed=seed), OUR_TOOLS, fake)
        tiers_spent.update(arguments["tier"] for name, arguments in fake.calls if name == "consume")

    assert set(tiers_spent) == {"aizuchi"}  # 30 affords only the 5-unit nod
    assert tiers_spent["aizuchi"] >= 20


async def test_the_tool_loop_does_not_consume_when_nothing_is_affordable() -> None:
    fake = FakeTools(level=3)

    final = await run_loop(scripted(), OUR_TOOLS, fake)

    assert [name for name, _ in fake.calls] == ["history", "status"]
    assert final.text == "(pass)"


async def test_the_tool_loop_retries_a_refused_spend_once_cheaper() -> None:
    for seed in range(30):
        fake = FakeTools(level=100, grant=False)
        await run_loop(scripted(seed=seed), OUR_TOOLS, fake)
        consumes = [arguments for name, arguments in fake.calls if name == "consume"]
        assert len(consumes) <= 2
        if len(consumes) == 2:
            cost = [TIERS[arguments["tier"]]["cost"] for arguments in consumes]
            assert cost[1] < cost[0]


async def test_the_tool_loop_skips_lines_the_history_already_has() -> None:
    fake = FakeTools(level=100, history=tuple(AIZUCHI[:-1]))
    for seed in range(20):
        fake.calls.clear()
        await run_loop(scripted(seed=seed), OUR_TOOLS, fake)
        spoken = [arguments["text"] for name, arguments in fake.calls if name == "consume"]
        assert not set(spoken) & set(AIZUCHI[:-1])


@pytest.mark.parametrize(("level", "amounts"), [(100, {5, 60, 80}), (30, {5})])
async def test_the_tool_loop_speaks_the_reference_designs_shapes(level: int, amounts: set[int]) -> None:
    history = tuple(REMARKS[:4])
    fake = FakeTools(level=level, history=history, reference=True)
    provider = ScriptedProvider(AIZUCHI, REMARKS, seed=2, speaker="companion_hana")
    for _ in range(12):
        await run_loop(provider, REFERENCE_TOOLS, fake)

    consumes = [arguments for name, arguments in fake.calls if name == "consume"]
    assert consumes
    for arguments in consumes:
        assert set(arguments) == {"amount", "message", "from"}
        assert arguments["amount"] in amounts
        assert arguments["from"] == "companion_hana"
        assert arguments["message"] not in history
