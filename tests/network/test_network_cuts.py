"""The fleet across machines, with the network between them failing: PostgreSQL, two arbiter hosts and two persona
hosts, each in a network namespace of its own on one bridge (tests/support/netns.py), with links made lossy and
cut while the persona hosts speak in shared channels through both arbiters.

Each persona host (tests/support/lab_persona_host.py) uses the real client of a persona process (channel affinity
over the two arbiters, the multiplexed stream with its reconnection) and writes down every answer and every frame.
Held throughout, and checked at the end on the database and the journals:

- nothing acknowledged is lost: every granted speech is in the history, at its seq, once;
- no overdraw: at no instant do a channel's live spends add up to more than its capacity, whichever process granted
  them (the ledger, read from PostgreSQL), and no answer or level event shows a negative level;
- the streams resume without gaps or duplicates: each host saw every message of every channel, in order, once;
- the cut-off side refuses with a clear reason, and recovers: an arbiter cut from PostgreSQL answers 503 naming the
  database (not a hang past the client's own timeout), and serves again once the link is back; a persona host cut
  from its arbiter goes to the other one.

One test, phases in order, because the lab (a database, four processes) is what costs: about 10 s of set-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import asyncpg

from arbiter.storage.pubsub import LISTENER_NAME
from bots.affinity import home
from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS
from tests.support.arbiters import Api
from tests.support.eventually import eventually
from tests.support.lab_postgres import lab_postgres
from tests.support.netns import Lab

if TYPE_CHECKING:
    import subprocess
    from collections.abc import AsyncIterator

ROOT = str(Path(__file__).resolve().parents[2])
PORT = 8340
PERSONAS = {"persona1": "hana", "persona2": "kai"}
ARBITERS = ("arbiter1", "arbiter2")
CAPACITY = 200
COST = 10
# Refunds come back quickly, so the pool refills during the test and is also often empty: claims are refused
# for it ("insufficient") as often as granted, which is where an overdraw would show.
SETTINGS = {"capacity": CAPACITY, "idle_cap": 1_000, "tiers": {"remark": {"cost": COST, "recovery_s": 3.0}}}
# The persona hosts' client timeout: a refusal must come before it. The arbiter gives up on a statement after 3 s
# (arbiter.storage.database), twice that for a request queued behind a batch that timed out.
TIMEOUT_S = 8.0


def channels_homed() -> list[str]:
    """Four channels, two served first by each arbiter (bots.affinity's hash)."""
    by_home: dict[int, list[str]] = {0: [], 1: []}
    for index in range(100):
        name = f"cut{index}"
        if len(by_home[home(name, 2)]) < 2:
            by_home[home(name, 2)].append(name)
    return by_home[0] + by_home[1]


CHANNELS = channels_homed()
ON_FIRST, ON_SECOND = CHANNELS[:2], CHANNELS[2:]


@dataclass
class Fleet:
    lab: Lab
    database: str
    urls: list[str]
    journals: dict[str, Path]
    hosts: dict[str, subprocess.Popen[bytes]]
    workdir: Path

    def log(self, host: str) -> str:
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


def _start_persona_host(lab: Lab, host: str, urls: list[str], own: int, workdir: Path) -> subprocess.Popen[bytes]:
    persona = PERSONAS[host]
    argv = [sys.executable, "-m", "tests.support.lab_persona_host", "--urls", ",".join(urls), "--persona", persona]
    argv += ["--token", PERSONA_TOKENS[persona], "--channels", ",".join(CHANNELS), "--own", str(own)]
    argv += ["--journal", str(workdir / f"{host}.jsonl"), "--pace", "0.05", "--timeout", str(TIMEOUT_S)]
    return lab.spawn(host, argv, env=_environment(), cwd=workdir, log=workdir / f"{host}.log")


@contextlib.asynccontextmanager
async def _fleet(lab: Lab, workdir: Path) -> AsyncIterator[Fleet]:
    async with lab_postgres(lab, "pg") as database:
        url = database.replace("postgresql://", "postgresql+asyncpg://")
        # One after the other: the first migrates the new database.
        urls = [await _start_arbiter(lab, host, url, workdir) for host in ARBITERS]
        async with aiohttp.ClientSession() as session:
            api = Api(session, {}, urls[0])
            for channel in CHANNELS:
                await api.create_channel(channel, **SETTINGS)
        # Each host's stream on the arbiter its calls are not cut from in phase 3 (persona1's on the second).
        hosts = {host: _start_persona_host(lab, host, urls, 1 - own, workdir) for own, host in enumerate(PERSONAS)}
        journals = {host: workdir / f"{host}.jsonl" for host in PERSONAS}
        yield Fleet(lab, database, urls, journals, hosts, workdir)


async def _more(
    fleet: Fleet, kind: str, channels: list[str], since: float, *, hosts: tuple[str, ...] = tuple(PERSONAS), n: int = 3
) -> None:
    for host in hosts:
        await eventually(
            lambda host=host: fleet.count(host, kind, channels, since) >= n,
            what=f"{n} {kind} entries on {host} for {channels}",
            every=0.05,
        )


async def _listen_ports(database: str, lab: Lab, *, replacing: dict[str, int] | None = None) -> dict[str, int]:
    """Each arbiter host's LISTEN connection to PostgreSQL, by its client port, once both listen: an arbiter cut
    from the database may still be connecting its listener again (it retries with a back-off). ``replacing``: the
    ports of connections given up, once the server has dropped them too and each host listens on another one."""
    by_address = {host.address: name for name, host in lab.hosts.items()}

    async def listening() -> dict[str, int]:
        conn = await asyncpg.connect(database, timeout=10)
        try:
            rows = await conn.fetch(
                "SELECT host(client_addr) AS addr, client_port FROM pg_stat_activity WHERE application_name = $1",
                LISTENER_NAME,
            )
        finally:
            await conn.close()
        ports = {by_address[row["addr"]]: row["client_port"] for row in rows}
        if replacing and (len(rows) != len(ports) or any(ports.get(host) == port for host, port in replacing.items())):
            return {}
        return ports if set(ports) == set(ARBITERS) else {}

    return await eventually(listening, what="both arbiters to listen for notifications", every=0.1)


async def test_the_fleet_keeps_its_promises_while_links_fail(tmp_path: Path) -> None:
    with Lab.open(["pg", "arbiter1", "arbiter2", "persona1", "persona2"]) as lab:
        async with _fleet(lab, tmp_path) as fleet:
            # Warm: every host speaking, through both arbiters.
            await _more(fleet, "ack", CHANNELS, 0)

            # 1. Lossy links: 10 % of the packets of one persona host and one arbiter lost, both ways.
            lab.lossy("persona1", 10)
            lab.lossy("arbiter2", 10)
            since = time.time()
            await _more(fleet, "ack", ON_FIRST, since)
            await _more(fleet, "ack", ON_SECOND, since)
            lab.lossy("persona1", 0)
            lab.lossy("arbiter2", 0)

            # 2. The first arbiter cut from PostgreSQL: its channels' calls answered 503 naming the database, in
            # time; the other arbiter's channels carry on; all recover once the link is back.
            since = time.time()
            lab.cut("arbiter1", "pg")
            await _more(fleet, "unavailable", ON_FIRST, since, hosts=("persona2",), n=1)
            await _more(fleet, "ack", ON_SECOND, since)
            # A read too (the history is read from the database, not from the writer's memory).
            async with aiohttp.ClientSession() as session:
                read = await Api(session, {}, fleet.urls[0]).request(
                    "GET", f"/v1/channels/{ON_FIRST[0]}/history", "admin"
                )
            assert read[0] == 503 and read[1]["error"]["code"] == "storage_unavailable", read
            lab.heal("arbiter1", "pg")
            healed = time.time()
            await _more(fleet, "ack", ON_FIRST, healed)
            cut_answers = [
                e
                for host in PERSONAS
                for e in fleet.entries(host)
                if e["kind"] == "unavailable" and since <= e["at"] <= healed
            ]
            assert cut_answers
            for answer in cut_answers:
                assert "503" in answer["error"] and "storage_unavailable" in answer["error"], answer
                assert answer["took"] < TIMEOUT_S, answer

            # 3. One persona host cut from the first arbiter: its calls for that arbiter's channels go to the
            # second; the other host carries on with both.
            lab.cut("persona1", "arbiter1")
            # Counted from when the cut is in place. A host makes its calls in a channel one after another, so at
            # most one ack per channel can be of a call answered before then (two, in these two channels): the third
            # went through the second arbiter.
            since = time.time()
            await _more(fleet, "ack", ON_FIRST, since, hosts=("persona1",), n=len(ON_FIRST) + 1)
            await _more(fleet, "ack", ON_FIRST, since, hosts=("persona2",))
            lab.heal("persona1", "arbiter1")

            # 4. Both arbiters' notifications cut (their LISTEN connections, nothing else), silently, for good:
            # every write still committed against the database's versions; each arbiter notices its listener is
            # dead (a probe unanswered), says so, and listens again on a new connection. The hosts fall quiet while
            # the arbiters are deaf, so no later message shows the streams what they missed: they catch up from
            # the database.
            ports = await _listen_ports(fleet.database, lab)
            logged = {host: len(fleet.log(host)) for host in ARBITERS}
            since = time.time()
            for host, port in ports.items():
                lab.cut_port(host, port)
            await _more(fleet, "ack", CHANNELS, since, n=3)
            for process in fleet.hosts.values():
                process.send_signal(signal.SIGUSR1)
            noticed = await _logged(fleet, "lost the PostgreSQL listening connection", logged, since)
            again = await _logged(fleet, "listening again", logged, since)
            # The server drops the dead connections too (the arbiters' keepalive settings for it).
            await _listen_ports(fleet.database, lab, replacing=ports)
            dropped = time.time() - since
            for host, port in ports.items():
                lab.heal_port(host, port)
            print(
                f"LISTEN cut -> lost logged {noticed:.1f}s, listening again {again:.1f}s, server dropped {dropped:.1f}s"
            )

            # The end: every host's stream reaches the last message of every channel.
            await _settled(fleet)
            await _check(fleet)


async def _logged(fleet: Fleet, line: str, after: dict[str, int], since: float) -> float:
    """Seconds from ``since`` until both arbiters have logged ``line`` (after the first ``after[host]`` characters
    of their logs)."""

    def both() -> bool:
        return all(line in fleet.log(host)[after[host] :] for host in ARBITERS)

    await eventually(both, what=f"both arbiters to log {line!r}", every=0.05)
    return time.time() - since


async def _history(database: str) -> tuple[dict[str, list[tuple[int, str]]], list[asyncpg.Record]]:
    conn = await asyncpg.connect(database, timeout=10)
    try:
        messages = await conn.fetch("SELECT channel_id, seq, text FROM messages ORDER BY channel_id, seq")
        spends = await conn.fetch("SELECT channel_id, cost, created_at, refund_at, state FROM spends")
    finally:
        await conn.close()
    history: dict[str, list[tuple[int, str]]] = {channel: [] for channel in CHANNELS}
    for row in messages:
        history[row["channel_id"]].append((row["seq"], row["text"]))
    return history, spends


async def _settled(fleet: Fleet) -> None:
    """The hosts fall quiet; then each one's stream reaches the last message of every channel, and it stops."""
    for process in fleet.hosts.values():
        process.send_signal(signal.SIGUSR1)

    async def caught_up() -> bool:
        history, _ = await _history(fleet.database)
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


async def _check(fleet: Fleet) -> None:
    history, spends = await _history(fleet.database)
    said = {(channel, seq): text for channel, lines in history.items() for seq, text in lines}
    for host in PERSONAS:
        entries = fleet.entries(host)
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
        for channel in CHANNELS:
            seen = [e["seq"] for e in entries if e["kind"] == "frame" and e["channel"] == channel]
            expected = [seq for seq, _ in history[channel]]
            assert seen == expected[: len(seen)], f"{host} {channel}: gap or duplicate"
    # No overdraw: at no instant more held than the capacity.
    for channel in CHANNELS:
        ledger = [row for row in spends if row["channel_id"] == channel]
        for row in ledger:
            moment = row["created_at"]
            held = sum(r["cost"] for r in ledger if r["created_at"] <= moment < r["refund_at"])
            assert held <= CAPACITY, f"{channel} overdrawn at {moment}: {held}"
