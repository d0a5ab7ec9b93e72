"""``aizuchi run`` as the user runs it: a process started from a directory of its own, with no tokens and no
keys, so it opens the local room with the scripted provider.

It prints where the room is; a person says something and the personas answer; SIGTERM stops it at once with
exit status 0; started again on the same database, the conversation is still there. Bad settings and a
missing persona directory end it with one clear line, not a traceback.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.support.eventually import eventually
from tests.support.process import Aizuchi, clean_environment

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

ROOM_LINE = re.compile(r"aizuchi local room: open (http://127\.0\.0\.1:\d+)/room/lobby")
ROOM = "porch"


def settings_of(workdir: Path, **extra: str) -> dict[str, str]:
    """What the test sets for ``aizuchi``: a database in ``workdir``, any free port, and ``extra``."""
    return {"ARBITER_DATABASE_URL": f"sqlite:///{workdir / 'aizuchi.db'}", "ARBITER_PORT": "0", **extra}


def environment(workdir: Path, **extra: str) -> dict[str, str]:
    """The user's environment without anything that would take the fleet to Discord or a paid model."""
    return clean_environment(**settings_of(workdir, **extra))


def run_to_end(workdir: Path, *args: str, python: tuple[str, ...] = (), **env: str) -> subprocess.CompletedProcess[str]:
    """``aizuchi args`` run to its end, with ``python``'s options for the interpreter."""
    return subprocess.run(
        [sys.executable, *python, "-m", "aizuchi", *args],
        cwd=workdir,
        env=environment(workdir, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class Fleet:
    def __init__(self, running: Aizuchi, base: str, session: aiohttp.ClientSession) -> None:
        self.running = running
        self.base = base
        self.session = session

    async def get(self, path: str) -> Any:
        async with self.session.get(self.base + path) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def say(self, text: str) -> None:
        async with self.session.post(f"{self.base}/room/api/{ROOM}/say", json={"name": "Ann", "text": text}) as r:
            assert r.status == 200, await r.text()

    async def history(self) -> list[dict[str, Any]]:
        return list((await self.get(f"/room/api/{ROOM}/snapshot"))["history"])

    async def stop(self) -> int:
        return await self.running.stop(within=10)


@contextlib.asynccontextmanager
async def fleet(workdir: Path) -> AsyncIterator[Fleet]:
    async with Aizuchi.start(workdir, "run", env=settings_of(workdir)) as running:
        base = (await running.wait_for(ROOM_LINE.pattern)).group(1)
        async with aiohttp.ClientSession() as session:
            yield Fleet(running, base, session)


async def wait_for_persona_message(room: Fleet) -> dict[str, Any]:
    async def persona_said() -> list[dict[str, Any]]:
        return [m for m in await room.history() if m["author_kind"] == "persona"]

    return (await eventually(persona_said, what="a persona's message in the room", every=0.2))[0]


async def test_make_run_without_tokens_opens_a_room_where_personas_answer(tmp_path: Path) -> None:
    async with fleet(tmp_path) as room:
        async with room.session.get(f"{room.base}/room/{ROOM}") as page:
            assert page.status == 200 and "<title>" in await page.text()
        await room.say("Hello everyone, how was your day?")
        answer = await wait_for_persona_message(room)
        assert answer["author_id"] in {"rin", "theo", "juno"}
        assert answer["tier"] in {"aizuchi", "remark", "long"}

        async def linked() -> list[dict[str, Any]]:
            """The history once every persona message in it has the id the room gave it (linked just after)."""
            history = await room.history()
            return history if all(m["platform_message_id"] for m in history if m["author_kind"] == "persona") else []

        before = await eventually(linked, what="the persona messages linked to the room's ids", every=0.1)
        assert await room.stop() == 0
        assert "Traceback" not in room.running.stderr

    async with fleet(tmp_path) as room:
        # The same database: the conversation is still there, message for message.
        assert (await room.history())[: len(before)] == before
        assert await room.stop() == 0


def test_a_missing_persona_directory_is_one_clear_line(tmp_path: Path) -> None:
    result = run_to_end(tmp_path, "run", AIZUCHI_PERSONAS_DIR=str(tmp_path / "nowhere"))
    assert result.returncode == 1
    assert result.stderr.strip() == f"aizuchi: {tmp_path / 'nowhere'}: no such persona directory"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ARBITER_PORT", "eighty"),
        ("AIZUCHI_MODE", "chatty"),
        ("ARBITER_PERSONA_TOKENS", "not json"),
        ("ARBITER_ADMIN_TOKEN", "short-secret"),
        ("AIZUCHI_ARBITER_URL", "http://127.0.0.1:8340,ws://127.0.0.1:8341"),
        ("AIZUCHI_DISCORD_READY_S", "soon"),
    ],
)
def test_invalid_settings_are_named_and_nothing_starts(tmp_path: Path, variable: str, value: str) -> None:
    result = run_to_end(tmp_path, "run", **{variable: value})
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"aizuchi: invalid settings: {variable}")
    assert value not in line  # the value may be a secret: it is never repeated
    assert not (tmp_path / "aizuchi.db").exists()


def test_the_shipped_personas_are_found_from_any_directory(tmp_path: Path) -> None:
    result = run_to_end(tmp_path, "personas", "check")
    assert result.returncode == 0, result.stderr
    assert re.search(r"\b6 persona\(s\) checked: ok", result.stdout)


def imported_by(workdir: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``aizuchi args`` run to its end, and the modules it imported (from ``python -X importtime``)."""
    result = run_to_end(workdir, *args, python=("-X", "importtime"), **env)
    found = re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", result.stderr, re.MULTILINE)
    assert found, result.stderr
    return result, set(found)


def test_a_setup_mistake_ends_the_command_before_the_arbiters_code_is_imported(tmp_path: Path) -> None:
    # Importing the arbiter (its storage, SQLAlchemy, Alembic) is most of a start's CPU: a mistake said before it
    # is said at once, and costs the tests that make one a fraction of a start.
    result, modules = imported_by(tmp_path, "run", ARBITER_PORT="eighty")
    assert result.returncode == 2
    assert "aizuchi.run" not in modules
    result, modules = imported_by(tmp_path, "run", AIZUCHI_PERSONAS_DIR=str(tmp_path / "nowhere"))
    assert result.returncode == 1
    assert "aizuchi.run" in modules
    assert not {"arbiter.server", "sqlalchemy", "alembic"} & modules
