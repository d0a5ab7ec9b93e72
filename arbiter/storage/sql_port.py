"""The SQL side of the storage port (``arbiter.storage.port``): the queries a step may make in the writer's
transaction (:class:`TxQueries`, mixed into ``BatchTx``), the reads outside it (:class:`DatabaseReads`) and the MCP
sessions' subscriptions (:class:`DatabaseSessions`), each a call of ``arbiter.storage.repository`` or
``arbiter.storage.subscriptions`` on an open connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.storage import repository as repo
from arbiter.storage import subscriptions as rows

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from arbiter.core.models import ChannelState, Memory, Message, PersonaInfo
    from arbiter.storage.database import Database
    from arbiter.storage.port import ChannelSummary, Usage

__all__ = ("DatabaseReads", "DatabaseSessions", "TxQueries")


class TxQueries:
    """The port's queries over the transaction's connection. Each goes through ``conn``, as a step's own query did
    before there was a port: in a locked transaction that marks the step as having written rows (undone by a
    rollback, not in memory). A write first asks for the row locks (the one-statement commit does not write it)."""

    @property
    def conn(self) -> Connection:
        raise NotImplementedError

    def now(self) -> float:
        raise NotImplementedError

    def require_lock(self) -> None:
        raise NotImplementedError

    def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        return repo.recent_history(self.conn, channel_id, limit)

    def said_by(self, channel_id: str, author_id: str, limit: int) -> list[Message]:
        return repo.said_by(self.conn, channel_id, author_id, limit)

    def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        return repo.load_memories(self.conn, channel_id, persona_id)

    def delete_memories(self, channel_id: str, persona_id: str | None = None) -> list[str]:
        self.require_lock()
        return repo.delete_memories(self.conn, channel_id, persona_id)

    def save_persona(self, info: PersonaInfo) -> None:
        self.require_lock()
        repo.upsert_persona(self.conn, info, self.now())


class DatabaseReads:
    """The port's reads, each a query on a reader connection of its own."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def channel(self, channel_id: str, now: float) -> ChannelState | None:
        return await self._database.read(repo.load_channel, channel_id, now)

    async def version(self, channel_id: str) -> int | None:
        return await self._database.read(repo.channel_version, channel_id)

    async def channel_ids(self) -> list[ChannelSummary]:
        return await self._database.read(repo.channel_ids)

    async def history(self, channel_id: str, after: int, limit: int) -> list[Message]:
        return await self._database.read(repo.history, channel_id, after, limit)

    async def recent_history(self, channel_id: str, limit: int) -> list[Message]:
        return await self._database.read(repo.recent_history, channel_id, limit)

    async def recent_platform_ids(self, channel_id: str, limit: int) -> list[str]:
        return await self._database.read(repo.recent_platform_ids, channel_id, limit)

    async def memories(self, channel_id: str, persona_id: str | None = None) -> list[Memory]:
        return await self._database.read(repo.load_memories, channel_id, persona_id)

    async def usage(self, channel_id: str, day: int) -> Usage:
        return await self._database.read(repo.usage, channel_id, day)

    async def persona_infos(self) -> list[PersonaInfo]:
        return await self._database.read(repo.persona_infos)


class DatabaseSessions:
    """The subscriptions in ``mcp_subscriptions``, each change in a transaction of its own."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def subscribe(self, session_id: str, channel_id: str, member: str, now: float, *, keep: int) -> list[str]:
        def run(conn: Connection) -> list[str]:
            rows.subscribe(conn, session_id, channel_id, member, now)
            return rows.evict_beyond(conn, member, keep)

        return await self._database.write(run)

    async def unsubscribe(self, session_id: str, channel_id: str) -> None:
        await self._database.write(rows.unsubscribe, session_id, channel_id)

    async def channels_of(self, session_id: str) -> list[str]:
        return await self._database.read(rows.channels_of, session_id)

    async def touch(self, session_id: str, now: float) -> None:
        await self._database.write(rows.touch, session_id, now)

    async def forget(self, session_id: str) -> None:
        await self._database.write(rows.forget, session_id)

    async def expire(self, before: float) -> int:
        return await self._database.write(rows.expire, before)
