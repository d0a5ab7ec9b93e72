"""``make run`` says what aizuchi says and nothing of its own: the Makefile's run recipe, driven by the real GNU make
against a stand-in ``aizuchi`` (a fake venv: ``make -f Makefile run VENV=...`` from a directory of its own), so no
venv is installed.

Once installed, a failing aizuchi's one line is all there is, and make exits 1 (GNU make exits only 0, 1 or 2, and
announces any other failure with a line of its own; see the Makefile for how). Before the install is done, make
runs as usual: the install, then aizuchi, whose failure is followed by make's line and status 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"
LINE = "aizuchi: persona rin: profile 'anthropic' needs an API key in ANTHROPIC_API_KEY, which is not set or empty"

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def checkout(tmp_path: Path, *, installed: bool = True) -> Path:
    """A directory like a checkout whose venv is the stand-in: ``bin/aizuchi`` prints LINE (or ``FAKE_STDOUT``) and
    exits ``FAKE_STATUS``; ``bin/pip`` only notes that it ran. ``installed``: the venv is up to date."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'stand-in'\n")
    aizuchi = venv / "bin" / "aizuchi"
    aizuchi.write_text(
        '#!/bin/sh\n[ -n "$FAKE_STDOUT" ] && echo "$FAKE_STDOUT"\n'
        f'[ "${{FAKE_STATUS:-1}}" = 0 ] || echo "{LINE}" >&2\nexit "${{FAKE_STATUS:-1}}"\n'
    )
    pip = venv / "bin" / "pip"
    pip.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "pip.log"}\n')
    for script in (aizuchi, pip):
        script.chmod(0o755)
    (venv / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    installed_marker = venv / ".installed"
    installed_marker.touch()
    if not installed:
        earlier = time.time() - 60
        os.utime(installed_marker, (earlier, earlier))  # pyproject.toml changed since the install
    return venv


def make(tmp_path: Path, venv: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith(("MAKE", "MFLAGS"))}
    return subprocess.run(
        ["make", "-f", str(MAKEFILE), *args, f"VENV={venv}"],
        cwd=tmp_path,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("status", ["1", "2"])
def test_a_failing_aizuchi_is_its_one_line_and_status_1(tmp_path: Path, status: str) -> None:
    venv = checkout(tmp_path)

    result = make(tmp_path, venv, "run", FAKE_STATUS=status)

    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"{LINE}\n")


def test_plain_make_runs_the_room_too(tmp_path: Path) -> None:
    venv = checkout(tmp_path)

    result = make(tmp_path, venv, FAKE_STATUS="1")

    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"{LINE}\n")


def test_a_run_that_ends_well_is_only_aizuchi_and_status_0(tmp_path: Path) -> None:
    venv = checkout(tmp_path)

    result = make(tmp_path, venv, "run", FAKE_STATUS="0", FAKE_STDOUT="aizuchi local room: open http://127.0.0.1:8340")

    assert (result.returncode, result.stdout, result.stderr) == (
        0,
        "aizuchi local room: open http://127.0.0.1:8340\n",
        "",
    )


def test_before_the_install_make_installs_first_and_says_a_failure_its_own_way(tmp_path: Path) -> None:
    # Question mode would skip the install: when one is due, make runs as usual.
    venv = checkout(tmp_path, installed=False)

    result = make(tmp_path, venv, "run", FAKE_STATUS="1")

    assert (tmp_path / "pip.log").read_text() == "install --quiet -e .\n"
    assert result.returncode == 2
    assert result.stderr.splitlines()[0] == LINE
    assert result.stderr.splitlines()[1].startswith("make: *** [")
    assert result.stderr.splitlines()[1].endswith(": run] Error 1")


def test_a_dry_run_runs_nothing(tmp_path: Path) -> None:
    venv = checkout(tmp_path)

    result = make(tmp_path, venv, "-n", "run", FAKE_STATUS="1")

    assert result.returncode == 0
    assert result.stdout == f"{venv}/bin/aizuchi run || exit 1\n"
    assert result.stderr == ""
