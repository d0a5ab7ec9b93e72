"""``aizuchi personas check``: every persona file valid, and consistent with the profiles and each other."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from arbiter.contract import display_length
from bots.llm.profiles import ProfileError, load_profiles
from bots.persona import Persona, PersonaError, load_persona

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ("DEFAULT_LENGTHS", "CheckReport", "check_personas", "sample_length")

# The arbiter's default tier lengths, by the tier each sample set is spoken in; a channel may change them, so
# longer samples are warnings, not errors.
DEFAULT_LENGTHS = {
    "aizuchi": 24,
    "remarks": 120,
    "greetings": 120,
    "farewells": 120,
    "thanks": 120,
    "answers": 120,
    "unsure": 120,
    "questions": 120,
    "echoes": 120,
}
# What a placeholder stands for, as long as a typical name or word: lines are measured with it filled in.
PLACEHOLDER_COLUMNS = 8


@dataclass
class CheckReport:
    personas: list[Persona] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def check_personas(directory: Path, profiles_file: Path | None, env: Mapping[str, str]) -> CheckReport:
    report = CheckReport()
    try:
        profiles = load_profiles(profiles_file if profiles_file is not None and profiles_file.exists() else None)
    except ProfileError as error:
        report.errors.append(str(error))
        profiles = {}
    paths = sorted(directory.glob("*.toml")) if directory.is_dir() else []
    if not paths:
        report.errors.append(f"{directory}: no persona files (*.toml)")
    for path in paths:
        try:
            persona = load_persona(path)
        except PersonaError as error:
            report.errors.append(str(error))
            continue
        report.personas.append(persona)
        if profiles and persona.provider not in profiles:
            known = ", ".join(sorted(profiles))
            report.errors.append(f"{path}: provider: no profile named {persona.provider!r} (known: {known})")
        for kind, limit in DEFAULT_LENGTHS.items():
            for index, line in enumerate(getattr(persona.samples, kind)):
                columns = sample_length(line)
                if columns > limit:
                    filled = " with its placeholders filled" if columns != display_length(line) else ""
                    report.warnings.append(
                        f"{path}: samples.{kind}[{index}]: {columns} columns{filled}, over the default {limit}"
                        " (the scripted provider will not use it unless a channel allows more)"
                    )
    _check_unique(report, "display name", [p.display_name.casefold() for p in report.personas])
    token_variables = [p.discord_token_env for p in report.personas if p.discord_token_env]
    _check_unique(report, "Discord token variable", token_variables)
    names = Counter(name.casefold() for p in report.personas for name in p.names)
    shared = sorted(name for name, count in names.items() if count > 1)
    if shared:
        report.errors.append(f"names shared by several personas (addressing would be ambiguous): {', '.join(shared)}")
    return report


def sample_length(line: str) -> int:
    """A sample line's display columns, each placeholder ({name}, {word}) counted as a typical name or word."""
    bare = line.replace("{name}", "").replace("{word}", "")
    placeholders = line.count("{name}") + line.count("{word}")
    return display_length(bare) + PLACEHOLDER_COLUMNS * placeholders


def _check_unique(report: CheckReport, what: str, values: list[str]) -> None:
    repeated = sorted(value for value, count in Counter(values).items() if count > 1)
    if repeated:
        report.errors.append(f"the same {what} is used by several personas: {', '.join(repeated)}")
