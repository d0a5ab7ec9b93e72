"""Writing a persona file: TOML a person can read and edit, checked by loading it back, in place whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli_w

from bots.persona import PersonaError, load_persona

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from bots.persona import Persona

__all__ = ("PersonaFileExists", "render_persona", "write_persona")

_TABLES = ("big_five", "samples")


class PersonaFileExists(PersonaError):
    """The persona file is there already, and replacing it was not asked for."""


def render_persona(persona: Mapping[str, Any], comments: Mapping[str, str], header: Sequence[str] = ()) -> str:
    """``persona`` as TOML in the shipped files' layout: its keys, then ``[big_five]`` and ``[samples]``, each
    key or table after its comment in ``comments`` (by dotted name: "background", "samples.greetings")."""
    parts = [_comment(line) for line in header]
    for key, value in persona.items():
        if key not in _TABLES:
            parts.append(_entry(key, value, comments.get(key)))
    for table in _TABLES:
        if table in persona:
            parts.append("\n" + (_comment(comments[table]) if table in comments else "") + f"[{table}]\n")
            for key, value in persona[table].items():
                parts.append(_entry(key, value, comments.get(f"{table}.{key}")))
    return "".join(parts)


def _entry(key: str, value: object, comment: str | None) -> str:
    # One key at a time through the writer, so that quoting and escaping are its job, and a comment can go between.
    return (_comment(comment) if comment else "") + tomli_w.dumps({key: value})


def _comment(text: str) -> str:
    return "".join(f"# {line}".rstrip() + "\n" for line in text.splitlines() or [""])


def write_persona(directory: Path, text: str, persona_id: str, *, replace: bool = False) -> tuple[Path, Persona]:
    """``text`` written to ``directory/<persona_id>.toml`` once it loads as a valid persona; the file appears
    whole or not at all, and an existing one is replaced only when ``replace``."""
    target = directory / f"{persona_id}.toml"
    if target.exists() and not replace:
        raise PersonaFileExists(f"{target} already exists: give another --id, or --force to replace it")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".import-", dir=directory) as scratch:
            # The draft has the final name (load_persona checks the id against it), in the same file system, so
            # that putting it in place is one atomic step.
            draft = Path(scratch) / target.name
            with draft.open("w", encoding="utf-8") as file:
                file.write(text)
                file.flush()
                os.fsync(file.fileno())
            try:
                persona = load_persona(draft)
            except PersonaError as error:
                raise PersonaError(str(error).replace(str(draft), str(target))) from None
            if replace:
                os.replace(draft, target)
            else:
                try:  # a link fails if the name was taken meanwhile, where a rename would overwrite it
                    os.link(draft, target)
                except FileExistsError:
                    raise PersonaFileExists(
                        f"{target} already exists: give another --id, or --force to replace it"
                    ) from None
    except OSError as error:
        raise PersonaError(f"cannot write {target}: {error.strerror or error}") from None
    return target, persona
