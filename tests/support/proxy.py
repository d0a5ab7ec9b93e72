"""A TCP proxy on a localhost port in front of a server, that a test can cut (an outage as a browser sees it) or
move to another server (a failover as a client sees it).

While cut, every connection through it is dropped and each new one is closed as soon as it is accepted, so a client
gets what it gets when the server cannot be reached (a failed fetch, a WebSocket that closes); the server itself,
and whoever talks to it directly, carry on. ``restore`` lets connections through again. ``silence`` makes one
connection go quiet instead: what either end sends is dropped, and neither is told (a link that died silently).
``hold`` cuts the link as a firewall dropping packets does: every connection, open or new, goes quiet (a new one is
accepted, then never answered), and what was sent meanwhile is delivered once ``restore`` lets it through (TCP sends
it again), to the ends that are still open.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

__all__ = ("TcpProxy", "tcp_proxy")

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []  # (client's, server's) ends
        self._silenced: set[asyncio.StreamWriter] = set()
        self.cut_off = False
        self._held: dict[asyncio.StreamWriter, list[bytes]] | None = None  # by the end it is for, while held

    @property
    def port(self) -> int:
        assert self._server is not None
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    def cut(self) -> None:
        """Drop every connection now, and every new one until ``restore``."""
        self.cut_off = True
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    def restore(self) -> None:
        self.cut_off = False
        held, self._held = self._held, None
        for writer, chunks in (held or {}).items():
            if not writer.is_closing():
                writer.write(b"".join(chunks))

    def hold(self) -> None:
        """Deliver nothing either way on any connection, open or new, until ``restore``."""
        self._held = {}

    def silence(self, server_side_port: int) -> bool:
        """Drop everything sent either way on the connection whose end towards the server has this local port (the
        client port the server sees), leaving both ends open and untold. False if no such connection is open."""
        for client, server in self._pairs:
            if server.get_extra_info("sockname")[1] == server_side_port:
                self._silenced.update((client, server))
                return True
        return False

    def move_to(self, target_host: str, target_port: int) -> None:
        """Send new connections to another server, dropping those open (a load balancer failing over)."""
        self._target = (target_host, target_port)
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut_off:
            writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.transport.abort()
            return
        self._writers.update((writer, upstream_writer))
        pair = (writer, upstream_writer)
        self._pairs.append(pair)
        pipes = [
            asyncio.create_task(self._pipe(reader, upstream_writer)),
            asyncio.create_task(self._pipe(upstream_reader, writer)),
        ]
        self._tasks.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._tasks.difference_update(pipes)
            self._pairs.remove(pair)
            self._silenced.difference_update(pair)
            for end in (writer, upstream_writer):
                self._writers.discard(end)
                end.transport.abort()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(_CHUNK):
                if writer in self._silenced:
                    continue  # lost on the way
                if self._held is not None:
                    self._held.setdefault(writer, []).append(data)
                    continue
                writer.write(data)
                await writer.drain()
        # One side is done: end the other too (the browser opens a new connection when it needs one).
        writer.transport.abort()


@contextlib.asynccontextmanager
async def tcp_proxy(target_host: str, target_port: int) -> AsyncIterator[TcpProxy]:
    proxy = TcpProxy(target_host, target_port)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()
