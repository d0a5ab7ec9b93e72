"""A model key the API refuses, as a server owner meets it: ``aizuchi run`` with the key in ``.env`` and the API a
local server that refuses it as the real one does.

At start each distinct key is checked once (listing models: no tokens); a refused one ends the command with one
line naming the variable and the profile. With the check off, the first refused call stops the persona for good:
one ERROR line in the log, and the room says which persona cannot speak and which variable to fix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.support.eventually import eventually
from tests.support.llm_server import FakeLLMServer
from tests.support.process import Aizuchi, dotenv

if TYPE_CHECKING:
    from pathlib import Path

ROOM_LINE = r"aizuchi local room: open (http://127\.0\.0\.1:\d+)/room/lobby"
GOOD = {"anthropic": "sk-ant-the-right-one-0123456789", "openai": "sk-proj-the-right-one-0123456789"}
WRONG = {"anthropic": "sk-ant-revoked-9876543210abcd", "openai": "sk-proj-revoked-9876543210abcd"}
VARIABLE = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
SAYS = {
    "anthropic": "Anthropic API 401: invalid x-api-key",
    "openai": "OpenAI-compatible API 401: Incorrect API key provided: [the key]. You can find your API key at"
    " https://platform.openai.com/account/api-keys.",
}


def files_in(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def configure(workdir: Path, llm: FakeLLMServer, provider: str, key: str, **variables: object) -> None:
    url = llm.anthropic_url if provider == "anthropic" else llm.openai_url
    (workdir / "profiles.toml").write_text(f'[profiles.{provider}]\nbase_url = "{url}"\n')
    settings = {
        "ARBITER_DATABASE_URL": f"sqlite:///{workdir / 'aizuchi.db'}",
        "ARBITER_PORT": 0,
        "AIZUCHI_PROFILE": provider,
        VARIABLE[provider]: key,
        **variables,
    }
    (workdir / ".env").write_text(dotenv(settings))


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_refused_key_at_start_is_one_line_and_a_failing_status(tmp_path: Path, provider: str) -> None:
    async with FakeLLMServer(keys=[GOOD[provider]]) as llm:
        configure(tmp_path, llm, provider, WRONG[provider])
        async with Aizuchi.start(tmp_path, "run") as fleet:
            status = await fleet.ended()

    assert status == 1
    assert fleet.stderr.splitlines() == [
        f"aizuchi: the API refused the key in {VARIABLE[provider]} (profile '{provider}'): {SAYS[provider]}: put a"
        " valid key in .env (AIZUCHI_CHECK_KEYS=false starts without checking)"
    ]
    assert fleet.stdout == ""
    # Checked once for the three personas that share it, with no model call; nothing was started or made.
    assert len(llm.key_checks) == 1 and llm.requests == []
    assert files_in(tmp_path) == [".env", "profiles.toml"]
    assert WRONG[provider][-4:] not in fleet.stderr


async def test_a_good_key_is_checked_once_and_the_fleet_starts(tmp_path: Path) -> None:
    async with FakeLLMServer(keys=[GOOD["anthropic"]]) as llm:
        configure(tmp_path, llm, "anthropic", GOOD["anthropic"])
        async with Aizuchi.start(tmp_path, "run") as fleet:
            await fleet.wait_for(ROOM_LINE)
            assert await fleet.stop() == 0

    assert [check.path for check in llm.key_checks] == ["/v1/models"]
    assert not fleet.matching(r" (ERROR|WARNING) "), fleet.stderr


async def test_with_the_check_off_a_refused_key_silences_its_persona_and_the_room_says_why(tmp_path: Path) -> None:
    async with FakeLLMServer(keys=[GOOD["anthropic"]]) as llm:
        configure(tmp_path, llm, "anthropic", WRONG["anthropic"], AIZUCHI_CHECK_KEYS="false", AIZUCHI_PERSONAS="rin")
        async with Aizuchi.start(tmp_path, "run") as fleet, aiohttp.ClientSession() as session:
            base = (await fleet.wait_for(ROOM_LINE)).group(1)

            async def rin() -> dict[str, Any]:
                async with session.get(f"{base}/room/api/porch/state") as got:
                    return next(p for p in (await got.json())["personas"] if p["id"] == "rin")

            for text in ("Rin, how are you today?", "Rin, are you there?", "Anyone?"):
                async with session.post(f"{base}/room/api/porch/say", json={"name": "Ann", "text": text}) as said:
                    assert said.status == 200
                await eventually(lambda: _says_why(rin), what="the room learns why rin is quiet")
            assert await fleet.stop() == 0

    assert llm.key_checks == [] and len(llm.requests) == 1  # one refused call, then no more
    errors = fleet.matching(r" ERROR ")
    assert len(errors) == 1, fleet.stderr
    assert "persona=rin stops calling its model: the API refused the key in ANTHROPIC_API_KEY" in errors[0]
    assert "(profile 'anthropic')" in errors[0]
    assert WRONG["anthropic"][-4:] not in fleet.stderr + fleet.stdout


async def _says_why(persona: Any) -> bool:
    cannot = (await persona())["cannot_speak"]
    return cannot is not None and "ANTHROPIC_API_KEY" in cannot and cannot.endswith("start again")
