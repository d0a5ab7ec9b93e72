"""A misspelt setting is said, not ignored in silence: every ``AIZUCHI_*`` or ``ARBITER_*`` name in ``.env`` or the
environment that no settings class reads gets one warning line at start, naming the closest setting.

The list of known names is built from the settings classes themselves; these tests hold it to the source (every
settings class, every variable read directly) and to ``.env.example``, so a new setting cannot be forgotten.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dotenv import dotenv_values

from aizuchi.settings import (
    READ_DIRECTLY,
    closest_setting,
    known_variables,
    settings_classes,
    unknown_settings,
    variables_by_field,
    variables_of,
)
from tests.support.process import Aizuchi, clean_environment, dotenv

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / ".env.example"
SOURCES = ["aizuchi", "arbiter", "bots", "bench", "tests"]
ROOM_LINE = r"aizuchi local room: open (http://127\.0\.0\.1:\d+)/room/lobby"
# A variable of ours read straight from the environment: os.environ.get("X"), os.environ["X"], os.getenv("X").
DIRECT_READ = re.compile(r"""(?:environ\.get\(|environ\[|getenv\()\s*["']((?:AIZUCHI|ARBITER)_\w+)["']""")


def python_files() -> list[Path]:
    return sorted(path for source in SOURCES for path in (ROOT / source).rglob("*.py"))


def write_dotenv(workdir: Path, **variables: object) -> None:
    base: dict[str, object] = {"ARBITER_DATABASE_URL": f"sqlite:///{workdir / 'aizuchi.db'}", "ARBITER_PORT": 0}
    (workdir / ".env").write_text(dotenv({**base, **variables}))


def run(workdir: Path, *args: str, **environ: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aizuchi", *args],
        cwd=workdir,
        env=clean_environment(**environ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


# --- as the owner meets it ------------------------------------------------------------------------------


async def test_a_misspelt_setting_in_dotenv_is_one_warning_at_start_and_is_ignored(tmp_path: Path) -> None:
    write_dotenv(tmp_path, AIZUCHI_PERSONAS="rin", AIZUCHI_PROFLE="anthropic")

    async with Aizuchi.start(tmp_path, "run") as fleet:
        await fleet.wait_for(ROOM_LINE)
        status = await fleet.stop()

    assert status == 0
    assert fleet.lines["stderr"][0] == (
        "warning: AIZUCHI_PROFLE is not a setting (did you mean AIZUCHI_PROFILE?); it is ignored"
    )
    assert len(fleet.matching("is not a setting")) == 1
    # Ignored indeed: the persona kept its own profile (the offline stand-in), so no key was asked for.
    assert fleet.matching("persona rin \\(Rin\\) runs on profile scripted")


def test_a_misspelt_setting_in_the_environment_is_said_once_too(tmp_path: Path) -> None:
    write_dotenv(tmp_path, ARBITER_PROT=8340)  # the same name in both places: one line

    result = run(tmp_path, "personas", "check", ARBITER_PROT="8340", ARBITER_PERSONA="x")

    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: ARBITER_PERSONA is not a setting (did you mean AIZUCHI_PERSONAS?); it is ignored",
        "warning: ARBITER_PROT is not a setting (did you mean ARBITER_PORT?); it is ignored",
    ]


def test_settings_tokens_and_keys_spelt_right_give_no_warning(tmp_path: Path) -> None:
    # Persona token variables and API keys are named by files, not settings: not ours to judge.
    write_dotenv(
        tmp_path,
        AIZUCHI_PERSONAS="rin",
        aizuchi_log_level="INFO",  # the settings are read without regard to case
        RIN_DISCORD_TOKEN="",
        OPENAI_API_KEY="",
        AIZUCHI_DISCORD_RECONNECT_TRIES=3,
    )

    result = run(tmp_path, "personas", "check", AIZUCHI_REQUIRE_SERVICES="1")

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("AIZUCHI_PROFLE", "AIZUCHI_PROFILE"),
        ("ARBITER_PROT", "ARBITER_PORT"),
        ("AIZUCHI_OLAMA_MODEL", "AIZUCHI_OLLAMA_MODEL"),
        ("AIZUCHI_DISCORD_RECONECT_TRIES", "AIZUCHI_DISCORD_RECONNECT_TRIES"),
        ("AIZUCHI_DISCORD_API", "AIZUCHI_DISCORD_API_URL"),
        ("ARBITER_PROFILE", "AIZUCHI_PROFILE"),  # the other program's prefix
        ("AIZUCHI_PORT", "ARBITER_PORT"),
        ("AIZUCHI_ADMIN_TOKEN", "ARBITER_ADMIN_TOKEN"),
        ("AIZUCHI_PERSONA_TOKEN", "AIZUCHI_PERSONA_TOKENS"),  # the same prefix wins a tie
        ("AIZUCHI_ZZZZZZ", None),  # the prefix alone makes nothing close
        ("AIZUCHI_", None),
    ],
)
def test_the_closest_setting_is_named(name: str, meant: str | None) -> None:
    assert closest_setting(name, known_variables()) == meant


def test_a_name_close_to_nothing_points_at_the_example(tmp_path: Path) -> None:
    assert unknown_settings(None, {"AIZUCHI_ZZZZZZ": "1", "PATH": "/bin"}) == [
        "warning: AIZUCHI_ZZZZZZ is not a setting (the settings are listed in .env.example); it is ignored"
    ]


# --- the known names are every setting ------------------------------------------------------------------


def settings_classes_in_the_source() -> set[str]:
    """Every class that derives from BaseSettings (directly, or from another such class) in our packages."""
    bases_of: dict[str, set[str]] = {}
    for path in python_files():
        if path.is_relative_to(ROOT / "tests"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {base.id if isinstance(base, ast.Name) else ast.unparse(base) for base in node.bases}
                bases_of.setdefault(node.name, set()).update(names)
    found = {"BaseSettings"}
    while True:
        more = {name for name, bases in bases_of.items() if bases & found} - found
        if not more:
            return found - {"BaseSettings"}
        found |= more


def test_every_settings_class_is_checked() -> None:
    # A new settings class must be added to aizuchi.settings.settings_classes, or its variables would be warned of.
    assert {kind.__name__ for kind in settings_classes()} == settings_classes_in_the_source()


def test_every_variable_read_directly_is_known() -> None:
    read = {match for path in python_files() for match in DIRECT_READ.findall(path.read_text(encoding="utf-8"))}
    made = set(re.findall(r"\b((?:AIZUCHI|ARBITER)_[A-Z0-9_]+)=", (ROOT / "Makefile").read_text()))

    assert read, "the pattern finds the test suite's own switches"
    assert read | made <= known_variables()
    assert set(READ_DIRECTLY) <= read | made  # and nothing is listed that nothing reads


def test_the_settings_classes_variables_include_their_aliases() -> None:
    from bots.settings import BotsSettings

    assert {"AIZUCHI_PERSONA_TOKENS", "ARBITER_PERSONA_TOKENS"} <= variables_of(BotsSettings)
    assert {"AIZUCHI_OLLAMA_URL", "AIZUCHI_LOCAL_MODEL", "AIZUCHI_PROFILE"} <= variables_of(BotsSettings)


def test_the_example_dotenv_names_only_settings_and_every_setting() -> None:
    text = EXAMPLE.read_text()
    named = set(dotenv_values(EXAMPLE)) | set(re.findall(r"^# ([A-Z][A-Z0-9_]*)=", text, flags=re.MULTILINE))
    ours = {name for name in named if name.startswith(("AIZUCHI_", "ARBITER_"))}

    assert ours <= known_variables()
    for kind in settings_classes():
        for field, names in variables_by_field(kind).items():
            # A setting with aliases (AIZUCHI_PERSONA_TOKENS is ARBITER_PERSONA_TOKENS) is there under one of them.
            assert names & ours, f"{kind.__name__}.{field} ({', '.join(sorted(names))}) is not in .env.example"
