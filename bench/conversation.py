"""``aizuchi bench conversation``: one channel, several personas and a person, in the default mode and in the
reference-style tool-loop mode, on the same script. Prints what each mode cost and what a person would notice.

The arbiter runs in process on a scratch SQLite file and is reached over HTTP as in production. The provider
is the scripted one, given a fixed latency: it answers from the persona's lines, by the kind of message it is
answering. It costs no tokens, so prompt sizes are estimated from the prompts it was really sent. Time runs
faster than the clock by ``--speed`` (every duration - recoveries, waits, latency, the person's pace - is
divided by it); times are reported in conversation seconds. How distinct the personas sound is measured on the
transcript (bench.transcript_metrics). What the providers' prompt caches would read and write of those requests,
and what a busy channel-day costs with and without them on each built-in profile's model, is replayed on them
(bench.prompt_cache).

The person's script mixes what people say in a group chat: greetings, questions put to one persona by name
(some asking for an explanation), questions to everyone, thanks, plain statements, a farewell.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from arbiter.contract import AuthorKind, Tier
from arbiter.server import open_arbiter
from arbiter.settings import ArbiterSettings
from bench.confine import ConfineError, empty_database
from bench.prompt_cache import (
    BUSY_DAY_MESSAGES,
    BUSY_DAY_PACE_S,
    CachedCall,
    DayCost,
    busy_day,
    stable_beginning,
)
from bench.transcript_metrics import TranscriptScores, measure, profile_text
from bots.arbiter_client import ArbiterClient
from bots.language.kinds import is_question
from bots.language.text import nod_repeats, repeats
from bots.llm.base import ChatProvider, Completion, CompletionRequest, DecisionRequest, DecisionResult
from bots.llm.pricing import CHECKED, PRICES, model_price
from bots.llm.profiles import BUILTIN_PROFILES
from bots.llm.scripted import ScriptedProvider, estimate_prompt_tokens, estimate_tokens
from bots.persona import Persona, load_personas
from bots.platforms.memory import MemoryRoom
from bots.prompt import OWN_LINES
from bots.runtime import PersonaRuntime, RuntimeConfig
from bots.tool_loop import ToolLoopRuntime

if TYPE_CHECKING:
    import argparse

    from arbiter.contract import MessageView
    from arbiter.service import ArbiterService

__all__ = ("run_benchmark", "script")

CHANNEL = "bench"

# What the person says; "{name}" is a persona, taken in turn. The first line opens, the last one closes; the
# rest are dealt in a seeded order.
OPENING = "Hi all! What is everyone up to this weekend?"
CLOSING = "Okay, I have to go now. Bye everyone, see you tomorrow!"
LINES = (
    "Hello everyone, good to see you!",
    "{name}, do you ever switch off from work?",
    "{name}, got a story idea for me?",
    "{name}, why do you like what you do so much?",
    "{name}, can you explain how you got started?",
    "{name}, what's 12 plus 30?",
    "{name}, tell me about your favourite place.",
    "{name}, what would you cook for a friend?",
    "{name}, any plans for the holidays?",
    "{name}, how was your week?",
    "{name}, what do you think about remote work?",
    "{name}, which book changed your mind about something?",
    "Any book recommendations for a long train ride?",
    "What's the most useful thing you learned this year?",
    "Okay, new topic: cats or dogs?",
    "What's 17 times 3?",
    "Does anyone here play an instrument?",
    "Why is it so hard to get up on Mondays?",
    "Who wants to plan a picnic with me?",
    "What should I watch tonight?",
    "Is it just me, or is everyone tired today?",
    "Thanks, that's really helpful!",
    "Thank you all, you're great company.",
    "I'm thinking of learning to bake bread.",
    "I tried sourdough once and it was a brick.",
    "The weather here has been awful all week.",
    "I finally fixed the bug that haunted me for days.",
    "Haha, that's a good one.",
    "My cat knocked a glass off the table again.",
    "I started running in the mornings.",
    "The train was forty minutes late today.",
    "I think I'll repaint my room this weekend.",
    "Coffee or tea, that is the question.",
    "I just booked a trip to the mountains!",
    "Sometimes I miss writing letters by hand.",
    "Our team shipped the release at last.",
)


def latin_name(persona: Persona) -> str:
    """The name a person typing in English would use: the display name, or an alias in Latin letters."""
    return next((name for name in persona.names if name.isascii()), persona.display_name)


def script(personas: list[Persona], lines: int, seed: int) -> list[str]:
    """``lines`` lines of the person's: an opening, a seeded deal of the rest (personas named in turn), a
    closing."""
    rng = random.Random(seed)
    deck: list[str] = []
    while len(deck) < max(0, lines - 2):
        batch = list(LINES)
        rng.shuffle(batch)
        deck += batch
    names = [latin_name(p) for p in personas]
    named = 0
    said: list[str] = []
    for template in deck[: max(0, lines - 2)]:
        line = template
        if "{name}" in template:
            line = template.replace("{name}", names[named % len(names)])
            named += 1
        said.append(line)
    return ([OPENING] if lines >= 1 else []) + said + ([CLOSING] if lines >= 2 else [])


@dataclass
class PromptLog:
    """Every request's estimated prompt size, with how many messages the channel had when it was made, and the
    estimated size of each answer (the decision and the notes that come with it)."""

    entries: list[tuple[int, int]] = field(default_factory=list)  # (messages so far, prompt tokens)
    answers: list[int] = field(default_factory=list)  # completion tokens, estimated
    messages: int = 0
    calls: list[CachedCall] = field(default_factory=list)  # for the prompt caches' replay
    speed: float = 1.0
    started: float = field(default_factory=time.monotonic)

    def now(self) -> float:
        """Conversation seconds since the run began."""
        return (time.monotonic() - self.started) * self.speed

    def called(self, request: DecisionRequest | CompletionRequest, prompt: int, answer: int) -> None:
        beginning, tokens = stable_beginning(request)
        self.calls.append(CachedCall(self.now(), beginning, tokens, prompt, answer))


class MeteredProvider(ChatProvider):
    """Delegates to a provider and logs each request's prompt size against the conversation's length."""

    def __init__(self, inner: ChatProvider, log: PromptLog) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name

    async def complete(self, request: CompletionRequest) -> Completion:
        prompt = estimate_prompt_tokens(request)
        self.log.entries.append((self.log.messages, prompt))
        completion = await self.inner.complete(request)
        calls = [{"name": call.name, "arguments": call.arguments} for call in completion.tool_calls]
        answer = estimate_tokens(completion.text + json.dumps(calls, ensure_ascii=False))
        self.log.called(request, prompt, answer)
        return completion

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        prompt = estimate_prompt_tokens(request)
        self.log.entries.append((self.log.messages, prompt))
        result = await self.inner.decide(request)
        decision = result.decision
        answer = {"action": decision.action, "text": decision.text, "memory": decision.memory}
        answered = estimate_tokens(json.dumps(answer, ensure_ascii=False))
        self.log.answers.append(answered)
        self.log.called(request, prompt, answered)
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class Conversation:
    """What a person notices in a history, measured."""

    history: list[MessageView]

    def segments(self) -> list[tuple[MessageView, list[MessageView]]]:
        """Each human message with what the bots said after it, up to the next human message."""
        result: list[tuple[MessageView, list[MessageView]]] = []
        for message in self.history:
            if message.author_kind is AuthorKind.HUMAN:
                result.append((message, []))
            elif result:
                result[-1][1].append(message)
        return result

    @property
    def persona_lines(self) -> list[MessageView]:
        return [m for m in self.history if m.author_kind is AuthorKind.PERSONA]

    def addressed_first(self) -> tuple[int, int]:
        """(answered first by the persona addressed, messages that addressed one)."""
        asked = [(human, after) for human, after in self.segments() if human.addressed]
        first = sum(1 for human, after in asked if after and after[0].author_id in human.addressed)
        return first, len(asked)

    def unanswered_questions(self) -> int:
        """Questions a person asked that no persona answered (a nod is no answer) before the person spoke again."""
        return sum(
            1
            for human, after in self.segments()
            if is_question(human.text) and not any(m.tier in (Tier.REMARK, Tier.LONG) for m in after)
        )

    def most_nods_per_message(self) -> int:
        most = run = 0
        for message in self.history:
            run = run + 1 if message.tier is Tier.AIZUCHI else 0
            most = max(most, run)
        return most

    def repeated_lines(self, within: int = OWN_LINES) -> int:
        """Lines a persona said again as the runtime would not post them (``bots.language.text``): a remark one of
        its own last ``within`` lines, a nod its own nod before."""
        said: dict[str, list[str]] = defaultdict(list)
        last_nod: dict[str, str] = {}
        count = 0
        for message in self.persona_lines:
            earlier = said[message.author_id]
            if message.tier is Tier.AIZUCHI:
                count += nod_repeats(message.text, last_nod=last_nod.get(message.author_id), answering=None)
                last_nod[message.author_id] = message.text
            else:
                count += repeats(message.text, earlier[-within:])
            earlier.append(message.text)
        return count

    def longest_bot_run(self) -> int:
        most = run = 0
        for message in self.history:
            run = 0 if message.author_kind is AuthorKind.HUMAN else run + 1
            most = max(most, run)
        return most

    def first_replies(self, speed: float) -> list[float]:
        return [(after[0].at - human.at) * speed for human, after in self.segments() if after]


def faster(config: RuntimeConfig, speed: float) -> RuntimeConfig:
    """The personas' production settings with every duration (each ``*_s``) run ``speed`` times faster."""
    return replace(config, **{f.name: getattr(config, f.name) / speed for f in fields(config) if f.name.endswith("_s")})


@dataclass
class ModeResult:
    mode: str
    personas: int
    requests: int
    posted: int
    wasted: int
    overtaken: int
    passes: int
    tiers: dict[Tier, int]
    remarks_by_persona: dict[str, int]
    prompt_by_length: dict[str, float]
    answer_tokens: float
    conversation: Conversation
    scores: TranscriptScores
    speed: float
    days: dict[str, DayCost] = field(default_factory=dict)  # a busy channel-day, by model

    @property
    def nod_share(self) -> float:
        return self.tiers[Tier.AIZUCHI] / max(1, self.posted)

    @property
    def top_remarks(self) -> tuple[str, float]:
        total = sum(self.remarks_by_persona.values())
        top = max(self.remarks_by_persona.items(), key=lambda item: item[1], default=("-", 0))
        return top[0], top[1] / max(1, total)

    def rows(self) -> dict[str, str]:
        first, asked = self.conversation.addressed_first()
        replies = sorted(self.conversation.first_replies(self.speed))
        p90 = replies[max(0, int(len(replies) * 0.9) - 1)] if replies else float("nan")
        top, share = self.top_remarks
        distinct, accuracy = self.scores.distinctness, self.scores.accuracy
        rows = {
            "messages posted": f"{self.posted}",
            "LLM requests": f"{self.requests}",
            "LLM requests per posted message": f"{self.requests / max(1, self.posted):.2f}",
            "wasted generations": f"{self.wasted}",
            "calls stopped, overtaken": f"{self.overtaken}",
            "passes": f"{self.passes}",
            "addressed persona answered first": f"{first / max(1, asked):.0%} ({first}/{asked})",
            "questions left unanswered": f"{self.conversation.unanswered_questions()}",
            "nods per message (max)": f"{self.conversation.most_nods_per_message()}",
            "repeated lines within 30": f"{self.conversation.repeated_lines()}",
            "nods share": f"{self.nod_share:.0%}",
            "lines by tier (nod/remark/long)": "/".join(str(self.tiers[tier]) for tier in Tier),
            "top persona's share of remarks": f"{share:.0%} ({top})",
            "longest bot-only run": f"{self.conversation.longest_bot_run()}",
            "speaker distinctness": "-" if distinct is None else f"{distinct:.3f}",
            "persona accuracy, nearest profile": "-"
            if accuracy is None
            else f"{accuracy:.0%} ({self.scores.correct}/{self.scores.lines})",
            "time to first reply, median": f"{statistics.median(replies):.1f} s" if replies else "-",
            "time to first reply, p90": f"{p90:.1f} s" if replies else "-",
        }
        for bucket, tokens in self.prompt_by_length.items():
            rows[f"prompt tokens per request, history {bucket}"] = "-" if math.isnan(tokens) else f"{tokens:.0f}"
        answers = self.answer_tokens
        rows["answer tokens per decision (with notes)"] = "-" if math.isnan(answers) else f"{answers:.0f}"
        for model, day in self.days.items():
            used = day.usage
            requests = max(1.0, day.requests)
            rows[f"{model}: cache read / written per request"] = (
                f"{used.cache_read_tokens / requests:.0f} / {used.cache_write_tokens / requests:.0f}"
            )
            rows[f"{model}: busy channel-day, cached / uncached"] = (
                f"${day.cached:.2f} / ${day.uncached:.2f} ({-day.saved:+.0%})"
            )
        return rows

    def targets(self) -> list[tuple[str, bool]]:
        """The issue's targets for a long run, each with whether this run met it."""
        first, asked = self.conversation.addressed_first()
        ceiling = 1 / max(1, self.personas) + 0.15
        return [
            ("addressed persona answers first >= 95%", first >= 0.95 * asked),
            ("questions left unanswered = 0", self.conversation.unanswered_questions() == 0),
            ("repeated lines within 30 = 0", self.conversation.repeated_lines() == 0),
            ("nods 25-45% of persona lines", 0.25 <= self.nod_share <= 0.45),
            (f"no persona above {ceiling:.0%} of the remarks", self.top_remarks[1] <= ceiling),
            ("LLM requests per posted message <= 1.05", self.requests <= 1.05 * self.posted),
            ("wasted generations = 0", self.wasted == 0),
            ("each tier occurs", all(self.tiers[tier] > 0 for tier in Tier)),
        ]


# How long the conversation was when a request was made: prompts must not grow with it (the notes replace the past).
_EDGES = (0, 25, 50, 100, 200, 300, 400, 500)
_BUCKETS = (
    *((low, high, f"{low}-{high} msgs") for low, high in itertools.pairwise(_EDGES)),
    (_EDGES[-1], 10**9, f"{_EDGES[-1]}+ msgs"),
)


def _by_length(log: PromptLog) -> dict[str, float]:
    result = {}
    for low, high, label in _BUCKETS:
        sizes = [tokens for length, tokens in log.entries if low <= length < high]
        result[label] = statistics.mean(sizes) if sizes else float("nan")
    return result


async def _run_mode(mode: str, args: argparse.Namespace, scratch: Path) -> ModeResult:
    speed = args.speed
    personas = load_personas(Path(args.personas_dir), args.personas.split(","))
    tokens = {p.id: f"bench-{p.id}-token-0000000000" for p in personas}
    url = f"sqlite:///{scratch / f'{mode}.db'}"
    if args.database_url is not None:
        url = args.database_url
        await empty_database(url)  # each mode on it as on a scratch one
    settings = ArbiterSettings(database_url=url, persona_tokens=tokens, _env_file=None)
    log = PromptLog(speed=speed)
    room = MemoryRoom()
    async with open_arbiter(settings) as arbiter:
        runner = web.AppRunner(arbiter.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = runner.addresses[0][1]
        print(f"{mode}: the arbiter's API at http://127.0.0.1:{port}", flush=True)
        await arbiter.service.ensure_channel(
            CHANNEL,
            {
                "tiers": {tier: {"recovery_s": 5.0 / speed} for tier in ("aizuchi", "remark", "long")},
                "claim_ttl_s": max(1.0, 30.0 / speed),
                "priority_window_s": 20.0 / speed,
            },
        )
        counter = arbiter.hub.subscribe(CHANNEL)

        async def count_messages() -> None:
            async for event in counter:
                if event.type == "message":
                    log.messages += 1

        counting = asyncio.create_task(count_messages())
        async with aiohttp.ClientSession() as session:
            runtimes: list[PersonaRuntime] = []
            kind = ToolLoopRuntime if mode == "tool-loop" else PersonaRuntime
            for index, persona in enumerate(personas):
                scripted = ScriptedProvider.for_persona(persona, seed=args.seed + index, latency_s=args.latency / speed)
                runtime = kind(
                    persona,
                    MeteredProvider(scripted, log),
                    ArbiterClient(session, f"http://127.0.0.1:{port}", tokens[persona.id]),
                    room.platform(persona.id),
                    config=faster(RuntimeConfig(), speed),
                    rng=random.Random(args.seed * 100 + index),
                )
                await runtime.start()
                await runtime.join(CHANNEL).ready()
                runtimes.append(runtime)
            await _human(arbiter.service, script(personas, args.lines, args.seed), args)
            for runtime in runtimes:
                await runtime.close()
        counter.close()
        await counting
        history = await _history(arbiter.service)
        await runner.cleanup()
    stats = [runtime.stats for runtime in runtimes]
    return ModeResult(
        mode=mode,
        personas=len(personas),
        requests=sum(s.llm_requests for s in stats),
        posted=sum(sum(s.posted.values()) for s in stats),
        wasted=sum(s.wasted for s in stats),
        overtaken=sum(s.overtaken for s in stats),
        passes=sum(s.passes for s in stats),
        tiers={tier: sum(s.posted[str(tier)] for s in stats) for tier in Tier},
        remarks_by_persona={
            r.persona.id: r.stats.posted[str(Tier.REMARK)] + r.stats.posted[str(Tier.LONG)] for r in runtimes
        },
        prompt_by_length=_by_length(log),
        answer_tokens=statistics.mean(log.answers) if log.answers else float("nan"),
        conversation=Conversation(history),
        scores=measure([(m.author_id, m.text) for m in history], {p.id: profile_text(p) for p in personas}),
        speed=speed,
        days=_busy_days(log, args),
    )


def _busy_days(log: PromptLog, args: argparse.Namespace) -> dict[str, DayCost]:
    """A busy channel-day on each built-in profile's model, from the run's requests."""
    days = {}
    for name in ("anthropic", "openai"):
        profile = BUILTIN_PROFILES[name]
        price = model_price(profile.provider, profile.model)  # type: ignore[arg-type]
        if price is not None:
            days[profile.model] = busy_day(log.calls, args.lines, args.every, price)
    return days


async def _history(service: ArbiterService) -> list[MessageView]:
    history: list[MessageView] = []
    while True:
        page = await service.history(CHANNEL, after=history[-1].seq if history else 0, limit=200)
        history += page.messages
        if not page.has_more:
            return history


async def _human(service: ArbiterService, lines: list[str], args: argparse.Namespace) -> None:
    """The script: a line every ``--every`` conversation seconds (with a seeded jitter), then silence."""
    rng = random.Random(args.seed)
    started = time.monotonic()
    at = 0.0
    for text in lines:
        await asyncio.sleep(max(0.0, started + at / args.speed - time.monotonic()))
        await service.record_message(CHANNEL, author_id="human", author_name="Yui", text=text)
        at += args.every * rng.uniform(0.7, 1.3)
    await asyncio.sleep(max(0.0, started + (at + args.tail) / args.speed - time.monotonic()))


def _print(results: list[ModeResult], args: argparse.Namespace) -> None:
    rows = [result.rows() for result in results]
    labels = list(rows[0])
    width = max(len(label) for label in labels)
    columns = [
        max(len(result.mode), *(len(row[label]) for label in labels)) for result, row in zip(results, rows, strict=True)
    ]
    modes = " | ".join(result.mode.rjust(column) for result, column in zip(results, columns, strict=True))
    print(f"| {'metric'.ljust(width)} | {modes} |")
    print("|" + "-" * (width + 2) + "|" + "|".join("-" * (c + 2) for c in columns) + "|")
    for label in labels:
        cells = " | ".join(row[label].rjust(c) for row, c in zip(rows, columns, strict=True))
        print(f"| {label.ljust(width)} | {cells} |")
    _print_prices(results, args)
    for result in results:
        print(f"\nby speaker ({result.mode}): distinctness, persona accuracy")
        for score in result.scores.speakers:
            distinct = "-" if score.distinctness is None else f"{score.distinctness:.3f}"
            accuracy = f"{score.correct / score.lines:.0%} ({score.correct}/{score.lines})"
            print(f"  {score.speaker.ljust(12)} {distinct.rjust(6)}  {accuracy}")
    for result in results:
        met = result.targets()
        print(f"\ntargets ({result.mode}): {sum(ok for _, ok in met)} of {len(met)} met")
        for what, ok in met:
            print(f"  {'ok  ' if ok else 'MISS'} {what}")
    if args.transcript is not None:
        for result in results:
            path = _transcript_path(Path(args.transcript), result.mode, len(results))
            path.write_text("".join(f"[{m.author_name}] {m.text}\n" for m in result.conversation.history))
            print(f"\n{result.mode} transcript written to {path}")


def _print_prices(results: list[ModeResult], args: argparse.Namespace) -> None:
    """Where the day's costs come from: the price table's rows, and what a busy day is."""
    models = {model for result in results for model in result.days}
    if not models:
        return
    print(
        f"\nbusy channel-day: {BUSY_DAY_MESSAGES} people's messages, the run's requests per message; the run's time"
        f" stretched x{BUSY_DAY_PACE_S / args.every:.1f} (a message every {BUSY_DAY_PACE_S:.0f} s) for the cache"
        f" lifetimes. Prices per million tokens, from bots/llm/pricing.py (read {CHECKED}):"
    )
    for model in sorted(models):
        price = PRICES[next(prefix for prefix in PRICES if model.startswith(prefix))]
        print(
            f"  {model}: input ${price.input:g}, cache write ${price.cache_write:g}, cache read ${price.cache_read:g},"
            f" output ${price.output:g}; caches {price.min_cacheable:,}+ tokens for {price.cache_ttl_s / 60:g} min"
            f" ({price.source})"
        )


def _transcript_path(path: Path, mode: str, modes: int) -> Path:
    """``path`` itself for one mode; ``name.<mode>.ext`` beside it for each of several."""
    return path if modes == 1 else path.with_name(f"{path.stem}.{mode}{path.suffix}")


async def run_benchmark(args: argparse.Namespace) -> int:
    modes = ["decide", "tool-loop"] if args.mode == "both" else [args.mode]
    print(
        f"aizuchi bench conversation: personas {args.personas}; {args.lines} lines of a person's about every"
        f" {args.every:g} s, then {args.tail:g} s of quiet; provider latency {args.latency:g} s; time x{args.speed:g};"
        f" seed {args.seed}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        try:
            results = [await _run_mode(mode, args, Path(scratch)) for mode in modes]
        except ConfineError as error:
            print(f"aizuchi bench conversation: {error}", file=sys.stderr)
            return 2
    _print(results, args)
    return 0
