"""The scripted provider: the offline stand-in behind the provider interface.

A decision reads the request's scene (:class:`bots.llm.scene.Scene`, the facts its prompt tells), never the
prompt's words: which message to answer (:mod:`.cue`), and a move and a line that fit it (:mod:`.choosing`).
A request without a scene is a conversation with nothing to answer yet. Its requests cost nothing: every usage it
reports is zero tokens, so it never spends a channel's daily token budget.

:meth:`ScriptedProvider.complete` also plays the reference design's tool loop (:mod:`.loop`): offered ``history``,
``status`` and ``consume`` tools, it calls them in that order (one per call), picks a tier the level in the
``status`` result affords and a line that fits it and the ``history`` result, and then answers with plain text
and no tool call, which ends the loop. Offered a lookup tool besides ``decide`` (a persona's MCP tools), it first
looks up the question it answers, then decides with the first line of what the tool returned.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from bots.language.kinds import Kind
from bots.llm.base import (
    ACTIONS,
    DECIDE_TOOL,
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
    Usage,
)
from bots.llm.scripted import loop
from bots.llm.scripted.choosing import Line, Said, Voice, wide
from bots.llm.scripted.cue import NOTHING, Cue, read_scene
from bots.llm.scripted.lines import GENERIC, Lines
from bots.llm.scripted.notes import kept_notes

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from bots.llm.scene import Scene
    from bots.llm.scripted.words import Language

__all__ = ("SampleSets", "ScriptedProvider", "Speaker")

_RECENT_WINDOW = 30


class SampleSets(Protocol):
    """A persona's sample lines, set by set (``bots.persona.Samples`` is one)."""

    @property
    def aizuchi(self) -> Sequence[str]: ...
    @property
    def remarks(self) -> Sequence[str]: ...
    @property
    def greetings(self) -> Sequence[str]: ...
    @property
    def farewells(self) -> Sequence[str]: ...
    @property
    def thanks(self) -> Sequence[str]: ...
    @property
    def answers(self) -> Sequence[str]: ...
    @property
    def unsure(self) -> Sequence[str]: ...
    @property
    def questions(self) -> Sequence[str]: ...
    @property
    def echoes(self) -> Sequence[str]: ...


class Speaker(Protocol):
    """What the stand-in reads of a persona (``bots.persona.Persona`` is one): said as a protocol so that the
    provider library does not import the runtime's persona files."""

    @property
    def id(self) -> str: ...
    @property
    def language(self) -> Language: ...
    @property
    def samples(self) -> SampleSets: ...


class ScriptedProvider(ChatProvider):
    """A persona's lines in, a conversation that answers what was said out; no network.

    ``aizuchi`` and ``remarks`` (and the optional per-kind sets) are the persona's lines; ``language`` ("en" or
    "ja", guessed from the lines when None) picks the generic sets it falls back on. ``recent_window`` is how
    many of its own latest lines it will not say again. ``latency_s`` pauses each call (jittered by a quarter
    either way) so a demo does not answer instantly; a request's ``time_left_s`` bounds it as it bounds a real
    call (LLMTimeout when the pause would not fit). ``speaker`` is who it is in a tool loop.
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
        unsure: Sequence[str] = (),
        questions: Sequence[str] = (),
        echoes: Sequence[str] = (),
        latency_s: float = 0.0,
        recent_window: int = _RECENT_WINDOW,
        speaker: str = "scripted",
    ) -> None:
        self.name = "scripted"
        # Wide letters (kana, kanji) make it Japanese; wide emoji do not.
        wide_letters = any(wide(char) and char.isalpha() for line in (*aizuchi, *remarks) for char in line)
        self.language: Language = language or ("ja" if wide_letters else "en")
        generic = GENERIC[self.language]
        lines = Lines(
            aizuchi=_clean(aizuchi) or generic.aizuchi,
            remarks=_clean(remarks) or generic.remarks,
            greetings=_clean(greetings),
            farewells=_clean(farewells),
            thanks=_clean(thanks),
            answers=_clean(answers),
            unsure=_clean(unsure),
            questions=_clean(questions),
            echoes=_clean(echoes),
        )
        self.voice = Voice(lines, generic, random.Random(seed), recent_window)
        self.latency_s = latency_s
        self.speaker = speaker
        # Latency draws come from their own generator, so the lines do not depend on whether a demo pauses.
        self._latency_rng = random.Random(seed ^ 0x5EED)
        self._calls = 0

    @classmethod
    def for_persona(
        cls, persona: Speaker, *, seed: int, latency_s: float = 0.0, recent_window: int = _RECENT_WINDOW
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
            unsure=samples.unsure,
            questions=samples.questions,
            echoes=samples.echoes,
            latency_s=latency_s,
            recent_window=recent_window,
            speaker=persona.id,
        )

    @property
    def lines(self) -> Lines:
        return self.voice.lines

    @property
    def aizuchi(self) -> tuple[str, ...]:
        return self.voice.lines.aizuchi

    @property
    def remarks(self) -> tuple[str, ...]:
        return self.voice.lines.remarks

    def __repr__(self) -> str:
        return f"ScriptedProvider({self.language}, aizuchi={len(self.aizuchi)}, remarks={len(self.remarks)})"

    # --- the interface --------------------------------------------------------------------------------

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        await self._pause(request.time_left_s)
        decision = self._decision(request.actions, request.max_lengths, request.scene)
        if request.memory_schema is not None and request.scene is not None:
            decision = replace(decision, memory=kept_notes(request.scene))
        return DecisionResult(decision, Usage(0, 0))

    async def complete(self, request: CompletionRequest) -> Completion:
        await self._pause(request.time_left_s)
        tools = {tool.name: tool for tool in request.tools}
        forced = None if request.tool_choice in ("auto", "required", "none") else request.tool_choice
        if not tools or request.tool_choice == "none":
            return _text(self._decision(("aizuchi", "remark"), {}, request.scene).text)
        if forced == DECIDE_TOOL or (forced is None and set(tools) == {DECIDE_TOOL}):
            return self._decide_call(tools[DECIDE_TOOL], request)
        if forced is None and DECIDE_TOOL in tools:
            return self._look_up_or_decide(tools, request)
        if forced is not None and forced not in ("history", "status", "consume"):
            return self._call(forced, {})
        return self._tool_loop_step(tools, request)

    # --- deciding -------------------------------------------------------------------------------------

    def _decision(self, actions: Iterable[str], max_lengths: Mapping[str, int], scene: Scene | None) -> Decision:
        return self.voice.choose(actions, max_lengths, _said(scene), self._cue(scene))

    def _cue(self, scene: Scene | None) -> Cue:
        if scene is None:
            return NOTHING
        return replace(read_scene(scene, self.language), emoji_nods=scene.emoji_nods)

    def _look_up_or_decide(self, tools: dict[str, ToolSpec], request: CompletionRequest) -> Completion:
        """Asked a question, call the first lookup tool with it once; otherwise (or after that) decide."""
        calls, _ = loop.loop_so_far(request.turns)
        cue = self._cue(request.scene)
        if not calls and cue.kind is Kind.QUESTION and cue.text:
            tool = next(tool for name, tool in tools.items() if name != DECIDE_TOOL)
            arguments = loop.lookup_arguments(tool, cue.text)
            if arguments is not None:
                return self._call(tool.name, arguments)
        return self._decide_call(tools[DECIDE_TOOL], request)

    def _decide_call(self, tool: ToolSpec, request: CompletionRequest) -> Completion:
        properties = tool.parameters.get("properties", {})
        # What the claim allows, as the prompt says it (the scene's moves); the tool itself offers every action.
        scene = request.scene
        enum = scene.moves if scene is not None and scene.moves else properties.get("action", {}).get("enum", ACTIONS)
        actions = tuple(action for action in ACTIONS if action in enum)
        found = loop.looked_up(request.turns)
        saying = next((action for action in ("remark", "long") if action in actions), None)
        if found is not None and saying is not None:
            decision = self.voice.said(saying, (Line(found),))
        else:
            decision = self._decision(actions, {}, request.scene)
        arguments: dict[str, Any] = {"action": decision.action, "text": decision.text}
        if "memory" in properties and request.scene is not None:
            arguments["memory"] = kept_notes(request.scene)
        return self._call(DECIDE_TOOL, arguments)

    # --- the reference design's tool loop -------------------------------------------------------------

    def _tool_loop_step(self, tools: dict[str, ToolSpec], request: CompletionRequest) -> Completion:
        calls, results = loop.loop_so_far(request.turns)
        called = [call.name for call in calls]
        for step in ("history", "status"):
            if step in tools and step not in called:
                return self._call(step, {})
        consumes = [call for call in calls if call.name == "consume"]
        last = consumes[-1] if consumes else None
        if last is not None and loop.granted(results.get(last.id)):
            return _text(loop.spoken_text(last.arguments))
        if "consume" in tools and len(consumes) < loop.MAX_CONSUMES:
            arguments = self._consume_arguments(tools["consume"], calls, results, last)
            if arguments is not None:
                return self._call("consume", arguments)
        self.voice.passes()
        return _text("(pass)")

    def _consume_arguments(
        self, tool: ToolSpec, calls: list[ToolCall], results: dict[str, ToolResult], refused: ToolCall | None
    ) -> dict[str, Any] | None:
        status = next((loop.result_json(results.get(c.id)) for c in reversed(calls) if c.name == "status"), {})
        if status.get("paused") or status.get("enabled") is False:
            return None
        tiers = loop.tiers_of(status)
        level = loop.number(status.get("level", status.get("resource")), default=100)
        if refused is not None:
            # A refused spend: retry once, cheaper, with the level the refusal reported.
            refusal = loop.result_json(results.get(refused.id))
            level = loop.number(refusal.get("level", refusal.get("resource")), default=level)
            ceiling = loop.refused_cost(refused.arguments, tiers)
            tiers = {name: tier for name, tier in tiers.items() if tier.cost < ceiling}
        affordable = [name for name in ("aizuchi", "remark", "long") if name in tiers and tiers[name].cost <= level]
        history = loop.history_scene(calls, results, self.speaker)
        own = (line.text for line in reversed(history.lines) if line.role == "you")
        said = Said.of((line.text for line in history.lines), next((t for t in own if self.voice.is_nod(t)), None))
        lengths = {name: tier.max_length for name, tier in tiers.items() if tier.max_length is not None}
        decision = self.voice.choose(("pass", *affordable), lengths, said, read_scene(history, self.language))
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

    # --- answering ------------------------------------------------------------------------------------

    def _call(self, name: str, arguments: dict[str, Any]) -> Completion:
        self._calls += 1
        call = ToolCall(id=f"scripted_{self._calls}", name=name, arguments=arguments)
        return Completion(text="", tool_calls=(call,), usage=Usage(0, 0), stop_reason="tool_use")

    async def _pause(self, time_left_s: float | None) -> None:
        # As a real provider does: a call with no time left fails at once, one slower than the time left fails
        # when the time is up.
        pause = self.latency_s * (0.75 + 0.5 * self._latency_rng.random()) if self.latency_s > 0 else 0.0
        if time_left_s is not None and pause >= time_left_s:
            await asyncio.sleep(max(0.0, time_left_s))
            raise LLMTimeout(f"the scripted provider takes {pause:.2f} s; the call had {time_left_s:.2f} s")
        if pause > 0:
            await asyncio.sleep(pause)


def _text(text: str) -> Completion:
    return Completion(text=text, tool_calls=(), usage=Usage(0, 0), stop_reason="end_turn")


def _clean(lines: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))


def _said(scene: Scene | None) -> Said:
    """What ``scene`` already holds, its own earlier lines included, and its own latest nod there."""
    if scene is None:
        return Said.of(())
    nods = (line.text for line in reversed(scene.lines) if line.role == "you" and line.nod)
    return Said.of((*(line.text for line in scene.lines), *scene.earlier_own), next(nods, None))
