"""The arbiter's MCP endpoint (``/mcp``): any MCP client joins a channel's conversation through the same service
methods and rules as the HTTP API.

``tools`` is the tool table (what each tool takes, answers and calls), ``route`` the aiohttp side (who is calling,
which channel, the SDK loaded on first use), ``bridge`` hands a request to the SDK's ASGI app, ``server`` builds the
SDK's server from the table, and ``watch`` tells subscribed clients when a channel's history changes.
"""
