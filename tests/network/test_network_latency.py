"""The fleet across machines with slow, lossy links: PostgreSQL, two arbiter hosts and two persona hosts in network
namespaces (tests/support/netns.py), with 60-80 ms added each way (120-160 ms a round trip) and 3 % of the packets
lost between the first persona host and the first arbiter, and between that arbiter and PostgreSQL, while both
persona hosts speak in shared channels through both arbiters (tests/support/lab_fleet.py).

The delay is real: it is measured where a client sees it - the time a TCP connection takes to open across each
delayed link, and the time the first persona host waits for the first arbiter's answers - before and while it
applies. The fleet's promises hold through it (``lab_fleet.check``): nothing acknowledged lost, no overdraw, every
host's stream (the first host's on the slow link) without gaps or duplicates.

One test: the lab (a database, four processes) is what costs, about 10 s of set-up.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

from tests.support.lab_fleet import HOSTS, Fleet, channels_homed, check, connect_ms, lab_fleet, more, settled
from tests.support.lab_fleet import PORT as ARBITER_PORT
from tests.support.lab_postgres import PORT as PG_PORT
from tests.support.netns import Lab, require_delay

if TYPE_CHECKING:
    from pathlib import Path

CHANNELS = channels_homed("slow")
ON_FIRST, ON_SECOND = CHANNELS[:2], CHANNELS[2:]
CAPACITY = 200
# Refunds come back quickly: the pool is often empty, so claims are refused for it as well as granted, which is
# where an overdraw would show.
SETTINGS = {"capacity": CAPACITY, "idle_cap": 1_000, "tiers": {"remark": {"cost": 10, "recovery_s": 3.0}}}
TIMEOUT_S = 8.0
DELAY_MS, JITTER_MS, LOSS_PERCENT = 60, 20, 3


def _took_ms(fleet: Fleet, host: str, channels: list[str], since: float) -> float:
    """The median time ``host`` waited for a verdict in ``channels``, of the calls it made after ``since``."""
    took = [
        e["took"] * 1000
        for e in fleet.entries(host)
        if e["kind"] in ("ack", "refused") and e["channel"] in channels and e["at"] - e["took"] >= since
    ]
    assert took, f"no verdict for {host} in {channels} since {since}"
    return float(statistics.median(took))


def _measure(fleet: Fleet, since: float) -> dict[str, float]:
    lab = fleet.lab
    return {
        "connect persona1->arbiter1": connect_ms(lab, "persona1", "arbiter1", ARBITER_PORT),
        "connect arbiter1->pg": connect_ms(lab, "arbiter1", "pg", PG_PORT),
        "connect persona2->arbiter2 (not delayed)": connect_ms(lab, "persona2", "arbiter2", ARBITER_PORT),
        "verdict persona1 via arbiter1": _took_ms(fleet, "persona1", ON_FIRST, since),
        "verdict persona1 via arbiter2 (not delayed)": _took_ms(fleet, "persona1", ON_SECOND, since),
    }


async def test_the_fleet_keeps_its_promises_over_slow_lossy_links(tmp_path: Path) -> None:
    require_delay()
    with Lab.open(HOSTS) as lab:
        # The first persona host's stream on the first arbiter, over the slow link; the second's on the other.
        streams = {"persona1": 0, "persona2": 1}
        async with lab_fleet(
            lab, tmp_path, channels=CHANNELS, settings=SETTINGS, streams=streams, timeout_s=TIMEOUT_S
        ) as fleet:
            start = time.time()
            await more(fleet, "ack", CHANNELS, start)
            before = _measure(fleet, start)

            lab.delay("persona1", "arbiter1", DELAY_MS, jitter_ms=JITTER_MS, loss_percent=LOSS_PERCENT, seed=1)
            lab.delay("arbiter1", "pg", DELAY_MS, jitter_ms=JITTER_MS, loss_percent=LOSS_PERCENT, seed=2)
            slow = time.time()
            await more(fleet, "ack", ON_FIRST, slow, n=6)
            await more(fleet, "ack", ON_SECOND, slow)
            during = _measure(fleet, slow)
            delayers: dict[str, dict[str, Any]] = {}
            for a, b in (("persona1", "arbiter1"), ("arbiter1", "pg")):
                for host, did in lab.undelay(a, b).items():
                    delayers[f"{host} from {b if host == a else a}"] = did

            print(f"\nasked: {DELAY_MS}-{DELAY_MS + JITTER_MS} ms each way, {LOSS_PERCENT} % lost; ms, median:")
            for what, ms in before.items():
                print(f"  {what}: {ms:.1f} before, {during[what]:.1f} while delayed ({during[what] - ms:+.1f})")
            for link, did in delayers.items():
                print(f"  delayer in {link}: {did}")

            # Each way held at least DELAY_MS: a connection's opening (SYN out, SYN-ACK back) takes two of those,
            # and not far past the most asked (a delayer that held packets longer than asked would show here).
            round_trip = 2 * DELAY_MS
            for link in ("connect persona1->arbiter1", "connect arbiter1->pg"):
                assert before[link] < DELAY_MS, (link, before)
                assert round_trip <= during[link] < 2 * (round_trip + 2 * JITTER_MS), (link, during)
            # A verdict through the first arbiter: the request's round trip, and at least one to the database
            # (the arbiter commits before it answers).
            assert during["verdict persona1 via arbiter1"] >= 2 * round_trip, during
            assert all(did["passed"] > 0 for did in delayers.values()), delayers
            assert sum(did["dropped"] for did in delayers.values()) > 0, delayers

            await settled(fleet)
            await check(fleet)
