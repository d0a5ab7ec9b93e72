"""Node.js and the JavaScript clients the tests drive (``tests/js/package.json``, installed by ``make test``): a test
that needs them skips with the reason where they are missing, and fails under ``AIZUCHI_REQUIRE_SERVICES=1`` (CI)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

__all__ = ("NODE_MODULES", "node_with")

NODE_MODULES = Path(__file__).resolve().parents[1] / "js" / "node_modules"


def _unavailable(reason: str) -> None:
    if os.environ.get("AIZUCHI_REQUIRE_SERVICES") == "1":
        pytest.fail(f"the JavaScript clients are required (AIZUCHI_REQUIRE_SERVICES=1) but {reason}")
    pytest.skip(f"no JavaScript clients: {reason}")


def node_with(*packages: str) -> str:
    """The path of ``node``, once each of ``packages`` is installed in tests/js/node_modules."""
    found = shutil.which("node")
    if found is None:
        _unavailable("node is not on the PATH (install Node.js 20 or newer)")
    missing = [package for package in packages if not (NODE_MODULES / package / "package.json").is_file()]
    if missing:
        _unavailable(
            f"{', '.join(missing)} not in tests/js/node_modules (make test installs them: npm ci --prefix tests/js)"
        )
    assert found is not None
    return found
