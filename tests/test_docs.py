"""The README and the pages it links to: every relative link lands, and every command they show exists.

The README is the door (what it is, the two commands, a quick start, links); docs/ and CONTRIBUTING.md are the
house. These tests keep the door short and every way through it open: a link to a file that moved, a heading that
was renamed, or a command shown that `make` or `aizuchi` does not have fails here.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from aizuchi.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_PAGES = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, ROOT / "CONTRIBUTING.md", *DOC_PAGES]
README_MAX_LINES = 260

SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"(`+).+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def _lines(page: Path) -> list[tuple[str | None, str]]:
    """Each line with the language of the fenced block it is in (None outside one; fences themselves left out)."""
    out: list[tuple[str | None, str]] = []
    fence: str | None = None
    language = ""
    for line in page.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence, language = stripped[:3], stripped[3:].strip().lower()
        elif fence is not None and stripped.startswith(fence):
            fence = None
        else:
            out.append((None if fence is None else language, line))
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lowercased, punctuation dropped, spaces made hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays, its target goes
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for language, line in _lines(page):
        if language is None and (match := HEADING.match(line)):
            slug = _slug(match.group(2))
            anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _links(page: Path) -> list[str]:
    found = []
    for language, line in _lines(page):
        if language is None:
            found += LINK.findall(INLINE_CODE.sub("", line))
    return found


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in _links(page):
        if SCHEME.match(target):
            continue  # a web address: not this repository's to check
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in _anchors(destination):
            broken.append(f"{target}: {_name(destination)} has no heading with the anchor #{anchor}")
    return broken


def _shell_commands(page: Path) -> list[list[str]]:
    """The `make` and `aizuchi` command lines shown in the page's shell blocks, as words."""
    commands = []
    pending = ""
    for language, text in _lines(page):
        if language not in SHELL_LANGUAGES:
            continue
        line = pending + text.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        try:
            words = shlex.split(line.removeprefix("$ "), comments=True)
        except ValueError:  # output shown after a prompt, not a command
            continue
        while words and ASSIGNMENT.match(words[0]):  # VAR=value before a command, or a line of .env
            words.pop(0)
        if words:
            words[0] = words[0].removeprefix(".venv/bin/")
        if words and words[0] in ("make", "aizuchi"):
            commands.append(words)
    return commands


def _make_targets() -> set[str]:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"(?m)^([A-Za-z0-9_.-]+)\s*:(?!=)", makefile))


def _aizuchi_error(arguments: list[str]) -> str | None:
    """Why the real command line refuses these arguments, or None when it takes them (nothing is run)."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            _parser().parse_args(arguments)
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            return stderr.getvalue().strip().splitlines()[-1]
    return None


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_relative_link_lands(page: Path) -> None:
    assert page.exists(), f"{_name(page)} is missing"
    assert _broken_links(page) == [], f"broken links in {_name(page)}"


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_command_shown_exists(page: Path) -> None:
    targets = _make_targets()
    wrong = []
    for words in _shell_commands(page):
        shown = " ".join(words)
        if words[0] == "make":
            wrong += [f"{shown}: no make target {t!r}" for t in words[1:] if "=" not in t and t not in targets]
        elif error := _aizuchi_error(words[1:]):
            wrong.append(f"{shown}: {error}")
    assert wrong == [], f"commands in {_name(page)} that do not exist"


def test_the_readme_is_a_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    shown = [" ".join(words) for words in _shell_commands(README)]
    assert "make run" in shown
    assert "make test" in shown


def test_the_readme_links_every_page_and_every_page_links_back() -> None:
    linked = {(README.parent / target.partition("#")[0]).resolve() for target in _links(README)}
    assert [_name(page) for page in PAGES[1:] if page.resolve() not in linked] == []
    for page in PAGES[1:]:
        back = {(page.parent / target.partition("#")[0]).resolve() for target in _links(page)}
        assert README.resolve() in back, f"{_name(page)} does not link back to the README"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A heading, with `code`\n\n[ok](#a-heading-with-code) [gone](missing.md) [bad](#nowhere)\n"
        "`[not a link](missing.md)`\n\n```sh\nmake run\nmake no-such-target\n"
        ".venv/bin/aizuchi personas check\nAIZUCHI_X=1 aizuchi no-such-command\naizuchi discord check\n```\n",
        encoding="utf-8",
    )
    assert _broken_links(page) == [
        "missing.md: no such file",
        "#nowhere: page.md has no heading with the anchor #nowhere",
    ]
    commands = [" ".join(words) for words in _shell_commands(page)]
    assert commands == [
        "make run",
        "make no-such-target",
        "aizuchi personas check",
        "aizuchi no-such-command",
        "aizuchi discord check",
    ]
    assert "no-such-target" not in _make_targets()
    assert _aizuchi_error(["personas", "check"]) is None
    assert _aizuchi_error(["discord", "check"]) is None
    assert "invalid choice" in (_aizuchi_error(["no-such-command"]) or "")
