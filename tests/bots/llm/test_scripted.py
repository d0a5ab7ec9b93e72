"""The scripted provider: it answers what was said, by kind, in the persona's language, from the scene the runtime
hands it (never the prompt's words); deterministic for a seed, never repeating a remark of its last 30 lines nor
its previous nod, costing no tokens, and able to play the tool loop."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
import time
import unicodedata
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from arbiter.contract import AuthorKind, MessageView, StatusView, Tier, display_length
from bots.language.text import is_emoji, nod_repeats, repeats
from bots.llm import (
    ChatProvider,
    Completion,
    CompletionRequest,
    DecisionRequest,
    LLMTimeout,
    ScriptedProvider,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    estimate_prompt_tokens,
)
from bots.llm.base import decision_tool
from bots.llm.scene import Scene, SceneLine
from bots.llm.scripted import GENERIC, arithmetic, content_word
from bots.persona import load_persona
from bots.prompt import persona_prompt, rules_prompt, transcript_turn
from bots.scene import scene_of
from tests.support.lines import built_from, set_of
from tests.support.status import status_for

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bots.llm.scripted.words import Language
    from bots.persona import Persona

PERSONAS = Path(__file__).resolve().parents[3] / "personas"
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
PROMPT = (Turn("user", "(the prompt: the stand-in does not read it)"),)
LIMITS = {"aizuchi": 12, "remark": 50, "long": 100}
LENGTHS = {"aizuchi": 24, "remark": 120, "long": 240}  # the arbiter's defaults


def width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(char) in ("W", "F") else 1 for char in text)


def shipped(persona_id: str) -> Persona:
    return load_persona(PERSONAS / f"{persona_id}.toml")


def scripted(seed: int = 7, **options: Any) -> ScriptedProvider:
    return ScriptedProvider(AIZUCHI, REMARKS, seed=seed, **options)


def scene(*lines: str, asked: int | None = None) -> Scene:
    """A conversation as the runtime hands it: "Name: text" is a person's line, "Name (persona): text" another
    persona's, "you: text" (or "you (nod): text") the persona's own."""
    parsed = []
    for line in lines:
        speaker, _, text = line.partition(": ")
        if speaker.startswith("you"):
            parsed.append(SceneLine("Hana", "you", text, nod=speaker == "you (nod)"))
        elif speaker.endswith(" (persona)"):
            parsed.append(SceneLine(speaker.removesuffix(" (persona)"), "persona", text))
        else:
            parsed.append(SceneLine(speaker, "person", text))
    return Scene(names=("Hana",), lines=tuple(parsed), asked=asked)


def decide(scene: Scene | None = None, **options: Any) -> DecisionRequest:
    return DecisionRequest(system=SYSTEM, turns=PROMPT, scene=scene, **options)


async def converse(provider: ScriptedProvider, rounds: int, actions: tuple[Any, ...] = ()) -> list[tuple[str, str]]:
    """Decide ``rounds`` times in a growing conversation; returns (action, text) pairs."""
    lines = ["Mio: the new ramen place opened today."]
    said: list[tuple[str, str]] = []
    for index in range(rounds):
        request = decide(scene(*lines[-12:]), actions=actions or ("aizuchi", "remark", "long"), max_lengths=LIMITS)
        result = await provider.decide(request)
        said.append((result.decision.action, result.decision.text))
        if result.decision.action != "pass":
            lines.append(f"you{' (nod)' if result.decision.action == 'aizuchi' else ''}: {result.decision.text}")
        lines.append(f"Kai: message number {index}")
    return said


# --- the room, as the runtime asks ----------------------------------------------------------------------


def status(priority: Sequence[str] = ()) -> StatusView:
    return status_for("aoi", priority=priority)


class Room:
    """A channel's window as the runtime sends it: one person, Yui, and the persona; the persona's own lines go
    into the window too, as the arbiter records them."""

    def __init__(self, persona: Persona) -> None:
        self.persona = persona
        self.window: list[MessageView] = []
        self.action = "pass"  # the last move it made

    def _add(self, author: str, kind: AuthorKind, name: str, text: str, addressed: Sequence[str]) -> None:
        seq = len(self.window) + 1
        self.window.append(
            MessageView(
                seq=seq,
                author_id=author,
                author_kind=kind,
                author_name=name,
                text=text,
                at=0,
                addressed=list(addressed),
            )
        )
        self.window = self.window[-12:]

    def request(self, text: str, *, to_it: bool = False, tier: str = "remark") -> DecisionRequest:
        self._add("yui", AuthorKind.HUMAN, "Yui", text, [self.persona.id] if to_it else [])
        offered = ("aizuchi", "remark", "long")[: ("aizuchi", "remark", "long").index(tier) + 1]
        if to_it and tier != "aizuchi":
            offered = offered[1:]  # as the runtime: asked directly, answer (or pass), do not just nod
        lengths = {action: LENGTHS[action] for action in offered}
        actions = ("pass", *offered)
        shown = status([self.persona.id] if to_it else [])
        return DecisionRequest(
            system=persona_prompt(self.persona) + "\n\n" + rules_prompt(self.persona, lengths, ""),
            turns=(transcript_turn(self.persona, self.window, shown, moves=actions, max_lengths=lengths),),
            actions=actions,  # type: ignore[arg-type]
            max_lengths=lengths,
            scene=scene_of(self.persona, self.window, shown),
        )

    async def ask(self, provider: ScriptedProvider, text: str, *, to_it: bool = False, tier: str = "remark") -> str:
        """Yui says ``text``; the persona answers at ``tier`` (it never passes on all of a few tries)."""
        for _ in range(4):
            decision = (await provider.decide(self.request(text, to_it=to_it, tier=tier))).decision
            if decision.action != "pass":
                self.said(decision.action, decision.text)
                self.action = decision.action
                return decision.text
        raise AssertionError(f"{self.persona.id} passed on {text!r} four times")

    def said(self, action: str, text: str) -> None:
        self._add(self.persona.id, AuthorKind.PERSONA, self.persona.display_name, text, [])
        self.window[-1] = self.window[-1].model_copy(update={"tier": Tier(action)})


# --- it answers what was said ---------------------------------------------------------------------------

KIND_CASES = [
    # persona, message, addressed, the set the answer comes from
    ("rin", "Hi everyone!", False, "greetings"),
    ("rin", "Good morning, Rin!", True, "greetings"),
    ("rin", "Thanks, Rin!", True, "thanks"),
    ("rin", "Rin, what are you working on these days?", True, "unsure"),
    ("rin", "Rin, do you like jazz?", True, "answers"),
    ("juno", "Juno, what's your favourite book?", True, "unsure"),
    ("juno", "What's everyone reading?", False, "unsure"),
    ("rin", "Gotta go, bye all!", False, "farewells"),
    ("theo", "Hello Theo.", True, "greetings"),
    ("theo", "Theo, is it safe to deploy now?", True, "answers"),
    ("theo", "thanks theo", True, "thanks"),
    ("theo", "Good night everyone.", False, "farewells"),
    ("hana", "こんにちは!", False, "greetings"),
    ("hana", "はなちゃん、ありがとう!", True, "thanks"),
    ("hana", "はなちゃん、最近なにしてるの？", True, "unsure"),
    ("hana", "はなちゃん、もう行った?", True, "answers"),
    ("hana", "またね!", False, "farewells"),
    ("mio", "みおさん、こんばんは。", True, "greetings"),
    ("mio", "みおさん、おすすめの本はありますか？", True, "unsure"),
    ("mio", "みおさん、おすすめの本は何ですか?", True, "unsure"),
    ("mio", "おやすみなさい", False, "farewells"),
    ("sora", "そらさん、ありがとうございます!", True, "thanks"),
]


@pytest.mark.parametrize(("persona_id", "text", "to_it", "kind"), KIND_CASES, ids=[c[1] for c in KIND_CASES])
@pytest.mark.parametrize("seed", range(3))
async def test_it_answers_the_kind_of_message_in_the_personas_language(
    persona_id: str, text: str, to_it: bool, kind: str, seed: int
) -> None:
    persona = shipped(persona_id)
    answer = await Room(persona).ask(ScriptedProvider.for_persona(persona, seed=seed), text, to_it=to_it)

    assert built_from(answer, set_of(persona, kind)), f"{answer!r} is not from {kind}"
    assert (width(answer) > len(answer)) is (persona.language == "ja")  # Japanese for a Japanese persona


async def test_it_reads_the_scene_so_rewording_the_prompt_changes_nothing() -> None:
    rin = shipped("rin")
    request = Room(rin).request("Rin, what's your favourite book?", to_it=True)
    reworded = dataclasses.replace(
        request, system="Another prompt entirely.", turns=(Turn("user", 'Yui asked you: "Do you like jazz?"'),)
    )
    same, other = ScriptedProvider.for_persona(rin, seed=5), ScriptedProvider.for_persona(rin, seed=5)

    for _ in range(10):
        answer = (await same.decide(request)).decision
        assert answer == (await other.decide(reworded)).decision
        assert answer.action == "pass" or built_from(answer.text, set_of(rin, "unsure")), answer


@pytest.mark.parametrize(
    ("persona_id", "text", "number"),
    [
        ("rin", "Rin, what's 17 times 3?", "51"),
        ("theo", "Theo, what is 1200 divided by 16?", "75"),
        ("juno", "Juno: 2 + 3 * 4?", "14"),
        ("hana", "はなちゃん、17×3は？", "51"),
        ("sora", "そらさん、100わる8は?", "12.5"),
    ],
)
@pytest.mark.parametrize("tier", ["aizuchi", "remark", "long"])
async def test_simple_arithmetic_put_to_it_gets_the_number(persona_id: str, text: str, number: str, tier: str) -> None:
    persona = shipped(persona_id)
    for seed in range(3):
        answer = await Room(persona).ask(ScriptedProvider.for_persona(persona, seed=seed), text, to_it=True, tier=tier)

        assert re.search(rf"(?<![\d.]){re.escape(number)}(?![\d])", answer), answer


async def test_a_question_to_everyone_gets_an_answer_and_a_statement_a_remark() -> None:
    rin = shipped("rin")
    remarks = [*rin.samples.remarks, *set_of(rin, "echoes"), *set_of(rin, "questions")]
    cases = [
        ("Has anyone tried baking sourdough?", set_of(rin, "answers"), set_of(rin, "answers")),
        ("What's everyone baking this week?", set_of(rin, "unsure"), set_of(rin, "unsure")),
        ("I baked sourdough yesterday.", remarks, rin.samples.aizuchi),
    ]
    for seed in range(6):
        room, provider = Room(rin), ScriptedProvider.for_persona(rin, seed=seed)
        for text, lines, nods in cases:
            said = await room.ask(provider, text)
            # Now and then it nods instead of taking the remark it claimed, as a model would: a question's nod is
            # a short answer, a statement's a nod.
            assert built_from(said, lines if room.action == "remark" else nods), (text, said)
        assert built_from(await room.ask(provider, "Nice.", tier="aizuchi"), rin.samples.aizuchi)


async def test_an_echo_is_built_on_a_word_of_the_message() -> None:
    hana = shipped("hana")
    echoes = set()
    for seed in range(40):
        answer = await Room(hana).ask(ScriptedProvider.for_persona(hana, seed=seed), "昨日サワードウを焼いたよ")
        if "サワードウ" in answer:
            echoes.add(answer)
            assert built_from(answer, hana.samples.echoes), answer
    assert len(echoes) >= 3


async def test_a_greeting_names_whom_it_answers() -> None:
    rin = shipped("rin")
    named = [
        await Room(rin).ask(ScriptedProvider.for_persona(rin, seed=seed), "Hello!", tier="remark") for seed in range(30)
    ]

    assert any("Yui" in line for line in named)
    assert "{name}" not in " ".join(named)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What's 17 times 3?", "51"),
        ("17×3は？", "51"),
        ("what is 12 + 30 * 2", "72"),
        ("10 / 4?", "2.5"),
        ("17かける3は？", "51"),
        ("５足す７は？", "12"),
        ("Is the 9-5 grind worth it?", None),  # a range, not a sum
        ("Meet on 3/4?", None),  # a date
        ("What's 3 divided by 0?", None),
        ("How many times did you go?", None),
    ],
)
def test_arithmetic(text: str, expected: str | None) -> None:
    assert arithmetic(text) == expected


@pytest.mark.parametrize(
    ("text", "language", "word"),
    [
        ("I baked sourdough yesterday.", "en", "sourdough"),
        ("Rin, what are you building?", "en", "building"),
        ("Sourdough is hard.", "en", "sourdough"),
        ("The API keeps timing out", "en", "API"),
        ("We repainted the kitchen green.", "en", "kitchen"),  # a likely noun before a verb
        ("It just happens sometimes, you know.", "en", None),  # a verb is no word to build on
        ("昨日サワードウを焼いたよ", "ja", "サワードウ"),
        ("分散システムについて教えて", "ja", "分散システム"),
        ("ok", "en", None),
        ("それな", "ja", None),
        # Never a word carried over into another language.
        ("Catchの話、聞いたことある?", "ja", None),
        ("I watched Catch Me If You Can", "ja", None),
        ("昨日サワードウを焼いたよ", "en", None),
    ],
)
def test_content_word(text: str, language: Language, word: str | None) -> None:
    assert content_word(text, ["Rin"], language) == word


# --- it never repeats -----------------------------------------------------------------------------------

SCRIPT = [
    ("Hi everyone!", False),
    ("I baked sourdough yesterday.", False),
    ("{name}, what are you up to?", True),
    ("Thanks, {name}!", True),
    ("The new library downtown opened today.", False),
    ("What's 17 times 3?", False),
    ("Has anyone been to the coast lately?", False),
    ("My bike got a flat tyre on the bridge.", False),
    ("{name}, why do you like it?", True),
    ("Bye for now!", False),
    ("Okay.", False),
    ("We repainted the kitchen green.", False),
]
SCRIPT_JA = [
    ("こんにちは!", False),
    ("昨日サワードウを焼いたよ", False),
    ("{name}、最近なにしてるの？", True),
    ("ありがとう、{name}!", True),
    ("駅前に新しい図書館ができたよ。", False),
    ("17×3は？", False),
    ("最近、海に行った人いる？", False),
    ("自転車がパンクしちゃった。", False),
    ("{name}、どうしてそれが好きなの？", True),
    ("またね!", False),
    ("うん。", False),
    ("台所を緑に塗り替えたんだ。", False),
]


@pytest.mark.parametrize("persona_id", ["rin", "theo", "juno", "hana", "mio", "sora"])
@pytest.mark.parametrize("seed", range(2))
async def test_over_a_long_run_no_remark_repeats_its_last_30_lines_and_no_nod_its_last_nod(
    persona_id: str, seed: int
) -> None:
    # bots.language.text's rule, by tier: a remark is never one of its own last 30 lines (nods included) nor a line
    # shown; a nod may come again, only not as its previous nod nor as the words of the message it answers.
    persona = shipped(persona_id)
    provider = ScriptedProvider.for_persona(persona, seed=seed)
    room = Room(persona)
    script = SCRIPT_JA if persona.language == "ja" else SCRIPT
    said: list[str] = []
    last_nod: str | None = None
    for index in range(120):
        text, to_it = script[index % len(script)]
        text = text.replace("{name}", persona.display_name)
        tier = ("aizuchi", "remark", "aizuchi", "long", "remark")[index % 5]
        request = room.request(text, to_it=to_it, tier=tier)
        shown = [m.text for m in room.window]
        decision = (await provider.decide(request)).decision
        if decision.action == "pass":
            continue
        if decision.action == "aizuchi":
            assert not nod_repeats(decision.text, last_nod=last_nod, answering=text), (decision.text, last_nod, text)
            last_nod = decision.text
        else:
            assert not repeats(decision.text, said[-30:]), f"{decision.text!r} repeats one of {said[-30:]}"
            assert decision.text not in shown
        said.append(decision.text)
        room.said(decision.action, decision.text)
    assert len(said) >= 100  # it found something to say nearly every time


EMOJI_NODS = ("🙂", "👍", "👀", "Hm.", "Fair.", "Sure.")


@pytest.mark.parametrize("seed", range(3))
async def test_over_200_nods_it_keeps_choosing_among_all_of_its_nods_emoji_included(seed: int) -> None:
    # Its own nods shown in the turns, said within its last 30 lines: none is used up, each keeps coming up (an
    # emoji is not a line of no words that every other emoji repeats), and no nod comes twice running.
    provider = ScriptedProvider(EMOJI_NODS, REMARKS, seed=seed, language="en")

    said = await converse(provider, 240, actions=("aizuchi",))

    nods = [text for action, text in said if action == "aizuchi"][:200]
    assert len(nods) == 200
    assert set(nods) == set(EMOJI_NODS)  # its own, never a generic one
    for quarter in range(4):
        assert set(nods[quarter * 50 : (quarter + 1) * 50]) == set(EMOJI_NODS), f"quarter {quarter}"
    counts = Counter(nods)
    assert min(counts.values()) >= 200 / len(EMOJI_NODS) / 2, counts  # about a sixth each
    assert all(a != b for a, b in itertools.pairwise(nods))


NEWS = [
    "I baked sourdough yesterday.",
    "The new library downtown opened today.",
    "My bike got a flat tyre on the bridge.",
    "We repainted the kitchen green.",
]


@pytest.mark.parametrize("seed", range(3))
async def test_rin_keeps_nodding_with_all_of_her_nods_in_the_room_her_emoji_too(seed: int) -> None:
    # The shipped persona that reacts with emoji on Discord, nodding 200 times to Yui's news as the runtime asks.
    rin = shipped("rin")
    provider = ScriptedProvider.for_persona(rin, seed=seed)
    room = Room(rin)

    nods = [await room.ask(provider, NEWS[index % len(NEWS)], tier="aizuchi") for index in range(200)]

    counts = Counter(nods)
    assert set(counts) == set(rin.samples.aizuchi)  # every one of hers, never a generic one
    emoji = [line for line in rin.samples.aizuchi if is_emoji(line)]
    assert len(emoji) >= 3
    assert all(counts[line] >= 4 for line in emoji), counts  # about 200 / 19 each
    assert all(a != b for a, b in itertools.pairwise(nods))


async def test_a_nod_is_not_the_message_it_answers_nor_its_previous_nod_again() -> None:
    provider = ScriptedProvider(["Right!", "I see.", "Sure."], REMARKS, seed=1)
    # Its previous nod is in the conversation shown (whatever it said elsewhere since: the rule is per conversation);
    # another's "Sure." earlier on is no bar to a nod.
    shown = scene("Mio: Sure.", "you (nod): I see.", "Mio: Right!")

    nods = [
        (await provider.decide(decide(shown, actions=("aizuchi",), allow_pass=False))).decision.text for _ in range(20)
    ]

    assert nods == ["Sure."] * 20  # not an echo of what it answers, nor its previous nod again


def test_the_language_is_not_guessed_japanese_from_wide_emoji() -> None:
    assert ScriptedProvider(["🙂", "👍", "Hm."], ["Sure, why not."], seed=0).language == "en"


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
    said = await converse(scripted(seed=11, recent_window=6), 300)  # a short memory: few lines, many turns

    counts = Counter(action for action, _ in said)
    assert counts["long"] / 300 >= 0.6
    assert (counts["aizuchi"] + counts["remark"]) / 300 >= 0.1
    assert 1 <= counts["pass"] <= 0.1 * 300


@pytest.mark.parametrize(("offered", "largest"), [(("aizuchi",), "aizuchi"), (("aizuchi", "remark"), "remark")])
async def test_offered_a_claimed_tier_it_nearly_always_speaks_in_it(offered: tuple[str, ...], largest: str) -> None:
    said = await converse(scripted(seed=3, recent_window=6), 200, actions=offered)

    counts = Counter(action for action, _ in said)
    assert counts[largest] / 200 >= 0.7
    assert counts["pass"] / 200 <= 0.05


@pytest.mark.parametrize(
    "shown",
    [
        scene("Mio: Right!", "you: The queue is the worst part."),
        Scene(
            names=("Hana",),
            lines=(SceneLine("Mio", "person", "Right!"),),
            earlier_own=("The queue is the worst part.",),
        ),
    ],
    ids=["in the lines shown", "said before them"],
)
async def test_a_remark_already_in_the_conversation_is_never_said(shown: Scene) -> None:
    provider = ScriptedProvider(["Right!", "I see.", "Sure."], ["The queue is the worst part.", "Ramen!"], seed=1)

    for _ in range(20):
        result = await provider.decide(decide(shown, actions=("aizuchi", "remark")))
        assert result.decision.text != "The queue is the worst part."


async def test_an_echo_template_someone_else_just_used_is_not_used_again() -> None:
    # Another persona's "Sourdough? Tell me more." and ours "Pizza? Tell me more." would read as a repeat.
    provider = ScriptedProvider(["Hm."], ["One."], echoes=["{word}? Tell me more."], seed=1)
    shown = scene("Ben (persona): Sourdough? Tell me more.", "Yui: I made pizza instead.")

    for _ in range(10):
        decision = (await provider.decide(decide(shown, actions=("remark",)))).decision
        assert "Tell me more" not in decision.text


async def test_with_nothing_that_fits_it_passes() -> None:
    provider = ScriptedProvider(["Right!", "Sure."], ["That is a fine idea."], seed=1)
    request = decide(scene("Kai: ok."), actions=("aizuchi", "remark"), max_lengths={"aizuchi": 2, "remark": 3})

    assert (await provider.decide(request)).decision.action == "pass"


async def test_when_a_pass_is_not_offered_it_always_says_something() -> None:
    # An addressed persona's second try (allow_pass off): better a line said before than no answer.
    provider = ScriptedProvider(["Right!", "Sure.", "Okay."], ["That is a fine idea.", "Let's go.", "Why not."], seed=1)
    request = decide(scene("Kai: ok."), actions=("remark",), max_lengths={"remark": 20}, allow_pass=False)

    decisions = [(await provider.decide(request)).decision for _ in range(40)]

    assert all(decision.action == "remark" and decision.text for decision in decisions)


async def test_lines_fit_their_tier_in_display_columns() -> None:
    provider = ScriptedProvider(
        ["なるほど", "へえ、すごい!", "うんうん、それでそれで?"],
        ["それ、私も気になってた。", "今度みんなで行こうよ。", "駅前のラーメン屋さんって、あの赤いのれんのお店?"],
        seed=5,
    )
    limits = {"aizuchi": 10, "remark": 30, "long": 60}

    for _ in range(40):
        result = await provider.decide(decide(scene("ミオ: どうする?"), max_lengths=limits))
        decision = result.decision
        if decision.action != "pass":
            assert width(decision.text) <= limits[decision.action]
            assert " " not in decision.text  # Japanese sentences are joined without a space


def test_the_language_comes_from_the_persona_or_its_lines() -> None:
    assert ScriptedProvider.for_persona(shipped("mio"), seed=0).language == "ja"
    assert ScriptedProvider(["なるほど"], ["そうですね。"], seed=0).language == "ja"
    assert ScriptedProvider(AIZUCHI, REMARKS, seed=0).language == "en"
    assert ScriptedProvider(seed=0).aizuchi == GENERIC["en"].aizuchi  # no lines: generic ones


# --- what it costs --------------------------------------------------------------------------------------


async def test_its_requests_cost_no_tokens() -> None:
    provider = scripted()
    request = decide(scene("Kai: hi"), actions=("remark",))

    assert (await provider.decide(request)).usage == Usage(0, 0)
    assert (await provider.complete(CompletionRequest(system=SYSTEM, turns=request.turns))).usage == Usage(0, 0)
    fake = FakeTools(level=100)
    await run_loop(provider, OUR_TOOLS, fake)
    assert fake.calls  # the loop ran, and every step of it was free (checked in run_loop)


def test_a_requests_prompt_tokens_are_estimated_by_its_size() -> None:
    short = DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), actions=("remark",))
    long = DecisionRequest(system=SYSTEM, turns=tuple(Turn("user", "a fairly long line " * 10) for _ in range(10)))
    wide = DecisionRequest(system=SYSTEM, turns=(Turn("user", "あ" * 40),), actions=("remark",))
    completion = CompletionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), tools=OUR_TOOLS)

    assert 0 < estimate_prompt_tokens(short) < estimate_prompt_tokens(long)
    assert estimate_prompt_tokens(wide) >= estimate_prompt_tokens(short) + 38  # about a token per wide character
    assert estimate_prompt_tokens(completion) > estimate_prompt_tokens(CompletionRequest(SYSTEM, (Turn("user", "hi"),)))


# --- time -----------------------------------------------------------------------------------------------


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


# --- complete() -----------------------------------------------------------------------------------------


async def test_the_base_class_decide_works_through_the_scripted_decide_tool() -> None:
    # ChatProvider.decide forces a "decide" tool call through complete(); the scripted provider answers it too.
    provider = scripted()
    # The tool offers every action; the prompt's last line (the scene's moves) says which this claim allows.
    shown = dataclasses.replace(scene("Kai: nice."), moves=("pass", "aizuchi"))
    request = DecisionRequest(system=SYSTEM, turns=(Turn("user", "hi"),), actions=("aizuchi",), scene=shown)

    actions = {(await ChatProvider.decide(provider, request)).decision.action for _ in range(30)}

    assert actions <= {"pass", "aizuchi"}
    assert "aizuchi" in actions


async def test_the_decide_tool_answers_the_question_in_the_scene() -> None:
    rin = shipped("rin")
    provider = ScriptedProvider.for_persona(rin, seed=2)
    request = Room(rin).request("Rin, what's 6 times 7?", to_it=True)

    decision = (await ChatProvider.decide(provider, request)).decision

    assert "42" in decision.text


async def test_without_tools_it_answers_with_a_line() -> None:
    completion = await scripted().complete(CompletionRequest(system=SYSTEM, turns=PROMPT, scene=scene("Kai: nice.")))

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
        assert completion.usage == Usage(0, 0)
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


async def test_the_tool_loop_skips_remarks_the_history_already_has() -> None:
    fake = FakeTools(level=100, history=tuple(REMARKS[:-1]))
    said: list[str] = []
    for seed in range(20):
        fake.calls.clear()
        await run_loop(scripted(seed=seed), OUR_TOOLS, fake)
        said += [
            arguments["text"] for name, arguments in fake.calls if name == "consume" and arguments["tier"] != "aizuchi"
        ]

    assert len(said) >= 10
    assert not any(line in text for text in said for line in REMARKS[:-1])


async def test_the_tool_loop_nods_what_the_history_has_but_never_echoes_its_latest_message() -> None:
    history = tuple(AIZUCHI[:-2])  # ending with "Ha, true."
    fake = FakeTools(level=30, history=history)  # 30 affords only a nod
    nods: Counter[str] = Counter()
    for seed in range(20):
        fake.calls.clear()
        await run_loop(scripted(seed=seed), OUR_TOOLS, fake)
        nods.update(arguments["text"] for name, arguments in fake.calls if name == "consume")

    assert history[-1] not in nods  # the message it answers
    assert len(set(nods) & set(history[:-1])) >= 3  # others' nods further back may come again


async def test_the_tool_loop_answers_the_latest_message_in_the_history() -> None:
    fake = FakeTools(level=100, history=("I baked bread.", "Thanks for the tip!"))
    provider = ScriptedProvider.for_persona(shipped("theo"), seed=4)
    thanks = set_of(shipped("theo"), "thanks")

    for _ in range(6):
        fake.calls.clear()
        await run_loop(provider, OUR_TOOLS, fake)
        spoken = [arguments["text"] for name, arguments in fake.calls if name == "consume"]
        assert all(built_from(text, thanks) for text in spoken), spoken


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


# --- a decision with tools to look things up ------------------------------------------------------------

LOOKUP = ToolSpec(
    "search_faq",
    "Search the FAQ.",
    {
        "type": "object",
        "properties": {"limit": {"type": "integer"}, "query": {"type": "string"}},
        "required": ["query"],
    },
)


def with_tools(message: str, *loop: Turn) -> CompletionRequest:
    """Mio's ``message`` to the persona, and the tool loop so far."""
    shown = scene(f"Mio: {message}", asked=0)
    request = DecisionRequest(system=SYSTEM, turns=(*PROMPT, *loop), actions=("remark",), scene=shown)
    return CompletionRequest(
        system=SYSTEM, turns=request.turns, tools=(LOOKUP, decision_tool(request)), tool_choice="required", scene=shown
    )


def looked_up(result: str, *, is_error: bool = False) -> tuple[Turn, Turn]:
    call = ToolCall("scripted_1", "search_faq", {"query": "When is the event?"})
    return Turn("assistant", tool_calls=(call,)), Turn(
        "user", tool_results=(ToolResult(call.id, call.name, result, is_error),)
    )


async def test_asked_a_question_with_a_lookup_tool_it_looks_up_the_question_then_answers_from_it() -> None:
    provider = scripted()

    first = await provider.complete(with_tools("When is the event?"))
    assert [(call.name, call.arguments) for call in first.tool_calls] == [
        ("search_faq", {"query": "When is the event?"})
    ]

    found = "Every Saturday at 20:00 UTC.\n(FAQ: When is the event?)"
    second = await provider.complete(with_tools("When is the event?", *looked_up(found)))
    assert [(call.name, call.arguments["action"], call.arguments["text"]) for call in second.tool_calls] == [
        ("decide", "remark", "Every Saturday at 20:00 UTC.")
    ]


async def test_with_a_lookup_tool_it_decides_at_once_on_a_statement_and_ignores_a_failed_lookup() -> None:
    provider = scripted()

    statement = await provider.complete(with_tools("I fixed my bike today."))
    assert [call.name for call in statement.tool_calls] == ["decide"]

    failed = await provider.complete(
        with_tools("When is the event?", *looked_up("the tool failed: down", is_error=True))
    )
    (call,) = failed.tool_calls
    # An answer of its own to the question, not the error.
    assert call.name == "decide" and call.arguments["action"] == "remark"
    assert "failed" not in call.arguments["text"] and "down" not in call.arguments["text"]


async def test_a_decision_alone_is_the_same_with_or_without_the_tool_code() -> None:
    # The decide-only path (a forced decide call, or decide()) is untouched: same seed, same lines.
    request = decide(scene("Mio: When is the event?", asked=0))
    forced = CompletionRequest(
        system=SYSTEM, turns=request.turns, tools=(decision_tool(request),), tool_choice="decide", scene=request.scene
    )
    a, b = scripted(seed=3), scripted(seed=3)
    decided = [(await a.decide(request)).decision for _ in range(5)]
    called = [(await b.complete(forced)).tool_calls[0].arguments for _ in range(5)]
    assert [(d.action, d.text) for d in decided] == [(c["action"], c["text"]) for c in called]


# Emoji sequences, marks and wide text at a line's ends: where the columns of two lines run together may not add up.
_EDGES = (
    "Sure.",
    "なるほど。",
    "了解",
    "👍",
    "👍🏽 nice",
    "nice 👍🏽",
    "❤️",
    "ok ❤\ufe0f",
    "\ufe0fodd start",
    "👨\u200d👩\u200d👧",
    "ends with a joiner \u200d",
    "\u200dstarts with a joiner",
    "e\u0301clair",
    "\u0301mark first",
    "café\u0301",
    "🏽 a tone first",
    "ＡＢＣ full width",
    "",
)


def test_a_pair_is_measured_as_the_joined_line() -> None:
    from bots.llm.scripted.choosing import Line, _joined_length, _measured, join

    for first, second in itertools.product(_EDGES, repeat=2):
        expected = display_length(join((first, second)))
        assert _joined_length(_measured(Line(first)), _measured(Line(second))) == expected, (first, second)
