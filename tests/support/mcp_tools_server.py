"""An MCP server over stdio whose tools misbehave, for the host's tests: run as ``python -m`` or by path.

``slow_lookup(query)`` sleeps for the seconds given as the first command-line argument (default 60) before it
answers; ``broken_lookup(query)`` fails as a tool means to (a ``ToolError``); ``crashing_lookup(query)`` crashes (the
SDK tells the client only that it failed); ``echo(query)`` answers at once with the query.
"""

from __future__ import annotations

import asyncio
import sys

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError


def main() -> None:
    delay = float(sys.argv[1]) if len(sys.argv) > 1 else 60.0
    server = MCPServer("misbehaving", log_level="CRITICAL")  # a crash's traceback is not this test's business

    @server.tool()
    async def slow_lookup(query: str) -> str:
        """Look something up (slowly)."""
        await asyncio.sleep(delay)
        return f"slowly found: {query}"

    @server.tool()
    def broken_lookup(query: str) -> str:
        """Look something up (it always fails)."""
        raise ToolError(f"the lookup service is down (asked {query!r})")

    @server.tool()
    def crashing_lookup(query: str) -> str:
        """Look something up (it always crashes)."""
        raise RuntimeError(f"a bug in the server (asked {query!r})")

    @server.tool()
    def echo(query: str) -> str:
        """Say the query back."""
        return f"echo: {query}"

    server.run("stdio")


if __name__ == "__main__":
    main()
