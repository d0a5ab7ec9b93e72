"""``aizuchi bench conversation`` as a user runs it, briefly: a process that prints its table with the transcript
metrics in it, and writes the transcripts as before."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from typing import TYPE_CHECKING

from bench.conversation import faster
from bots.runtime import RuntimeConfig
from tests.support.arbiters import free_port
from tests.support.process import run_to_end

if TYPE_CHECKING:
    from pathlib import Path

PERSONAS = {"Rin": "rin", "Theo": "theo", "Juno": "juno"}


def row(output: str, label: str) -> list[str]:
    """The cells of the table row ``label``, one per mode."""
    match = re.search(rf"^\| {re.escape(label)} +\|(.*)\|$", output, re.MULTILINE)
    assert match, f"no row {label!r} in:\n{output}"
    return [cell.strip() for cell in match[1].split("|")]


def test_a_short_run_reports_distinctness_and_persona_accuracy(tmp_path: Path) -> None:
    transcript = tmp_path / "talk.txt"
    command = [
        "bench",
        "conversation",
        "--lines",
        "8",
        "--tail",
        "20",
        "--speed",
        "40",
        "--transcript",
        str(transcript),
        "--port",
        str(port := free_port()),
        "--database-url",
        f"sqlite:///{tmp_path / 'given.db'}",
    ]
    status, out, err = run_to_end(tmp_path, *command, timeout=120)
    assert status == 0, err
    # Kept to the port and the database given: each mode in turn, the second's conversation left in it.
    for mode in ("decide", "tool-loop"):
        assert f"{mode}: the arbiter's API at http://127.0.0.1:{port}\n" in out
    with closing(sqlite3.connect(tmp_path / "given.db")) as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE channel_id = 'bench'").fetchone()[0] >= 8

    assert row(out, "messages posted")  # the rows that were there are still there
    for mode, distinctness, accuracy in zip(
        ["decide", "tool-loop"],
        row(out, "speaker distinctness"),
        row(out, "persona accuracy, nearest profile"),
        strict=True,
    ):
        # The transcript file is as it was: [speaker] text lines; the persona lines are the ones scored.
        lines = (tmp_path / f"talk.{mode}.txt").read_text().splitlines()
        assert lines
        assert all(re.fullmatch(r"\[[^]]+\] .+", line) for line in lines)
        spoken = [line for line in lines if line.split("]")[0][1:] in PERSONAS]
        assert -1.0 <= float(distinctness) <= 1.0
        parts = re.fullmatch(r"(\d+)% \((\d+)/(\d+)\)", accuracy)
        assert parts, accuracy
        share, correct, total = parts.groups()
        assert int(total) == len(spoken)
        assert 0 <= int(correct) <= int(total)
        assert abs(int(share) - 100 * int(correct) / int(total)) <= 0.5

        by_speaker = out.split(f"by speaker ({mode}):")[1].split("\n\n")[0]
        speakers = re.findall(r"^  (\w+) +(-?\d\.\d{3}|-) +(\d+)% \((\d+)/(\d+)\)$", by_speaker, re.MULTILINE)
        assert sorted(s[0] for s in speakers) == sorted(PERSONAS.values())
        assert sum(int(s[4]) for s in speakers) == int(total)
        assert sum(int(s[3]) for s in speakers) == int(correct)


def test_every_duration_of_the_personas_runs_as_fast_as_the_conversation() -> None:
    # Time runs --speed times faster: a wait left at its production length would make the personas look slower
    # than they are (a pool wait's reaction, 0.25 s, is 5 s of conversation at x20).
    production = RuntimeConfig()

    quick = faster(production, 20)

    assert quick.base_delay_s == production.base_delay_s / 20
    assert quick.reaction_s == production.reaction_s / 20
    assert quick.max_backoff_s == production.max_backoff_s / 20
    assert (quick.window, quick.recent, quick.tool_rounds) == (
        production.window,
        production.recent,
        production.tool_rounds,
    )
