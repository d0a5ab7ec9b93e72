"""The database schema as SQLAlchemy 2 typed models. Alembic migrations are generated from these.

Times are POSIX seconds in DOUBLE columns: the rules compute with numbers, SQLite has no timestamp type,
and one representation on both databases keeps the queries identical.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import JSON, BigInteger, Double, Index, Integer, MetaData, String, Text, UniqueConstraint, false
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = ("Base", "ChannelRow", "McpSubscriptionRow", "MemoryRow", "MessageRow", "PersonaRow", "SpendRow", "UsageRow")

ID = String(64)

# Stable constraint names, so migrations can name what they alter on both SQLite and PostgreSQL.
NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map: ClassVar[dict[Any, Any]] = {dict[str, Any]: JSON, list[Any]: JSON, float: Double, str: Text}


class ChannelRow(Base):
    """A channel's settings and the counters the rules need, locked as one row per operation."""

    __tablename__ = "channels"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    capacity: Mapped[int]
    tiers: Mapped[dict[str, Any]]
    enabled: Mapped[bool]
    paused: Mapped[bool]
    idle_cap: Mapped[int]
    daily_token_budget: Mapped[int | None] = mapped_column(BigInteger)
    topic: Mapped[str]
    claim_ttl_s: Mapped[float]
    priority_window_s: Mapped[float]
    human_hold_s: Mapped[float]
    stale_tolerance: Mapped[int]
    personas_enabled_by_default: Mapped[bool]
    personas: Mapped[dict[str, Any]]
    last_seq: Mapped[int] = mapped_column(BigInteger)
    bot_streak: Mapped[int]
    last_human_seq: Mapped[int] = mapped_column(BigInteger)
    last_human_at: Mapped[float | None]
    priority: Mapped[dict[str, Any] | None]
    recent_substantive: Mapped[list[Any]]
    tokens_day: Mapped[int]
    tokens_used: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[float]
    updated_at: Mapped[float]
    history_since: Mapped[float | None]  # see ChannelState.history_since
    recent_said: Mapped[list[Any]]  # see ChannelState.recent_said
    # One more with every write of the row or of the channel's spends (all under the row lock): a process that
    # kept the channel's state in memory reuses it while the version it read under the lock is the one it wrote.
    version: Mapped[int] = mapped_column(BigInteger, server_default="0")
    cleared_seq: Mapped[int] = mapped_column(BigInteger, server_default="0")  # see ChannelState.cleared_seq


class SpendRow(Base):
    """The spend ledger. A row is active while refund_at is in the future; the level is derived from those."""

    __tablename__ = "spends"
    __table_args__ = (Index(None, "channel_id", "refund_at"), Index(None, "channel_id", "version"))

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    channel_id: Mapped[str] = mapped_column(ID)
    persona_id: Mapped[str] = mapped_column(ID)
    tier: Mapped[str] = mapped_column(String(16))
    cost: Mapped[int]
    state: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float]
    refund_at: Mapped[float]
    message_seq: Mapped[int | None] = mapped_column(BigInteger)
    # The channel's version this row was last written at: a process that remembers the channel at an older version
    # reads only the spends written since (see ChannelRow.version).
    version: Mapped[int] = mapped_column(BigInteger, server_default="0")


class MessageRow(Base):
    __tablename__ = "messages"
    # (channel, author, seq): a persona's own last lines, with its first claim in a channel (repository.said_by).
    __table_args__ = (
        UniqueConstraint("channel_id", "platform_message_id"),
        Index(None, "channel_id", "author_id", "seq"),
    )

    channel_id: Mapped[str] = mapped_column(ID, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    author_id: Mapped[str] = mapped_column(ID)
    author_kind: Mapped[str] = mapped_column(String(16))
    author_name: Mapped[str] = mapped_column(String(80))
    text: Mapped[str]
    created_at: Mapped[float]
    tier: Mapped[str | None] = mapped_column(String(16))
    cost: Mapped[int]
    platform_message_id: Mapped[str | None] = mapped_column(String(64))
    spend_id: Mapped[str | None] = mapped_column(String(40))
    retracted: Mapped[bool]
    addressed: Mapped[list[Any]]
    deleted: Mapped[bool] = mapped_column(server_default=false())
    edited_at: Mapped[float | None]
    images: Mapped[list[Any] | None]  # references (arbiter.core.images.ImageRef); null: none


class UsageRow(Base):
    """Tokens reported by personas, per channel, persona and UTC day."""

    __tablename__ = "token_usage"

    channel_id: Mapped[str] = mapped_column(ID, primary_key=True)
    persona_id: Mapped[str] = mapped_column(ID, primary_key=True)
    day: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)  # proleptic ordinal, UTC
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)  # every input token, the cache's included
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    requests: Mapped[int]
    # Of the prompt tokens, those the provider read from its prompt cache and those it wrote to it.
    cache_read_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")


class PersonaRow(Base):
    """How a persona registered: its names (so the arbiter can tell when a message addresses it), its colour
    (for the local room), its account on the chat platform (so its messages there are recognised), and why it
    cannot speak, if it said so."""

    __tablename__ = "personas"

    id: Mapped[str] = mapped_column(ID, primary_key=True)
    display_name: Mapped[str] = mapped_column(String(80))
    aliases: Mapped[list[Any]]
    updated_at: Mapped[float]
    color: Mapped[str | None] = mapped_column(String(7))
    platform_user_id: Mapped[str | None] = mapped_column(String(64))
    cannot_speak: Mapped[str | None] = mapped_column(String(300))


class MemoryRow(Base):
    """A persona's dialogue state in a channel: its notes on the conversation (JSON, as the API's DialogueState),
    and ``seq``, the last message they take into account. Deleted with the channel's history."""

    __tablename__ = "memories"

    channel_id: Mapped[str] = mapped_column(ID, primary_key=True)
    persona_id: Mapped[str] = mapped_column(ID, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[dict[str, Any]]
    updated_at: Mapped[float]


class McpSubscriptionRow(Base):
    """An MCP session's subscription to a channel's history, kept in the database so that any arbiter process,
    and the same one after a restart, serves the session's notification stream. ``member`` is the token's member
    (``""`` for the administrator), for the per-token cap; ``touched_at``, the session's last sign of use, for the
    idle expiry."""

    __tablename__ = "mcp_subscriptions"

    session_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    channel_id: Mapped[str] = mapped_column(ID, primary_key=True)
    member: Mapped[str] = mapped_column(ID, index=True)
    touched_at: Mapped[float] = mapped_column(index=True)
