"""``aizuchi bench arbiter``: drive the arbiter's HTTP API with concurrent clients and print what it sustains.

The arbiter runs as its own process (as in production), on a scratch SQLite file or a scratch PostgreSQL
database. Each client is one persona with its own token and keep-alive connection.
A client repeats a realistic mix, weighted like the persona runtime's traffic:

- a turn (60%): claim a tier (aizuchi, remark or long), then speak on it (80%) or release it (20%),
  sometimes speaking in a cheaper tier than claimed;
- a one-step consume (15%) as an external agent would;
- a status read (20%) and a history read (5%).

Beside the clients, a person speaks in every channel once a second (recorded through the admin API),
so the bots never reach the idle cap, which would otherwise stop them by design.

Each client takes its turns in a random channel of the M. Channels get a capacity of 10,000 (the default is
100) so the pool refuses little and the arbiter itself is what is measured.
A *grant* is a claim or consume the pool granted. Latency is measured per request, across all of them.

The clients speak HTTP/1.1 over plain asyncio connections, with httptools parsing the answers: the
benchmark shares the machine's cores with the arbiter, and aiohttp's client spends more CPU per request
than the arbiter does, so with it the benchmark would measure mostly itself.

On PostgreSQL, the path for several arbiter processes, the runs are made with each number of processes of
``--processes`` (1 and 2 by default): real ``aizuchi arbiter`` processes on one database, events crossing between
them by LISTEN/NOTIFY. Each client keeps a connection to every process and sends each channel's requests (as the
person's messages in it are sent) to the one the persona's own client would: ``bots.affinity.home``, a stable hash
of the channel id, so each process keeps its channels' state warm. The CPU column is then all of them together.

Each run is made twice in a row, with the same number of clients: over the HTTP API, then over MCP (``/mcp``, the
2025 protocol with a session, as the reference design's agents and desktop clients speak it: ``claim``, ``speak``,
``release``, ``consume``, ``status`` and ``history`` as tool calls). The table's ``MCP grants/s`` is the second.
The MCP clients are hand-rolled on the same connections as the HTTP ones, for the same reason: the SDK's client
would measure itself (the SDK's own client is what the tests drive the endpoint with).

``--without-http`` also runs the same mix straight against the arbiter's service inside the benchmark's
process (SQLite only): the arbiter's own work, with the HTTP layer taken away, to show what each costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import aiohttp
import asyncpg
import httptools

from arbiter.core.models import Tier
from arbiter.server import open_arbiter
from arbiter.settings import ArbiterSettings
from bench.confine import ConfineError, empty_database, plain_postgres_url, ports
from bots.affinity import home

if TYPE_CHECKING:
    import argparse
    from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

    from arbiter.service import ArbiterService

__all__ = ("ADMIN", "Reading", "Usage", "arbiter_process", "drop_postgres", "run_benchmark", "scratch_postgres")

ADMIN = "bench-admin-token-000000000000"
CAPACITY = 10_000
TIERS = (("aizuchi", 0.5), ("remark", 0.35), ("long", 0.15))
CHEAPER = {"aizuchi": "aizuchi", "remark": "aizuchi", "long": "remark"}
TEXT = {"aizuchi": "なるほど!", "remark": "That is a fair point about the schedule.", "long": "長めの話" * 10}


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)
    grants: int = 0
    refusals: Counter[str] = field(default_factory=Counter)  # by call and reason: "claim nodded"
    messages: int = 0
    errors: int = 0

    def refused(self) -> int:
        return self.refusals.total()

    def refusal_line(self) -> str:
        """The refusals by call and reason, most first."""
        return ", ".join(f"{why} {count:,}" for why, count in self.refusals.most_common()) or "none"


@dataclass(frozen=True)
class Usage:
    """What one run cost the machine: the arbiter process's CPU seconds, and the share of the machine's time
    the host took for other guests (steal), which makes wall-clock numbers move from run to run. On PostgreSQL
    also ``database_seconds``: the CPU of the server's backends that served the arbiter processes' connections."""

    cpu_seconds: float | None
    steal: float | None
    database_seconds: float | None = None

    @classmethod
    def total(cls, usages: list[Usage]) -> Usage:
        """Several processes' CPU added up, over the same run (the machine's steal is the same for all)."""
        cpus = [usage.cpu_seconds for usage in usages]
        cpu = None if any(c is None for c in cpus) else sum(c for c in cpus if c is not None)
        return cls(cpu, usages[0].steal)

    @classmethod
    def between(cls, before: Reading, after: Reading) -> Usage:
        cpu = None if before.cpu is None or after.cpu is None else after.cpu - before.cpu
        steal = None
        if before.ticks is not None and after.ticks is not None and after.ticks[1] > before.ticks[1]:
            steal = (after.ticks[0] - before.ticks[0]) / (after.ticks[1] - before.ticks[1])
        return cls(cpu, steal)


@dataclass(frozen=True)
class Reading:
    cpu: float | None  # the process's user + system seconds so far
    ticks: tuple[int, int] | None  # the machine's (steal, all) clock ticks so far

    @classmethod
    def take(cls, pid: int) -> Reading:
        """Linux only (/proc); elsewhere the columns read n/a."""
        try:
            cpu: float | None = process_cpu(pid)
            with open("/proc/stat") as machine:
                counts = [int(value) for value in machine.readline().split()[1:]]
            ticks: tuple[int, int] | None = (counts[7] if len(counts) > 7 else 0, sum(counts))
        except (OSError, ValueError, IndexError):
            cpu, ticks = None, None
        return cls(cpu, ticks)


def process_cpu(pid: int) -> float:
    """The process's user + system CPU seconds so far, from /proc (Linux). Raises OSError when it is gone."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class BackendMeter:
    """The CPU of the PostgreSQL backends serving the benchmark's database: each connection to PostgreSQL is served
    by a process of its own on the server (this machine's, so its /proc shows them), which ``pg_stat_activity`` names
    by pid. The meter's own connection, and the server's shared processes (WAL writer, checkpointer, autovacuum),
    are not counted: they cannot be told apart by whom they work for."""

    _BACKENDS = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
        " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )

    def __init__(self, connection: asyncpg.Connection) -> None:
        self._connection = connection
        self._start: dict[int, float] = {}

    @classmethod
    @contextlib.asynccontextmanager
    async def on(cls, database_url: str) -> AsyncIterator[BackendMeter]:
        connection = await asyncpg.connect(plain_postgres_url(database_url))
        try:
            yield cls(connection)
        finally:
            await connection.close()

    async def _readings(self) -> dict[int, float]:
        readings = {}
        for row in await self._connection.fetch(self._BACKENDS):
            with contextlib.suppress(OSError, ValueError, IndexError):
                readings[row["pid"]] = process_cpu(row["pid"])
        return readings

    async def start(self) -> None:
        self._start = await self._readings()

    async def seconds(self) -> float:
        """CPU seconds since ``start``: a backend that came since is counted whole; one that went is lost (the
        arbiter's pools keep their connections, so few do)."""
        end = await self._readings()
        return sum(cpu - self._start.get(pid, 0.0) for pid, cpu in end.items())


@dataclass(frozen=True)
class Result:
    database: str
    clients: int
    channels: int
    seconds: float
    tally: Tally
    usage: Usage
    processes: int = 1
    mcp: Result | None = None  # the same run over MCP
    bases: tuple[str, ...] = ()  # the arbiter processes' URLs

    def row(self) -> list[str]:
        lat = sorted(self.tally.latencies)
        p50 = statistics.median(lat) * 1000 if lat else float("nan")
        p99 = lat[int(len(lat) * 0.99) - 1] * 1000 if lat else float("nan")
        return [
            self.database,
            str(self.processes),
            str(self.clients),
            str(self.channels),
            f"{self.tally.grants / self.seconds:,.0f}",
            "n/a" if self.mcp is None else f"{self.mcp.tally.grants / self.mcp.seconds:,.0f}",
            f"{self.tally.messages / self.seconds:,.0f}",
            f"{len(lat) / self.seconds:,.0f}",
            f"{p50:.2f}",
            f"{p99:.2f}",
            f"{self.tally.refused()}",
            f"{self.tally.errors}",
            _micros(self.usage.cpu_seconds, len(self.tally.latencies)),
            _micros(self.usage.cpu_seconds, self.tally.grants),
            _micros(self.usage.database_seconds, len(self.tally.latencies)),
            _micros(self.total_cpu_seconds, len(self.tally.latencies)),
            "n/a" if self.mcp is None else _micros(self.mcp.usage.cpu_seconds, len(self.mcp.tally.latencies)),
            "n/a" if self.usage.steal is None else f"{self.usage.steal:.0%}",
        ]

    @property
    def total_cpu_seconds(self) -> float | None:
        """The arbiter processes' CPU and their PostgreSQL backends' (None without both)."""
        if self.usage.cpu_seconds is None or self.usage.database_seconds is None:
            return None
        return self.usage.cpu_seconds + self.usage.database_seconds

    def total_per_request(self) -> float | None:
        total, requests = self.total_cpu_seconds, len(self.tally.latencies)
        return None if total is None or not requests else total / requests


def _micros(seconds: float | None, count: int) -> str:
    """Seconds per count, in µs; n/a when there is nothing to divide."""
    if seconds is None or not count:
        return "n/a"
    return f"{seconds / count * 1e6:,.0f}"


HEADER = [
    "database",
    "processes",
    "clients",
    "channels",
    "grants/s",
    "MCP grants/s",
    "messages/s",
    "requests/s",
    "p50 ms",
    "p99 ms",
    "refused",
    "errors",
    "cpu µs/request",
    "cpu µs/grant",
    "db µs/request",
    "total µs/request",
    "MCP cpu µs/request",
    "steal",
]


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection carrying one request at a time."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body = bytearray()
        self._answer: asyncio.Future[tuple[int, bytes]] | None = None
        self.headers: dict[str, str] = {}  # the last answer's, names in lower case

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        _transport, connection = await asyncio.get_running_loop().create_connection(cls, host, port)
        return connection

    async def request(self, head: bytes, body: bytes) -> tuple[int, bytes]:
        """Send one request and return the status and body of its answer."""
        if self._transport is None or self._transport.is_closing():
            raise ConnectionError("the arbiter closed the connection")
        self._answer = asyncio.get_running_loop().create_future()
        self._transport.write(head + body)
        return await self._answer

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast("asyncio.Transport", transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            self._fail(ConnectionError(f"unreadable answer from the arbiter: {error}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError("the arbiter closed the connection"))

    # httptools callbacks

    def on_message_begin(self) -> None:
        self.headers = {}

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        answer, self._answer = self._answer, None
        body = bytes(self._body)
        self._body.clear()
        if answer is not None and not answer.done():
            answer.set_result((self._parser.get_status_code(), body))

    def _fail(self, error: Exception) -> None:
        answer, self._answer = self._answer, None
        if answer is not None and not answer.done():
            answer.set_exception(error)


class Client:
    """One persona repeating the mix; subclasses say how a call reaches the arbiter.

    Each call returns what the mix needs next (a claim id, a message seq, whether it was granted), or None
    when the pool refused or the call failed; latency is measured around every call.
    """

    def __init__(self, token: str, channels: list[str], tally: Tally) -> None:
        self._channels = channels
        self._tally = tally
        self._rng = random.Random(token)
        self._last_seq = 0

    def _verdict(self, call: str, granted: bool, reason: object) -> bool:
        """Whether the pool granted the call; a refusal is counted by the call and its reason."""
        if not granted:
            self._tally.refusals[f"{call} {reason}"] += 1
        return granted

    async def step(self) -> None:
        channel = self._rng.choice(self._channels)
        roll = self._rng.random()
        started = time.perf_counter()
        if roll < 0.60:
            tier = self._rng.choices([t for t, _ in TIERS], [w for _, w in TIERS])[0]
            claim = await self.claim(channel, tier)
            started = self._lap(started)
            if claim is None:
                return
            self._tally.grants += 1
            if self._rng.random() < 0.8:
                spoken = CHEAPER[tier] if self._rng.random() < 0.1 else tier
                seq = await self.speak(channel, claim, TEXT[spoken], spoken)
                if seq is not None:
                    self._tally.messages += 1
                    self._last_seq = seq
            else:
                await self.release(channel, claim)
        elif roll < 0.75:
            if await self.consume(channel, "うんうん"):
                self._tally.grants += 1
                self._tally.messages += 1
        elif roll < 0.95:
            await self.status(channel)
        else:
            await self.history(channel, max(0, self._last_seq - 20))
        self._lap(started)

    def _lap(self, started: float) -> float:
        now = time.perf_counter()
        self._tally.latencies.append(now - started)
        return now

    async def claim(self, channel: str, tier: str) -> str | None:
        raise NotImplementedError

    async def speak(self, channel: str, claim: str, text: str, tier: str) -> int | None:
        raise NotImplementedError

    async def release(self, channel: str, claim: str) -> None:
        raise NotImplementedError

    async def consume(self, channel: str, text: str) -> bool:
        raise NotImplementedError

    async def status(self, channel: str) -> None:
        raise NotImplementedError

    async def history(self, channel: str, after: int) -> None:
        raise NotImplementedError


class HttpClient(Client):
    """Through the HTTP API, on keep-alive connections of its own: one to each arbiter process, each channel's
    requests on the connection to its process."""

    def __init__(
        self, connections: Sequence[Connection], hosts: Sequence[str], token: str, channels: list[str], tally: Tally
    ) -> None:
        super().__init__(token, channels, tally)
        self._connections = connections
        self._home = {channel: home(channel, len(connections)) for channel in channels}
        self._headers = [
            f"Host: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n" for host in hosts
        ]

    async def _call(self, method: str, channel: str, path: str, body: dict[str, Any] | None = None) -> Any:
        index = self._home[channel]
        payload = b"" if body is None else json.dumps(body).encode()
        head = (
            f"{method} /v1/channels/{channel}{path} HTTP/1.1\r\n{self._headers[index]}"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        status, answer = await self._connections[index].request(head.encode(), payload)
        if status >= 400:
            self._tally.errors += 1
            return None
        return json.loads(answer) if answer else None

    async def claim(self, channel: str, tier: str) -> str | None:
        data = await self._call("POST", channel, "/claims", {"tier": tier})
        granted = data is not None and self._verdict("claim", data["granted"], data.get("reason"))
        return data["claim"]["claim_id"] if granted else None

    async def speak(self, channel: str, claim: str, text: str, tier: str) -> int | None:
        data = await self._call("POST", channel, f"/claims/{claim}/speak", {"text": text, "tier": tier})
        granted = data is not None and self._verdict("speak", data["granted"], data.get("reason"))
        return data["message"]["seq"] if granted else None

    async def release(self, channel: str, claim: str) -> None:
        await self._call("DELETE", channel, f"/claims/{claim}")

    async def consume(self, channel: str, text: str) -> bool:
        data = await self._call("POST", channel, "/consume", {"tier": "aizuchi", "text": text})
        return data is not None and self._verdict("consume", data["granted"], data.get("reason"))

    async def status(self, channel: str) -> None:
        await self._call("GET", channel, "/status")

    async def history(self, channel: str, after: int) -> None:
        await self._call("GET", channel, f"/history?after={after}&limit=20")


class McpClient(Client):
    """Through ``/mcp``: a session opened once with each arbiter process (initialize), then one tool call per step
    to the channel's process, each a JSON-RPC request whose answer comes as a short event stream."""

    VERSION = "2025-11-25"

    def __init__(
        self, connections: Sequence[Connection], hosts: Sequence[str], token: str, channels: list[str], tally: Tally
    ) -> None:
        super().__init__(token, channels, tally)
        self._connections = connections
        self._home = {channel: home(channel, len(connections)) for channel in channels}
        self._headers = [
            f"Host: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            "Accept: application/json, text/event-stream\r\n"
            for host in hosts
        ]
        self._ids = 0

    async def _post(self, index: int, message: dict[str, Any]) -> tuple[int, bytes]:
        payload = json.dumps(message).encode()
        head = f"POST /mcp HTTP/1.1\r\n{self._headers[index]}Content-Length: {len(payload)}\r\n\r\n"
        return await self._connections[index].request(head.encode(), payload)

    async def open(self) -> None:
        for index in range(len(self._connections)):
            await self._open(index)

    async def _open(self, index: int) -> None:
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": self.VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
        status, _ = await self._post(index, initialize)
        session = self._connections[index].headers.get("mcp-session-id")
        if status != 200 or session is None:
            raise RuntimeError(f"the arbiter did not open an MCP session ({status})")
        self._headers[index] += f"Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: {self.VERSION}\r\n"
        await self._post(index, {"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def _tool(self, name: str, arguments: dict[str, Any]) -> Any:
        self._ids += 1
        call = {
            "jsonrpc": "2.0",
            "id": self._ids,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        status, answer = await self._post(self._home[arguments["channel"]], call)
        if status >= 400:
            self._tally.errors += 1
            return None
        # One event ("data: {...}") when answered as a stream, or the JSON itself.
        data = next((line[5:] for line in answer.splitlines() if line.startswith(b"data:")), answer)
        result = json.loads(data).get("result", {})
        if result.get("isError"):
            self._tally.errors += 1
            return None
        return result.get("structuredContent")

    async def claim(self, channel: str, tier: str) -> str | None:
        data = await self._tool("claim", {"channel": channel, "tier": tier})
        granted = data is not None and self._verdict("claim", data["granted"], data.get("reason"))
        return data["claim"]["claim_id"] if granted else None

    async def speak(self, channel: str, claim: str, text: str, tier: str) -> int | None:
        data = await self._tool("speak", {"channel": channel, "claim_id": claim, "message": text, "tier": tier})
        granted = data is not None and self._verdict("speak", data["granted"], data.get("reason"))
        return data["message"]["seq"] if granted else None

    async def release(self, channel: str, claim: str) -> None:
        await self._tool("release", {"channel": channel, "claim_id": claim})

    async def consume(self, channel: str, text: str) -> bool:
        data = await self._tool("consume", {"channel": channel, "tier": "aizuchi", "message": text})
        return data is not None and self._verdict("consume", data["success"], data.get("reason"))

    async def status(self, channel: str) -> None:
        await self._tool("status", {"channel": channel})

    async def history(self, channel: str, after: int) -> None:
        await self._tool("history", {"channel": channel, "after": after, "limit": 20})


class ServiceClient(Client):
    """Straight to the arbiter's service in this process: the same work without HTTP, to show what the API
    layer costs."""

    def __init__(self, service: ArbiterService, persona: str, token: str, channels: list[str], tally: Tally) -> None:
        super().__init__(token, channels, tally)
        self._service = service
        self._persona = persona

    async def claim(self, channel: str, tier: str) -> str | None:
        result = await self._service.claim(channel, self._persona, Tier(tier))
        granted = self._verdict("claim", result.granted, result.reason)
        return result.claim.claim_id if granted and result.claim is not None else None

    async def speak(self, channel: str, claim: str, text: str, tier: str) -> int | None:
        result = await self._service.speak(channel, self._persona, claim, text, tier=Tier(tier))
        granted = self._verdict("speak", result.granted, result.reason)
        return result.message.seq if granted and result.message is not None else None

    async def release(self, channel: str, claim: str) -> None:
        await self._service.release(channel, self._persona, claim)

    async def consume(self, channel: str, text: str) -> bool:
        result = await self._service.consume(channel, self._persona, text, tier=Tier.AIZUCHI)
        return self._verdict("consume", result.granted, result.reason)

    async def status(self, channel: str) -> None:
        await self._service.status(channel, self._persona)

    async def history(self, channel: str, after: int) -> None:
        await self._service.history(channel, after=after, limit=20)


@contextlib.asynccontextmanager
async def arbiter_process(
    database_url: str, personas: dict[str, str], *, port: int = 0
) -> AsyncIterator[tuple[str, int]]:
    """``aizuchi arbiter`` on ``database_url``, listening on ``port`` (0: a free one); its base URL and pid."""
    env = {
        **os.environ,
        "ARBITER_DATABASE_URL": database_url,
        "ARBITER_ADMIN_TOKEN": ADMIN,
        "ARBITER_PERSONA_TOKENS": json.dumps(personas),
        "ARBITER_PORT": str(port),
        "ARBITER_LOG_LEVEL": "WARNING",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "aizuchi", "arbiter", env=env, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), timeout=60)).decode()
        match = re.search(r"(http://\S+)", line)
        if match is None:
            raise RuntimeError(f"the arbiter did not start: {line!r}")
        yield match.group(1), process.pid
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


async def _run_mix(
    workers: list[Client],
    say: Callable[[str, str], Awaitable[None]],
    channels: list[str],
    seconds: float,
    pids: list[int],
    *,
    meter: BackendMeter | None = None,
) -> tuple[float, Tally, Usage]:
    """Run the clients (and a person in every channel) for a warm-up, then ``seconds`` measured; ``pids`` are
    the processes whose CPU time is metered (added up), ``meter`` their PostgreSQL backends'."""
    stop = asyncio.Event()
    warmup, tally = Tally(), Tally()

    async def loop(worker: Client) -> None:
        while not stop.is_set():
            await worker.step()

    async def human(channel: str) -> None:
        # People keep talking, so the bots never reach the idle cap (which would stop them, by design).
        count = 0
        while not stop.is_set():
            count += 1
            await say(channel, f"what about this? ({count})")
            await asyncio.sleep(1.0)

    for worker in workers:
        worker._tally = warmup
    tasks = [asyncio.create_task(loop(worker)) for worker in workers]
    tasks += [asyncio.create_task(human(channel)) for channel in channels]
    await asyncio.sleep(min(2.0, seconds / 5))
    for worker in workers:
        worker._tally = tally
    if meter is not None:
        await meter.start()
    before = [Reading.take(pid) for pid in pids]
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - started
    usage = Usage.total([Usage.between(first, Reading.take(pid)) for first, pid in zip(before, pids, strict=True)])
    if meter is not None:
        usage = dataclasses.replace(usage, database_seconds=await meter.seconds())
    for worker in workers:
        worker._tally = Tally()
    stop.set()
    await asyncio.gather(*tasks)
    return elapsed, tally, usage


async def _measure(
    bases: list[str],
    pids: list[int],
    database: str,
    *,
    clients: int,
    channels: int,
    seconds: float,
    tokens: list[str],
    protocol: str = "http",
    meter: BackendMeter | None = None,
) -> Result:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    base = bases[0]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        names = [f"bench-{protocol}-{clients}-{index}" for index in range(channels)]
        for name in names:
            body = {"capacity": CAPACITY, "idle_cap": 1_000}
            async with session.put(f"{base}/v1/channels/{name}", json=body, headers=admin) as r:
                r.raise_for_status()

        async def say(channel: str, text: str) -> None:
            # To the channel's process, as its requests go (in production the arbiter bot's process records them).
            body = {"author_id": "human", "author_name": "Human", "text": text}
            url = f"{bases[home(channel, len(bases))]}/v1/channels/{channel}/messages"
            async with session.post(url, json=body, headers=admin) as r:
                r.raise_for_status()

        # Each client has a connection to every process, and sends each channel's requests to that channel's.
        urls = [urllib.parse.urlsplit(base) for base in bases]
        hosts = [url.netloc for url in urls]
        connections: list[list[Connection]] = []
        try:
            for _ in range(clients):
                mine: list[Connection] = []
                connections.append(mine)
                for url in urls:
                    assert url.hostname is not None and url.port is not None
                    mine.append(await Connection.open(url.hostname, url.port))
            workers: list[Client]
            if protocol == "mcp":
                mcp = [McpClient(connections[i], hosts, tokens[i], names, Tally()) for i in range(clients)]
                for client in mcp:
                    await client.open()
                workers = list(mcp)
            else:
                workers = [HttpClient(connections[i], hosts, tokens[i], names, Tally()) for i in range(clients)]
            elapsed, tally, usage = await _run_mix(workers, say, names, seconds, pids, meter=meter)
        finally:
            for connection in (connection for mine in connections for connection in mine):
                connection.close()
    return Result(database, clients, channels, elapsed, tally, usage, processes=len(bases), bases=tuple(bases))


async def _measure_fresh(
    args: argparse.Namespace,
    database: str,
    processes: int,
    *,
    protocol: str,
    clients: int,
    personas: dict[str, str],
    tokens: list[str],
) -> Result:
    """One run on a new scratch database (or the given one, emptied), with its own arbiter processes."""
    with tempfile.TemporaryDirectory() as scratch:
        dropped: tuple[str, str] | None = None
        if args.database_url is not None:
            url = args.database_url
            await empty_database(url)
        elif database == "sqlite":
            url = f"sqlite:///{scratch}/bench.db"
        else:
            url, name = await scratch_postgres(args.postgres_url)
            dropped = (args.postgres_url, name)
        try:
            async with contextlib.AsyncExitStack() as stack:
                arbiters = [
                    await stack.enter_async_context(arbiter_process(url, personas, port=port))
                    for port in ports(args.port, processes)
                ]
                bases, pids = [base for base, _ in arbiters], [pid for _, pid in arbiters]
                meter = None if database == "sqlite" else await stack.enter_async_context(BackendMeter.on(url))
                return await _measure(
                    bases, pids, database, protocol=protocol, meter=meter,
                    clients=clients, channels=args.channels, seconds=args.seconds, tokens=tokens,
                )  # fmt: skip
        finally:
            if dropped is not None:
                await drop_postgres(*dropped)


async def _measure_without_http(
    database_url: str, *, clients: int, channels: int, seconds: float, personas: dict[str, str]
) -> Result:
    settings = ArbiterSettings(database_url=database_url, admin_token=ADMIN, persona_tokens=personas)
    async with open_arbiter(settings) as arbiter:
        service = arbiter.service
        names = [f"bench-{clients}-{index}" for index in range(channels)]
        for name in names:
            await service.ensure_channel(name, {"capacity": CAPACITY, "idle_cap": 1_000})

        async def say(channel: str, text: str) -> None:
            await service.record_message(channel, author_id="human", author_name="Human", text=text)

        ids = list(personas)[:clients]
        workers: list[Client] = [ServiceClient(service, pid, personas[pid], names, Tally()) for pid in ids]
        elapsed, tally, usage = await _run_mix(workers, say, names, seconds, [os.getpid()])
    return Result("sqlite, no HTTP", clients, channels, elapsed, tally, usage)


async def scratch_postgres(server_url: str) -> tuple[str, str]:
    plain = plain_postgres_url(server_url)
    name = f"aizuchi_bench_{os.getpid()}"
    conn = await asyncpg.connect(plain)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return server_url.rsplit("/", 1)[0] + f"/{name}", name


async def drop_postgres(server_url: str, name: str) -> None:
    conn = await asyncpg.connect(plain_postgres_url(server_url))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def _print_table(results: list[Result]) -> None:
    rows = [HEADER, *[result.row() for result in results]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = ["| " + " | ".join(cell.rjust(widths[i]) for i, cell in enumerate(row)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("\n".join(lines))


def _databases(args: argparse.Namespace) -> list[str]:
    """The databases to run on: ``--database``'s, or the kind of the one ``--database-url`` gives."""
    if args.database_url is None:
        return ["sqlite", "postgres"] if args.database == "both" else [args.database]
    given = "sqlite" if args.database_url.startswith("sqlite") else "postgres"
    if args.database not in ("both", given):
        raise ConfineError(f"--database {args.database} but --database-url is a {given} URL")
    return [given]


async def run_benchmark(args: argparse.Namespace) -> int:
    try:
        databases = _databases(args)
    except ConfineError as error:
        print(f"aizuchi bench arbiter: {error}", file=sys.stderr)
        return 2
    most = max(args.clients)
    personas = {f"p{index}": f"bench-persona-token-{index:04d}-xxxxxxxx" for index in range(most)}
    tokens = list(personas.values())
    results: list[Result] = []
    print(f"aizuchi bench arbiter: {args.seconds:g}s per run, {args.channels} channels, cpu count {os.cpu_count()}")
    if args.port or args.database_url:
        where = [f"ports from {args.port}" if args.port else "", "the given database" if args.database_url else ""]
        print(f"  confined to {' and '.join(w for w in where if w)}")
    if "postgres" in databases and max(args.processes) > 1:
        print(
            "  several processes: each channel's requests go to one of them, by bots.affinity.home (as the personas')"
        )
    try:
        if args.without_http:
            await _runs_without_http(args, databases, personas, results)
        runs = [("sqlite", 1)] if "sqlite" in databases else []
        runs += [("postgres", processes) for processes in args.processes] if "postgres" in databases else []
        for database, processes in runs:
            for clients in args.clients:
                by_protocol: dict[str, Result] = {}
                for protocol in ("http",) if args.without_mcp else ("http", "mcp"):
                    # Each protocol on a database of its own: the second run would otherwise meet the first one's
                    # messages, and pay for them.
                    run = await _measure_fresh(
                        args, database, processes, protocol=protocol, clients=clients, personas=personas, tokens=tokens
                    )
                    by_protocol[protocol] = run
                    print(f"  {protocol:>4} " + " ".join(run.row()), flush=True)
                    print(f"       at {', '.join(run.bases)}; refused: {run.tally.refusal_line()}", flush=True)
                results.append(dataclasses.replace(by_protocol["http"], mcp=by_protocol.get("mcp")))
    except ConfineError as error:
        print(f"aizuchi bench arbiter: {error}", file=sys.stderr)
        return 2
    print()
    _print_table(results)
    _print_scaling(results)
    return 0


async def _runs_without_http(
    args: argparse.Namespace, databases: list[str], personas: dict[str, str], results: list[Result]
) -> None:
    # In this process, so only SQLite: the arbiter's own work, for comparison with the HTTP runs.
    given = args.database_url if databases == ["sqlite"] else None
    for clients in args.clients:
        with tempfile.TemporaryDirectory() as scratch:
            url = f"sqlite:///{scratch}/bench.db"
            if given is not None:
                url = given
                await empty_database(url)
            result = await _measure_without_http(
                url, clients=clients, channels=args.channels, seconds=args.seconds, personas=personas
            )
        results.append(result)
        print("  " + " ".join(result.row()), flush=True)


# Above this share of the machine's time taken by the host for other guests (steal), a run's CPU per request is
# inflated too, and unevenly: two processes cost 1.68x one in runs at 26 % and 42 % steal, 1.11x at 29 % and 11 %,
# and 1.25x at 3 % and 0 %, the same code on the same evening.
NOISY_STEAL = 0.10


def _print_scaling(results: list[Result]) -> None:
    """On PostgreSQL with several processes: what a request costs in all (the backends' CPU included) with N
    processes, as a multiple of one process's; with a warning where the host took much of the machine meanwhile."""
    by_processes = {
        result.processes: (cost, result.usage.steal)
        for result in results
        if result.database == "postgres" and (cost := result.total_per_request()) is not None
    }
    one, one_steal = by_processes.get(1, (0.0, None))
    if not one:
        return
    for processes, (cost, steal) in sorted(by_processes.items()):
        if processes == 1:
            continue
        print(
            f"{processes} processes: {cost * 1e6:,.0f} µs of CPU per request in all (arbiters and their PostgreSQL"
            f" backends), {cost / one:.2f}x one process's {one * 1e6:,.0f} µs"
        )
        steals = [s for s in (one_steal, steal) if s is not None]
        if any(s >= NOISY_STEAL for s in steals):
            print(
                f"  not comparable: the host took {' and '.join(f'{s:.0%}' for s in steals)} of the machine's time"
                " for other guests (steal) during these runs; run again when it is near 0"
            )
