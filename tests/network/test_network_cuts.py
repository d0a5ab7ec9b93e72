"""The fleet across machines, with the network between them failing: PostgreSQL, two arbiter hosts and two persona
hosts, each in a network namespace of its own on one bridge (tests/support/netns.py), with links made lossy and
cut while the persona hosts speak in shared channels through both arbiters.

Each persona host (tests/support/lab_persona_host.py) uses the real client of a persona process (channel affinity
over the two arbiters, the multiplexed stream with its reconnection) and writes down every answer and every frame.
Held throughout, and checked at the end on the database and the journals (tests/support/lab_fleet.py's ``check``):

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

import signal
import time
from typing import TYPE_CHECKING

import aiohttp
import asyncpg

from arbiter.storage.pubsub import LISTENER_NAME
from tests.support.arbiters import Api
from tests.support.eventually import eventually
from tests.support.lab_fleet import ARBITERS, HOSTS, PERSONAS, Fleet, channels_homed, check, lab_fleet, more, settled
from tests.support.netns import Lab

if TYPE_CHECKING:
    from pathlib import Path

CHANNELS = channels_homed("cut")
ON_FIRST, ON_SECOND = CHANNELS[:2], CHANNELS[2:]
CAPACITY = 200
COST = 10
# Refunds come back quickly, so the pool refills during the test and is also often empty: claims are refused
# for it ("insufficient") as often as granted, which is where an overdraw would show.
SETTINGS = {"capacity": CAPACITY, "idle_cap": 1_000, "tiers": {"remark": {"cost": COST, "recovery_s": 3.0}}}
# The persona hosts' client timeout: a refusal must come before it. The arbiter gives up on a statement after 3 s
# (arbiter.storage.database), twice that for a request queued behind a batch that timed out.
TIMEOUT_S = 8.0
# Each host's stream on the arbiter its calls are not cut from in phase 3 (persona1's on the second).
STREAMS = {"persona1": 1, "persona2": 0}


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
    with Lab.open(HOSTS) as lab:
        async with lab_fleet(
            lab, tmp_path, channels=CHANNELS, settings=SETTINGS, streams=STREAMS, timeout_s=TIMEOUT_S
        ) as fleet:
            # Warm: every host speaking, through both arbiters.
            await more(fleet, "ack", CHANNELS, 0)

            # 1. Lossy links: 10 % of the packets of one persona host and one arbiter lost, both ways.
            lab.lossy("persona1", 10)
            lab.lossy("arbiter2", 10)
            since = time.time()
            await more(fleet, "ack", ON_FIRST, since)
            await more(fleet, "ack", ON_SECOND, since)
            lab.lossy("persona1", 0)
            lab.lossy("arbiter2", 0)

            # 2. The first arbiter cut from PostgreSQL: its channels' calls answered 503 naming the database, in
            # time; the other arbiter's channels carry on; all recover once the link is back.
            since = time.time()
            lab.cut("arbiter1", "pg")
            await more(fleet, "unavailable", ON_FIRST, since, hosts=("persona2",), n=1)
            await more(fleet, "ack", ON_SECOND, since)
            # A read too (the history is read from the database, not from the writer's memory).
            async with aiohttp.ClientSession() as session:
                read = await Api(session, {}, fleet.urls[0]).request(
                    "GET", f"/v1/channels/{ON_FIRST[0]}/history", "admin"
                )
            assert read[0] == 503 and read[1]["error"]["code"] == "storage_unavailable", read
            lab.heal("arbiter1", "pg")
            healed = time.time()
            await more(fleet, "ack", ON_FIRST, healed)
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
            await more(fleet, "ack", ON_FIRST, since, hosts=("persona1",), n=len(ON_FIRST) + 1)
            await more(fleet, "ack", ON_FIRST, since, hosts=("persona2",))
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
            await more(fleet, "ack", CHANNELS, since, n=3)
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

            # The end: every host's stream reaches the last message of every channel. Late: a call persona1 gave
            # up on in phase 3 (its client timed out on the cut link) may still be granted once the link is back,
            # after the hosts fell quiet; such a message may be missing from the end of a stream, nothing else.
            await settled(fleet)
            await check(fleet, late=True)


async def _logged(fleet: Fleet, line: str, after: dict[str, int], since: float) -> float:
    """Seconds from ``since`` until both arbiters have logged ``line`` (after the first ``after[host]`` characters
    of their logs)."""

    def both() -> bool:
        return all(line in fleet.log(host)[after[host] :] for host in ARBITERS)

    await eventually(both, what=f"both arbiters to log {line!r}", every=0.05)
    return time.time() - since
