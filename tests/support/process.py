"""``aizuchi`` as a server owner runs it: a process started in a directory of its own, configured by a real
``.env`` file there and nothing else.

The user's own environment is cleared of every variable the fleet reads (so a token on the test machine cannot
leak in and nothing reaches a paid model); what the test means to set goes into ``.env``. Output is read as it
comes (so the process never blocks on a full pipe) and kept, for waiting on a line and for asserting on it.

    (workdir / ".env").write_text(dotenv({"ANTHROPIC_API_KEY": KEY, ...}))
    async with Aizuchi.start(workdir, "run") as fleet:
        url = await fleet.wait_for(r"arbiter listening on (\\S+);")
        ...
        assert await fleet.stop() == 0
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from pathlib import Path

__all__ = ("Aizuchi", "clean_environment", "dotenv", "run_to_end")

Stream = Literal["stdout", "stderr"]

# Variables the fleet reads, by prefix or suffix: none may come from the machine the tests run on.
_OURS_PREFIXES = ("ARBITER_", "AIZUCHI_")
_OURS_SUFFIXES = ("_DISCORD_TOKEN", "_API_KEY")


def clean_environment(**extra: str) -> dict[str, str]:
    """The test machine's environment without anything that configures the fleet, plus ``extra``."""
    keep = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_OURS_PREFIXES) and not key.endswith(_OURS_SUFFIXES)
    }
    return {**keep, "PYTHONUNBUFFERED": "1", **extra}


def dotenv(variables: Mapping[str, object]) -> str:
    """A .env file's text, as a person writes one (a JSON value stays unquoted, as in .env.example)."""
    return "".join(f"{name}={value}\n" for name, value in variables.items())


def run_to_end(workdir: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run ``aizuchi args`` to its end; (exit status, stdout, stderr). For commands that end by themselves."""
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "aizuchi", *args],
        cwd=workdir,
        env=clean_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return result.returncode, result.stdout, result.stderr


@dataclass
class Aizuchi:
    process: asyncio.subprocess.Process
    lines: dict[Stream, list[str]] = field(default_factory=lambda: {"stdout": [], "stderr": []})
    _readers: list[asyncio.Task[None]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    @contextlib.asynccontextmanager
    async def start(cls, workdir: Path, *args: str, env: Mapping[str, str] | None = None) -> AsyncIterator[Aizuchi]:
        """``python -m aizuchi args`` in ``workdir``, ``env`` added to its clean environment; killed at the end if
        still running."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "aizuchi",
            *args,
            cwd=workdir,
            env=clean_environment(**(env or {})),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        running = cls(process)
        running._readers = [
            asyncio.create_task(running._read("stdout")),
            asyncio.create_task(running._read("stderr")),
        ]
        try:
            yield running
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            await asyncio.gather(*running._readers, return_exceptions=True)

    async def _read(self, name: Stream) -> None:
        stream = self.process.stdout if name == "stdout" else self.process.stderr
        assert stream is not None
        while line := await stream.readline():
            self.lines[name].append(line.decode(errors="replace").rstrip("\n"))
            self._changed.set()
        self._changed.set()

    @property
    def stdout(self) -> str:
        return "\n".join(self.lines["stdout"])

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines["stderr"])

    def matching(self, pattern: str, stream: Stream = "stderr") -> list[str]:
        return [line for line in self.lines[stream] if re.search(pattern, line)]

    async def wait_for(self, pattern: str, stream: Stream = "stdout", *, within: float = 30.0) -> re.Match[str]:
        """The first line of ``stream`` matching ``pattern``; fails if the process ends or time runs out first."""
        regex = re.compile(pattern)
        try:
            async with asyncio.timeout(within):
                while True:
                    for line in self.lines[stream]:
                        if found := regex.search(line):
                            return found
                    if all(reader.done() for reader in self._readers):
                        raise AssertionError(
                            f"aizuchi ended (status {await self.process.wait()}) before printing {pattern!r}:\n"
                            f"{self.stderr}"
                        )
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"no line matching {pattern!r} within {within}s:\n{self.stderr}") from None

    async def ended(self, within: float = 30.0) -> int:
        """Its exit status, once it has ended by itself (and every line it wrote has been read)."""
        try:
            async with asyncio.timeout(within):
                status = await self.process.wait()
                await asyncio.gather(*self._readers)
        except TimeoutError:
            raise AssertionError(f"aizuchi still running after {within}s:\n{self.stderr}") from None
        return status

    async def stop(self, within: float = 15.0) -> int:
        """SIGTERM, as a supervisor stops it; its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return await self.ended(within)
