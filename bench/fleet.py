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
  told by the runtime's ``on_decision`` hook. Personas pause before they look, as a person reads before answering
  (``--delay``, by default as they run: 1.5 s for a persona of average temperament, jittered); the pause is theirs,
  not the system's delay, so it is left out: from the message, or from when the look was due if it was under way
  already. The same with the pause in is printed too; ``--delay 0`` has every persona look at once.
- status requests per human message: looks that had to ask for the status instead of using the pushed one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp

from bench.arbiter_load import ADMIN, Reading, Usage, arbiter_process, drop_postgres, scratch_postgres
from bench.confine import ConfineError, empty_database
from bots.arbiter_client import ArbiterClient
from bots.llm.scripted import ScriptedProvider
from bots.persona import load_personas
from bots.platforms.memory import MemoryRoom
from bots.runtime import LookPlanned, PersonaRuntime, RuntimeConfig, personas_stream

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

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


class FirstDecisions:
    """For each person's message, the first persona's plan after it, and how long it took: from sending the message
    to the plan, less the part of the persona's own pause that fell after the message (a person's moment of reading
    is the persona's choice, not the system's delay; a look already under way when the message came counts from
    when it was due, or from the message if that was later).

    Kept as it goes, not as a record of every plan: a plan is kept only while a message in its channel waits for its
    seq (its request is in flight; the stream can bring the plan first), and a message only until its first plan.
    What is kept must not grow with the talk: the benchmark reports this process's memory as the personas'."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or asyncio.get_running_loop().time  # the runtimes' clock
        self._inflight: dict[str, list[tuple[LookPlanned, float]]] = {}  # plans (and when) made while a message's
        # request is in flight
        self._sending: dict[str, int] = {}  # requests in flight, by channel
        self._waiting: dict[str, list[tuple[int, float]]] = {}  # (seq, sent) of messages with no plan yet
        self._sent = array("d")  # each message's send time, in the order of the latencies
        self.latencies = array("d")  # ms, the pause excluded, by message as each is decided
        self.as_seen = array("d")  # ms, the pause included

    def now(self) -> float:
        return self._clock()

    def record(self, look: LookPlanned) -> None:
        at = self._clock()
        plans = self._inflight.get(look.channel_id)
        if plans is not None:
            plans.append((look, at))
        waiting = self._waiting.get(look.channel_id)
        if waiting:
            still = [(seq, sent) for seq, sent in waiting if not self._decided(seq, sent, look, at)]
            if still:
                self._waiting[look.channel_id] = still
            else:
                del self._waiting[look.channel_id]

    def sending(self, channel_id: str) -> None:
        self._sending[channel_id] = self._sending.get(channel_id, 0) + 1
        self._inflight.setdefault(channel_id, [])

    def sent(self, channel_id: str, seq: int | None, sent: float) -> None:
        """A message's request came back: its seq, or None if it failed."""
        plans = self._inflight[channel_id]
        self._sending[channel_id] -= 1
        if not self._sending[channel_id]:
            del self._sending[channel_id], self._inflight[channel_id]
        if seq is not None and not any(self._decided(seq, sent, look, at) for look, at in plans):
            self._waiting.setdefault(channel_id, []).append((seq, sent))

    def _decided(self, seq: int, sent: float, look: LookPlanned, at: float) -> bool:
        if look.seq < seq or at < sent:
            return False
        intended = max(sent, min(look.due, sent + look.pause))
        self._sent.append(sent)
        self.latencies.append((at - intended) * 1000)
        self.as_seen.append((at - sent) * 1000)
        return True

    def between(self, start: float, end: float) -> tuple[list[float], list[float], int]:
        """The latencies of the messages sent from ``start`` to ``end``, sorted (the pause excluded, then included),
        and how many of those messages no plan followed."""
        chosen = [i for i, sent in enumerate(self._sent) if start <= sent < end]
        undecided = sum(1 for waiting in self._waiting.values() for _, sent in waiting if start <= sent < end)
        return sorted(self.latencies[i] for i in chosen), sorted(self.as_seen[i] for i in chosen), undecided


async def _people(
    session: aiohttp.ClientSession,
    base: str,
    channels: list[str],
    *,
    rate: float,
    stop: asyncio.Event,
    decisions: FirstDecisions,
) -> None:
    """Messages at ``rate`` a second on average (Poisson), each to a random channel, each its own request. Sent on a
    schedule drawn in advance, not after a gap from the last send: a starved process catches up instead of sending
    fewer than asked (the CPU per message depends on the rate really sent)."""
    rng = random.Random(11)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    pending: set[asyncio.Task[None]] = set()
    count = 0

    async def say(channel: str, text: str) -> None:
        decisions.sending(channel)
        sent, seq = decisions.now(), None
        body = {"author_id": "person", "author_name": "Person", "text": text}
        try:
            async with session.post(f"{base}/v1/channels/{channel}/messages", json=body, headers=admin) as response:
                response.raise_for_status()
                seq = (await response.json())["seq"]
        finally:
            decisions.sent(channel, seq, sent)

    loop = asyncio.get_running_loop()
    due = loop.time()
    while not stop.is_set():
        count += 1
        task = asyncio.create_task(say(rng.choice(channels), f"{rng.choice(_LINES)} ({count})"))
        pending.add(task)
        task.add_done_callback(pending.discard)
        due += rng.expovariate(rate)
        await asyncio.sleep(max(0.0, due - loop.time()))
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
    seen_p50_ms: float
    seen_p99_ms: float
    delay: float
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
            ("human messages/s (sent)", f"{self.human_messages / self.seconds:.1f}"),
            ("arbiter CPU per human message", f"{self.arbiter_cpu_ms:.2f} ms"),
            ("persona CPU per human message", f"{self.persona_cpu_ms:.2f} ms"),
            ("persona event streams", f"{self.streams}"),
            ("sockets the arbiter holds", f"{self.arbiter_sockets}"),
            ("memory per channel (both)", f"{self.memory_kib_per_channel:.1f} KiB"),
            ("  arbiter / personas", f"{self.arbiter_kib_per_channel:.1f} / {self.persona_kib_per_channel:.1f} KiB"),
            ("personas' pause before a look", f"{self.delay:g} s (base)"),
            ("message -> first decision p50", f"{self.p50_ms:.1f} ms"),
            ("message -> first decision p99", f"{self.p99_ms:.1f} ms"),
            ("  the same, the pause included", f"{self.seen_p50_ms:.0f} / {self.seen_p99_ms:.0f} ms (p50 / p99)"),
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
    decisions: FirstDecisions,
) -> list[PersonaRuntime]:
    """The personas' runtimes in this process, as a fleet runs them: on one event stream."""
    room = MemoryRoom()
    config = RuntimeConfig(base_delay_s=args.delay)
    clients = [ArbiterClient(session, base, tokens[persona.id]) for persona in personas]
    stream = personas_stream(clients[0], tokens=[tokens[p.id] for p in personas[1:]], config=config)
    runtimes: list[PersonaRuntime] = []
    for index, (persona, client) in enumerate(zip(personas, clients, strict=True)):
        runtime = PersonaRuntime(
            persona,
            ScriptedProvider.for_persona(persona, seed=index, latency_s=args.latency),
            client,
            room.platform(persona.id),
            config=config,
            rng=random.Random(index),
            follower=stream,
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
    async with arbiter_process(url, tokens, port=args.port) as (base, pid):
        print(f"  the arbiter at {base}", flush=True)
        admin = {"Authorization": f"Bearer {ADMIN}"}
        connector = aiohttp.TCPConnector(limit=64)
        async with aiohttp.ClientSession(connector=connector) as session:
            setup = asyncio.Semaphore(32)

            async def create(name: str) -> None:
                async with setup, session.put(f"{base}/v1/channels/{name}", json={}, headers=admin) as response:
                    response.raise_for_status()

            await asyncio.gather(*(create(name) for name in names))
            arbiter_before, persona_before = _rss_kib(pid), _rss_kib(os.getpid())

            decisions = FirstDecisions()
            runtimes = await _start_personas(args, personas, session, base, tokens, decisions=decisions)
            joined = time.monotonic()
            await asyncio.gather(*(runtime.join(name).ready() for runtime in runtimes for name in names))
            print(f"  {len(runtimes)} personas joined {len(names):,} channels in {time.monotonic() - joined:.1f}s")

            stop = asyncio.Event()
            people = asyncio.create_task(_people(session, base, names, rate=args.rate, stop=stop, decisions=decisions))
            await asyncio.sleep(args.warmup)
            window_start = decisions.now()
            reads_before = sum(r.stats.statuses_read for r in runtimes)
            counts_before = _counts(runtimes)
            machine_before, cpu_before, started = Reading.take(pid), time.process_time(), time.monotonic()
            await asyncio.sleep(args.seconds)
            elapsed = time.monotonic() - started
            machine_after, cpu_after = Reading.take(pid), time.process_time()
            window_end = decisions.now()
            reads = sum(r.stats.statuses_read for r in runtimes) - reads_before
            claims, refused, posts = (now - then for now, then in zip(_counts(runtimes), counts_before, strict=True))
            arbiter_after, persona_after = _rss_kib(pid), _rss_kib(os.getpid())
            sockets = _tcp_sockets(pid)
            streams = runtimes[0].follower.connections  # the personas' one stream: its connections so far
            await asyncio.sleep(1.0 + 2 * args.delay)  # decisions on the last messages, after the personas' pauses
            stop.set()
            await people
            for runtime in runtimes:
                await runtime.close()
            await runtimes[0].follower.close()

    latencies, as_seen, undecided = decisions.between(window_start, window_end)
    measured = len(latencies) + undecided
    count = max(1, measured)
    usage = Usage.between(machine_before, machine_after)
    arbiter_kib = (arbiter_after - arbiter_before) / args.channels
    persona_kib = (persona_after - persona_before) / args.channels
    return Result(
        database=database,
        personas=len(personas),
        channels=args.channels,
        rate=args.rate,
        seconds=elapsed,
        human_messages=measured,
        arbiter_cpu_ms=float("nan") if usage.cpu_seconds is None else usage.cpu_seconds / count * 1000,
        persona_cpu_ms=(cpu_after - cpu_before) / count * 1000,
        arbiter_sockets=sockets,
        streams=streams,
        memory_kib_per_channel=arbiter_kib + persona_kib,
        arbiter_kib_per_channel=arbiter_kib,
        persona_kib_per_channel=persona_kib,
        p50_ms=_percentile(latencies, 0.5),
        p99_ms=_percentile(latencies, 0.99),
        seen_p50_ms=_percentile(as_seen, 0.5),
        seen_p99_ms=_percentile(as_seen, 0.99),
        delay=args.delay,
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


def _percentile(ordered: list[float], share: float) -> float:
    if not ordered:
        return float("nan")
    return statistics.median(ordered) if share == 0.5 else ordered[max(0, int(len(ordered) * share) - 1)]


async def run_benchmark(args: argparse.Namespace) -> int:
    if args.delay is None:
        args.delay = RuntimeConfig().base_delay_s
    print(
        f"aizuchi bench fleet: {args.personas} personas x {args.channels:,} channels, {args.rate:g} human messages/s,"
        f" {args.seconds:g}s measured after {args.warmup:g}s, pause {args.delay:g}s,"
        f" cpu count {os.cpu_count()}, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as scratch:
        dropped: tuple[str, str] | None = None
        if args.database_url is not None:
            url = args.database_url
            try:
                await empty_database(url)
            except ConfineError as error:
                print(f"aizuchi bench fleet: {error}", file=sys.stderr)
                return 2
        elif args.database == "sqlite":
            url = f"sqlite:///{scratch}/fleet.db"
        else:
            url, name = await scratch_postgres(args.postgres_url)
            dropped = (args.postgres_url, name)
        try:
            database = "sqlite" if url.startswith("sqlite") else "postgres"
            result = await _measure(args, database, url)
        finally:
            if dropped is not None:
                await drop_postgres(*dropped)
    print()
    print(result.table())
    return 0
