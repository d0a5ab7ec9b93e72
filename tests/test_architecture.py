"""docs/architecture.md, held to the tree: its module map lists exactly the modules there are, and the files and
functions its paths name exist.

The map is the lines of its "Module map" section that start with a backticked path: ``- `bots/planner.py`: ...``.
A folder's line (``- `bots/llm/`: ...``) stands for the folder and its ``__init__.py``. Every ``.py`` file under the
packages below is read on every run, so a new module without a line, or a line for a module that is gone, fails
here with its name. Alembic's version files are left out: one per schema change, each named for what it changes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("arbiter", "bots", "aizuchi", "bench")
SECTION = "## Module map"

ENTRY = re.compile(r"^- `([^`]+)`:?(.*)$")
# A path the page shows in backticks: words joined by slashes (not a URL path, not a command with spaces).
PATH = re.compile(r"`([\w.-]+(?:/[\w.-]+)+/?)`")
# A module and what the reader opens in it: `arbiter/core/rules.py` `claim()`, `bots/x.py` `Worker.on_frame()`.
NAMED = re.compile(r"`([\w/.-]+\.py)` `([\w.]+)(?:\(\))?`")


def _skipped(relative: Path) -> bool:
    return "versions" in relative.parts[:-1] and "migrations" in relative.parts


def modules_in_tree(root: Path = ROOT) -> set[str]:
    """Every module (``a/b.py``) and every folder of modules (``a/``) under the packages, as the map names them."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            relative = path.relative_to(root)
            if _skipped(relative):
                continue
            found.add(relative.parent.as_posix() + "/")
            if path.name != "__init__.py":
                found.add(relative.as_posix())
    return found


def _section(page: Path) -> list[str]:
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(SECTION) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def mapped(page: Path = PAGE) -> list[tuple[str, str]]:
    """The map's entries in order: (path, the job its line says)."""
    return [(m.group(1), m.group(2).strip()) for line in _section(page) if (m := ENTRY.match(line))]


def map_problems(page: Path = PAGE, root: Path = ROOT) -> list[str]:
    entries = mapped(page)
    listed = [path for path, _ in entries]
    tree = modules_in_tree(root)
    problems = [f"{path}: in the tree, but the module map has no line for it" for path in sorted(tree - set(listed))]
    problems += [f"{path}: in the module map, but not in the tree" for path in sorted(set(listed) - tree)]
    problems += [f"{path}: listed twice" for path in sorted({p for p in listed if listed.count(p) > 1})]
    problems += [f"{path}: its line says no job" for path, job in entries if not job]
    return problems


def _defined(source: str) -> set[str]:
    """Names a module defines: functions and classes, and ``Class.method`` for their methods."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names |= {item.name, f"{node.name}.{item.name}"}
    return names


def reference_problems(page: Path = PAGE, root: Path = ROOT) -> list[str]:
    """Paths the page shows that do not exist, and functions it names in a module that does not define them."""
    text = page.read_text(encoding="utf-8")
    missing = {path for path in PATH.findall(text) if not (root / path).exists()}
    undefined = []
    for module, name in sorted(set(NAMED.findall(text))):
        path = root / module
        if not path.exists():
            missing.add(module)
        elif name not in _defined(path.read_text(encoding="utf-8")):
            undefined.append(f"{module} defines no {name}")
    return [f"{path}: no such file or folder" for path in sorted(missing)] + undefined


def test_the_module_map_lists_exactly_the_modules_in_the_tree() -> None:
    assert len(mapped()) > 50, "no module map found: the section heading or the line format changed"
    assert map_problems() == [], "docs/architecture.md's module map is out of date with the tree"


def test_the_files_and_functions_the_page_names_exist() -> None:
    assert reference_problems() == [], "docs/architecture.md names what is not in the tree"


# --- the checks themselves: they must see what a stale page would show ----------------------------------------


def test_a_new_module_and_a_gone_one_are_both_reported(tmp_path: Path) -> None:
    (tmp_path / "bots" / "llm").mkdir(parents=True)
    (tmp_path / "bots" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "bots" / "planner.py").write_text("def plan_turn():\n    pass\n", encoding="utf-8")
    (tmp_path / "bots" / "llm" / "new.py").write_text("", encoding="utf-8")  # a folder with no __init__.py
    versions = tmp_path / "arbiter" / "storage" / "migrations" / "versions"
    versions.mkdir(parents=True)
    (versions / "0001_first.py").write_text("", encoding="utf-8")
    (versions.parent / "env.py").write_text("", encoding="utf-8")
    page = tmp_path / "architecture.md"
    page.write_text(
        "# Architecture\n\n- `bots/gone.py`: not a map line: before the section\n\n"
        "## Module map\n\n- `bots/`: the personas\n- `bots/planner.py`: plans\n- `bots/runtime.py`: gone since\n"
        "- `arbiter/storage/migrations/`: migrations\n- `arbiter/storage/migrations/env.py`: Alembic\n"
        "- `bots/planner.py`: again\n\n## Next\n\n- `bots/llm/new.py`: not a map line either\n",
        encoding="utf-8",
    )
    assert map_problems(page, tmp_path) == [
        "bots/llm/: in the tree, but the module map has no line for it",
        "bots/llm/new.py: in the tree, but the module map has no line for it",
        "bots/runtime.py: in the module map, but not in the tree",
        "bots/planner.py: listed twice",
    ]


def test_a_line_without_a_job_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "__init__.py").write_text("", encoding="utf-8")
    page = tmp_path / "architecture.md"
    page.write_text("## Module map\n\n- `bench/`\n", encoding="utf-8")
    assert map_problems(page, tmp_path) == ["bench/: its line says no job"]


def test_a_missing_file_and_an_undefined_function_are_reported(tmp_path: Path) -> None:
    (tmp_path / "bots").mkdir()
    (tmp_path / "bots" / "runtime.py").write_text(
        "class ChannelWorker:\n    def on_frame(self):\n        pass\n", encoding="utf-8"
    )
    page = tmp_path / "architecture.md"
    page.write_text(
        "1. `bots/runtime.py` `ChannelWorker.on_frame()`, then `bots/runtime.py` `ChannelWorker.on_event()`.\n"
        "2. `models.py` `ChannelSettings`: a module named without its folder.\n"
        "3. `bots/worker/` and `bots/planner.py`; `GET /v1/events` and `arbiter.contract` are not paths.\n",
        encoding="utf-8",
    )
    assert reference_problems(page, tmp_path) == [
        "bots/planner.py: no such file or folder",
        "bots/worker/: no such file or folder",
        "models.py: no such file or folder",
        "bots/runtime.py defines no ChannelWorker.on_event",
    ]
