"""Import boundaries, read from the source: the pure core stays pure, and bots know the arbiter only by its contract.

- ``arbiter/core`` imports the standard library and ``arbiter.core`` only: no third-party package and
  no other part of the arbiter.
- ``bots/`` imports nothing from ``arbiter`` except ``arbiter.contract``.
- ``arbiter/`` never imports ``bots``.
- ``bots/llm`` (the provider library) imports nothing else of ``bots`` but ``bots/language``, a leaf that imports
  nothing else of ``bots`` at all: the runtime uses the providers, never the other way round.
- No module imports another's private (``_``) names, and no two packages import each other (a package may use its
  parent's modules and its own subpackages).

Every ``.py`` file is read on every run, so new modules are checked as soon as they exist.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Import:
    module: str  # what the file imports, resolved to an absolute dotted name; "from a import b" gives "a.b"
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> Iterator[Import]:
    """Every import in ``source`` (including those only for type checking, and import_module("...") calls)."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = parts[: len(parts) - node.level + 1]  # level 1 is the package itself
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                yield Import(base if alias.name == "*" else f"{base}.{alias.name}", node.lineno)
        elif isinstance(node, ast.Call) and (target := _dynamic_import(node)) is not None:
            yield Import(target, node.lineno)


def _dynamic_import(call: ast.Call) -> str | None:
    """The module named by ``import_module("x")`` or ``__import__("x")``, if that is what ``call`` is."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in {"import_module", "__import__"} or not call.args:
        return None
    first = call.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def core_may_import(module: str) -> bool:
    return module.partition(".")[0] in sys.stdlib_module_names or _within(module, "arbiter.core")


def bots_may_import(module: str) -> bool:
    return not _within(module, "arbiter") or _within(module, "arbiter.contract")


def arbiter_may_import(module: str) -> bool:
    return not _within(module, "bots")


def language_may_import(module: str) -> bool:
    return bots_may_import(module) and (not _within(module, "bots") or _within(module, "bots.language"))


def llm_may_import(module: str) -> bool:
    return language_may_import(module) or _within(module, "bots.llm")


def _sources(folder: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / folder).rglob("*.py"))


def violations(folder: str, allowed: Callable[[str], bool], root: Path = ROOT) -> list[str]:
    found = []
    for path in _sources(folder, root):
        module = module_name(path, root)
        source = path.read_text(encoding="utf-8")
        for item in imports_of(source, module, is_package=path.name == "__init__.py"):
            if not allowed(item.module):
                found.append(f"{path.relative_to(root)}:{item.line} imports {item.module}")
    return found


def test_the_core_imports_only_the_standard_library_and_itself() -> None:
    assert _sources("arbiter/core"), "no core modules found: the walk is looking in the wrong place"
    assert violations("arbiter/core", core_may_import) == []


def test_bots_import_only_the_contract_from_the_arbiter() -> None:
    # bots/ may be missing or nearly empty early on; the rule applies to whatever is there.
    assert violations("bots", bots_may_import) == []


def test_the_arbiter_never_imports_bots() -> None:
    assert _sources("arbiter")
    assert violations("arbiter", arbiter_may_import) == []


def test_the_provider_library_never_imports_the_runtime() -> None:
    assert _sources("bots/llm") and _sources("bots/language")
    assert violations("bots/llm", llm_may_import) == []
    assert violations("bots/language", language_may_import) == []


OURS = ("arbiter", "bots", "aizuchi", "bench")


def _modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(path, root): path for top in OURS for path in _sources(top, root)}


def private_imports(root: Path = ROOT) -> list[str]:
    """Imports of a ``_name`` (or from a ``_module``) of ours, from outside the module that defines it."""
    found = []
    for module, path in _modules(root).items():
        for item in imports_of(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"):
            parts = item.module.split(".")
            if parts[0] in OURS and any(part.startswith("_") and not part.startswith("__") for part in parts):
                found.append(f"{path.relative_to(root)}:{item.line} imports {item.module}")
    return found


def package_cycles(root: Path = ROOT) -> list[list[str]]:
    """Packages that import each other, directly or round a loop. A module belongs to its package; importing the
    package's own subpackages does not count (a package is made of them), importing a parent's modules does."""
    modules = _modules(root)
    packages = {module for module, path in modules.items() if path.name == "__init__.py"}

    def package_of(module: str) -> str:
        return module if module in packages else module.rpartition(".")[0]

    def defined_in(name: str) -> str | None:
        parts = name.split(".")
        return next((".".join(parts[:i]) for i in range(len(parts), 0, -1) if ".".join(parts[:i]) in modules), None)

    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        for item in imports_of(path.read_text(encoding="utf-8"), module, is_package=path.name == "__init__.py"):
            target = defined_in(item.module)
            if target is None:
                continue
            a, b = package_of(module), package_of(target)
            if a != b and not b.startswith(a + "."):
                edges.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(edges.get(here, ()))
        return False

    pairs = {tuple(sorted((a, b))) for a in edges for b in edges[a] if reaches(b, a)}
    return [list(pair) for pair in sorted(pairs)]


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports() == []


def test_no_two_packages_import_each_other() -> None:
    assert package_cycles() == []


# --- the checker itself: it must see the imports a violation would use ------------------------------------


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("import json, os.path", "arbiter.core.x", ["json", "os.path"]),
        ("from collections.abc import Mapping", "arbiter.core.x", ["collections.abc.Mapping"]),
        ("from . import ledger", "arbiter.core.rules", ["arbiter.core.ledger"]),
        ("from .models import Tier", "arbiter.core.rules", ["arbiter.core.models.Tier"]),
        ("from ..storage import tables", "arbiter.core.rules", ["arbiter.storage.tables"]),
        ("from arbiter import contract as wire", "bots.x", ["arbiter.contract"]),
        ("from arbiter.core import *", "bots.x", ["arbiter.core"]),
        ("if TYPE_CHECKING:\n    from arbiter.service import S", "bots.x", ["arbiter.service.S"]),
        ("def f():\n    import aiohttp", "arbiter.core.x", ["aiohttp"]),
        ("importlib.import_module('bots.runtime')", "arbiter.x", ["bots.runtime"]),
    ],
)
def test_imports_are_resolved_to_absolute_names(source: str, module: str, expected: list[str]) -> None:
    assert [item.module for item in imports_of(source, module)] == expected


def test_relative_imports_in_a_package_init_resolve_from_the_package() -> None:
    assert [i.module for i in imports_of("from .rules import level", "arbiter.core", is_package=True)] == [
        "arbiter.core.rules.level"
    ]


@pytest.mark.parametrize(
    ("rule", "module", "allowed"),
    [
        (core_may_import, "__future__.annotations", True),
        (core_may_import, "dataclasses.replace", True),
        (core_may_import, "arbiter.core.models.Tier", True),
        (core_may_import, "pydantic", False),
        (core_may_import, "sqlalchemy.orm", False),
        (core_may_import, "arbiter.contract", False),
        (core_may_import, "arbiter.corex", False),
        (bots_may_import, "arbiter.contract.Tier", True),
        (bots_may_import, "aiohttp", True),
        (bots_may_import, "arbiter", False),
        (bots_may_import, "arbiter.core.text", False),
        (bots_may_import, "arbiter.contractor", False),
        (arbiter_may_import, "bots.runtime", False),
        (arbiter_may_import, "bots", False),
        (arbiter_may_import, "botsy", True),
    ],
)
def test_rules_tell_allowed_imports_from_forbidden_ones(
    rule: Callable[[str], bool], module: str, allowed: bool
) -> None:
    assert rule(module) is allowed


def test_a_forbidden_import_in_a_new_file_is_reported(tmp_path: Path) -> None:
    assert violations("bots", bots_may_import, tmp_path) == []  # no bots/ at all is fine
    (tmp_path / "bots" / "llm").mkdir(parents=True)
    (tmp_path / "bots" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "bots" / "llm" / "new.py").write_text(
        "from arbiter import contract\nfrom ...arbiter.core.rules import level\n", encoding="utf-8"
    )
    assert violations("bots", bots_may_import, tmp_path) == ["bots/llm/new.py:2 imports arbiter.core.rules.level"]


def test_the_provider_library_importing_the_runtime_is_reported(tmp_path: Path) -> None:
    (tmp_path / "bots" / "llm").mkdir(parents=True)
    (tmp_path / "bots" / "llm" / "new.py").write_text(
        "from bots.language.kinds import Kind\nfrom bots.llm.base import Usage\nfrom ..persona import Persona\n",
        encoding="utf-8",
    )
    assert violations("bots/llm", llm_may_import, tmp_path) == ["bots/llm/new.py:3 imports bots.persona.Persona"]


def test_a_private_import_and_a_package_cycle_are_reported(tmp_path: Path) -> None:
    for package in ("arbiter", "arbiter/api", "arbiter/mcp"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "arbiter" / "api" / "app.py").write_text("from arbiter.mcp.route import serve\n", encoding="utf-8")
    (tmp_path / "arbiter" / "mcp" / "route.py").write_text(
        "from arbiter.api.app import _check\nfrom arbiter import service\n", encoding="utf-8"
    )
    (tmp_path / "arbiter" / "service.py").write_text("from arbiter.api import app\n", encoding="utf-8")
    assert private_imports(tmp_path) == ["arbiter/mcp/route.py:1 imports arbiter.api.app._check"]
    assert package_cycles(tmp_path) == [["arbiter.api", "arbiter.mcp"]]
