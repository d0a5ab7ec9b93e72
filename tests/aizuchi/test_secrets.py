"""No secret in any log or error: a settings mistake about tokens is one line naming the personas and the variable,
never a token; and a request too large or malformed to parse is logged without its content, which may hold one.

Run as the owner runs it: ``aizuchi`` processes in a directory of their own, their stderr searched for the tokens.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import TYPE_CHECKING

import aiohttp
import pytest

from tests.conftest import ADMIN_TOKEN, PERSONA_TOKENS
from tests.support.arbiters import arbiter_process
from tests.support.eventually import eventually
from tests.support.process import clean_environment

if TYPE_CHECKING:
    from pathlib import Path

SECRET = "s3cret-token+with/odd=chars-0123456789"
OTHER = "another-secret-token-0123456789"


def aizuchi(workdir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aizuchi", *args],
        cwd=workdir,
        env=clean_environment(ARBITER_DATABASE_URL=f"sqlite:///{workdir / 'aizuchi.db'}", ARBITER_PORT="0", **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("command", "env", "says"),
    [
        pytest.param(
            "arbiter",
            {"ARBITER_PERSONA_TOKENS": json.dumps({"hana": SECRET, "kai": OTHER, "mio": SECRET})},
            "ARBITER_PERSONA_TOKENS: personas 'hana' and 'mio' have the same token; give each persona its own",
            id="two-personas-one-token",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_ADMIN_TOKEN": SECRET, "ARBITER_PERSONA_TOKENS": json.dumps({"hana": OTHER, "kai": SECRET})},
            "ARBITER_PERSONA_TOKENS: the token of 'kai' is the admin token (ARBITER_ADMIN_TOKEN); give each its own",
            id="a-persona-with-the-admin-token",
        ),
        pytest.param(
            "arbiter",
            # Written the wrong way round (token -> persona): the key is the token, and must not be shown.
            {"ARBITER_PERSONA_TOKENS": json.dumps({SECRET: "hana"})},
            f"ARBITER_PERSONA_TOKENS: the persona id of {len(SECRET)} characters (not shown: it may be a token; the"
            " mapping is persona id -> token) is not a valid persona id: use 1-64 letters, digits, '_', '.' or '-'",
            id="mapping-the-wrong-way-round",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_PERSONA_TOKENS": json.dumps({OTHER: "hana"})},
            f"ARBITER_PERSONA_TOKENS: the token of the persona id of {len(OTHER)} characters (not shown: it may be a"
            " token; the mapping is persona id -> token) must be at least 16 characters",
            id="mapping-the-wrong-way-round-with-an-id-like-token",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_PERSONA_TOKENS": json.dumps({"hana": SECRET[:10]})},
            "ARBITER_PERSONA_TOKENS: the token of 'hana' must be at least 16 characters",
            id="a-short-token",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_PERSONA_TOKENS": json.dumps({"hana": OTHER}), "ARBITER_AGENT_TOKENS": json.dumps({"aya": OTHER})},
            "ARBITER_AGENT_TOKENS: the token of agent 'aya' is the token of persona 'hana'; give each its own",
            id="an-agent-with-a-personas-token",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_ADMIN_TOKEN": SECRET, "ARBITER_AGENT_TOKENS": json.dumps({"aya": SECRET})},
            "ARBITER_AGENT_TOKENS: the token of agent 'aya' is the admin token (ARBITER_ADMIN_TOKEN); "
            "give each its own",
            id="an-agent-with-the-admin-token",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_AGENT_TOKENS": json.dumps({"aya": SECRET, "natsu": SECRET})},
            "ARBITER_AGENT_TOKENS: agents 'aya' and 'natsu' have the same token; give each agent its own",
            id="two-agents-one-token",
        ),
        pytest.param(
            "arbiter",
            {
                "ARBITER_PERSONA_TOKENS": json.dumps({"hana": OTHER}),
                "ARBITER_AGENT_TOKENS": json.dumps({"hana": SECRET}),
            },
            "ARBITER_AGENT_TOKENS: agent 'hana' has the id of a persona (ARBITER_PERSONA_TOKENS)",
            id="an-agent-with-a-personas-id",
        ),
        pytest.param(
            "arbiter",
            {"ARBITER_AGENT_TOKENS": json.dumps({"aya": SECRET[:10]})},
            "ARBITER_AGENT_TOKENS: the token of agent 'aya' must be at least 16 characters",
            id="an-agent-with-a-short-token",
        ),
        pytest.param(
            "personas",
            {"AIZUCHI_PERSONA_TOKENS": json.dumps({"rin": SECRET, "theo": SECRET})},
            "AIZUCHI_PERSONA_TOKENS: personas 'rin' and 'theo' have the same token; give each its own",
            id="the-bots-two-personas-one-token",
        ),
    ],
)
def test_a_token_mistake_is_one_line_naming_the_personas_never_the_token(
    tmp_path: Path, command: str, env: dict[str, str], says: str
) -> None:
    args = ["personas", "check"] if command == "personas" else [command]
    result = aizuchi(tmp_path, *args, **env)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [f"aizuchi: invalid settings: {says}"]
    for token in (SECRET, OTHER, SECRET[:10]):
        assert token not in result.stdout + result.stderr
    assert not (tmp_path / "aizuchi.db").exists()


async def send_raw(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_a_request_too_large_to_parse_is_logged_without_its_headers(tmp_path: Path) -> None:
    token = PERSONA_TOKENS["hana"]
    async with arbiter_process(f"sqlite:///{tmp_path / 'arbiter.db'}", tmp_path) as arbiter:
        # A header longer than aiohttp reads (8190 bytes), starting with a real token; and a header it cannot
        # parse (a control character in its value), holding the admin token.
        answers = [
            await send_raw(
                arbiter.url,
                f"GET /v1/channels HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}".encode()
                + b"x" * 9000
                + b"\r\n\r\n",
            ),
            await send_raw(
                arbiter.url,
                b"GET /v1/channels HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                + ADMIN_TOKEN.encode()
                + b"\x01\r\n\r\n",
            ),
        ]
        assert all(answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0] for answer in answers)
        # The log line is written as the answer goes out: wait for both before stopping.
        await eventually(
            lambda: arbiter.stderr.read_text(errors="replace").count("bad HTTP request from") >= 2,
            what="both bad requests in the arbiter's log",
            every=0.05,
        )
        arbiter.stop()
        log = arbiter.stderr.read_text(errors="replace")
    for secret in (token, ADMIN_TOKEN):
        assert secret not in log, log
    assert "Traceback" not in log, log
    assert "bad HTTP request from 127.0.0.1: a request line or header longer than 8190 bytes" in log, log
    assert "bad HTTP request from 127.0.0.1: a malformed request" in log, log


@pytest.mark.parametrize("kind", ["arbiter", "bots"])
def test_a_settings_error_printed_whole_shows_no_value(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """Beside the one line ``aizuchi`` prints, a settings error can be printed whole: in a traceback, by a tool
    that reads the settings (alembic, for a migration). pydantic shows each input there, unless told not to."""
    from pydantic import ValidationError

    from arbiter.settings import ArbiterSettings
    from bots.settings import BotsSettings

    monkeypatch.setenv("ARBITER_PERSONA_TOKENS", json.dumps({"hana": [SECRET]}))
    monkeypatch.setenv("ARBITER_ADMIN_TOKEN", SECRET[:12])
    settings = ArbiterSettings if kind == "arbiter" else BotsSettings
    with pytest.raises(ValidationError) as raised:
        settings(_env_file=None)
    assert "persona_tokens" in str(raised.value).lower()
    assert SECRET[:12] not in str(raised.value)
    assert SECRET[:12] not in repr(raised.value)


async def test_a_token_in_an_mcp_url_is_never_logged(tmp_path: Path) -> None:
    """An agent that can set only a URL carries its token in the path. Run at DEBUG, with calls that succeed, fail
    and are refused, the arbiter's log never shows it, nor a token sent in a header."""
    from urllib.parse import quote

    from mcp import Client

    from tests.conftest import PERSONA_TOKENS

    agents = {"aya": SECRET}
    env = {"ARBITER_AGENT_TOKENS": json.dumps(agents), "ARBITER_LOG_LEVEL": "DEBUG"}
    async with arbiter_process(f"sqlite:///{tmp_path / 'arbiter.db'}", tmp_path, env=env) as arbiter:
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        async with aiohttp.ClientSession() as http:
            async with http.put(f"{arbiter.url}/v1/channels/lobby", json={}, headers=admin) as created:
                assert created.status == 200
            base = f"{arbiter.url}/key/{quote(SECRET, safe='')}"
            async with Client(f"{base}/channels/lobby/mcp", mode="legacy") as client:
                spoken = await client.call_tool("consume", {"amount": 5, "message": "なるほど", "from": "aya"})
                assert spoken.structured_content is not None and spoken.structured_content["success"] is True
                refused = await client.call_tool("consume", {"amount": 5, "message": "hi", "from": "hana"})
                assert refused.is_error
                await client.call_tool("status", {"channel": "nowhere"})
            request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
            for path, status in (
                (f"{base}/channels/bad%20channel/mcp", 422),
                (f"{arbiter.url}/key/{quote(OTHER, safe='')}/channels/lobby/mcp", 401),
            ):
                async with http.post(path, json=request) as answer:
                    assert answer.status == status
            persona = {"Authorization": f"Bearer {PERSONA_TOKENS['hana']}", "Accept": "application/json"}
            async with http.post(f"{arbiter.url}/channels/lobby/mcp", json=request, headers=persona) as answer:
                assert answer.status in (200, 400, 406)
        await asyncio.sleep(0.5)  # a span for the log lines of the last calls: no secret may appear in them either
        arbiter.stop()
        log = arbiter.stderr.read_text(errors="replace")
    assert "MCP tools/call from aya" in log, log  # the log is on, at DEBUG, and heard the MCP side
    for secret in (SECRET, quote(SECRET, safe=""), OTHER, PERSONA_TOKENS["hana"], ADMIN_TOKEN):
        assert secret not in log, log


async def test_the_access_log_shows_an_mcp_url_without_its_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp's access log (on where a server is run with one, as the test server is) prints each request line."""
    import logging

    from aiohttp.test_utils import TestClient, TestServer

    from arbiter.server import open_arbiter
    from tests.conftest import make_settings

    settings = make_settings(f"sqlite:///{tmp_path / 'arbiter.db'}", agent_tokens={"aya": OTHER})
    with caplog.at_level(logging.INFO, logger="aiohttp.access"):
        async with open_arbiter(settings) as arbiter, TestClient(TestServer(arbiter.app)) as client:
            async with client.post(f"/key/{OTHER}/channels/lobby/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "x"}):
                pass
            async with client.post(f"/key/{SECRET[:20]}/mcp", json={}):
                pass
    logged = "\n".join(record.getMessage() for record in caplog.records if record.name == "aiohttp.access")
    assert "/key/***/channels/lobby/mcp" in logged, logged
    assert "/key/***/mcp" in logged, logged
    assert OTHER not in caplog.text and SECRET[:20] not in caplog.text
