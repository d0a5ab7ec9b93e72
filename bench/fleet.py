"""``aizuchi bench fleet``: N personas across C channels, people talking at R messages a second, and what it costs.

The arbiter runs as its own process (as in production) on a scratch SQLite file or PostgreSQL database; the
personas (``PersonaRuntime``, the scripted provider, an in-memory platform) run in this process, each on its one
multiplexed event stream; the people are a load generator here too, posting observed messages at R a second, each
to a random channel, through the admin API as the Discord bot records them.

It prints, over the measured window:

- arbiter CPU and persona CPU per human message (this process's CPU is the personas' plus the load generator's,
  which is small: one HTTP request per message);
- the sockets the arbiter holds (its open TCP connections: the personas' streams and their keep-alive pool);
- memory per channel: how much the arbiter's and this process's resident memory grew from before the personas
  joined to after, divided by the channels;
- p50 / p99 from a person's message to the first persona's claim decision in its channel: the time from sending
  the message (so its commit is included) to the first plan made after it (a claim about to be sent, or none),
  told by the runtime's ``on_decision`` hook. Personas wait ``--delay`` before they look, as a person reads before
  answering (1.5 s by default in production): the default here is 0, so what is measured is the system's latency.
- status requests per human message: looks that had to ask for the status instead of using the pushed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import tempfile
import time
from array import array
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from bench.arbiter_load import ADMIN, Usage, _arbiter_process, _drop_postgres, _Reading, _scratch_postgres
from bots.arbiter_client import ArbiterClient
from bots.frames import FrameCache
from bots.llm.scripted import ScriptedProvider
from bots.persona import load_personas
from bots.platforms.memory import MemoryRoom
from bots.runtime import PersonaRuntime, RuntimeConfig

if TYPE_CHECKING:
    import argparse

    from arbiter.contract import Tier
    from bots.persona import Persona

__all__ = ("run_benchmark",)

_LINES = (
    "What does everyone think about this?",
    "I tried the new place by the station yesterday.",
    "Has anyone read anything good lately?",
    "The weather has been strange this week.",
    "Should we plan something for the weekend?",
)


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _tcp_sockets(pid: int) -> int:
    """Open sockets of the process (its listening socket and its database connections included)."""
    count = 0
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                    count += 1
    return count


@dataclass
class Decisions:
    """Every plan the personas made, per channel: the newest seq they had seen and when, one after the other in an
    array of doubles (16 bytes a plan: kept as tuples, tens of thousands of plans were a KiB of the memory per
    channel the benchmark reports as the personas')."""

    by_channel: defaultdict[str, array[float]] = field(default_factory=lambda: defaultdict(lambda: array("d")))

    def record(self, channel_id: str, seq: int, _tier: Tier | None) -> None:
        self.by_channel[channel_id].extend((seq, time.monotonic()))

    def first_after(self, channel_id: str, seq: int, sent: float) -> float | None:
        plans = self.by_channel.get(channel_id, array("d"))
        return min(
            (at for newest, at in zip(plans[::2], plans[1::2], strict=True) if newest >= seq and at >= sent),
            default=None,
        )


@dataclass
class Said:
    channel_id: str
    seq: int
    sent: float


async def _people(
    session: aiohttp.ClientSession,
    base: str,
    channels: list[str],
    *,
    rate: float,
    stop: asyncio.Event,
    said: list[Said],
) -> None:
    """Messages at ``rate`` a second on average (Poisson), each to a random channel, each its own request."""
    rng = random.Random(11)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    pending: set[asyncio.Task[None]] = set()
    count = 0

    async def say(channel: str, text: str) -> None:
        sent = time.monotonic()
        body = {"author_id": "person", "author_name": "Person", "text": text}
        async with session.post(f"{base}/v1/channels/{channel}/messages", json=body, headers=admin) as response:
            response.raise_for_status()
            seq = (await response.json())["seq"]
        said.append(Said(channel, seq, sent))

    while not stop.is_set():
        count += 1
        task = asyncio.create_task(say(rng.choice(channels), f"{rng.choice(_LINES)} ({count})"))
        pending.add(task)
        task.add_done_callback(pending.discard)
        await asyncio.sleep(rng.expovariate(rate))
    await asyncio.gather(*pending, return_exceptions=True)


@dataclass(frozen=True)
class Result:
    database: str
    personas: int
    channels: int
    rate: float
    seconds: float
    human_messages: int
    arbiter_cpu_ms: float
    persona_cpu_ms: float
    arbiter_sockets: int
    streams: int
    memory_kib_per_channel: float
    arbiter_kib_per_channel: float
    persona_kib_per_channel: float
    p50_ms: float
    p99_ms: float
    undecided: int
    status_reads_per_message: float
    claims_per_message: float
    refused_per_message: float
    posts_per_message: float
    steal: float | None

    def table(self) -> str:
        rows = [
            ("database", self.database),
            ("personas x channels", f"{self.personas} x {self.channels:,}"),
            ("human messages/s (asked)", f"{self.rate:g}"),
            ("human messages measured", f"{self.human_messages:,} in {self.seconds:.0f}s"),
            ("arbiter CPU per human message", f"{self.arbiter_cpu_ms:.2f} ms"),
            ("persona CPU per human message", f"{self.persona_cpu_ms:.2f} ms"),
            ("persona event streams", f"{self.streams}"),
            ("sockets the arbiter holds", f"{self.arbiter_sockets}"),
            ("memory per channel (both)", f"{self.memory_kib_per_channel:.1f} KiB"),
            ("  arbiter / personas", f"{self.arbiter_kib_per_channel:.1f} / {self.persona_kib_per_channel:.1f} KiB"),
            ("message -> first decision p50", f"{self.p50_ms:.1f} ms"),
            ("message -> first decision p99", f"{self.p99_ms:.1f} ms"),
            ("messages with no decision", f"{self.undecided}"),
            ("status requests per message", f"{self.status_reads_per_message:.3f}"),
            ("claims (refused) per message", f"{self.claims_per_message:.2f} ({self.refused_per_message:.2f})"),
            ("persona posts per message", f"{self.posts_per_message:.2f}"),
            ("steal", "n/a" if self.steal is None else f"{self.steal:.0%}"),
        ]
        width = max(len(name) for name, _ in rows)
        return "\n".join(f"| {name.ljust(width)} | {value} |" for name, value in rows)


async def _start_personas(
    args: argparse.Namespace,
    personas: list[Persona],
    session: aiohttp.ClientSession,
    base: str,
    tokens: dict[str, str],
    *,
    decisions: Decisions,
) -> list[PersonaRuntime]:
    """The personas' runtimes in this process, as a fleet runs them: one cache of parsed frames for all."""
    room = MemoryRoom()
    frames = FrameCache()
    runtimes: list[PersonaRuntime] = []
    for index, persona in enumerate(personas):
        runtime = PersonaRuntime(
            persona,
            ScriptedProvider.for_persona(persona, seed=index, latency_s=args.latency),
            ArbiterClient(session, base, tokens[persona.id], frames=frames),
            room.platform(persona.id),
            config=RuntimeConfig(base_delay_s=args.delay),
            rng=random.Random(index),
            on_decision=decisions.record,
        )
        await runtime.start()
        runtimes.append(runtime)
    return runtimes


async def _measure(args: argparse.Namespace, database: str, url: str) -> Result:
    personas = load_personas(Path(args.personas_dir))[: args.personas]
    if len(personas) < args.personas:
        raise SystemExit(f"--personas {args.personas}: only {len(personas)} personas in {args.personas_dir}")
    tokens = {p.id: f"bench-fleet-token-{p.id}-0123456789" for p in personas}
    names = [f"fleet-{index}" for index in range(args.channels)]
    async with _arbiter_process(url, tokens) as (base, pid):
        admin = {"Authorization": f"Bearer {ADMIN}"}
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            setup = asyncio.Semaphore(32)

            async def create(name: str) -> None:
                async with setup, session.put(f"{base}/v1/channels/{name}", json={}, headers=admin) as response:
                    response.raise_for_status()

            await asyncio.gather(*(create(name) for name in names))
            arbiter_before, persona_before = _rss_kib(pid), _rss_kib(os.getpid())

            decisions = Decisions()
            runtimes = await _start_personas(args, personas, session, base, tokens, decisions=decisions)
            joined = time.monotonic()
            await asyncio.gather(*(runtime.join(name).ready() for runtime in runtimes for name in names))
            print(f"  {len(runtimes)} personas joined {len(names):,} channels in {time.monotonic() - joined:.1f}s")

            stop = asyncio.Event()
            said: list[Said] = []
            people = asyncio.create_task(_people(session, base, names, rate=args.rate, stop=stop, said=said))
            await asyncio.sleep(args.warmup)
            first = len(said)
            reads_before = sum(r.stats.statuses_read for r in runtimes)
            counts_before = _counts(runtimes)
            machine_before, cpu_before, started = _Reading.take(pid), time.process_time(), time.monotonic()
            await asyncio.sleep(args.seconds)
            elapsed = time.monotonic() - started
            machine_after, cpu_after = _Reading.take(pid), time.process_time()
            measured = said[first:]
            reads = sum(r.stats.statuses_read for r in runtimes) - reads_before
            claims, refused, posts = (now - then for now, then in zip(_counts(runtimes), counts_before, strict=True))
            arbiter_after, persona_after = _rss_kib(pid), _rss_kib(os.getpid())
            sockets = _tcp_sockets(pid)
            streams = sum(r.follower.connections for r in runtimes)
            await asyncio.sleep(1.0)  # decisions on the last messages
            stop.set()
            await people
            for runtime in runtimes:
                await runtime.close()

    latencies, undecided = _latencies(measured, decisions)
    count = max(1, len(measured))
    usage = Usage.between(machine_before, machine_after)
    arbiter_kib = (arbiter_after - arbiter_before) / args.channels
    persona_kib = (persona_after - persona_before) / args.channels
    return Result(
        database=database,
        personas=len(personas),
        channels=args.channels,
        rate=args.rate,
        seconds=elapsed,
        human_messages=len(measured),
        arbiter_cpu_ms=float("nan") if usage.cpu_seconds is None else usage.cpu_seconds / count * 1000,
        persona_cpu_ms=(cpu_after - cpu_before) / count * 1000,
        arbiter_sockets=sockets,
        streams=streams,
        memory_kib_per_channel=arbiter_kib + persona_kib,
        arbiter_kib_per_channel=arbiter_kib,
        persona_kib_per_channel=persona_kib,
        p50_ms=statistics.median(latencies) if latencies else float("nan"),
        p99_ms=latencies[max(0, int(len(latencies) * 0.99) - 1)] if latencies else float("nan"),
        undecided=undecided,
        status_reads_per_message=reads / count,
        claims_per_message=claims / count,
        refused_per_message=refused / count,
        posts_per_message=posts / count,
        steal=usage.steal,
    )


def _counts(runtimes: list[PersonaRuntime]) -> tuple[int, int, int]:
    """Claims, refused claims and posts of all the personas so far."""
    stats = [runtime.stats for runtime in runtimes]
    return (
        sum(s.claims for s in stats),
        sum(s.refused_claims for s in stats),
        sum(s.posted.total() for s in stats),
    )


def _latencies(measured: list[Said], decisions: Decisions) -> tuple[list[float], int]:
    """Milliseconds from each message to the first decision after it, sorted; and how many had none."""
    latencies: list[float] = []
    undecided = 0
    for message in measured:
        at = decisions.first_after(message.channel_id, message.seq, message.sent)
        if at is None:
            undecided += 1
        else:
            latencies.append((at - message.sent) * 1000)
    return sorted(latencies), undecided


async def run_benchmark(args: argparse.Namespace) -> int:
    print(
        f"aizuchi bench fleet: {args.personas} personas x {args.channels:,} channels, {args.rate:g} human messages/s,"
        f" {args.seconds:g}s measured after {args.warmup:g}s, cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        dropped: tuple[str, str] | None = None
        if args.database == "sqlite":
            url = f"sqlite:///{scratch}/fleet.db"
        else:
            url, name = await _scratch_postgres(args.postgres_url)
            dropped = (args.postgres_url, name)
        try:
            result = await _measure(args, args.database, url)
        finally:
            if dropped is not None:
                await _drop_postgres(*dropped)
    print()
    print(result.table())
    return 0
