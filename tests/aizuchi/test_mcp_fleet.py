"""``aizuchi run`` with a persona that lists an MCP server: the shipped FAQ example, started by the fleet over stdio,
answers in the local room; and what is wrong with a persona's servers is said at start-up."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.aizuchi.test_commands import ROOM, ROOM_LINE, run_to_end, settings_of
from tests.support.eventually import eventually
from tests.support.process import Aizuchi

ROOT = Path(__file__).resolve().parents[2]


def guide_in(workdir: Path, **server: Any) -> Path:
    """The example persona in ``workdir/personas``, its FAQ server run by this Python, with ``server``'s changes."""
    personas = workdir / "personas"
    personas.mkdir()
    shutil.copytree(ROOT / "examples" / "faq", workdir / "faq")
    text = (ROOT / "examples" / "faq" / "guide.toml").read_text(encoding="utf-8")
    text = text.replace('command = "python"', f"command = {sys.executable!r}".replace("'", '"'))
    text = text.replace("examples/faq/", f"{workdir}/faq/")
    for key, value in server.items():
        text += f"{key} = {value}\n"
    (personas / "guide.toml").write_text(text, encoding="utf-8")
    return personas


async def test_a_persona_answers_from_the_faq_server_in_the_local_room(tmp_path: Path) -> None:
    personas = guide_in(tmp_path)
    (tmp_path / "faq" / "faq.md").write_text(
        "## When is the weekly event?\n\nFridays at 19:00 UTC on the Stage, this month only.\n", encoding="utf-8"
    )
    settings = settings_of(tmp_path, AIZUCHI_PERSONAS_DIR=str(personas), AIZUCHI_PERSONAS="guide")
    async with Aizuchi.start(tmp_path, "run", env=settings) as running, aiohttp.ClientSession() as session:
        base = (await running.wait_for(ROOM_LINE.pattern)).group(1)
        say = {"name": "Ann", "text": "Guide, when is the weekly event?"}
        async with session.post(f"{base}/room/api/{ROOM}/say", json=say) as response:
            assert response.status == 200

        async def persona_said() -> list[str]:
            async with session.get(f"{base}/room/api/{ROOM}/snapshot") as response:
                history = (await response.json())["history"]
            return [m["text"] for m in history if m["author_kind"] == "persona"]

        said = await eventually(persona_said, what="the guide's answer in the room", every=0.2)
        assert said == ["Fridays at 19:00 UTC on the Stage, this month only."]
        assert await running.stop(within=10) == 0
        assert "Traceback" not in running.stderr


def test_a_profile_that_cannot_force_the_decision_is_a_setup_error_naming_the_persona(tmp_path: Path) -> None:
    personas = guide_in(tmp_path)
    (tmp_path / "profiles.toml").write_text(
        '[profiles.local]\nprovider = "scripted"\nmodel = "x"\nstructured_output = "json_schema"\n', encoding="utf-8"
    )
    result = run_to_end(
        tmp_path, "run", AIZUCHI_PERSONAS_DIR=str(personas), AIZUCHI_PERSONAS="guide", AIZUCHI_PROFILE="local"
    )
    assert result.returncode != 0
    [line] = result.stderr.splitlines()
    assert line.startswith("aizuchi: persona guide lists MCP servers, but profile 'local'")
    assert 'structured_output = "tools"' in line
