"""The JavaScript MCP clients agents are written with, run by Node against a live arbiter on a real socket: the
official TypeScript SDK's client (token in the header, and in the URL), the AI SDK's client the reference design's
agents use (nothing but a URL), the MCP Inspector's command line as docs/mcp.md shows it, and Claude Code when it is
installed. A TypeScript client is also kept across a restart of an arbiter process.

The clients are the exact versions in tests/js/package.json (``make test`` installs them with ``npm ci``); the scripts
they run are beside it (tests/js/*.mjs). Without Node or those packages these tests skip with the reason, unless
AIZUCHI_REQUIRE_SERVICES=1 (CI), which turns the skip into a failure. Claude Code is not among them (a 400 MB native
binary): its test runs only where ``claude`` is on the PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest

from tests.support.arbiters import Api, arbiter_process, free_port
from tests.support.mcp_live import AGENTS, CHANNEL, live_arbiter
from tests.support.node import NODE_MODULES, node_with

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

REFERENCE_TOOLS = {"consume", "status", "history"}
MEMBER_TOOLS = {*REFERENCE_TOOLS, "claim", "speak", "release", "register"}

JS = Path(__file__).resolve().parents[2] / "js"
PACKAGES = ("@modelcontextprotocol/sdk", "@ai-sdk/mcp", "@modelcontextprotocol/inspector-cli")
# The Inspector's command line as `npx @modelcontextprotocol/inspector --cli` runs it on Node 20 (version 0.15.0,
# the last without an engines field; later ones need Node 22).
INSPECTOR = NODE_MODULES / "@modelcontextprotocol" / "inspector-cli" / "build" / "cli.js"

# What the arbiter answers a token it does not know, as each client passes it on.
UNKNOWN_TOKEN = '{"error":{"code":"unauthorized","message":"unknown token"}}'


@pytest.fixture
def node() -> str:
    """Node, with tests/js's packages installed."""
    return node_with(*PACKAGES)


@dataclass(frozen=True, slots=True)
class Ran:
    status: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        assert self.status == 0, f"exit {self.status}:\n{self.stderr}"
        return json.loads(self.stdout)


async def run(*command: str, within: float = 60, cwd: Path = JS, env: dict[str, str] | None = None) -> Ran:
    """A command to its end, without holding the event loop the arbiter it talks to runs on."""
    process = await asyncio.create_subprocess_exec(
        *command,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), within)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return Ran(process.returncode, stdout.decode(), stderr.decode())


@dataclass(frozen=True, slots=True)
class Served:
    url: str
    api: Api

    def header_url(self) -> str:
        return f"{self.url}/channels/{CHANNEL}/mcp"

    def key_url(self, token: str) -> str:
        return f"{self.url}/key/{token}/channels/{CHANNEL}/mcp"

    async def history(self) -> list[tuple[str, str]]:
        return [(message["author_id"], message["text"]) for message in await self.api.history(CHANNEL)]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    """An arbiter in this process on a real socket (the clients are other processes), with the channel made."""
    async with live_arbiter() as live:
        yield Served(live.url, live.api)


# --- the TypeScript SDK's client ---------------------------------------------------------------------------


def _check_sdk_turn(answer: Any) -> None:
    assert set(answer["tools"]) == MEMBER_TOOLS
    assert answer["status"]["resource"] == 100
    assert answer["consume"] == {
        "success": True,
        "resource": 95,
        "message": "Resource consumed.",
        "tier": "aizuchi",
        "seq": 1,
    }
    assert answer["history"]["history"] == [{"from": "aya", "message": "うん"}]


async def test_the_typescript_sdk_client_with_the_token_in_the_header(node: str, served: Served) -> None:
    answer = (await run(node, "sdk_client.mjs", served.header_url(), AGENTS["aya"])).json()
    _check_sdk_turn(answer)
    assert answer["transportErrors"] == []
    assert await served.history() == [("aya", "うん")]


async def test_the_typescript_sdk_client_with_the_token_in_the_url(node: str, served: Served) -> None:
    answer = (await run(node, "sdk_client.mjs", served.key_url(AGENTS["aya"]))).json()
    _check_sdk_turn(answer)
    assert await served.history() == [("aya", "うん")]


async def test_a_wrong_token_is_an_error_that_names_it_in_the_typescript_clients(node: str, served: Served) -> None:
    header = await run(node, "sdk_client.mjs", served.header_url(), "wrong-token-0123456789")
    in_url = await run(node, "sdk_client.mjs", served.key_url("wrong-token-0123456789"))
    ai_sdk = await run(node, "ai_sdk_client.mjs", served.key_url("wrong-token-0123456789"))
    for ran in (header, in_url):
        assert (ran.status, ran.stdout) == (1, "")
        assert ran.stderr.strip() == f"Error: Streamable HTTP error: Error POSTing to endpoint: {UNKNOWN_TOKEN}"
    assert (ai_sdk.status, ai_sdk.stdout) == (1, "")
    assert (
        ai_sdk.stderr.strip()
        == f"MCPClientError: MCP HTTP Transport Error: POSTing to endpoint (HTTP 401): {UNKNOWN_TOKEN}"
    )
    assert await served.history() == []


# --- the reference design's agents' client (the AI SDK) ---------------------------------------------------


async def test_the_reference_agents_ai_sdk_client_with_only_a_url(node: str, served: Served) -> None:
    answer = (await run(node, "ai_sdk_client.mjs", served.key_url(AGENTS["natsu"]))).json()
    assert set(answer["tools"]) == MEMBER_TOOLS
    assert answer["consume"]["success"] is True
    assert answer["consume"]["tier"] == "aizuchi"
    assert answer["history"]["history"] == [{"from": "natsu", "message": "へえ、いいね"}]
    assert await served.history() == [("natsu", "へえ、いいね")]


# --- the MCP Inspector's command line ----------------------------------------------------------------------


async def inspector(node: str, *arguments: str) -> Ran:
    return await run(node, str(INSPECTOR), "--cli", *arguments)


async def test_the_inspector_cli_lists_the_tools_with_the_token_in_the_url(node: str, served: Served) -> None:
    ran = await inspector(node, served.key_url(AGENTS["aya"]), "--transport", "http", "--method", "tools/list")
    assert {tool["name"] for tool in ran.json()["tools"]} == MEMBER_TOOLS


async def test_the_inspector_cli_calls_status_and_consume(node: str, served: Served) -> None:
    url = served.key_url(AGENTS["aya"])
    status = await inspector(node, url, "--transport", "http", "--method", "tools/call", "--tool-name", "status")
    assert status.json()["structuredContent"]["resource"] == 100
    # The command line turns --tool-arg amount=5 into the number 5 because the schema names its type (integer).
    consume = await inspector(
        node, url, "--transport", "http", "--method", "tools/call", "--tool-name", "consume",
        "--tool-arg", "amount=5", "--tool-arg", "message=うん",
    )  # fmt: skip
    assert consume.json()["structuredContent"]["success"] is True
    assert await served.history() == [("aya", "うん")]


async def test_the_inspector_cli_with_a_wrong_token(node: str, served: Served) -> None:
    ran = await inspector(
        node, served.key_url("wrong-token-0123456789"), "--transport", "http", "--method", "tools/list"
    )
    said = f"Failed to connect to MCP server: Streamable HTTP error: Error POSTing to endpoint: {UNKNOWN_TOKEN}"
    assert (ran.status, ran.stdout) == (1, "")
    assert [line for line in ran.stderr.splitlines() if line] == [said, said, "Failed with exit code: 1"]


async def test_the_inspector_cli_on_node_20_sends_no_header(node: str, served: Served) -> None:
    # Version 0.15.0 has no --header: it takes the option for arguments to a server it would start, and refuses.
    ran = await inspector(
        node, served.header_url(), "--transport", "http", "--header", f"Authorization: Bearer {AGENTS['aya']}",
        "--method", "tools/list",
    )  # fmt: skip
    assert ran.status == 1
    assert "Arguments cannot be passed to a URL-based MCP server." in ran.stderr


# --- Claude Code, when it is installed ---------------------------------------------------------------------


async def test_claude_code_adds_the_server_with_a_header_and_connects(served: Served, tmp_path: Path) -> None:
    claude = shutil.which("claude")
    if claude is None:
        pytest.skip("Claude Code is not installed (npm install -g @anthropic-ai/claude-code puts claude on the PATH)")
    project = tmp_path / "project"
    project.mkdir()
    # Its own home, so the test neither reads nor writes the developer's ~/.claude.json; no login is needed.
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }

    async def claude_code(*arguments: str) -> Ran:
        ran = await run(claude, "mcp", *arguments, cwd=project, env=env)
        assert ran.status == 0, ran.stderr
        return ran

    url = served.header_url()
    await claude_code(
        "add", "--transport", "http", "aizuchi", url, "--header", f"Authorization: Bearer {AGENTS['aya']}"
    )
    await claude_code("add", "--transport", "http", "wrong", url, "--header", "Authorization: Bearer wrong-token-0123")
    listed = (await claude_code("list")).stdout
    assert f"aizuchi: {url} (HTTP) - ✔ Connected" in listed
    assert f"wrong: {url} (HTTP) - ✘ Failed to connect" in listed
    assert "(HTTP 401). Check that the token is valid for this MCP endpoint" in listed
    got = (await claude_code("get", "aizuchi")).stdout
    assert "Status: ✔ Connected" in got


# --- across a restart ----------------------------------------------------------------------------------------


async def test_a_typescript_client_keeps_working_across_a_restart(tmp_path: Path, node: str) -> None:
    """What a long-running agent sees: one SDK client object, the arbiter stopped and started again on the same port
    and database, and the client's next call must work without the agent reconnecting by hand."""
    database = f"sqlite:///{tmp_path / 'arbiter.db'}"
    env = {"ARBITER_PORT": str(free_port()), "ARBITER_AGENT_TOKENS": json.dumps(AGENTS)}
    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(arbiter_process(database, tmp_path, env=env))
        http = await stack.enter_async_context(aiohttp.ClientSession())
        await Api(http, AGENTS, base=first.url).create_channel(CHANNEL)
        client = await asyncio.create_subprocess_exec(
            node, "restart_client.mjs", f"{first.url}/channels/{CHANNEL}/mcp", AGENTS["aya"],
            cwd=JS, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        stack.push_async_callback(_ended, client)
        assert client.stdin is not None and client.stdout is not None
        before = json.loads(await asyncio.wait_for(client.stdout.readline(), 60))
        assert before["first"]["resource"] == 100

        await asyncio.to_thread(first.stop)  # SIGTERM: it shuts down, and starts again on the same port
        again = await stack.enter_async_context(arbiter_process(database, tmp_path, name="again", env=env))
        assert again.url == first.url
        client.stdin.write(b"again\n")
        await client.stdin.drain()
        after = json.loads(await asyncio.wait_for(client.stdout.readline(), 60))
        assert "error" not in after, f"the same client, after the restart: {after}"
        assert after["second"]["resource"] == 100


async def _ended(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await process.wait()
