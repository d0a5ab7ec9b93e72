"""Import boundaries, read from the source: the pure core stays pure, and bots know the arbiter only by its contract.

- ``arbiter/core`` imports the standard library and ``arbiter.core`` only: no third-party package and
  no other part of the arbiter.
- ``bots/`` imports nothing from ``arbiter`` except ``arbiter.contract``.
- ``arbiter/`` never imports ``bots``.

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
