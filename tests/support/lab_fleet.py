"""The fleet on a lab (tests/support/netns.py) and the invariants it is held to: PostgreSQL on ``pg``, an arbiter
process on ``arbiter1`` and ``arbiter2``, a persona host (tests/support/lab_persona_host.py) on ``persona1`` and
``persona2`` speaking in shared channels through both arbiters and writing down every answer and stream frame.

``check`` holds the journals and the database to what the fleet promises whatever the network does:

- nothing acknowledged is lost: every granted speech is in the history, at its seq, once;
- no overdraw: at no instant do a channel's live spends add up to more than its capacity, whichever process granted
  them (the ledger, read from PostgreSQL), and no answer or level event shows a negative level;
- the streams resume without gaps or duplicates: each host saw every message of every channel, in order, once
  (after ``settled``, which lets the streams catch up); with links cut, short at the end by no more than the calls
  given up on, none of them acknowledged (``check``'s ``late``).

tests/network/test_network_cuts.py and tests/network/test_network_latency.py use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import asyncpg

from bots.affinity import home
from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS
from tests.support.arbiters import Api
from tests.support.eventually import eventually
from tests.support.lab_postgres import lab_postgres

if TYPE_CHECKING:
    import subprocess
    from collections.abc import AsyncIterator, Mapping

    from tests.support.netns import Lab

__all__ = (
    "ARBITERS",
    "HOSTS",
    "PERSONAS",
    "PORT",
    "Fleet",
    "channels_homed",
    "check",
    "connect_ms",
    "lab_fleet",
    "more",
    "settled",
)

ROOT = str(Path(__file__).resolve().parents[2])
PORT = 8340
PERSONAS = {"persona1": "hana", "persona2": "kai"}
ARBITERS = ("arbiter1", "arbiter2")
HOSTS = ("pg", *ARBITERS, *PERSONAS)


def channels_homed(prefix: str) -> list[str]:
    """Four channels, the first two served first by the first arbiter, the last two by the second (bots.affinity's
    hash)."""
    by_home: dict[int, list[str]] = {0: [], 1: []}
    for index in range(100):
        name = f"{prefix}{index}"
        if len(by_home[home(name, 2)]) < 2:
            by_home[home(name, 2)].append(name)
    return by_home[0] + by_home[1]


@dataclass
class Fleet:
    lab: Lab
    database: str
    urls: list[str]
    channels: list[str]
    capacity: int
    journals: dict[str, Path]
    hosts: dict[str, subprocess.Popen[bytes]]
    workdir: Path

    def log(self, host: str) -> str:
        """What ``host``'s process (an arbiter or a persona host) has written to its log so far."""
        return (self.workdir / f"{host}.log").read_text(errors="replace")

    def entries(self, host: str) -> list[dict[str, Any]]:
        text = self.journals[host].read_text() if self.journals[host].exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    def count(self, host: str, kind: str, channels: list[str], since: float = 0.0) -> int:
        return sum(1 for e in self.entries(host) if e["kind"] == kind and e["channel"] in channels and e["at"] >= since)


def _environment(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("ARBITER_", "AIZUCHI_"))}
    return {**keep, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1", **extra}


async def _start_arbiter(lab: Lab, host: str, database_url: str, workdir: Path) -> str:
    log = workdir / f"{host}.log"
    env = _environment(
        ARBITER_DATABASE_URL=database_url,
        ARBITER_HOST=lab.address(host),
        ARBITER_PORT=str(PORT),
        ARBITER_ROOM="false",
        ARBITER_ADMIN_TOKEN=ADMIN_TOKEN,
        ARBITER_PERSONA_TOKENS=json.dumps(PERSONA_TOKENS),
        ARBITER_LOG_LEVEL="WARNING",
    )
    process = lab.spawn(host, [sys.executable, "-m", "aizuchi", "arbiter"], env=env, cwd=workdir, log=log)

    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"{host} exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        return "arbiter listening on" in log.read_text(errors="replace")

    await eventually(listening, what=f"{host} to listen")
    return f"http://{lab.address(host)}:{PORT}"


@contextlib.asynccontextmanager
async def lab_fleet(
    lab: Lab,
    workdir: Path,
    *,
    channels: list[str],
    settings: Mapping[str, Any],
    streams: Mapping[str, int],
    timeout_s: float,
) -> AsyncIterator[Fleet]:
    """The fleet, its channels made with ``settings``; each persona host's stream on the arbiter ``streams``
    names (0 or 1), its calls on the arbiter of each channel; ``timeout_s`` the hosts' client timeout."""
    async with lab_postgres(lab, "pg") as database:
        url = database.replace("postgresql://", "postgresql+asyncpg://")
        # One after the other: the first migrates the new database.
        urls = [await _start_arbiter(lab, host, url, workdir) for host in ARBITERS]
        async with aiohttp.ClientSession() as session:
            api = Api(session, {}, urls[0])
            for channel in channels:
                await api.create_channel(channel, **settings)
        hosts = {}
        for host, persona in PERSONAS.items():
            argv = [sys.executable, "-m", "tests.support.lab_persona_host", "--urls", ",".join(urls)]
            argv += ["--persona", persona, "--token", PERSONA_TOKENS[persona], "--channels", ",".join(channels)]
            argv += ["--own", str(streams[host]), "--journal", str(workdir / f"{host}.jsonl")]
            argv += ["--pace", "0.05", "--timeout", str(timeout_s)]
            hosts[host] = lab.spawn(host, argv, env=_environment(), cwd=workdir, log=workdir / f"{host}.log")
        journals = {host: workdir / f"{host}.jsonl" for host in PERSONAS}
        yield Fleet(lab, database, urls, channels, int(settings["capacity"]), journals, hosts, workdir)


async def more(
    fleet: Fleet, kind: str, channels: list[str], since: float, *, hosts: tuple[str, ...] = tuple(PERSONAS), n: int = 3
) -> None:
    """``n`` more ``kind`` entries for ``channels`` on each of ``hosts`` since ``since``."""
    for host in hosts:

        def enough(host: str = host) -> bool:
            return fleet.count(host, kind, channels, since) >= n

        await eventually(enough, what=f"{n} {kind} entries on {host} for {channels}", every=0.05)


def connect_ms(lab: Lab, host: str, peer: str, port: int, *, times: int = 7) -> float:
    """The median time a TCP connection from ``host`` to ``peer``'s ``port`` takes to open (one round trip: the
    SYN out, the SYN-ACK back), in ms; the median, so that one lost SYN (a second's retransmission) does not count."""
    probe = (
        "import socket, sys, time\n"
        "for _ in range(int(sys.argv[3])):\n"
        "    s = socket.socket(); t = time.monotonic(); s.connect((sys.argv[1], int(sys.argv[2])))\n"
        "    print((time.monotonic() - t) * 1000); s.close()\n"
    )
    out = lab.run(host, [sys.executable, "-c", probe, lab.address(peer), str(port), str(times)])
    return statistics.median(float(line) for line in out.split())


async def _history(fleet: Fleet) -> tuple[dict[str, list[tuple[int, str]]], list[asyncpg.Record]]:
    conn = await asyncpg.connect(fleet.database, timeout=10)
    try:
        messages = await conn.fetch("SELECT channel_id, seq, text FROM messages ORDER BY channel_id, seq")
        spends = await conn.fetch("SELECT channel_id, cost, created_at, refund_at, state FROM spends")
    finally:
        await conn.close()
    history: dict[str, list[tuple[int, str]]] = {channel: [] for channel in fleet.channels}
    for row in messages:
        history[row["channel_id"]].append((row["seq"], row["text"]))
    return history, spends


async def settled(fleet: Fleet) -> None:
    """The hosts fall quiet; then each one's stream reaches the last message of every channel, and it stops."""
    for process in fleet.hosts.values():
        process.send_signal(signal.SIGUSR1)
    # Quiet once its last call is answered: a call still on its way (a slow link's, for a second and more) may add
    # a message after the streams were seen to be at the end.
    for host in PERSONAS:

        def quiet(host: str = host) -> bool:
            return any(e["kind"] == "quiet" for e in fleet.entries(host))

        await eventually(quiet, what=f"{host} to fall quiet", every=0.05)

    async def caught_up() -> bool:
        history, _ = await _history(fleet)
        for host in PERSONAS:
            for channel, lines in history.items():
                seen = [e["seq"] for e in fleet.entries(host) if e["kind"] == "frame" and e["channel"] == channel]
                if lines and (not seen or seen[-1] < lines[-1][0]):
                    return False
        return True

    await eventually(caught_up, what="every stream to reach the last message of its channel", every=0.2)
    for host, process in fleet.hosts.items():
        process.terminate()
        await asyncio.to_thread(process.wait, 10)
        assert process.returncode == 0, f"{host} exited with {process.returncode}"


async def check(fleet: Fleet, *, late: bool = False) -> None:
    """The invariants. ``late``: a stream may stop short of its channel's history by messages of calls given up on
    (answered "unavailable", none acknowledged), as many at most as there were such calls in the channel. A call
    whose client timed out on a cut link is one: the kernel still sends its request once the link is back, and the
    arbiter grants it then, after its host fell quiet and the streams were seen at the end."""
    history, spends = await _history(fleet)
    said = {(channel, seq): text for channel, lines in history.items() for seq, text in lines}
    journals = {host: fleet.entries(host) for host in PERSONAS}
    acked = {e["text"] for entries in journals.values() for e in entries if e["kind"] == "ack"}
    given_up = [e["channel"] for entries in journals.values() for e in entries if e["kind"] == "unavailable"]
    for host, entries in journals.items():
        acks = [e for e in entries if e["kind"] == "ack"]
        # Nothing acknowledged lost.
        for ack in acks:
            assert said.get((ack["channel"], ack["seq"])) == ack["text"], f"{host}: {ack} not in the history"
        texts = [ack["text"] for ack in acks]
        assert len(texts) == len(set(texts))
        # No level below zero, in any answer or event.
        levels = [e["level"] for e in entries if "level" in e and e["level"] is not None]
        assert min(levels) >= 0
        # The streams: every message of every channel, in order, once.
        for channel in fleet.channels:
            seen = [e["seq"] for e in entries if e["kind"] == "frame" and e["channel"] == channel]
            expected = [seq for seq, _ in history[channel]]
            if not late:
                assert seen == expected, f"{host} {channel}: gap or duplicate"
                continue
            assert seen == expected[: len(seen)], f"{host} {channel}: gap or duplicate"
            missed = [text for _, text in history[channel][len(seen) :]]
            assert not set(missed) & acked, f"{host} {channel}: acknowledged {missed} not streamed"
            assert len(missed) <= given_up.count(channel), f"{host} {channel}: {missed} not streamed"
    # No overdraw: at no instant more held than the capacity.
    for channel in fleet.channels:
        ledger = [row for row in spends if row["channel_id"] == channel]
        for row in ledger:
            moment = row["created_at"]
            held = sum(r["cost"] for r in ledger if r["created_at"] <= moment < r["refund_at"])
            assert held <= fleet.capacity, f"{channel} overdrawn at {moment}: {held}"
