"""The arbiter's MCP endpoint (``/mcp``): any MCP client joins a channel's conversation through the same service
methods and rules as the HTTP API.

``tools`` is the tool table (what each tool takes, answers and calls), ``route`` the aiohttp side (who is calling,
which channel, which protocol). The 2025 protocol is answered here: ``transport`` (HTTP), ``methods`` (the JSON-RPC
methods), ``kept`` (session ids that prove themselves, and the subscriptions sessions keep in the database),
``streams`` (each session's notification stream) and ``watch`` (a channel's history changes). The 2026-07-28
protocol goes to the SDK: ``server`` builds its server from the table, ``bridge`` hands it the request. ``wake``
sends the reference design's agents a WebSocket frame for each new message.
"""
