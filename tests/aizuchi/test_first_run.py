"""The first run, as a server owner makes it: ``aizuchi run`` in a directory of its own, configured by a real
``.env`` there (and a ``profiles.toml`` where the owner points a profile somewhere), nothing in the environment.

Keys written only in ``.env`` reach the real SDK clients, which talk to the local wire servers; every setup
mistake the owner can make ends the command with one line naming what to change, and a non-zero status.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.eventually import eventually
from tests.support.llm_server import FakeLLMServer, decision_reply
from tests.support.process import Aizuchi, dotenv, run_to_end

EXAMPLE = Path(__file__).resolve().parents[2] / ".env.example"
ROOM_LINE = r"aizuchi local room: open (http://127\.0\.0\.1:\d+)/room/lobby"
ROOM = "porch"
KEYS = {"anthropic": "sk-ant-dotenv-only-0123456789", "openai": "sk-openai-dotenv-only-0123456789"}


def write_dotenv(workdir: Path, **variables: object) -> None:
    settings: dict[str, object] = {
        "ARBITER_DATABASE_URL": f"sqlite:///{workdir / 'aizuchi.db'}",
        "ARBITER_PORT": 0,
        **variables,
    }
    (workdir / ".env").write_text(dotenv(settings))


async def say(base: str, text: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base}/room/api/{ROOM}/say", json={"name": "Ann", "text": text}) as response,
    ):
        assert response.status == 200, await response.text()


async def persona_lines(base: str) -> list[dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/room/api/{ROOM}/snapshot") as response:
        history = (await response.json())["history"]
    return [m for m in history if m["author_kind"] == "persona"]


async def rin_answers(fleet: Aizuchi, base: str, llm: FakeLLMServer) -> dict[str, Any]:
    """Ann asks Rin how she is: Rin's one answer (or, if none comes, what the server refused and the log)."""
    await say(base, "Rin, how are you today?")
    try:
        await eventually(lambda: persona_lines(base), what="rin answers")
    except AssertionError as failed:
        raise AssertionError(f"{failed}; refused: {llm.refusals}; log:\n{fleet.stderr}") from None
    [line] = await persona_lines(base)
    return line


async def test_the_example_dotenv_copied_as_the_readme_says_opens_the_room(tmp_path: Path) -> None:
    # The README: copy .env.example to .env and fill in what you need. Here only the port and the database move.
    example = EXAMPLE.read_text()
    assert "ARBITER_PORT=8340\n" in example and "ARBITER_DATABASE_URL=sqlite:///aizuchi.db\n" in example
    dotenv_text = example.replace("ARBITER_PORT=8340\n", "ARBITER_PORT=0\n").replace(
        "sqlite:///aizuchi.db", f"sqlite:///{tmp_path / 'aizuchi.db'}"
    )
    (tmp_path / ".env").write_text(dotenv_text)

    async with Aizuchi.start(tmp_path, "run") as fleet:
        base = (await fleet.wait_for(ROOM_LINE)).group(1)
        async with aiohttp.ClientSession() as session, session.get(f"{base}/room/api/{ROOM}/snapshot") as response:
            notice = (await response.json())["notice"]
        status = await fleet.stop()

    assert status == 0
    assert "personas: Rin, Theo, Juno" in fleet.stdout
    assert not fleet.matching(r" (ERROR|WARNING) "), fleet.stderr
    # Without a key the personas are stand-ins, and both the room and the log say so, and how to change it.
    assert notice.startswith("Rin, Theo and Juno are offline stand-ins")
    assert "AIZUCHI_PROFILE=anthropic and ANTHROPIC_API_KEY" in notice
    assert "AIZUCHI_PROFILE=ollama with Ollama running: no key needed" in notice  # a model on this machine
    assert fleet.matching(re.escape(notice))
    assert not fleet.matching(r"is not a setting")  # every name in the example is one


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
async def test_a_key_only_in_dotenv_reaches_the_provider(tmp_path: Path, provider: str) -> None:
    reply = decision_reply("tools", {"action": "remark", "text": "Doing well, thanks for asking!"})
    async with FakeLLMServer(reply) as llm:
        url = llm.anthropic_url if provider == "anthropic" else llm.openai_url
        # The owner's profiles.toml changes only where the built-in profile's API is.
        (tmp_path / "profiles.toml").write_text(f'[profiles.{provider}]\nbase_url = "{url}"\n')
        write_dotenv(
            tmp_path,
            AIZUCHI_PERSONAS="rin",
            AIZUCHI_PROFILE=provider,
            **{f"{provider.upper()}_API_KEY": KEYS[provider]},
        )
        async with Aizuchi.start(tmp_path, "run") as fleet:
            base = (await fleet.wait_for(ROOM_LINE)).group(1)
            line = await rin_answers(fleet, base, llm)
            assert await fleet.stop() == 0

    assert (line["author_id"], line["text"]) == ("rin", "Doing well, thanks for asking!")
    [request] = llm.requests
    headers = {name.lower(): value for name, value in request.headers.items()}
    # Each SDK sends the key in its own header (the Anthropic SDK, in its current version, as a bearer token too).
    assert KEYS[provider] in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))
    assert KEYS[provider] not in fleet.stdout + fleet.stderr
    assert "Traceback" not in fleet.stderr


@pytest.mark.parametrize("profile", ["ollama", "local"])
async def test_a_model_on_this_machine_answers_a_person(tmp_path: Path, profile: str) -> None:
    # Ollama as Ollama answers (its model list, what it reads); any other OpenAI-compatible server by its URL. No
    # key, no profiles.toml: the built-in profile and its settings in .env.
    reply = decision_reply("json_schema", {"action": "remark", "text": "Doing well, thanks for asking!"})
    server = (
        FakeLLMServer(reply, ollama=["gemma4:latest"]) if profile == "ollama" else FakeLLMServer(reply, lenient=True)
    )
    async with server as llm:
        where = (
            {"AIZUCHI_OLLAMA_URL": llm.openai_url}
            if profile == "ollama"
            else {"AIZUCHI_LOCAL_URL": llm.openai_url, "AIZUCHI_LOCAL_MODEL": "qwen3-8b"}
        )
        write_dotenv(tmp_path, AIZUCHI_PERSONAS="rin", AIZUCHI_PROFILE=profile, **where)
        async with Aizuchi.start(tmp_path, "run") as fleet:
            base = (await fleet.wait_for(ROOM_LINE)).group(1)
            async with aiohttp.ClientSession() as session, session.get(f"{base}/room/api/{ROOM}/snapshot") as got:
                notice = (await got.json())["notice"]
            line = await rin_answers(fleet, base, llm)
            assert await fleet.stop() == 0

    assert (line["author_id"], line["text"]) == ("rin", "Doing well, thanks for asking!")
    assert notice is None  # no offline stand-in to explain
    assert fleet.matching(rf"persona rin \(Rin\) runs on profile {profile}")
    [request] = llm.requests
    assert request.body["model"] == ("gemma4" if profile == "ollama" else "qwen3-8b")
    assert request.body["response_format"]["type"] == "json_schema"
    assert llm.refusals == []
    assert llm.ignored == []  # nothing Ollama would have dropped
    assert "Traceback" not in fleet.stderr
    assert not fleet.matching(r"is not a setting")


def taken_port() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        pytest.param(
            {"AIZUCHI_PROFILE": "anthropic", "ANTHROPIC_API_KEY": ""},
            "aizuchi: persona rin: profile 'anthropic' needs an API key in ANTHROPIC_API_KEY, which is not set or"
            " empty: put ANTHROPIC_API_KEY=... in .env",
            id="empty-api-key",
        ),
        pytest.param(
            {"AIZUCHI_PROFILE": "openai"},
            "aizuchi: persona rin: profile 'openai' needs an API key in OPENAI_API_KEY, which is not set or empty:"
            " put OPENAI_API_KEY=... in .env",
            id="missing-api-key",
        ),
        pytest.param(
            {"AIZUCHI_PROFILE": "antropic"},
            "aizuchi: no provider profile named 'antropic' (AIZUCHI_PROFILE); known: anthropic, local, ollama, openai,"
            " scripted (add one to profiles.toml)",
            id="unknown-profile",
        ),
        pytest.param(
            {"ARBITER_DATABASE_URL": "sqlite:///{workdir}/.env/aizuchi.db"},
            "aizuchi: cannot open the database {workdir}/.env/aizuchi.db: {workdir}/.env is a file, not a directory"
            " (check ARBITER_DATABASE_URL)",
            id="unwritable-database",
        ),
        pytest.param(
            {"AIZUCHI_PROFILE": "local", "AIZUCHI_LOCAL_MODEL": "qwen3-8b"},
            "aizuchi: profile 'local' needs AIZUCHI_LOCAL_URL, which is not set: put AIZUCHI_LOCAL_URL=... in .env"
            " (where the server listens: llama.cpp's llama-server: http://127.0.0.1:8080/v1; vLLM:"
            " http://127.0.0.1:8000/v1; LM Studio: http://127.0.0.1:1234/v1)",
            id="local-server-not-set",
        ),
        pytest.param(
            {"AIZUCHI_PROFILE": "local", "AIZUCHI_LOCAL_URL": "127.0.0.1:8080/v1", "AIZUCHI_LOCAL_MODEL": "m"},
            "aizuchi: invalid settings: AIZUCHI_LOCAL_URL: must start with http:// or https://, e.g."
            " http://127.0.0.1:8080/v1",
            id="local-server-not-a-url",
        ),
        pytest.param(
            {"ARBITER_DATABASE_URL": "sqlite:///tmp/aizuchi.db"},
            "aizuchi: cannot open the database tmp/aizuchi.db: the folder tmp does not exist: create it, or write"
            " sqlite:////tmp/aizuchi.db for /tmp/aizuchi.db (check ARBITER_DATABASE_URL)",
            id="database-folder-missing-relative",
        ),
        pytest.param(
            {"ARBITER_DATABASE_URL": "sqlite:///{workdir}/data/aizuchi.db"},
            "aizuchi: cannot open the database {workdir}/data/aizuchi.db: the folder {workdir}/data does not exist:"
            " create it (check ARBITER_DATABASE_URL)",
            id="database-folder-missing",
        ),
        pytest.param(
            {"ARBITER_PORT": "eighty"},
            "aizuchi: invalid settings: ARBITER_PORT: Input should be a valid integer, unable to parse string as an"
            " integer",
            id="invalid-setting",
        ),
        pytest.param(
            {"AIZUCHI_PERSONAS": "rin,nobody"},
            "aizuchi: {personas}/nobody.toml: no such persona file",
            id="unknown-persona",
        ),
    ],
)
def test_a_setup_mistake_is_one_line_and_a_failing_status(tmp_path: Path, variables: dict[str, str], says: str) -> None:
    from bots.settings import SHIPPED_PERSONAS

    values = {name: value.format(workdir=tmp_path) for name, value in variables.items()}
    write_dotenv(tmp_path, **{"AIZUCHI_PERSONAS": "rin", **values})

    status, stdout, stderr = run_to_end(tmp_path, "run")

    assert status in (1, 2)
    assert stderr.splitlines() == [says.format(workdir=tmp_path, personas=SHIPPED_PERSONAS)]
    assert stdout == ""
    assert [path.name for path in tmp_path.iterdir()] == [".env"]  # nothing made: no folder, no database


async def test_the_default_database_is_made_in_the_working_directory(tmp_path: Path) -> None:
    # sqlite:///aizuchi.db: a file in the directory aizuchi runs in, which exists; only a missing folder is refused.
    (tmp_path / ".env").write_text(dotenv({"ARBITER_PORT": 0, "AIZUCHI_PERSONAS": "rin"}))

    async with Aizuchi.start(tmp_path, "run") as fleet:
        await fleet.wait_for(ROOM_LINE)
        assert await fleet.stop() == 0

    assert (tmp_path / "aizuchi.db").is_file()


def test_a_port_in_use_names_the_variable_that_moves_it(tmp_path: Path) -> None:
    with taken_port() as listener:
        port = listener.getsockname()[1]
        write_dotenv(tmp_path, AIZUCHI_PERSONAS="rin", ARBITER_PORT=port)
        status, _, stderr = run_to_end(tmp_path, "run")

    assert status == 1
    assert stderr.splitlines()[-1] == (
        f"aizuchi: port {port} on 127.0.0.1 is already in use (is another aizuchi running?): set ARBITER_PORT in"
        " .env to a free port, or pass --port"
    )
    assert "Traceback" not in stderr


def test_the_version_is_printed(tmp_path: Path) -> None:
    from importlib.metadata import version

    status, stdout, _ = run_to_end(tmp_path, "--version")

    assert (status, stdout.strip()) == (0, f"aizuchi {version('aizuchi')}")


def test_personas_check_reads_the_discord_tokens_from_dotenv(tmp_path: Path) -> None:
    write_dotenv(tmp_path, RIN_DISCORD_TOKEN="rin-token-from-dotenv-0123456789")

    status, stdout, _ = run_to_end(tmp_path, "personas", "check")

    assert status == 0
    [rin] = [line for line in stdout.splitlines() if line.startswith("rin ")]
    [theo] = [line for line in stdout.splitlines() if line.startswith("theo ")]
    assert rin.endswith("discord token RIN_DISCORD_TOKEN (set)")
    assert theo.endswith("discord token THEO_DISCORD_TOKEN (not set)")
    assert "rin-token-from-dotenv" not in stdout


def test_a_broken_profiles_file_is_one_line_naming_it(tmp_path: Path) -> None:
    # ProfileError is the profile file's own error (not the runtime's): the command line still says it in one line.
    (tmp_path / "profiles.toml").write_text('profile = "scripted"\n', encoding="utf-8")
    write_dotenv(tmp_path, AIZUCHI_PERSONAS="rin")
    status, _, stderr = run_to_end(tmp_path, "run")

    assert status == 1
    assert stderr.splitlines()[-1] == (
        "aizuchi: profiles.toml: unknown top-level key(s) ['profile']; profiles go in [profiles.<name>] tables"
    )
    assert "Traceback" not in stderr
