"""MCP sessions' subscriptions to channel histories (``mcp_subscriptions``): the statements, each run in a
transaction of its own by ``arbiter.mcp.kept``. Not the conversation's state: nothing here goes through the batch
writer or the event hub."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from arbiter.storage.tables import McpSubscriptionRow

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ("channels_of", "evict_beyond", "expire", "forget", "subscribe", "touch", "unsubscribe")

_TABLE: Table = McpSubscriptionRow.__table__  # type: ignore[assignment]


def subscribe(conn: Connection, session_id: str, channel_id: str, member: str, now: float) -> None:
    insert = postgresql_insert if conn.dialect.name == "postgresql" else sqlite_insert
    statement = insert(_TABLE).values(session_id=session_id, channel_id=channel_id, member=member, touched_at=now)
    conn.execute(statement.on_conflict_do_update(index_elements=["session_id", "channel_id"], set_={"touched_at": now}))
    conn.execute(update(_TABLE).where(_TABLE.c.session_id == session_id).values(touched_at=now))


def evict_beyond(conn: Connection, member: str, keep: int) -> list[str]:
    """Forget the member's least recently used sessions past the ``keep`` most recent; their ids."""
    last_use = func.max(_TABLE.c.touched_at)
    ranked = (
        select(_TABLE.c.session_id)
        .where(_TABLE.c.member == member)
        .group_by(_TABLE.c.session_id)
        .order_by(last_use.desc(), _TABLE.c.session_id)
        .offset(keep)
    )
    evicted = list(conn.scalars(ranked))
    if evicted:
        conn.execute(delete(_TABLE).where(_TABLE.c.session_id.in_(evicted)))
    return evicted


def unsubscribe(conn: Connection, session_id: str, channel_id: str) -> None:
    conn.execute(delete(_TABLE).where(_TABLE.c.session_id == session_id, _TABLE.c.channel_id == channel_id))


def channels_of(conn: Connection, session_id: str) -> list[str]:
    return list(conn.scalars(select(_TABLE.c.channel_id).where(_TABLE.c.session_id == session_id)))


def touch(conn: Connection, session_id: str, now: float) -> None:
    conn.execute(update(_TABLE).where(_TABLE.c.session_id == session_id).values(touched_at=now))


def forget(conn: Connection, session_id: str) -> None:
    conn.execute(delete(_TABLE).where(_TABLE.c.session_id == session_id))


def expire(conn: Connection, before: float) -> int:
    """Forget the subscriptions of sessions not used since ``before``; how many rows went."""
    return conn.execute(delete(_TABLE).where(_TABLE.c.touched_at < before)).rowcount
