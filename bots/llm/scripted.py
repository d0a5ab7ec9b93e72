"""The scripted provider: offline, deterministic for a seed, speaking a persona's sample lines where they fit.

It stands in for an LLM in the local room, in demos and in tests, so it listens the way a model would: it reads
the prompt (:mod:`bots.prompt`'s transcript: the message it would reply to, or the question it was asked, quoted)
and answers what kind of message that is (:mod:`bots.kinds`): a greeting with a greeting, thanks with a you're
welcome, a goodbye with a goodbye, a question put to it with an answer (simple arithmetic with the number), a
statement with a remark, a question for everyone, or a line built on a word of the message ("Sourdough? ...").
The lines come from the persona file's sets (``samples``), then from small generic sets in its language.

It keeps the runtime's no-repeat rule (:mod:`bots.text`): a remark is never one of its own last ``recent_window``
lines (nor the same echo template), nor a line present in the turns it was shown; a nod is not a sentence and may
come again, only not as its previous nod nor as the words of the message it answers, so it keeps choosing among all
of a persona's nods (emoji too) however long it runs. Its requests cost nothing: every usage it reports is zero
tokens, so it never spends a channel's daily token budget. :func:`estimate_prompt_tokens` says what a request's
prompt would cost a real model.

:meth:`ScriptedProvider.complete` also plays the reference design's tool loop: offered ``history``, ``status``
and ``consume`` tools, it calls them in that order (one per call, as a model following the reference's
instructions would), picks a tier the level in the ``status`` result affords and a line that fits it and the
latest message of the ``history`` result, and then answers with plain text and no tool call, which ends the
loop.

Offered other tools besides ``decide`` (a persona's MCP tools, :mod:`bots.llm.tool_rounds`), it looks up what it was
asked: when the message it answers is a question, its first call is the first of those tools with the question as
its first text argument; then it decides, answering with the first line of what the tool returned. A decision alone
is made exactly as before.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import unicodedata
from collections import deque
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, cast

from arbiter.contract import display_length, estimate_tokens
from bots.kinds import Kind, message_kind
from bots.llm.base import (
    ACTIONS,
    DECIDE_TOOL,
    Action,
    ChatProvider,
    Completion,
    CompletionRequest,
    Decision,
    DecisionRequest,
    DecisionResult,
    LLMTimeout,
    ToolCall,
    ToolResult,
    ToolSpec,
    Turn,
    Usage,
    decision_tool,
)
from bots.prompt import NEW_SINCE_NOTES, NOTES_HEADER
from bots.text import line_key, nod_repeats, repeats

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from bots.persona import Persona

__all__ = (
    "DEFAULT_AIZUCHI",
    "DEFAULT_REMARKS",
    "GENERIC",
    "Lines",
    "ScriptedProvider",
    "estimate_prompt_tokens",
    "estimate_tokens",
    "kept_notes",
)

Language = Literal["en", "ja"]


@dataclass(frozen=True, slots=True)
class Lines:
    """What a persona can say, by set (as in the persona file's ``samples``). ``{name}`` in a line stands for
    whom it answers, ``{word}`` for a word of their message; a line with one is used only when it is known."""

    aizuchi: tuple[str, ...] = ()
    remarks: tuple[str, ...] = ()
    greetings: tuple[str, ...] = ()
    farewells: tuple[str, ...] = ()
    thanks: tuple[str, ...] = ()
    answers: tuple[str, ...] = ()
    questions: tuple[str, ...] = ()
    echoes: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()  # answers to arithmetic: {n} is the result


DEFAULT_AIZUCHI: tuple[str, ...] = (
    "I see.",
    "Right!",
    "Mm-hm.",
    "No way!",
    "Oh, nice.",
    "Fair point.",
    "Ha, true.",
    "Really?",
)
DEFAULT_REMARKS: tuple[str, ...] = (
    "That reminds me of something I read last week.",
    "I'm not sure I agree, but go on.",
    "What made you think of that?",
    "Honestly, I'd never looked at it that way.",
    "We should try that sometime.",
    "That sounds harder than it looks.",
    "I keep coming back to that idea.",
    "Maybe the simplest answer is the right one here.",
)

# The fallback for every set a persona leaves out or has used up, in its language: plain, voice-neutral lines.
GENERIC: dict[str, Lines] = {
    "en": Lines(
        aizuchi=(*DEFAULT_AIZUCHI, "Uh-huh.", "Oh!", "Hm, okay.", "Got it.", "Interesting.", "Go on.", "Huh."),
        remarks=DEFAULT_REMARKS,
        greetings=(
            "Hi {name}!",
            "Hey {name}, good to see you.",
            "Hello! Nice to have you here.",
            "Hey there!",
            "Hi! How's your day going?",
            "Oh hey, welcome in!",
        ),
        farewells=("Bye {name}, take care!", "See you later!", "Good night!", "Take care!", "Catch you next time."),
        thanks=(
            "You're welcome!",
            "Anytime.",
            "Happy to help.",
            "No problem at all.",
            "Glad it helped.",
            "Sure thing!",
        ),
        answers=(
            "Good question. Honestly, I'm not sure yet.",
            "Hm, I'd have to think about that one.",
            "Short answer: it depends.",
            "I don't know, but I'd like to find out.",
            "Honestly? A bit of both.",
            "Let me think... probably yes.",
        ),
        questions=(
            "What's everyone up to today?",
            "Has anyone tried something new lately?",
            "Anyone else have a take on this?",
            "What would you do differently?",
            "How did that start, anyway?",
        ),
        echoes=(
            "{word}? Tell me more.",
            "Oh, {word}! How did that go?",
            "Wait, {word}? Go on.",
            "I like the sound of {word}.",
            "So, {word}. What's the best part?",
            "{word}, huh. I didn't see that coming.",
        ),
        numbers=("{n}.", "That's {n}.", "It's {n}.", "{n}, if I counted right.", "{n}, I think.", "Easy one: {n}."),
    ),
    "ja": Lines(
        aizuchi=(
            "なるほど。",
            "へえ。",
            "うんうん。",
            "たしかに。",
            "そうなんだ。",
            "ほんとに?",
            "いいね。",
            "ふむふむ。",
            "そっかあ。",
            "おお。",
            "ほう。",
            "なるほどね。",
            "わあ。",
            "うん。",
            "へえー。",
            "そうなのね。",
        ),
        remarks=(
            "それ、ちょっと気になりますね。",
            "そういう考え方もあるんですね。",
            "なんだか試してみたくなりました。",
            "思ったより奥が深そうですね。",
            "前にも似た話を聞いたことがあります。",
            "いちばん単純な答えが正解かもしれません。",
        ),
        greetings=(
            "{name}さん、こんにちは!",
            "やあ、{name}さん!",
            "こんにちは!",
            "どうも、こんにちは。",
            "いらっしゃい!",
            "こんにちは、今日はどうですか?",
        ),
        farewells=("{name}さん、またね!", "またね!", "おやすみなさい!", "お疲れさまでした。", "またお話ししましょう。"),
        thanks=("どういたしまして!", "いえいえ!", "お役に立ててよかったです。", "気にしないで!", "こちらこそ!"),
        answers=(
            "いい質問ですね。うーん、まだはっきりとは言えないかな。",
            "ちょっと考えさせてください。",
            "場合によるかな。",
            "正直、よくわからないんです。でも気になります。",
            "たぶん、そうだと思います。",
            "両方ありかな、と思います。",
        ),
        questions=(
            "みんなは最近どう?",
            "ほかの人はどう思う?",
            "最近なにか新しいこと始めた?",
            "みんなならどうする?",
            "それって、どうやって始まったの?",
        ),
        echoes=(
            "{word}?もっと聞かせて!",
            "{word}、いいですね。",
            "えっ、{word}?それで?",
            "{word}かあ、気になる。",
            "{word}の話、面白いですね。",
            "{word}って、どんな感じ?",
        ),
        numbers=("{n}です。", "{n}だよ。", "答えは{n}。", "{n}、かな。", "{n}ですね。", "えっと、{n}!"),
    ),
}

# How often each move comes up before the mood adjustments below: mostly nods and remarks. A pass is rare:
# the runtime only asks after it has decided to take a turn and claimed the tier, as a model would mostly
# speak when asked at that point.
_WEIGHTS: dict[str, float] = {"pass": 0.04, "aizuchi": 0.42, "remark": 0.34, "long": 0.12}
# After each own move, how the next one's weights shift, so the persona does not do the same thing twice running.
_AFTER: dict[str, dict[str, float]] = {
    "pass": {"pass": 0.5},
    "aizuchi": {"aizuchi": 0.8},
    "remark": {"remark": 0.7},
    "long": {"long": 0.25, "remark": 0.7},
}
# The reference design's tiers, for a status result that does not list its own.
_REFERENCE_COSTS: dict[str, int] = {"aizuchi": 5, "remark": 60, "long": 80}
_MAX_CONSUMES = 2
_RECENT_WINDOW = 30


class _Tier(NamedTuple):
    cost: int
    max_length: int | None


class _Cue(NamedTuple):
    """What the provider replies to, as read from the prompt."""

    text: str = ""  # the message ("" when none could be read)
    speaker: str | None = None
    addressed: bool = False  # asked or told directly
    kind: Kind = Kind.STATEMENT
    word: str | None = None  # a content word of the message
    result: str | None = None  # the answer to its arithmetic


class _Line(NamedTuple):
    text: str
    template: str | None = None  # the line it was built from, when it had a placeholder


@dataclass(frozen=True, slots=True)
class _Said:
    """What the turns shown already hold: the lines' keys, and the lines themselves (to spot a template)."""

    keys: frozenset[str]
    lines: tuple[str, ...]
    own: tuple[str, ...] = ()  # its own lines in the conversation shown, oldest first


class ScriptedProvider(ChatProvider):
    """A persona's lines in, a conversation that answers what was said out; no network.

    ``aizuchi`` and ``remarks`` (and the optional per-kind sets) are the persona's lines; ``language`` ("en" or
    "ja", guessed from the lines when None) picks the generic sets it falls back on. ``recent_window`` is how
    many of its own latest lines it will not say again. ``latency_s`` pauses each call (jittered by a quarter
    either way) so a demo does not answer instantly; a request's ``time_left_s`` bounds it as it bounds a real
    call (LLMTimeout when the pause would not fit). ``speaker`` is who it is in a tool loop's ``consume``.
    """

    def __init__(
        self,
        aizuchi: Sequence[str] = (),
        remarks: Sequence[str] = (),
        *,
        seed: int,
        language: Language | None = None,
        greetings: Sequence[str] = (),
        farewells: Sequence[str] = (),
        thanks: Sequence[str] = (),
        answers: Sequence[str] = (),
        questions: Sequence[str] = (),
        echoes: Sequence[str] = (),
        latency_s: float = 0.0,
        recent_window: int = _RECENT_WINDOW,
        speaker: str = "scripted",
    ) -> None:
        self.name = "scripted"
        own = (*aizuchi, *remarks)
        # Wide letters (kana, kanji) make it Japanese; wide emoji do not.
        wide_letters = any(_wide(char) and char.isalpha() for line in own for char in line)
        self.language: Language = language or ("ja" if wide_letters else "en")
        generic = GENERIC[self.language]
        self.lines = Lines(
            aizuchi=_clean(aizuchi) or generic.aizuchi,
            remarks=_clean(remarks) or generic.remarks,
            greetings=_clean(greetings),
            farewells=_clean(farewells),
            thanks=_clean(thanks),
            answers=_clean(answers),
            questions=_clean(questions),
            echoes=_clean(echoes),
        )
        self.generic = generic
        self.latency_s = latency_s
        self.speaker = speaker
        self._rng = random.Random(seed)
        # Latency draws come from their own generator, so the lines do not depend on whether a demo pauses.
        self._latency_rng = random.Random(seed ^ 0x5EED)
        # One entry per line said: its keys (and its template's), so a long remark counts as one line; and the
        # lines themselves, to keep clear of near repeats too.
        self._recent: deque[frozenset[str]] = deque(maxlen=max(1, recent_window))
        self._recent_texts: deque[str] = deque(maxlen=max(1, recent_window))
        self._last_action: str | None = None
        self._calls = 0

    @classmethod
    def for_persona(
        cls, persona: Persona, *, seed: int, latency_s: float = 0.0, recent_window: int = _RECENT_WINDOW
    ) -> ScriptedProvider:
        """The provider speaking ``persona``'s sample lines, in its language."""
        samples = persona.samples
        return cls(
            samples.aizuchi,
            samples.remarks,
            seed=seed,
            language=persona.language,
            greetings=samples.greetings,
            farewells=samples.farewells,
            thanks=samples.thanks,
            answers=samples.answers,
            questions=samples.questions,
            echoes=samples.echoes,
            latency_s=latency_s,
            recent_window=recent_window,
            speaker=persona.id,
        )

    @property
    def aizuchi(self) -> tuple[str, ...]:
        return self.lines.aizuchi

    @property
    def remarks(self) -> tuple[str, ...]:
        return self.lines.remarks

    def __repr__(self) -> str:
        return f"ScriptedProvider({self.language}, aizuchi={len(self.aizuchi)}, remarks={len(self.remarks)})"

    # --- the interface --------------------------------------------------------------------------------

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        await self._pause(request.time_left_s)
        cue = _read_cue(request.system, request.turns)
        decision = self._choose(request.actions, request.max_lengths, _spoken(request.turns), cue)
        if request.memory_schema is not None:
            decision = replace(decision, memory=kept_notes(request.system, request.turns))
        return DecisionResult(decision, Usage(0, 0))

    async def complete(self, request: CompletionRequest) -> Completion:
        await self._pause(request.time_left_s)
        tools = {tool.name: tool for tool in request.tools}
        forced = None if request.tool_choice in ("auto", "required", "none") else request.tool_choice
        if not tools or request.tool_choice == "none":
            return self._text(self._line_for_text(request.system, request.turns))
        if forced == DECIDE_TOOL or (forced is None and set(tools) == {DECIDE_TOOL}):
            return self._decide_call(tools[DECIDE_TOOL], request.system, request.turns)
        if forced is None and DECIDE_TOOL in tools:
            return self._look_up_or_decide(tools, request.system, request.turns)
        if forced is not None and forced not in ("history", "status", "consume"):
            return self._call(forced, {})
        return self._tool_loop_step(tools, request.turns)

    # --- choosing -------------------------------------------------------------------------------------

    def _choose(self, actions: Iterable[str], max_lengths: Mapping[str, int], said: _Said, cue: _Cue) -> Decision:
        weights = {action: _WEIGHTS[action] for action in actions}
        # The largest move offered is what the caller made room for (the runtime claims before it asks): take
        # it most of the time, as a model would.
        largest = max((a for a in weights if a != "pass"), key=ACTIONS.index, default=None)
        if largest is not None:
            weights[largest] += 3.0
        for action, factor in _AFTER.get(self._last_action or "", {}).items():
            if action in weights:
                weights[action] *= factor
        must_speak = "pass" not in weights  # a pass was not offered: it has to say something
        used = frozenset().union(*self._recent)
        while weights:
            action = self._rng.choices(list(weights), weights=list(weights.values()))[0]
            if action == "pass":
                break
            parts = self._pick(action, max_lengths.get(action), said, used, cue)
            if parts is not None:
                return self._said(action, parts)
            # Nothing fresh fits this tier: try the others before falling silent.
            del weights[action]
        if must_speak and largest is not None:
            # Better a line said before than no answer at all: the freshest that fits, else the shortest nod.
            nothing = _Said(frozenset(), ())
            parts = self._pick(largest, max_lengths.get(largest), nothing, frozenset(), cue, relaxed=True)
            return self._said(largest, parts or (_Line(min(self.lines.aizuchi, key=display_length)),))
        self._last_action = "pass"
        return Decision("pass")

    def _said(self, action: str, parts: tuple[_Line, ...]) -> Decision:
        text = _join(tuple(part.text for part in parts))
        self._recent.append(frozenset(key for part in parts for key in _keys(part)))
        self._recent_texts.append(text)
        self._last_action = action
        return Decision(cast("Action", action), text)

    def _pick(
        self, action: str, limit: int | None, said: _Said, used: frozenset[str], cue: _Cue, *, relaxed: bool = False
    ) -> tuple[_Line, ...] | None:
        def fresh(line: _Line) -> bool:
            return (
                not any(key in used or key in said.keys for key in _keys(line))
                and (line.template is None or not _template_in(line.template, said.lines))
                and (limit is None or display_length(line.text) <= limit)
            )

        def first_fresh(pools: list[list[_Line]]) -> list[_Line]:
            for pool in pools:
                usable = [line for line in dict.fromkeys(pool) if fresh(line)]
                if usable:
                    return usable
            return []

        earlier = [] if relaxed else [*self._recent_texts, *said.lines]

        def choose(candidates: list[tuple[_Line, ...]]) -> tuple[_Line, ...] | None:
            # At random; but not what says nearly the same as a line said lately (as the runtime would judge).
            while candidates:
                parts = self._rng.choice(candidates)
                if not repeats(_join(tuple(part.text for part in parts)), earlier):
                    return parts
                candidates = [other for other in candidates if other != parts]
            return None

        if action == "aizuchi":
            return self._pick_nod(limit, cue, self._last_nod(said), relaxed=relaxed)
        firsts = first_fresh(self._remark_pools(cue))
        if action == "long" and firsts:
            # A long remark is a line and a follow-up run together; the line alone will do when no pair fits.
            follows = first_fresh(self._follow_pools(cue))
            pairs: list[tuple[_Line, ...]] = [
                (a, b)
                for a in firsts
                for b in follows
                if _key(a.text) != _key(b.text)
                and (a.template is None or a.template != b.template)
                and (limit is None or display_length(_join((a.text, b.text))) <= limit)
            ]
            chosen = choose(pairs)
            if chosen is not None:
                return chosen
        return choose([(line,) for line in firsts])

    def _last_nod(self, said: _Said) -> str | None:
        """Its latest nod in the conversation shown (the newest of its own lines there that is one of its nods): as
        the runtime judges, per channel, whatever it said elsewhere since."""
        nods = {_key(line.text) for pool in self._nod_pools(_Cue()) for line in pool}
        return next((line for line in reversed(said.own) if _key(line) in nods), None)

    def _pick_nod(
        self, limit: int | None, cue: _Cue, last_nod: str | None, *, relaxed: bool
    ) -> tuple[_Line, ...] | None:
        """A nod from the first pool with one that fits: at random among all of them, any said before included,
        but not one that :func:`bots.text.nod_repeats` (its previous nod, or an echo of the message it answers)."""

        def usable(line: _Line) -> bool:
            return (limit is None or display_length(line.text) <= limit) and (
                relaxed or not nod_repeats(line.text, last_nod=last_nod, answering=cue.text or None)
            )

        for pool in self._nod_pools(cue):
            lines = [line for line in dict.fromkeys(pool) if usable(line)]
            if lines:
                return (self._rng.choice(lines),)
        return None

    # Where each move's lines come from, best first: the first pool with a fresh line that fits is used.

    def _nod_pools(self, cue: _Cue) -> list[list[_Line]]:
        own, generic = self.lines, self.generic
        pools: list[list[_Line]] = []
        if cue.result is not None:
            pools.append(self._filled(generic.numbers, cue))  # a number is as short as a nod
        kind_sets = {Kind.GREETING: "greetings", Kind.FAREWELL: "farewells", Kind.THANKS: "thanks"}
        if cue.kind in kind_sets:
            name = kind_sets[cue.kind]
            pools += [self._filled(getattr(own, name), cue), self._filled(getattr(generic, name), cue)]
        return [*pools, self._filled(own.aizuchi, cue), self._filled(generic.aizuchi, cue)]

    def _remark_pools(self, cue: _Cue) -> list[list[_Line]]:
        own, generic = self.lines, self.generic
        pools: list[list[_Line]] = []
        if cue.result is not None:
            pools.append(self._filled(generic.numbers, cue))
        if cue.kind is Kind.GREETING:
            pools += [self._filled(own.greetings, cue), self._filled(generic.greetings, cue)]
        elif cue.kind is Kind.FAREWELL:
            pools += [self._filled(own.farewells, cue), self._filled(generic.farewells, cue)]
        elif cue.kind is Kind.THANKS:
            pools += [self._filled(own.thanks, cue), self._filled(generic.thanks, cue)]
        elif cue.kind is Kind.QUESTION and cue.addressed:
            pools += [self._filled(own.answers, cue), self._filled(generic.answers, cue)]
        elif cue.kind is Kind.QUESTION:
            pools += [
                self._filled(own.answers + own.echoes, cue),
                self._filled(generic.answers + generic.echoes, cue),
            ]
        return [
            *pools,
            self._filled(own.remarks + own.echoes + own.questions, cue),
            self._filled(generic.echoes + generic.questions, cue),
            self._filled(generic.remarks, cue),
        ]

    def _follow_pools(self, cue: _Cue) -> list[list[_Line]]:
        """What a long remark adds after its first line."""
        own, generic = self.lines, self.generic
        if cue.kind in (Kind.FAREWELL, Kind.THANKS):
            return []  # a goodbye or a you're-welcome needs nothing after it
        if cue.kind is Kind.GREETING:
            return [self._filled(own.questions + own.remarks, cue), self._filled(generic.questions, cue)]
        return [self._filled(own.remarks, cue), self._filled(own.questions, cue), self._filled(generic.remarks, cue)]

    def _filled(self, lines: Iterable[str], cue: _Cue) -> list[_Line]:
        """The lines with their placeholders filled from the cue; those whose placeholder is unknown left out."""
        values = {"name": cue.speaker, "word": cue.word, "n": cue.result}
        filled: list[_Line] = []
        for line in lines:
            names = _PLACEHOLDER.findall(line)
            if not names:
                filled.append(_Line(line))
                continue
            if any(values.get(name) is None for name in names):
                continue
            text = _PLACEHOLDER.sub(lambda match: str(values[match.group(1)]), line)
            if line.startswith("{word}") and text[:1].isascii():
                text = text[:1].upper() + text[1:]
            filled.append(_Line(text, line))
        return filled

    def _line_for_text(self, system: str, turns: tuple[Turn, ...]) -> str:
        decision = self._choose(("aizuchi", "remark"), {}, _spoken(turns), _read_cue(system, turns))
        return decision.text

    # --- answers --------------------------------------------------------------------------------------

    def _look_up_or_decide(self, tools: dict[str, ToolSpec], system: str, turns: tuple[Turn, ...]) -> Completion:
        """Asked a question, call the first lookup tool with it once; otherwise (or after that) decide."""
        calls, _ = _loop_so_far(turns)
        cue = _read_cue(system, turns)
        lookups = [tool for name, tool in tools.items() if name != DECIDE_TOOL]
        if not calls and cue.kind is Kind.QUESTION and cue.text:
            tool = lookups[0]
            properties = tool.parameters.get("properties", {})
            required = [name for name in tool.parameters.get("required", ()) if name in properties]
            texts = [name for name in (*required, *properties) if properties[name].get("type", "string") == "string"]
            if texts:
                return self._call(tool.name, {texts[0]: cue.text})
        return self._decide_call(tools[DECIDE_TOOL], system, turns)

    def _decide_call(self, tool: ToolSpec, system: str, turns: tuple[Turn, ...]) -> Completion:
        properties = tool.parameters.get("properties", {})
        enum = properties.get("action", {}).get("enum", ACTIONS)
        actions = tuple(action for action in ACTIONS if action in enum)
        found = _looked_up(turns)
        saying = next((action for action in ("remark", "long") if action in actions), None)
        if found is not None and saying is not None:
            decision = self._said(saying, (_Line(found),))
        else:
            decision = self._choose(actions, {}, _spoken(turns), _read_cue(system, turns))
        arguments: dict[str, Any] = {"action": decision.action, "text": decision.text}
        if "memory" in properties:
            arguments["memory"] = kept_notes(system, turns)
        return self._call(DECIDE_TOOL, arguments)

    def _tool_loop_step(self, tools: dict[str, ToolSpec], turns: tuple[Turn, ...]) -> Completion:
        calls, results = _loop_so_far(turns)
        called = [call.name for call in calls]
        for step in ("history", "status"):
            if step in tools and step not in called:
                return self._call(step, {})
        consumes = [call for call in calls if call.name == "consume"]
        last = consumes[-1] if consumes else None
        if last is not None and _granted(results.get(last.id)):
            return self._text(_spoken_text(last.arguments))
        if "consume" in tools and len(consumes) < _MAX_CONSUMES:
            arguments = self._consume_arguments(tools["consume"], calls, results, turns, last)
            if arguments is not None:
                return self._call("consume", arguments)
        self._last_action = "pass"
        return self._text("(pass)")

    def _consume_arguments(
        self,
        tool: ToolSpec,
        calls: list[ToolCall],
        results: dict[str, ToolResult],
        turns: tuple[Turn, ...],
        refused: ToolCall | None,
    ) -> dict[str, Any] | None:
        status = next((_json(results.get(c.id)) for c in reversed(calls) if c.name == "status"), {})
        if status.get("paused") or status.get("enabled") is False:
            return None
        tiers = _tiers(status)
        level = _number(status.get("level", status.get("resource")), default=100)
        if refused is not None:
            # A refused spend: retry once, cheaper, with the level the refusal reported.
            refusal = _json(results.get(refused.id))
            level = _number(refusal.get("level", refusal.get("resource")), default=level)
            ceiling = _refused_cost(refused.arguments, tiers)
            tiers = {name: tier for name, tier in tiers.items() if tier.cost < ceiling}
        affordable = [name for name in ("aizuchi", "remark", "long") if name in tiers and tiers[name].cost <= level]
        history = _history_messages(calls, results)
        spoken = _spoken(turns)
        said = _Said(spoken.keys | {_key(m.text) for m in history}, spoken.lines + tuple(m.text for m in history))
        lengths = {name: tier.max_length for name, tier in tiers.items() if tier.max_length is not None}
        decision = self._choose(("pass", *affordable), lengths, said, self._history_cue(history))
        if decision.action == "pass":
            return None
        # Fill in the consume tool's own parameter names: ours (text, tier) or the reference's (message, amount).
        properties = tool.parameters.get("properties", {})
        text_key = "message" if "message" in properties and "text" not in properties else "text"
        arguments: dict[str, Any] = {text_key: decision.text}
        if "tier" in properties:
            arguments["tier"] = decision.action
        elif "amount" in properties:
            arguments["amount"] = tiers[decision.action].cost
        if "from" in properties:
            arguments["from"] = self.speaker
        return arguments

    def _history_cue(self, history: list[_Message]) -> _Cue:
        """The cue of a tool loop: the latest message in the history result that is not its own."""
        for message in reversed(history):
            if message.author != self.speaker:
                return _cue(message.text, message.name, addressed=self.speaker in message.addressed, names=())
        return _Cue()

    def _call(self, name: str, arguments: dict[str, Any]) -> Completion:
        self._calls += 1
        call = ToolCall(id=f"scripted_{self._calls}", name=name, arguments=arguments)
        return Completion(text="", tool_calls=(call,), usage=Usage(0, 0), stop_reason="tool_use")

    def _text(self, text: str) -> Completion:
        return Completion(text=text, tool_calls=(), usage=Usage(0, 0), stop_reason="end_turn")

    async def _pause(self, time_left_s: float | None) -> None:
        # As a real provider does: a call with no time left fails at once, one slower than the time left fails
        # when the time is up.
        pause = self.latency_s * (0.75 + 0.5 * self._latency_rng.random()) if self.latency_s > 0 else 0.0
        if time_left_s is not None and pause >= time_left_s:
            await asyncio.sleep(max(0.0, time_left_s))
            raise LLMTimeout(f"the scripted provider takes {pause:.2f} s; the call had {time_left_s:.2f} s")
        if pause > 0:
            await asyncio.sleep(pause)


# --- token estimates ------------------------------------------------------------------------------------


def estimate_prompt_tokens(request: DecisionRequest | CompletionRequest) -> int:
    """About how many prompt tokens ``request`` would cost a real model: its system prompt, turns and tools (for
    a decision, the decide tool it would be sent with). The scripted provider itself reports zero."""
    tools = (decision_tool(request),) if isinstance(request, DecisionRequest) else request.tools
    total = estimate_tokens(request.system) + 3
    for turn in request.turns:
        total += 4 + estimate_tokens(turn.text)
        total += sum(
            estimate_tokens(json.dumps(dict(call.arguments), ensure_ascii=False)) + 6 for call in turn.tool_calls
        )
        total += sum(estimate_tokens(result.content) + 6 for result in turn.tool_results)
    total += sum(
        estimate_tokens(tool.description) + estimate_tokens(json.dumps(dict(tool.parameters), ensure_ascii=False))
        for tool in tools
    )
    return total


# --- reading the prompt ---------------------------------------------------------------------------------

# The lines of bots.prompt's transcript turn this provider reads, as a model would.
_ASKED = re.compile(r'^(?P<name>.+?) (?:asked|said to) you: "(?P<text>.*)"$')
_REPLYING = re.compile(r'^You would be replying to (?P<name>.+?): "(?P<text>.*)"$')
_TRANSCRIPT_LINE = re.compile(r"^\[(?P<name>[^\]\n]+?) \((?P<mark>person|persona|bot|you)\)\] (?P<text>.*)$")
# Other shapes of a conversation line: "[Name] text", "Name: text".
_PLAIN_LINE = re.compile(r"^(?:\[(?P<bracketed>[^\]\n]{1,46})\]\s*|(?P<name>[^\[\]\n:：]{1,40})[:：]\s*)(?P<text>.+)$")
_YOU_ARE = re.compile(r"^You are (?P<name>.+?)(?: \(also called (?P<aliases>.+?)\))?, ", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{(name|word|n)\}")


def _read_cue(system: str, turns: tuple[Turn, ...]) -> _Cue:
    """The message to reply to: the question quoted at the end of the transcript, else the latest message
    quoted there, else the transcript's latest line not its own, else the latest line of the last user turn."""
    names: list[str] = []
    you = _YOU_ARE.search(system)
    if you is not None:
        names += [you.group("name"), *(you.group("aliases") or "").split(", ")]
    user = next((turn.text for turn in reversed(turns) if turn.role == "user" and turn.text.strip()), "")
    lines = [line.strip() for line in user.splitlines() if line.strip()]
    names += [match.group("name") for line in lines if (match := _TRANSCRIPT_LINE.match(line))]
    for line in reversed(lines):
        match = _ASKED.match(line)
        if match is not None:
            return _cue(match.group("text"), match.group("name"), addressed=True, names=names)
        match = _REPLYING.match(line)
        if match is not None:
            return _cue(match.group("text"), match.group("name"), addressed=False, names=names)
    for line in reversed(lines):
        match = _TRANSCRIPT_LINE.match(line)
        if match is not None and match.group("mark") != "you":
            return _cue(match.group("text"), match.group("name"), addressed=False, names=names)
    for line in reversed(lines):
        match = _PLAIN_LINE.match(line)
        if match is not None:
            name = (match.group("bracketed") or match.group("name") or "").strip()
            return _cue(match.group("text"), name or None, addressed=False, names=names)
    return _cue(lines[-1], None, addressed=False, names=names) if lines else _Cue()


def _cue(text: str, speaker: str | None, *, addressed: bool, names: Iterable[str]) -> _Cue:
    kind = message_kind(text)
    return _Cue(
        text=text,
        speaker=speaker,
        addressed=addressed,
        kind=kind,
        word=content_word(text, (*names, *([speaker] if speaker else []))),
        result=arithmetic(text) if kind is Kind.QUESTION else None,
    )


# --- words and numbers ----------------------------------------------------------------------------------

_EN_STOPWORD_TEXT = """
    about above actually after again against ago almost already also always another anybody anyone anything
    anyway around away back because been before being below best better between both bring came cannot come
    could didn doesn doing done down during each either else enough even ever every everybody everyone
    everything fine first from further getting give going gonna good got gotta great guess guys have having
    hello here hers herself himself hmm honestly into isn itself just keep kind know last lately later least
    less let like little long look made make many maybe mean might mine more most much must myself need never
    next nice nobody none nothing okay once only other others ours over people perhaps pretty probably quite
    rather really right said same should since some somebody someone something sometimes soon sort still such
    sure take tell than thank thanks that that's their theirs them then there these they thing things think
    this those though through today together tomorrow tonight totally tried trying very wait wanna want wasn
    well went were what what's whatever when where which while will wish with within without won't would
    wouldn yeah year years yesterday your yours yourself you're it's i'm i've i'd don't didn't doesn't isn't
    wasn't can't let's there's here's times plus minus divided multiplied equals else also everyone's
    anyone's someone's haha lol hehe wow yes nope yep question questions sound sounds happen happened
    useful stuff week weekend idea ideas point ways part bit lot lots
"""
_EN_STOPWORDS = frozenset(_EN_STOPWORD_TEXT.split())
_JA_STOP_COMPOUNDS = (
    "今日",
    "昨日",
    "明日",
    "今度",
    "最近",
    "自分",
    "本当",
    "一番",
    "時間",
    "全然",
    "普通",
    "多分",
    "絶対",
    "結構",
    "一緒",
    "大丈夫",
    "意味",
    "感じ",
    "今回",
    "今年",
    "去年",
    "来年",
    "毎日",
    "質問",
    "説明",
    "仕組",
)
_JA_RUN = re.compile(r"[\u4e00-\u9fff\u3005\u30a1-\u30fa\u30fc]{2,}")
_EN_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]")


def content_word(text: str, names: Iterable[str] = ()) -> str | None:
    """A word that says what ``text`` is about, for an echo ("Sourdough? ..."): the longest run of kanji and
    katakana in Japanese (a loanword, a compound noun), else the longest English word that is not a function
    word or a name (a likely noun before a verb or an adverb). None when there is none."""
    skip = {name.casefold() for name in names if name}
    runs: list[str] = []
    for found in _JA_RUN.findall(text):
        run = str(found)
        for stop in _JA_STOP_COMPOUNDS:
            run = run.removeprefix(stop).removesuffix(stop)
        if len(run) >= 2 and run.strip("ー") and run.casefold() not in skip:
            runs.append(run)
    if runs:
        return max(runs, key=len)
    best: tuple[bool, bool, int] | None = None  # (a noun, likely; an acronym; its length) of the best word yet
    word_found: str | None = None
    for index, match in enumerate(_EN_WORD.finditer(text)):
        word = match.group().replace("’", "'")
        if word.casefold().endswith("'s"):
            word = word[:-2]
        folded = word.casefold()
        if (len(word) < 4 and not (len(word) >= 3 and word.isupper())) or folded in _EN_STOPWORDS or folded in skip:
            continue
        if index == 0 and not word.isupper():
            word = word[:1].lower() + word[1:]  # capitalised only as the message's first word
        # Verbs and adverbs ("repainted", "slowly") make poor echoes: a likely noun wins, an acronym ("API") first,
        # then the longer the better.
        rank = (not folded.endswith(("ed", "ing", "ly")), word.isupper(), len(word))
        if best is None or rank >= best:
            best, word_found = rank, word
    return word_found


_NUMBER = r"\d+(?:\.\d+)?"
_OPERATORS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?<=\d)-(?=\d)|(?<=\d)/(?=\d)"), " ~ "),  # 9-5, 3/4: a range or a date, not a sum
    (re.compile(r"\bmultiplied\s+by\b|\btimes\b|(?<=\d)\s*[x×]\s*(?=\d)|かける|掛ける|[×✕*]", re.IGNORECASE), " * "),
    (re.compile(r"\bdivided\s+by\b|\bover\b|÷|わる|割る|\s/\s", re.IGNORECASE), " / "),
    (re.compile(r"\bplus\b|たす|足す|\+", re.IGNORECASE), " + "),
    (re.compile(r"\bminus\b|ひく|引く|\s[-−]\s|−", re.IGNORECASE), " - "),
]
_EXPRESSION = re.compile(rf"{_NUMBER}(?:\s*[-+*/]\s*{_NUMBER}){{1,5}}")


def arithmetic(text: str) -> str | None:
    """The result of the simple arithmetic in ``text`` ("What's 17 times 3?", "17×3は?"), as it would be said:
    "51", "3.3333", "-4"; None when there is none (or it divides by zero)."""
    normal = unicodedata.normalize("NFKC", text).replace(",", "")
    for pattern, operator in _OPERATORS:
        normal = pattern.sub(operator, normal)
    match = _EXPRESSION.search(normal)
    if match is None:
        return None
    tokens = re.findall(rf"{_NUMBER}|[-+*/]", match.group())
    try:
        # Products and quotients first, then sums, left to right.
        terms: list[Fraction] = [Fraction(tokens[0])]
        signs: list[int] = [1]
        for operator, operand in zip(tokens[1::2], tokens[2::2], strict=True):
            number = Fraction(operand)
            if operator == "*":
                terms[-1] *= number
            elif operator == "/":
                terms[-1] /= number
            else:
                terms.append(number)
                signs.append(1 if operator == "+" else -1)
    except ZeroDivisionError:
        return None
    value = sum((sign * term for sign, term in zip(signs, terms, strict=True)), Fraction(0))
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


# --- helpers --------------------------------------------------------------------------------------------


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _clean(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))


def _key(text: str) -> str:
    # As the runtime compares lines for repeats (bots.text): width and case folded, punctuation and spaces ignored,
    # so "たしかに!" and "たしかに。" are the same line; a line of emoji only is its emoji, so "👍" and "🙂" are not.
    return line_key(text)


def _keys(line: _Line) -> tuple[str, ...]:
    """What saying ``line`` uses up: the line, and the template it was built from (a key no text can have)."""
    return (_key(line.text),) if line.template is None else (_key(line.text), f"template:{line.template}")


def _template_in(template: str, lines: Iterable[str]) -> bool:
    """Whether one of ``lines`` was built from ``template`` (by anyone): the same words around another word."""
    pattern = re.compile(
        _PLACEHOLDER.sub(".+?", re.escape(template).replace(r"\{", "{").replace(r"\}", "}")), re.IGNORECASE
    )
    return any(pattern.fullmatch(line) for line in lines)


def _join(parts: tuple[str, ...]) -> str:
    # Latin text wants a space between sentences; Japanese and Chinese do not ("やあ!わかる").
    text = parts[0]
    for part in parts[1:]:
        text += ("" if _wide(text[-1:] or " ") or _wide(part[:1] or " ") else " ") + part
    return text


def _spoken(turns: tuple[Turn, ...]) -> _Said:
    """Every line said in the turns, with and without a speaker in front ("Name: ", "[Name] "), to keep clear of."""
    keys: set[str] = set()
    lines: list[str] = []
    own: list[str] = []
    for turn in turns:
        for line in turn.text.splitlines():
            line = line.strip()  # noqa: PLW2901 - the same line, tidied
            keys.add(_key(line))
            transcript = _TRANSCRIPT_LINE.match(line)
            if transcript is not None and transcript.group("mark") == "you":
                own.append(transcript.group("text"))
            elif turn.role == "assistant" and line:
                own.append(line)  # a chat's own turns: what it said
            match = transcript or _PLAIN_LINE.match(line)
            lines.append(match.group("text") if match is not None else line)
            for mark in (": ", "：", "] "):
                if mark in line:
                    keys.add(_key(line.split(mark, 1)[1]))
    keys.discard("")
    return _Said(frozenset(keys), tuple(lines), tuple(own))


def _loop_so_far(turns: tuple[Turn, ...]) -> tuple[list[ToolCall], dict[str, ToolResult]]:
    """The tool calls and results since the last plain turn: the loop now running."""
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    for turn in reversed(turns):
        if not turn.tool_calls and not turn.tool_results:
            break
        calls[:0] = turn.tool_calls
        results.update((result.call_id, result) for result in turn.tool_results)
    return calls, results


def _looked_up(turns: tuple[Turn, ...]) -> str | None:
    """The first line of what the latest lookup in the running loop found (not an error), if any."""
    calls, results = _loop_so_far(turns)
    for call in reversed(calls):
        result = results.get(call.id)
        if call.name == DECIDE_TOOL or result is None or result.is_error:
            continue
        line = next((line.strip() for line in result.content.splitlines() if line.strip()), "")
        return line or None
    return None


def _json(result: ToolResult | None) -> dict[str, Any]:
    if result is None or result.is_error:
        return {}
    try:
        data = json.loads(result.content)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _granted(result: ToolResult | None) -> bool:
    data = _json(result)
    return bool(data.get("granted", data.get("success", False)))


def _number(value: object, *, default: int) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def _tiers(status: Mapping[str, Any]) -> dict[str, _Tier]:
    """Tiers from a status result: ``tiers`` ({name: {cost, max_length}}), ``costs`` ({name: cost}), or defaults."""
    listed = status.get("tiers")
    if not isinstance(listed, dict):
        costs = status.get("costs")
        costs = costs if isinstance(costs, dict) else _REFERENCE_COSTS
        return {
            name: _Tier(_number(costs.get(name), default=cost), None)
            for name, cost in _REFERENCE_COSTS.items()
            if name in costs
        }
    tiers: dict[str, _Tier] = {}
    for name, info in listed.items():
        if name not in _REFERENCE_COSTS or not isinstance(info, dict) or info.get("affordable") is False:
            continue
        limit = info.get("max_length")
        tiers[name] = _Tier(
            _number(info.get("cost"), default=_REFERENCE_COSTS[name]),
            limit if isinstance(limit, int) and not isinstance(limit, bool) else None,
        )
    return tiers


def _refused_cost(arguments: Mapping[str, Any], tiers: Mapping[str, _Tier]) -> int:
    tier = arguments.get("tier")
    if isinstance(tier, str) and tier in tiers:
        return tiers[tier].cost
    return _number(arguments.get("amount"), default=0)


def _spoken_text(arguments: Mapping[str, Any]) -> str:
    return str(arguments.get("text", arguments.get("message", "")))


class _Message(NamedTuple):
    """A message of a tool loop's history result."""

    author: str | None  # its author's id, or name when the result gives no id
    name: str | None
    text: str
    addressed: tuple[str, ...]


def _history_messages(calls: list[ToolCall], results: dict[str, ToolResult]) -> list[_Message]:
    """The messages of the history results, oldest first."""
    messages: list[_Message] = []
    for call in calls:
        if call.name == "history" and call.id in results:
            try:
                _collect_messages(json.loads(results[call.id].content), messages)
            except ValueError:
                continue
    return messages


def _collect_messages(data: object, into: list[_Message]) -> None:
    if isinstance(data, dict):
        text = data.get("text", data.get("message"))
        if isinstance(text, str):
            name = next((data[key] for key in ("author_name", "from") if isinstance(data.get(key), str)), None)
            author = data["author_id"] if isinstance(data.get("author_id"), str) else name
            addressed = data.get("addressed")
            listed = tuple(str(item) for item in addressed) if isinstance(addressed, list) else ()
            into.append(_Message(author, name, text, listed))
            return
        for value in data.values():
            _collect_messages(value, into)
    elif isinstance(data, list):
        for item in data:
            _collect_messages(item, into)


# --- notes (the dialogue state) -------------------------------------------------------------------------

_TOPIC_SET = re.compile(r"^The moderators set the topic: (?P<topic>.+)$", re.MULTILINE)
_NOTE_TOPIC = re.compile(r"^Topic: (?P<topic>.*)$")
_NOTE_ITEM = re.compile(r"^- (?P<item>.+)$")
_NOTE_SPEAKER = re.compile(r"^- (?P<name>[^:]+): (?P<note>.+)$")
_SECTIONS = {"Open questions:": "open_questions", "Agreed:": "agreed", "Speakers:": "speakers"}
_QUESTIONS_KEPT = 4  # the newest questions still open (one per speaker)
_NOTE_CHARS = 80


def kept_notes(system: str, turns: tuple[Turn, ...]) -> dict[str, Any]:
    """The notes a model would keep, made by rule, deterministically: the notes in the prompt, updated with the
    conversation shown. Each speaker's note is its latest line ("asked: ..." for a question, else "said: ..."),
    the most recent speaker first; the open questions are each speaker's latest question, newest first; the topic
    is the one noted before, else the moderators'; what was agreed stays as it was."""
    user = next((turn.text for turn in reversed(turns) if turn.role == "user" and turn.text.strip()), "")
    lines = [line.strip() for line in user.splitlines()]
    topic, agreed = "", []
    questions: dict[str, str] = {}
    speakers: dict[str, str] = {}
    section = None
    if NOTES_HEADER in lines:
        for line in lines[lines.index(NOTES_HEADER) + 1 :]:
            if not line:
                break
            if (match := _NOTE_TOPIC.match(line)) is not None:
                topic = "" if match.group("topic") == "(none yet)" else match.group("topic")
            elif line in _SECTIONS:
                section = _SECTIONS[line]
            elif section == "speakers" and (found := _NOTE_SPEAKER.match(line)) is not None:
                speakers[found.group("name")] = found.group("note")
            elif section == "open_questions" and (item := _NOTE_ITEM.match(line)) is not None:
                name, _, question = item.group("item").partition(": ")
                questions[name] = question
            elif section == "agreed" and (item := _NOTE_ITEM.match(line)) is not None:
                agreed.append(item.group("item"))
    questions = dict(reversed(questions.items()))  # the notes list them oldest first; here the newest leads
    if not topic and (moderators := _TOPIC_SET.search(system)) is not None:
        topic = moderators.group("topic")
    # Oldest first as read, so that a later line moves its speaker (and its question) to the front.
    heard: list[tuple[str, str]] = []
    for line in lines:
        match = _TRANSCRIPT_LINE.match(line)
        if match is not None and line != NEW_SINCE_NOTES:
            heard.append((match.group("name"), match.group("text")))
    for name, text in heard:
        asked = message_kind(text) is Kind.QUESTION
        speakers.pop(name, None)
        speakers = {name: f"{'asked' if asked else 'said'}: {_short(text)}", **speakers}
        if asked:
            questions.pop(name, None)
            questions = {name: _short(text), **questions}
    return {
        "topic": topic,
        "open_questions": [f"{name}: {text}" for name, text in list(questions.items())[:_QUESTIONS_KEPT]][::-1],
        "agreed": agreed,
        "speakers": [{"name": name, "note": note} for name, note in speakers.items()],
    }


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _NOTE_CHARS else text[: _NOTE_CHARS - 1].rstrip() + "…"
