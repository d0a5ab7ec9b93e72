"""Arbiters for tests that need more than the ``client`` fixture: extra personas, several arbiters on one
database, an arbiter closed and opened again within one test, or a real ``aizuchi arbiter`` process."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp.test_utils import TestClient, TestServer

from arbiter.server import Arbiter, open_arbiter
from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS, make_settings
from tests.support.eventually import eventually, eventually_blocking

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator, Mapping
    from pathlib import Path

    import aiohttp

__all__ = (
    "ROOT",
    "Api",
    "ArbiterProcess",
    "Served",
    "arbiter_exit",
    "arbiter_process",
    "arbiter_process_blocking",
    "crowd",
    "free_port",
    "serve",
)

# Where the repository lives: the arbiter process must import this checkout, whatever the test's cwd.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LISTENING = re.compile(r"arbiter listening on (http://\S+)")


def crowd(count: int, prefix: str = "p") -> dict[str, str]:
    """``count`` persona ids with their tokens, for tests that need many personas at once."""
    return {f"{prefix}{index:03d}": f"{prefix}{index:03d}-token-0123456789abcdef" for index in range(count)}


class Api:
    """JSON calls to one arbiter over HTTP: in process through a test client, or to a process by its base URL.

    ``who`` names the caller: "admin" or a persona id, whose bearer token is sent.
    """

    def __init__(
        self, session: aiohttp.ClientSession | TestClient[Any, Any], tokens: Mapping[str, str], base: str = ""
    ) -> None:
        self._session = session
        self._base = base
        self._tokens = {"admin": ADMIN_TOKEN, **PERSONA_TOKENS, **tokens}

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._tokens[who]}"}

    async def request(self, method: str, path: str, who: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON body or None)."""
        async with self._session.request(method, self._base + path, json=body, headers=self.headers(who)) as resp:
            data = await resp.json() if resp.content_type == "application/json" else None
            return resp.status, data

    async def call(self, method: str, path: str, who: str = "admin", body: Any = None) -> Any:
        """A call that must succeed: its JSON body (None for 204)."""
        status, data = await self.request(method, path, who, body)
        assert status in (200, 204), f"{method} {path} as {who}: {status} {data}"
        return data

    async def create_channel(self, channel: str, **settings: Any) -> Any:
        return await self.call("PUT", f"/v1/channels/{channel}", body=settings)

    async def status(self, channel: str, who: str = "admin") -> Any:
        return await self.call("GET", f"/v1/channels/{channel}/status", who)

    async def settings(self, channel: str) -> Any:
        return await self.call("GET", f"/v1/channels/{channel}/settings")

    async def history(self, channel: str) -> list[Any]:
        """The whole history, page by page."""
        messages: list[Any] = []
        after = 0
        while True:
            page = await self.call("GET", f"/v1/channels/{channel}/history?after={after}&limit=200")
            messages += page["messages"]
            after = page["next_after"]
            if not page["has_more"]:
                return messages

    async def say(self, channel: str, author: str, text: str, **extra: Any) -> Any:
        """A human message, as the arbiter bot records it."""
        body = {"author_id": author, "author_name": author.title(), "text": text, **extra}
        return await self.call("POST", f"/v1/channels/{channel}/messages", body=body)

    async def consume(self, channel: str, who: str, tier: str, text: str) -> Any:
        return await self.call("POST", f"/v1/channels/{channel}/consume", who, {"tier": tier, "text": text})

    async def claim(self, channel: str, who: str, tier: str) -> Any:
        return await self.call("POST", f"/v1/channels/{channel}/claims", who, {"tier": tier})

    async def speak(self, channel: str, who: str, claim_id: str, text: str, tier: str | None = None) -> Any:
        body: dict[str, Any] = {"text": text} if tier is None else {"text": text, "tier": tier}
        return await self.call("POST", f"/v1/channels/{channel}/claims/{claim_id}/speak", who, body)

    async def release(self, channel: str, who: str, claim_id: str) -> Any:
        return await self.call("DELETE", f"/v1/channels/{channel}/claims/{claim_id}", who)

    async def usage(self, channel: str, who: str, prompt_tokens: int, completion_tokens: int) -> Any:
        body = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        return await self.call("POST", f"/v1/channels/{channel}/usage", who, body)


@dataclass(frozen=True, slots=True)
class Served:
    arbiter: Arbiter
    client: TestClient[Any, Any]
    api: Api


@contextlib.asynccontextmanager
async def serve(
    database_url: str | None, *, clock: Callable[[], float], extra_personas: Mapping[str, str] | None = None
) -> AsyncIterator[Served]:
    """An in-process arbiter and a test client on it; both closed on exit (the arbiter last). ``database_url`` None:
    on the in-memory twin of the storage."""
    extra = dict(extra_personas or {})
    settings = make_settings(database_url)
    async with (
        open_arbiter(settings, clock=clock, extra_personas=extra, in_memory=database_url is None) as arbiter,
        TestClient(TestServer(arbiter.app)) as client,
    ):
        yield Served(arbiter, client, Api(client, extra))


# --- a real arbiter process ------------------------------------------------------------------------------


# Ports for processes given one in advance: below the kernel's ephemeral range (32768-60999 by default), from which
# it hands out the ports of every socket bound to port 0 and every outgoing connection, so that none of those takes
# a port between choosing it and the process binding it (seen in a full run: "port 34155 ... is already in use").
# Each pytest-xdist worker has a block of its own.
_PORT_BLOCKS = range(20_000, 32_000, 500)
_next_ports = itertools.count()


def free_port() -> int:
    """A port nothing listens on now, for a process that must come back on the same one (a restart)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    block = _PORT_BLOCKS[int(worker) % len(_PORT_BLOCKS) if worker.isdigit() else 0]
    for _ in range(_PORT_BLOCKS.step):
        port = block + next(_next_ports) % _PORT_BLOCKS.step
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue  # taken by something else: the next one
            return port
    raise RuntimeError(f"no free port in {block}-{block + _PORT_BLOCKS.step - 1}")


@dataclass
class ArbiterProcess:
    """``aizuchi arbiter`` running as a child process; ``url`` is where it said it listens (once it has)."""

    process: subprocess.Popen[bytes]
    url: str
    stderr: Path

    def kill(self) -> None:
        """SIGKILL: no clean shutdown, as in a crash."""
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")[-4000:]


def _environment(database_url: str, personas: Mapping[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("ARBITER_")}
    env.update(
        ARBITER_DATABASE_URL=database_url,
        ARBITER_ADMIN_TOKEN=ADMIN_TOKEN,
        ARBITER_PERSONA_TOKENS=json.dumps({**PERSONA_TOKENS, **personas}),
        ARBITER_PORT="0",
        ARBITER_LOG_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
        # The CLI prints its URL without flushing; on a file stdout is block-buffered (reported separately).
        PYTHONUNBUFFERED="1",
    )
    return env


def _spawn(workdir: Path, name: str, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, Path]:
    stdout = workdir / f"{name}.stdout"
    stderr = workdir / f"{name}.stderr"
    # cwd is the test's own directory, so no .env lying around the checkout is read.
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "aizuchi", "arbiter"], cwd=workdir, env=env, stdout=out, stderr=err
        )
    return process, stdout, stderr


def _announced(stdout: Path) -> str | None:
    match = _LISTENING.search(stdout.read_text(errors="replace"))
    return match.group(1) if match else None


def _started(handle: ArbiterProcess, stdout: Path, name: str) -> str | None:
    """The URL the process announced, None while it has not yet; fails the test if it exited (the caller adds
    its log)."""
    url = _announced(stdout)
    if url is None and handle.process.poll() is not None:
        raise AssertionError(f"{name} exited with {handle.process.returncode}")
    return url


@contextlib.asynccontextmanager
async def arbiter_process(
    database_url: str,
    workdir: Path,
    *,
    name: str = "arbiter",
    personas: Mapping[str, str] | None = None,
    startup_s: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[ArbiterProcess]:
    """Start ``python -m aizuchi arbiter`` and wait for its URL; terminate it on exit, also when the test fails.
    ``env`` adds to (or overrides) its environment."""
    process, stdout, stderr = _spawn(workdir, name, {**_environment(database_url, personas or {}), **(env or {})})
    handle = ArbiterProcess(process, "", stderr)
    try:
        # Polled, not awaited: the announcement is a line in a file another process writes.
        try:
            handle.url = await eventually(
                lambda: _started(handle, stdout, name), within=startup_s, what=f"{name} to announce its URL", every=0.02
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{handle.log()}") from None
        yield handle
    finally:
        await asyncio.to_thread(handle.stop)


@contextlib.contextmanager
def arbiter_process_blocking(
    database_url: str, workdir: Path, *, name: str = "arbiter", log_level: str = "WARNING", startup_s: float = 30.0
) -> Iterator[ArbiterProcess]:
    """As :func:`arbiter_process`, for tests that are plain functions (schemathesis calls the API from those)."""
    env = {**_environment(database_url, {}), "ARBITER_LOG_LEVEL": log_level}
    process, stdout, stderr = _spawn(workdir, name, env)
    handle = ArbiterProcess(process, "", stderr)
    try:
        try:
            handle.url = eventually_blocking(
                lambda: _started(handle, stdout, name), within=startup_s, what=f"{name} to announce its URL"
            )
        except AssertionError as failure:
            raise AssertionError(f"{failure}\n{handle.log()}") from None
        yield handle
    finally:
        handle.stop()


async def arbiter_exit(
    database_url: str, workdir: Path, *, name: str = "arbiter", within: float = 30.0
) -> tuple[int, str]:
    """Start ``python -m aizuchi arbiter`` expecting it to give up: its exit code and what it wrote on stderr."""
    process, _stdout, stderr = _spawn(workdir, name, _environment(database_url, {}))
    handle = ArbiterProcess(process, "", stderr)
    try:
        returncode = await asyncio.wait_for(asyncio.to_thread(process.wait), within)
    finally:
        await asyncio.to_thread(handle.stop)
    return returncode, handle.log()
