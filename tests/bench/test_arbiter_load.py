"""``aizuchi bench arbiter`` as a user runs it, briefly: kept to the port and the database it is given, and its
refusals told apart by reason (a run's CPU per request mixes cheap refusals in; per grant it does not)."""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING

import asyncpg

from bench.arbiter_load import NOISY_STEAL, Result, Tally, Usage, _print_scaling
from bench.confine import plain_postgres_url
from tests.support.arbiters import free_port
from tests.support.process import run_to_end

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

SHORT = ["bench", "arbiter", "--database", "postgres", "--processes", "1", "--without-mcp"]
SHORT += ["--clients", "2", "--channels", "4", "--seconds", "1.5"]


def columns(output: str) -> dict[str, str]:
    """The summary table's one row, by column."""
    rows = [line for line in output.splitlines() if line.startswith("|") and not line.startswith("|-")]
    header, row = ([cell.strip() for cell in line.strip("|").split("|")] for line in rows[:2])
    return dict(zip(header, row, strict=True))


async def test_a_short_run_keeps_to_its_port_and_database_and_tells_refusals_apart(
    tmp_path: Path, postgres_url: str
) -> None:
    port = free_port()
    command = [*SHORT, "--port", str(port), "--database-url", postgres_url]
    status, out, err = await asyncio.to_thread(run_to_end, tmp_path, *command, timeout=120)
    assert status == 0, err
    assert f"at http://127.0.0.1:{port};" in out
    # Its channels are in the database it was given (left there after the last run, to be looked at).
    conn = await asyncpg.connect(plain_postgres_url(postgres_url))
    try:
        channels = {row["id"] for row in await conn.fetch("SELECT id FROM channels")}
    finally:
        await conn.close()
    assert channels == {f"bench-http-2-{index}" for index in range(4)}
    # Every refusal counted under its call and reason, adding up to the table's count.
    reasons = re.search(r"; refused: (.*)$", out, re.MULTILINE)
    assert reasons is not None, out
    counted = re.findall(r"(\w+ \w+) ([\d,]+)", reasons[1])
    table = columns(out)
    assert sum(int(count.replace(",", "")) for _why, count in counted) == int(table["refused"])
    assert all(why.split()[0] in {"claim", "speak", "consume"} for why, _count in counted)
    # Two clients in four channels of capacity 10,000: one nod per message is what is refused, and it is.
    assert any(why.endswith(" nodded") for why, _count in counted)
    # Per grant costs more than per request (fewer grants than requests); the backends' CPU is counted too.
    per_request, per_grant, database, total = (
        float(table[name].replace(",", ""))
        for name in ("cpu µs/request", "cpu µs/grant", "db µs/request", "total µs/request")
    )
    assert per_grant > per_request > 0
    assert database > 0
    assert total == per_request + database or abs(total - per_request - database) <= 1  # each rounded


async def test_a_database_with_channels_no_benchmark_made_is_refused_untouched(
    tmp_path: Path, postgres_url: str
) -> None:
    conn = await asyncpg.connect(plain_postgres_url(postgres_url))
    try:
        await conn.execute("CREATE TABLE channels (id text PRIMARY KEY)")
        await conn.execute("INSERT INTO channels VALUES ('1234567890'), ('bench-http-2-0')")
        command = [*SHORT, "--database-url", postgres_url]
        status, out, err = await asyncio.to_thread(run_to_end, tmp_path, *command, timeout=60)
        assert status == 2, out
        assert "holds 1 channel(s) not made by a benchmark" in err
        assert await conn.fetchval("SELECT count(*) FROM channels") == 2
    finally:
        await conn.close()


def test_a_database_url_of_another_kind_than_database_is_refused(tmp_path: Path) -> None:
    command = ["bench", "arbiter", "--database", "postgres", "--database-url", f"sqlite:///{tmp_path / 'b.db'}"]
    status, _out, err = run_to_end(tmp_path, *command)
    assert status == 2
    assert "--database postgres but --database-url is a sqlite URL" in err


def _run(processes: int, cpu_seconds: float, steal: float | None) -> Result:
    """A run of 1,000 requests that took ``cpu_seconds`` in all (the backends' share a fifth of it)."""
    usage = Usage(cpu_seconds * 0.8, steal, database_seconds=cpu_seconds * 0.2)
    tally = Tally(latencies=[0.01] * 1000, grants=300)
    return Result("postgres", clients=16, channels=64, seconds=1.0, tally=tally, usage=usage, processes=processes)


def test_the_scaling_line_warns_when_the_host_took_the_machine_meanwhile(capsys: pytest.CaptureFixture[str]) -> None:
    _print_scaling([_run(1, 0.68, 0.01), _run(2, 0.85, 0.02)])
    quiet = capsys.readouterr().out
    assert "2 processes: 850 µs of CPU per request in all" in quiet
    assert "1.25x one process's 680 µs" in quiet
    assert "not comparable" not in quiet

    _print_scaling([_run(1, 0.85, 0.26), _run(2, 1.43, 0.42)])
    noisy = capsys.readouterr().out
    assert "1.68x one process's 850 µs" in noisy
    assert "not comparable: the host took 26% and 42% of the machine's time" in noisy

    _print_scaling([_run(1, 0.68, NOISY_STEAL), _run(2, 0.85, None)])  # steal unknown where /proc is not
    assert "not comparable: the host took 10% of the machine's time" in capsys.readouterr().out

    _print_scaling([_run(2, 0.85, 0.5)])  # nothing to compare with
    assert capsys.readouterr().out == ""
