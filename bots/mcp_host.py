"""The MCP host: a persona's MCP servers, connected once per process, and their allowed tools as the model sees them.

:func:`open_tools` connects to each server a persona file lists (a command run over stdio, or a Streamable HTTP
URL) with the ``mcp`` SDK's client, lists its tools and keeps those the file allows. A server that cannot be started
or reached, or that lacks a tool the file names, is one warning line; the persona runs with the tools it could get
(a server that is down must not keep a persona from talking). The sessions close when the block ends.

:meth:`ToolHost.call` never raises for what a server does: a tool that fails, hangs past its time or answers
something unusable becomes an error result the model reads, so a turn always ends while its claim holds.

The SDK takes a second and tens of MB to load: it is imported only when some persona lists a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bots.llm.base import ToolCall, ToolResult, ToolSpec

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping

    from mcp import Client

    from bots.persona import McpServer, Persona

__all__ = ("MAX_RESULT_CHARS", "OPEN_TIMEOUT_S", "ToolHost", "open_tools")

_log = logging.getLogger(__name__)

OPEN_TIMEOUT_S = 10.0  # starting a server and listing its tools; a server slower than this is left out
MAX_RESULT_CHARS = 4000  # what the model reads of one result: a tool's answer is context, not a document


@dataclass
class _Bound:
    """One allowed tool: the session it is called on and the longest a call may take."""

    client: Client
    server: str
    timeout_s: float


@dataclass
class ToolHost:
    """A persona's MCP tools: ``specs`` as offered to the model, each bound to its server's session."""

    specs: tuple[ToolSpec, ...] = ()
    _bound: dict[str, _Bound] = field(default_factory=dict)

    def timeout_for(self, name: str) -> float | None:
        bound = self._bound.get(name)
        return None if bound is None else bound.timeout_s

    async def call(self, call: ToolCall, time_left_s: float | None = None) -> ToolResult:
        """Run ``call``; within its server's ``timeout_s`` and ``time_left_s``. Whatever goes wrong is an error
        result, never an exception (but cancellation)."""
        bound = self._bound.get(call.name)
        if bound is None:
            return _error(call, f"there is no tool {call.name!r}; use one of: {', '.join(self._bound) or 'none'}")
        limit = bound.timeout_s if time_left_s is None else min(bound.timeout_s, time_left_s)
        if limit <= 0:
            return _error(call, "no time left to call the tool; decide now")
        try:
            async with asyncio.timeout(limit):
                result = await bound.client.call_tool(call.name, call.arguments)
        except TimeoutError:
            _log.warning("MCP tool %s on %s: no answer within %.1f s", call.name, bound.server, limit)
            return _error(call, f"the tool did not answer within {limit:.1f} s")
        except Exception as error:  # the SDK raises MCPError, validation and transport errors alike
            _log.warning("MCP tool %s on %s failed: %s", call.name, bound.server, _one_line(error))
            return _error(call, f"the tool failed: {_one_line(error)}")
        text = _result_text(result)
        return ToolResult(call.id, call.name, text[:MAX_RESULT_CHARS], is_error=bool(result.is_error))


def _error(call: ToolCall, message: str) -> ToolResult:
    return ToolResult(call.id, call.name, message, is_error=True)


def _one_line(error: BaseException) -> str:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return _one_line(error.exceptions[0])
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:300]


def _result_text(result: Any) -> str:
    """The text blocks of a tool result; its structured content as JSON when it has no text."""
    texts = [block.text for block in result.content or () if getattr(block, "type", None) == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "(the tool returned nothing)"


def _spec(tool: Any) -> ToolSpec:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    parameters = {"type": "object", "properties": {}, **schema}
    description = " ".join((tool.description or tool.title or tool.name).split())[:1000]
    return ToolSpec(name=tool.name, description=description, parameters=parameters)


def _client(server: McpServer, env: Mapping[str, str]) -> Client:
    # Here, not at the top: the SDK's import cost is paid only by a persona that has servers.
    from mcp import Client, StdioServerParameters  # noqa: PLC0415

    if server.url is not None:
        return Client(server.url)
    assert server.command is not None  # the persona file holds one or the other
    passed = {name: env[name] for name in server.env if name in env}
    missing = [name for name in server.env if name not in env]
    if missing:
        _log.warning("MCP server %s: %s not set; started without it", server.name, ", ".join(missing))
    return Client(StdioServerParameters(command=_command(server.command), args=list(server.args), env=passed or None))


def _command(command: str) -> str:
    """``python`` (or ``python3``) is the fleet's own interpreter: the one that has the ``mcp`` SDK a Python server
    needs, whatever ``python`` means on the PATH (on Debian, nothing)."""
    return sys.executable if command in ("python", "python3") else command


async def _connect(
    stack: contextlib.AsyncExitStack, persona: Persona, server: McpServer, env: Mapping[str, str]
) -> tuple[dict[str, _Bound], list[ToolSpec]]:
    """Connect to ``server`` (its session kept on ``stack``): its allowed tools, bound, and their specs."""
    client = _client(server, env)
    async with asyncio.timeout(OPEN_TIMEOUT_S):
        await stack.enter_async_context(client)
        listed = (await client.list_tools()).tools
    offered = {tool.name: tool for tool in listed}
    missing = [name for name in server.tools if name not in offered]
    if missing:
        _log.warning(
            "persona %s: MCP server %s has no tool %s (it has: %s)",
            persona.id,
            server.name,
            ", ".join(missing),
            ", ".join(sorted(offered)) or "none",
        )
    allowed = [name for name in server.tools if name in offered]
    bound = {name: _Bound(client, server.name, server.timeout_s) for name in allowed}
    return bound, [_spec(offered[name]) for name in allowed]


@contextlib.asynccontextmanager
async def open_tools(persona: Persona, env: Mapping[str, str] | None = None) -> AsyncIterator[ToolHost]:
    """The tools of ``persona``'s MCP servers, connected until the block ends (an empty host when it lists none).

    ``env``: where the variables the file names are read (the process environment by default)."""
    host = ToolHost()
    if not persona.mcp_servers:
        yield host
        return
    env = os.environ if env is None else env
    specs: list[ToolSpec] = []
    async with contextlib.AsyncExitStack() as stack:
        for server in persona.mcp_servers:
            where = server.url or " ".join([server.command or "", *server.args])
            # Each server's own stack: one that fails half-way is unwound alone, the others stay connected.
            inner = contextlib.AsyncExitStack()
            try:
                bound, found = await _connect(inner, persona, server, env)
            except Exception as error:  # whatever a server does wrong on the way up, it is left out, in one line
                await _close_quietly(inner)
                _log.warning(
                    "persona %s: MCP server %s (%s) could not be started: %s; it runs without that server's tools",
                    persona.id,
                    server.name,
                    where,
                    _one_line(error) if not isinstance(error, TimeoutError) else f"no answer in {OPEN_TIMEOUT_S:.0f} s",
                )
                continue
            stack.push_async_callback(_close_quietly, inner)
            host._bound.update(bound)
            specs.extend(found)
            _log.info("persona %s: MCP server %s gives %s", persona.id, server.name, ", ".join(bound) or "no tools")
        host.specs = tuple(specs)
        yield host


async def _close_quietly(stack: contextlib.AsyncExitStack) -> None:
    try:
        await stack.aclose()
    except Exception as error:  # a server that dies on the way out costs nothing but this line
        _log.info("an MCP session did not close cleanly: %s", _one_line(error))
