"""Latency on a lab's link without ``tc netem`` (the kernels these tests run on are built without it): one process,
run inside a host's namespace, that takes the packets an iptables NFQUEUE rule hands it (tests/support/netns.py
adds the rule: the packets arriving from one peer) and gives each its verdict once its delay has passed.

- every packet is held ``--delay-ms``, plus a random part of up to ``--jitter-ms``; a packet never overtakes the
  one before it (its release is at least the previous one's), so jitter delays without reordering, as a real
  path does for one flow;
- ``--loss`` percent of the packets are dropped instead, at random (seeded: ``--seed``).

Only the packet's metadata crosses to this process (COPY_META: its id, not its bytes), and the verdict reinjects
the kernel's own packet. The packets are held on arrival, not on departure: a sender's packets held in its own
output path still count against its socket's send budget (TCP small queues), which would throttle the sender as
no real network does.

It writes "bound" once the kernel hands it packets, and at SIGTERM lets every held packet go at once and writes
what it did as one JSON line (``{"passed": n, "dropped": m, "held_max": k}``) before it exits.

    python -m tests.support.lab_delayer --queue 3 --delay-ms 50 --jitter-ms 10 --loss 2 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import select
import signal
import sys
import time
from typing import Any

from netfilterqueue import COPY_META, NetfilterQueue, Packet

# More than a lab link ever holds at once: past it the kernel drops what arrives, which would be loss nobody asked
# for.
MAX_HELD = 20_000


class Delayer:
    def __init__(self, delay_s: float, jitter_s: float, loss_percent: float, rng: random.Random) -> None:
        self._delay_s = delay_s
        self._jitter_s = jitter_s
        self._loss = loss_percent / 100
        self._rng = rng
        self._held: collections.deque[tuple[float, Packet]] = collections.deque()
        self._last_release = 0.0
        self.passed = self.dropped = self.held_max = 0

    def on_packet(self, packet: Packet) -> None:
        if self._loss and self._rng.random() < self._loss:
            packet.drop()
            self.dropped += 1
            return
        release = time.monotonic() + self._delay_s + self._rng.uniform(0, self._jitter_s)
        self._last_release = max(self._last_release, release)
        self._held.append((self._last_release, packet))
        self.held_max = max(self.held_max, len(self._held))

    def release_due(self, *, everything: bool = False) -> float | None:
        """Accepts the packets whose time has come; returns how long until the next one's, or None."""
        now = time.monotonic()
        while self._held and (everything or self._held[0][0] <= now):
            self._held.popleft()[1].accept()
            self.passed += 1
        return max(0.0, self._held[0][0] - now) if self._held else None

    def summary(self) -> dict[str, Any]:
        return {"passed": self.passed, "dropped": self.dropped, "held_max": self.held_max}


def main(args: argparse.Namespace) -> None:
    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    delayer = Delayer(args.delay_ms / 1000, args.jitter_ms / 1000, args.loss, random.Random(args.seed))
    queue = NetfilterQueue()
    queue.bind(args.queue, delayer.on_packet, max_len=MAX_HELD, mode=COPY_META)
    fd = queue.get_fd()
    print("bound", flush=True)
    wait: float | None = None
    while not stop:
        # Wakes for the next packet to arrive or to be let go, and at least every 0.1 s to see a SIGTERM (which
        # Python handles between calls, not inside select's wait).
        readable, _, _ = select.select([fd], [], [], 0.1 if wait is None else min(wait, 0.1))
        if readable:
            queue.run(block=False)
        wait = delayer.release_due()
    queue.run(block=False)  # what arrived before the rule went (netns.py removes it first)
    delayer.release_due(everything=True)
    queue.unbind()
    print(json.dumps(delayer.summary()), flush=True)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue", type=int, required=True, help="the NFQUEUE number the rule hands packets to")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--loss", type=float, default=0.0, help="percent of the packets dropped")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


if __name__ == "__main__":
    main(_parse())
    sys.exit(0)
