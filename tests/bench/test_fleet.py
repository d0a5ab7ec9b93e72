"""``aizuchi bench fleet`` as a user runs it, briefly: a process that prints its table, the personas on one stream
and every person's message decided on; and the latency it reports, which leaves out the personas' own pause."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from typing import TYPE_CHECKING

import pytest

from bench.fleet import FirstDecisions
from bots.runtime import LookPlanned
from tests.support.arbiters import free_port
from tests.support.process import run_to_end

if TYPE_CHECKING:
    from pathlib import Path


def cell(output: str, label: str) -> str:
    match = re.search(rf"^\| {re.escape(label)} +\| (.*) \|$", output, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{output}"
    return match[1]


def test_a_short_run_prints_what_the_fleet_costs(tmp_path: Path) -> None:
    port, database = free_port(), tmp_path / "given.db"
    command = ["bench", "fleet", "--personas", "3", "--channels", "6", "--rate", "5", "--seconds", "3"]
    command += ["--warmup", "1", "--delay", "0.1", "--latency", "0.05"]
    command += ["--port", str(port), "--database-url", f"sqlite:///{database}"]  # kept to them
    status, out, err = run_to_end(tmp_path, *command, timeout=120)
    assert status == 0, err
    assert f"the arbiter at http://127.0.0.1:{port}\n" in out
    with closing(sqlite3.connect(database)) as conn:
        assert {row[0] for row in conn.execute("SELECT id FROM channels")} == {f"fleet-{i}" for i in range(6)}
    assert cell(out, "personas x channels") == "3 x 6"
    measured = int(re.match(r"(\d+) in", cell(out, "human messages measured"))[1])  # type: ignore[index]
    assert measured >= 5
    assert cell(out, "persona event streams") == "1"  # the three personas share one stream
    assert cell(out, "messages with no decision") == "0"
    assert cell(out, "status requests per message") == "0.000"  # each look asked its status on the stream
    for label in ("arbiter CPU per human message", "persona CPU per human message"):
        assert float(cell(out, label).removesuffix(" ms")) > 0
    p50, p99 = (float(cell(out, f"message -> first decision {p}").removesuffix(" ms")) for p in ("p50", "p99"))
    assert 0 <= p50 <= p99
    # The same with the pause in is longer by about the pause (0.1 s base, jittered and scaled by temperament).
    seen_p50 = float(cell(out, "  the same, the pause included").split(" / ")[0])
    assert seen_p50 > p50 + 20


def look(seq: int, *, due: float, pause: float) -> LookPlanned:
    return LookPlanned("lobby", seq, None, due, pause)


@pytest.mark.parametrize(
    ("sent", "plan", "at", "latency"),
    [
        # Woken by the message 20 ms after it was sent: the pause (1.5 s) is the persona's, the delivery and the
        # 20 ms after the pause the system's.
        (10.0, look(7, due=11.52, pause=1.5), 11.54, 40.0),
        # A look already under way when the message came: counted from when it was due.
        (10.0, look(7, due=10.5, pause=1.5), 10.56, 60.0),
        # Due before the message was even sent, planned after it: counted from the message.
        (10.0, look(7, due=9.9, pause=1.5), 10.03, 30.0),
        # No pause (--delay 0): from the message.
        (10.0, look(7, due=10.02, pause=0.0), 10.05, 50.0),
    ],
)
async def test_the_latency_leaves_out_the_personas_pause(
    sent: float, plan: LookPlanned, at: float, latency: float
) -> None:
    clock = iter([sent, at])
    decisions = FirstDecisions(clock=lambda: next(clock))
    decisions.sending("lobby")
    sent_at = decisions.now()
    decisions.sent("lobby", 7, sent_at)
    decisions.record(plan)
    latencies, as_seen, undecided = decisions.between(0, 100)
    assert undecided == 0  # (a message in the window with no plan after it would be counted here)
    assert latencies == [pytest.approx(latency)]
    assert as_seen == [pytest.approx((at - sent) * 1000)]


async def test_a_plan_that_came_before_the_message_was_acknowledged_counts_and_an_older_one_does_not() -> None:
    times = iter([10.0, 10.01, 10.02])
    decisions = FirstDecisions(clock=lambda: next(times))
    decisions.sending("lobby")
    sent_at = decisions.now()  # 10.0
    decisions.record(look(6, due=10.0, pause=0.0))  # a plan about the message before (seq 6): not this one's
    decisions.record(look(7, due=10.0, pause=0.0))  # the stream brought it before the request came back
    decisions.sent("lobby", 7, sent_at)
    latencies, _, undecided = decisions.between(0, 100)
    assert (latencies, undecided) == ([pytest.approx(20.0)], 0)
