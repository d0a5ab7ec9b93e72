"""``aizuchi bench conversation``: one channel, several personas and a human, in the default mode and in the
reference-style tool-loop mode, on the same script. Prints what each mode cost and how the talk went.

The arbiter runs in process on a scratch SQLite file and is reached over HTTP like in production. The
provider is the scripted one, given a fixed latency: it answers from the persona's sample lines and counts
tokens from the prompt it was actually sent, so prompt growth is real. Time runs faster than the clock by
``--speed`` (every duration - recoveries, waits, latency, the human's pace - is divided by it); times are
reported in conversation seconds.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from arbiter.contract import AuthorKind, Tier
from arbiter.server import open_arbiter
from arbiter.settings import ArbiterSettings
from bots.arbiter_client import ArbiterClient
from bots.llm.base import ChatProvider, Completion, CompletionRequest, DecisionRequest, DecisionResult
from bots.llm.scripted import ScriptedProvider
from bots.persona import load_personas
from bots.platforms.memory import MemoryRoom
from bots.runtime import PersonaRuntime, RuntimeConfig
from bots.tool_loop import ToolLoopRuntime

if TYPE_CHECKING:
    import argparse

    from arbiter.contract import MessageView
    from arbiter.service import ArbiterService

__all__ = ("run_benchmark",)

CHANNEL = "bench"
HUMAN_LINES = (
    "Hi all! What is everyone up to this weekend?",
    "I'm thinking of learning to bake bread. Good idea or chaos?",
    "Theo, do you ever switch off from work?",
    "Juno, got a story idea for me?",
    "Any book recommendations for a long train ride?",
    "Rin, how is your game dev community doing?",
    "I tried sourdough once and it was a brick.",
    "What's the most useful thing you learned this year?",
    "Okay, new topic: cats or dogs?",
    "Hana, what are you drawing these days?",
)


@dataclass
class PromptLog:
    """Every request's prompt size, with how many messages the channel had when it was made."""

    entries: list[tuple[int, int]] = field(default_factory=list)  # (messages so far, prompt tokens)
    messages: int = 0


class MeteredProvider(ChatProvider):
    """Delegates to a provider and logs each request's prompt tokens against the conversation's length."""

    def __init__(self, inner: ChatProvider, log: PromptLog) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name

    async def complete(self, request: CompletionRequest) -> Completion:
        completion = await self.inner.complete(request)
        self.log.entries.append((self.log.messages, completion.usage.prompt_tokens))
        return completion

    async def decide(self, request: DecisionRequest) -> DecisionResult:
        result = await self.inner.decide(request)
        self.log.entries.append((self.log.messages, result.usage.prompt_tokens))
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


@dataclass
class ModeResult:
    mode: str
    requests: int
    posted: int
    wasted: int
    aizuchi: int
    remarks_by_persona: dict[str, int]
    prompt_by_length: dict[str, float]
    first_reply_s: list[float]
    history: list[MessageView]

    def rows(self) -> dict[str, str]:
        remarks = sum(self.remarks_by_persona.values())
        top = max(self.remarks_by_persona.items(), key=lambda item: item[1], default=("-", 0))
        replies = sorted(self.first_reply_s)
        p90 = replies[max(0, int(len(replies) * 0.9) - 1)] if replies else float("nan")
        rows = {
            "messages posted": f"{self.posted}",
            "LLM requests": f"{self.requests}",
            "LLM requests per posted message": f"{self.requests / max(1, self.posted):.2f}",
            "wasted generations": f"{self.wasted}",
            "share of aizuchi": f"{self.aizuchi / max(1, self.posted):.0%}",
            "largest persona's share of remarks": f"{top[1] / max(1, remarks):.0%} ({top[0]})",
            "human message to first reply, median": f"{statistics.median(replies):.1f} s" if replies else "-",
            "human message to first reply, p90": f"{p90:.1f} s" if replies else "-",
        }
        for bucket, tokens in self.prompt_by_length.items():
            rows[f"prompt tokens per request, history {bucket}"] = f"{tokens:.0f}"
        return rows


_BUCKETS = ((0, 15, "0-15 msgs"), (15, 30, "15-30 msgs"), (30, 60, "30-60 msgs"), (60, 10**9, "60+ msgs"))


def _by_length(log: PromptLog) -> dict[str, float]:
    result = {}
    for low, high, label in _BUCKETS:
        sizes = [tokens for length, tokens in log.entries if low <= length < high]
        result[label] = statistics.mean(sizes) if sizes else float("nan")
    return result


def _first_replies(history: list[MessageView], speed: float) -> list[float]:
    delays = []
    for index, message in enumerate(history):
        if message.author_kind is not AuthorKind.HUMAN:
            continue
        reply = next((m for m in history[index + 1 :] if m.author_kind is AuthorKind.PERSONA), None)
        # A human line answered only after the next human line is not a reply to it: leave it out.
        followed_by_human = index + 1 < len(history) and history[index + 1].author_kind is AuthorKind.HUMAN
        if reply is not None and not followed_by_human:
            delays.append((reply.at - message.at) * speed)
    return delays


async def _run_mode(mode: str, args: argparse.Namespace, scratch: Path) -> ModeResult:
    speed = args.speed
    personas = load_personas(Path(args.personas_dir), args.personas.split(","))
    tokens = {p.id: f"bench-{p.id}-token-0000000000" for p in personas}
    settings = ArbiterSettings(
        database_url=f"sqlite:///{scratch / f'{mode}.db'}", persona_tokens=tokens, _env_file=None
    )
    log = PromptLog()
    room = MemoryRoom()
    async with open_arbiter(settings) as arbiter:
        runner = web.AppRunner(arbiter.app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
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
                scripted = ScriptedProvider(
                    persona.samples.aizuchi,
                    persona.samples.remarks,
                    seed=args.seed + index,
                    latency_s=args.latency / speed,
                )
                runtime = kind(
                    persona,
                    MeteredProvider(scripted, log),
                    ArbiterClient(session, f"http://127.0.0.1:{port}", tokens[persona.id]),
                    room.platform(persona.id),
                    config=RuntimeConfig(base_delay_s=1.5 / speed, backoff_s=2.0 / speed),
                    rng=random.Random(args.seed * 100 + index),
                )
                await runtime.start()
                await runtime.join(CHANNEL).ready()
                runtimes.append(runtime)
            await _human(arbiter.service, args)
            for runtime in runtimes:
                await runtime.close()
        counter.close()
        await counting
        history = (await arbiter.service.history(CHANNEL, limit=200)).messages
        more = history
        while len(more) == 200:
            more = (await arbiter.service.history(CHANNEL, after=history[-1].seq, limit=200)).messages
            history += more
        await runner.cleanup()
    stats = [runtime.stats for runtime in runtimes]
    return ModeResult(
        mode=mode,
        requests=sum(s.llm_requests for s in stats),
        posted=sum(sum(s.posted.values()) for s in stats),
        wasted=sum(s.wasted for s in stats),
        aizuchi=sum(s.posted[str(Tier.AIZUCHI)] for s in stats),
        remarks_by_persona={
            r.persona.id: r.stats.posted[str(Tier.REMARK)] + r.stats.posted[str(Tier.LONG)] for r in runtimes
        },
        prompt_by_length=_by_length(log),
        first_reply_s=_first_replies(history, speed),
        history=history,
    )


async def _human(service: ArbiterService, args: argparse.Namespace) -> None:
    """The script: a human line every ``--every`` conversation seconds (with a seeded jitter), then silence."""
    rng = random.Random(args.seed)
    started = time.monotonic()
    at = 0.0
    for index in range(args.lines):
        await asyncio.sleep(max(0.0, started + at / args.speed - time.monotonic()))
        text = HUMAN_LINES[index % len(HUMAN_LINES)]
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
    default, loop = results[0], results[-1]
    if len(results) == 2 and default.posted and loop.posted:
        ratio = (loop.requests / loop.posted) / (default.requests / default.posted)
        print(f"\ntool-loop makes {ratio:.1f}x as many LLM requests per posted message as the default mode")
    if args.transcript:
        for result in results:
            print(f"\n--- {result.mode} transcript ---")
            for message in result.history:
                print(f"{message.seq:4d} [{message.author_name}] ({message.tier or 'human'}) {message.text}")


async def run_benchmark(args: argparse.Namespace) -> int:
    modes = ["decide", "tool-loop"] if args.mode == "both" else [args.mode]
    print(
        f"aizuchi bench conversation: personas {args.personas}; {args.lines} human lines about every {args.every:g} s,"
        f" then {args.tail:g} s of quiet; provider latency {args.latency:g} s; time x{args.speed:g}; seed {args.seed}\n"
    )
    with tempfile.TemporaryDirectory() as scratch:
        results = [await _run_mode(mode, args, Path(scratch)) for mode in modes]
    _print(results, args)
    return 0
