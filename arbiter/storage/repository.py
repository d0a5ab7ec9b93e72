"""Queries over the tables, speaking only in core models. Every function takes an open ``Connection``.

Plain (synchronous) SQLAlchemy Core: ``Database.read`` and ``Database.write`` run these functions on either
database. Core statements rather than ORM sessions, because the writer runs thousands of them a second.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    JSON,
    Connection,
    Row,
    String,
    Table,
    any_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from arbiter.core.images import ImageRef
from arbiter.core.ledger import split
from arbiter.core.models import (
    SETTINGS,
    AuthorKind,
    ChannelSettings,
    ChannelState,
    Memory,
    Message,
    PersonaInfo,
    PersonaPolicy,
    Priority,
    Spend,
    SpendState,
    Tier,
    TierRule,
)
from arbiter.storage.database import sqlite_driver_change, sqlite_driver_execute, sqlite_driver_query
from arbiter.storage.port import ChannelSummary
from arbiter.storage.tables import ChannelRow, MemoryRow, MessageRow, PersonaRow, SpendRow, UsageRow

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from sqlalchemy import Select

__all__ = (
    "JSON_COLUMNS",
    "ChannelSummary",
    "add_usage",
    "channel_ids",
    "channel_version",
    "delete_history",
    "delete_memories",
    "history",
    "insert_channel",
    "insert_messages",
    "insert_spends",
    "load_channel",
    "load_channels",
    "load_memories",
    "load_since",
    "load_versioned",
    "lock_versions",
    "message",
    "message_by_platform_id",
    "message_columns",
    "persona_infos",
    "recent_platform_ids",
    "said_by",
    "save_channels",
    "save_memory",
    "spend_columns",
    "spends_by_id",
    "state_columns",
    "update_messages",
    "update_spends",
    "upsert_persona",
    "usage",
)

channels: Table = ChannelRow.__table__  # type: ignore[assignment]
spends: Table = SpendRow.__table__  # type: ignore[assignment]
messages: Table = MessageRow.__table__  # type: ignore[assignment]
token_usage: Table = UsageRow.__table__  # type: ignore[assignment]
personas: Table = PersonaRow.__table__  # type: ignore[assignment]
memories: Table = MemoryRow.__table__  # type: ignore[assignment]

# The writer's statements, built once: building a statement costs more than running it on SQLite, and a
# reused statement also reuses its memoized cache key.
_STATE_COLUMNS = (
    "last_seq",
    "bot_streak",
    "last_human_seq",
    "last_human_at",
    "priority",
    "recent_substantive",
    "recent_said",
    "tokens_day",
    "tokens_used",
    "history_since",
    "cleared_seq",
    "updated_at",
)
_SETTINGS_COLUMNS = (*(declared.name for declared in SETTINGS), "tiers", "personas")
_SPEND_CHANGES = ("tier", "cost", "state", "refund_at", "message_seq")
_MESSAGE_CHANGES = ("text", "platform_message_id", "retracted", "deleted", "edited_at")


def _by_key(table: Table, key: str, names: Sequence[str]) -> Any:
    return update(table).where(table.c[key] == bindparam(f"b_{key}")).values({n: bindparam(n) for n in names})


def _save_channel(names: Sequence[str]) -> Any:
    # The version is counted in SQL, so a writer that did not read it (SQLite's, which owns the file) keeps it right.
    return _by_key(channels, "id", names).values(version=channels.c.version + literal_column("1"))


class _DriverQuery:
    """A hot read, built once; on SQLite also rendered once and run on the driver, like the writer's
    statements (personas read the history about as often as they write). Rows are sequences in the
    statement's column order either way."""

    def __init__(self, statement: Select[Any]) -> None:
        self.statement = statement
        compiled = statement.compile(dialect=sqlite_dialect())
        self._sql: str = compiled.string
        self._defaults: dict[str, Any] = dict(compiled.params)
        self._names: tuple[str, ...] = tuple(compiled.positiontup or ())

    def rows(self, conn: Connection, params: dict[str, Any]) -> Sequence[Sequence[Any]]:
        if conn.dialect.name != "sqlite":
            return conn.execute(self.statement, params).all()
        values = {**self._defaults, **params}
        return sqlite_driver_query(conn, self._sql, tuple(values[name] for name in self._names))


class _WriterStatement:
    """One of the writer's batch statements, built once and rendered once for each database, then run on the driver
    (``sqlite_driver_execute`` on SQLite; ``exec_driver_sql`` on PostgreSQL, which keeps SQLAlchemy's error handling
    but skips compiling and processing every row's values), with JSON encoded the way SQLAlchemy's JSON type does
    (``None`` as ``null``). Measured on PostgreSQL: SQLAlchemy's per-row work was a tenth of the arbiter's CPU."""

    def __init__(self, statement: Any) -> None:
        self.statement = statement
        self._sqlite = _Rendered(statement, sqlite_dialect())
        self._postgresql = _Rendered(statement, asyncpg_dialect())  # type: ignore[no-untyped-call]

    def run(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        if conn.dialect.name == "sqlite":
            sqlite_driver_execute(conn, self._sqlite.sql, self._sqlite.values(rows))
        else:
            conn.exec_driver_sql(self._postgresql.sql, self._postgresql.values(rows))


class _Rendered:
    """A statement's text in one dialect, and the order of its parameters."""

    def __init__(self, statement: Any, dialect: Any) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql: str = compiled.string
        names: tuple[str, ...] = tuple(compiled.positiontup or ())
        self._order = itemgetter(*names)
        self._json = [name for name in names if name in JSON_COLUMNS]

    def values(self, rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        """The rows' values in order (the rows are the caller's, made for this statement: encoded in place)."""
        for row in rows:
            for name in self._json:
                row[name] = _json_text(row[name])
        return [self._order(row) for row in rows]


def _json_text(value: Any) -> str:
    """``json.dumps(value)``; the values most rows have (no priority, no images, nobody addressed) without a call
    into the encoder: a message's row has two JSON columns and a channel's three."""
    if value is None:
        return "null"
    if value == [] and type(value) is list:
        return "[]"
    return json.dumps(value)


JSON_COLUMNS = frozenset(
    column.name for table in (channels, spends, messages) for column in table.columns if isinstance(column.type, JSON)
)
_SAVE_STATE = _WriterStatement(_save_channel(_STATE_COLUMNS))
_SAVE_ALL = _WriterStatement(_save_channel((*_STATE_COLUMNS, *_SETTINGS_COLUMNS)))
# A spend is written at the version its channel is about to be saved at (the writer writes spends before it saves
# their channels, in the same transaction under the row lock).
_INSERT_SPENDS = _WriterStatement(
    insert(spends).values(
        {
            **{column.name: bindparam(column.name) for column in spends.columns if column.name != "version"},
            "version": select(channels.c.version + literal_column("1"))
            .where(channels.c.id == bindparam("channel_id"))
            .scalar_subquery(),
        }
    )
)
_UPDATE_SPENDS = _WriterStatement(
    _by_key(spends, "id", _SPEND_CHANGES).values(
        version=select(channels.c.version + literal_column("1"))
        .where(channels.c.id == spends.c.channel_id)
        .scalar_subquery()
    )
)
_INSERT_MESSAGES = _WriterStatement(insert(messages))
_visible = messages.c.retracted.is_(False) & messages.c.deleted.is_(False)
_UPDATE_MESSAGES = _WriterStatement(
    update(messages)
    .where(messages.c.channel_id == bindparam("b_channel_id"), messages.c.seq == bindparam("b_seq"))
    .values({name: bindparam(name) for name in _MESSAGE_CHANGES})
)


# --- mapping --------------------------------------------------------------------------------------------


def _settings_columns(settings: ChannelSettings) -> dict[str, Any]:
    # One column per declared setting, of the same name; the tiers and the persona policies as JSON.
    return {
        **{declared.name: getattr(settings, declared.name) for declared in SETTINGS},
        "tiers": {str(tier): asdict(rule) for tier, rule in settings.tiers.items()},
        "personas": {pid: asdict(policy) for pid, policy in sorted(settings.personas.items())},
    }


def state_columns(state: ChannelState) -> dict[str, Any]:
    priority = state.priority
    return {
        "last_seq": state.last_seq,
        "bot_streak": state.bot_streak,
        "last_human_seq": state.last_human_seq,
        "last_human_at": state.last_human_at,
        "priority": None
        if priority is None
        else {
            "persona_ids": sorted(priority.persona_ids),
            "until": priority.until,
            "since_seq": priority.since_seq,
            "tried": sorted(priority.tried),
            "since_at": priority.since_at,
        },
        "recent_substantive": list(state.recent_substantive),
        "recent_said": [[seq, nod] for seq, nod in state.recent_said],
        "tokens_day": state.tokens_day,
        "tokens_used": state.tokens_used,
        "history_since": state.history_since,
        "cleared_seq": state.cleared_seq,
    }


def _settings_from(row: Row[Any]) -> ChannelSettings:
    return ChannelSettings(
        **{declared.name: getattr(row, declared.name) for declared in SETTINGS},
        tiers={Tier(name): TierRule(**rule) for name, rule in row.tiers.items()},
        personas={pid: PersonaPolicy(**policy) for pid, policy in row.personas.items()},
    )


def _spend_from(row: Row[Any]) -> Spend:
    return Spend(
        id=row.id,
        persona_id=row.persona_id,
        tier=Tier(row.tier),
        cost=row.cost,
        state=SpendState(row.state),
        created_at=row.created_at,
        refund_at=row.refund_at,
        message_seq=row.message_seq,
    )


def spend_columns(channel_id: str, spend: Spend) -> dict[str, Any]:
    return {
        "id": spend.id,
        "channel_id": channel_id,
        "persona_id": spend.persona_id,
        "tier": str(spend.tier),
        "cost": spend.cost,
        "state": str(spend.state),
        "created_at": spend.created_at,
        "refund_at": spend.refund_at,
        "message_seq": spend.message_seq,
    }


# Where _message_from finds each field in a full row of the table (select(messages) lists its columns in order).
_MESSAGE_FIELDS = itemgetter(
    *(
        [column.name for column in messages.columns].index(name)
        for name in (
            "channel_id", "seq", "author_id", "author_kind", "author_name", "text", "created_at", "tier", "cost",
            "platform_message_id", "spend_id", "retracted", "addressed", "deleted", "edited_at", "images",
        )
    )
)  # fmt: skip


def _message_from(row: Sequence[Any]) -> Message:
    """A message from a full row of the table, from SQLAlchemy or from the SQLite driver (which leaves JSON as
    text and booleans as integers)."""
    (
        channel_id, seq, author_id, author_kind, author_name, text, created_at, tier, cost,
        platform_message_id, spend_id, retracted, addressed, deleted, edited_at, images,
    ) = _MESSAGE_FIELDS(row)  # fmt: skip
    return Message(
        channel_id=channel_id,
        seq=seq,
        author_id=author_id,
        author_kind=AuthorKind(author_kind),
        author_name=author_name,
        text=text,
        created_at=created_at,
        tier=None if tier is None else Tier(tier),
        cost=cost,
        platform_message_id=platform_message_id,
        spend_id=spend_id,
        retracted=bool(retracted),
        addressed=tuple(json.loads(addressed) if isinstance(addressed, str) else addressed),
        deleted=bool(deleted),
        edited_at=edited_at,
        images=tuple(ImageRef(**image) for image in (json.loads(images) if isinstance(images, str) else images) or ()),
    )


def message_columns(message: Message) -> dict[str, Any]:
    return {
        "channel_id": message.channel_id,
        "seq": message.seq,
        "author_id": message.author_id,
        "author_kind": str(message.author_kind),
        "author_name": message.author_name,
        "text": message.text,
        "created_at": message.created_at,
        "tier": None if message.tier is None else str(message.tier),
        "cost": message.cost,
        "platform_message_id": message.platform_message_id,
        "spend_id": message.spend_id,
        "retracted": message.retracted,
        "addressed": list(message.addressed),
        "deleted": message.deleted,
        "edited_at": message.edited_at,
        "images": [asdict(image) for image in message.images] or None,
    }


# --- channels -------------------------------------------------------------------------------------------


def load_channel(
    conn: Connection, channel_id: str, now: float, *, lock: bool = False, spend_ids: Iterable[str] = ()
) -> ChannelState | None:
    """The channel's state with its active spends (and any spends named), or None if it does not exist."""
    return load_channels(conn, [channel_id], now, lock=lock, spend_ids=spend_ids).get(channel_id)


def load_channels(
    conn: Connection, channel_ids: Sequence[str], now: float, *, lock: bool = False, spend_ids: Iterable[str] = ()
) -> dict[str, ChannelState]:
    """Several channels' states in two queries. With ``lock`` their rows are locked for the transaction, in id
    order, so two processes locking overlapping sets cannot deadlock (FOR UPDATE on PostgreSQL; on SQLite the
    writer's transaction holds the database's write lock)."""
    loaded = load_versioned(conn, channel_ids, now, lock=lock, spend_ids=spend_ids)
    return {channel_id: state for channel_id, (_version, state) in loaded.items()}


def load_versioned(
    conn: Connection, channel_ids: Sequence[str], now: float, *, lock: bool = False, spend_ids: Iterable[str] = ()
) -> dict[str, tuple[int, ChannelState]]:
    """``load_channels`` with each channel's version (see ``ChannelRow.version``)."""
    ids = sorted(set(channel_ids))
    query = select(channels).where(channels.c.id.in_(ids)).order_by(channels.c.id)
    if lock:
        query = query.with_for_update()
    rows = conn.execute(query).all()
    if not rows:
        return {}
    wanted = list(spend_ids)
    condition = spends.c.refund_at > now
    if wanted:
        condition = or_(condition, spends.c.id.in_(wanted))
    by_channel: dict[str, list[Spend]] = {}
    for spend in conn.execute(select(spends).where(spends.c.channel_id.in_([row.id for row in rows]), condition)):
        by_channel.setdefault(spend.channel_id, []).append(_spend_from(spend))
    return {row.id: (row.version, _state_from(row, by_channel.get(row.id, ()))) for row in rows}


# PostgreSQL only (a process that shares the database checks what it remembers): one statement for any number of
# channels, so the driver prepares it once.
_VERSIONS = (
    select(channels.c.id, channels.c.version)
    .where(channels.c.id == any_(bindparam("ids", type_=ARRAY(String))))
    .order_by(channels.c.id)
)
_LOCK_VERSIONS = _VERSIONS.with_for_update()
_VERSION = select(channels.c.version).where(channels.c.id == bindparam("id"))


_CHANGED_SPENDS = text(
    "SELECT spends.* FROM spends"
    " JOIN unnest(CAST(:ids AS varchar[]), CAST(:versions AS bigint[])) AS known (id, version)"
    " ON spends.channel_id = known.id WHERE spends.version > known.version"
)


def load_since(conn: Connection, known: Mapping[str, tuple[int, ChannelState]]) -> dict[str, tuple[int, ChannelState]]:
    """The channels' states from the ones remembered at an older version: their rows, and only the spends written
    since (a channel's spends are all written under its row lock, each at the version it was saved at), merged into
    the remembered ones. Expired spends are left for the caller to drop; PostgreSQL only."""
    ids = sorted(known)
    rows = conn.execute(select(channels).where(channels.c.id.in_(ids))).all()
    changed: dict[str, list[Spend]] = {}
    for row in conn.execute(_CHANGED_SPENDS, {"ids": ids, "versions": [known[cid][0] for cid in ids]}):
        changed.setdefault(row.channel_id, []).append(_spend_from(row))
    loaded: dict[str, tuple[int, ChannelState]] = {}
    for row in rows:
        old = known[row.id][1]
        merged = {spend.id: spend for spend in (*old.spends, *old.claims)}
        merged.update((spend.id, spend) for spend in changed.get(row.id, ()))
        loaded[row.id] = (row.version, _state_from(row, merged.values()))
    return loaded


def lock_versions(conn: Connection, channel_ids: Collection[str], *, lock: bool = True) -> dict[str, int]:
    """Lock the channels' rows for the transaction, in id order, and return their versions (without ``lock``, only
    read them); PostgreSQL only."""
    statement = _LOCK_VERSIONS if lock else _VERSIONS
    return {row.id: row.version for row in conn.execute(statement, {"ids": sorted(set(channel_ids))})}


def channel_version(conn: Connection, channel_id: str) -> int | None:
    """The channel's committed version, None if it does not exist."""
    version: int | None = conn.execute(_VERSION, {"id": channel_id}).scalar()
    return version


def _state_from(row: Row[Any], channel_spends: Iterable[Spend]) -> ChannelState:
    ordinary, claims = split(channel_spends)
    priority = None
    if row.priority:
        priority = Priority(
            frozenset(row.priority["persona_ids"]),
            row.priority["until"],
            row.priority.get("since_seq", 0),
            frozenset(row.priority.get("tried", ())),
            row.priority.get("since_at", 0.0),
        )
    return ChannelState(
        channel_id=row.id,
        settings=_settings_from(row),
        spends=ordinary,
        claims=claims,
        last_seq=row.last_seq,
        bot_streak=row.bot_streak,
        last_human_seq=row.last_human_seq,
        last_human_at=row.last_human_at,
        priority=priority,
        recent_substantive=tuple(row.recent_substantive),
        recent_said=tuple((int(seq), bool(nod)) for seq, nod in row.recent_said),
        tokens_day=row.tokens_day,
        tokens_used=row.tokens_used,
        history_since=row.history_since,
        cleared_seq=row.cleared_seq,
    )


def _upsert(conn: Connection, table: Table) -> Any:
    """An INSERT that can say what to do on a key conflict, in the connection's dialect."""
    dialect_insert = postgresql_insert if conn.dialect.name == "postgresql" else sqlite_insert
    return dialect_insert(table)


def insert_channel(conn: Connection, state: ChannelState, now: float) -> bool:
    """Create the channel unless it exists (another process may create it at the same moment)."""
    values = {"id": state.channel_id, **_settings_columns(state.settings), **state_columns(state)}
    statement = _upsert(conn, channels).values(created_at=now, updated_at=now, **values)
    return conn.execute(statement.on_conflict_do_nothing(index_elements=["id"])).rowcount == 1


def save_channels(
    conn: Connection, states: Sequence[ChannelState], now: float, *, with_settings: Collection[str] = ()
) -> None:
    """Write the channels' counters; their settings only for the ids in ``with_settings`` (they rarely change)."""
    settings_changed = set(with_settings)
    plain = [
        {"b_id": state.channel_id, "updated_at": now, **state_columns(state)}
        for state in states
        if state.channel_id not in settings_changed
    ]
    full = [
        {"b_id": state.channel_id, "updated_at": now, **state_columns(state), **_settings_columns(state.settings)}
        for state in states
        if state.channel_id in settings_changed
    ]
    if plain:
        _SAVE_STATE.run(conn, plain)
    if full:
        _SAVE_ALL.run(conn, full)


def channel_ids(conn: Connection) -> list[ChannelSummary]:
    rows = conn.execute(select(channels.c.id, channels.c.enabled, channels.c.last_seq).order_by(channels.c.id))
    return [(row.id, row.enabled, row.last_seq) for row in rows]


# --- spends and messages --------------------------------------------------------------------------------


def insert_spends(conn: Connection, new: Sequence[tuple[str, Spend]]) -> None:
    """Insert (channel id, spend) pairs."""
    if new:
        _INSERT_SPENDS.run(conn, [spend_columns(channel_id, spend) for channel_id, spend in new])


def update_spends(conn: Connection, changed: Sequence[Spend]) -> None:
    if changed:
        rows = [
            {
                "b_id": spend.id,
                "tier": str(spend.tier),
                "cost": spend.cost,
                "state": str(spend.state),
                "refund_at": spend.refund_at,
                "message_seq": spend.message_seq,
            }
            for spend in changed
        ]
        _UPDATE_SPENDS.run(conn, rows)


def spends_by_id(conn: Connection, channel_id: str, ids: Sequence[str]) -> list[Spend]:
    query = select(spends).where(spends.c.channel_id == channel_id, spends.c.id.in_(list(ids)))
    return [_spend_from(row) for row in conn.execute(query)]


def insert_messages(conn: Connection, new: Sequence[Message]) -> None:
    if new:
        _INSERT_MESSAGES.run(conn, [message_columns(message) for message in new])


def update_messages(conn: Connection, changed: Sequence[Message]) -> None:
    if changed:
        rows = [
            {
                "b_channel_id": message.channel_id,
                "b_seq": message.seq,
                "text": message.text,
                "platform_message_id": message.platform_message_id,
                "retracted": message.retracted,
                "deleted": message.deleted,
                "edited_at": message.edited_at,
            }
            for message in changed
        ]
        _UPDATE_MESSAGES.run(conn, rows)


def message(conn: Connection, channel_id: str, seq: int) -> Message | None:
    rows = _MESSAGE.rows(conn, {"channel_id": channel_id, "seq": seq})
    return _message_from(rows[0]) if rows else None


def message_by_platform_id(conn: Connection, channel_id: str, platform_message_id: str) -> Message | None:
    rows = _MESSAGE_BY_PLATFORM_ID.rows(conn, {"channel_id": channel_id, "platform_message_id": platform_message_id})
    return _message_from(rows[0]) if rows else None


def history(conn: Connection, channel_id: str, after: int, limit: int) -> list[Message]:
    """Messages after seq ``after``, oldest first; retracted and deleted ones are not part of the conversation."""
    rows = _HISTORY.rows(conn, {"channel_id": channel_id, "after": after, "limit": limit})
    return [_message_from(row) for row in rows]


def recent_history(conn: Connection, channel_id: str, limit: int) -> list[Message]:
    """The last ``limit`` messages, oldest first."""
    rows = _RECENT_HISTORY.rows(conn, {"channel_id": channel_id, "limit": limit})
    return [_message_from(row) for row in reversed(rows)]


# Read in the writer on every link of a post to its platform message (and on edits, deletions, retractions).
_MESSAGE = _DriverQuery(
    select(messages).where(messages.c.channel_id == bindparam("channel_id"), messages.c.seq == bindparam("seq"))
)
_MESSAGE_BY_PLATFORM_ID = _DriverQuery(
    select(messages).where(
        messages.c.channel_id == bindparam("channel_id"),
        messages.c.platform_message_id == bindparam("platform_message_id"),
    )
)
_HISTORY = _DriverQuery(
    select(messages)
    .where(messages.c.channel_id == bindparam("channel_id"), messages.c.seq > bindparam("after"), _visible)
    .order_by(messages.c.seq)
    .limit(bindparam("limit"))
)
_RECENT_HISTORY = _DriverQuery(
    select(messages)
    .where(messages.c.channel_id == bindparam("channel_id"), _visible)
    .order_by(messages.c.seq.desc())
    .limit(bindparam("limit"))
)


def said_by(conn: Connection, channel_id: str, author_id: str, limit: int) -> list[Message]:
    """The last ``limit`` messages ``author_id`` said in the channel, oldest first, however much others said since:
    deleted ones too (said once, they are no better to say again), not retracted ones (never shown)."""
    rows = _SAID_BY.rows(conn, {"channel_id": channel_id, "author_id": author_id, "limit": limit})
    return [_message_from(row) for row in reversed(rows)]


_SAID_BY = _DriverQuery(
    select(messages)
    .where(
        messages.c.channel_id == bindparam("channel_id"),
        messages.c.author_id == bindparam("author_id"),
        messages.c.retracted.is_(False),
    )
    .order_by(messages.c.seq.desc())
    .limit(bindparam("limit"))
)


def recent_platform_ids(conn: Connection, channel_id: str, limit: int) -> list[str]:
    """The platform ids of the channel's last ``limit`` messages that have one, newest (by seq) first; deleted
    messages included (they were said and recorded), retracted ones have none."""
    query = (
        select(messages.c.platform_message_id)
        .where(messages.c.channel_id == channel_id, messages.c.platform_message_id.is_not(None))
        .order_by(messages.c.seq.desc())
        .limit(limit)
    )
    return [row[0] for row in conn.execute(query)]


def delete_history(conn: Connection, channel_id: str) -> int:
    result = conn.execute(delete(messages).where(messages.c.channel_id == channel_id))
    return result.rowcount


# --- usage and personas ---------------------------------------------------------------------------------


def add_usage(
    conn: Connection, channel_id: str, persona_id: str, *, day: int, tokens: tuple[int, int, int, int]
) -> None:
    """Count a request's tokens (prompt, completion, cache read, cache write) to the persona's usage of the day."""
    prompt_tokens, completion_tokens, cache_read, cache_write = tokens
    key = (
        token_usage.c.channel_id == channel_id,
        token_usage.c.persona_id == persona_id,
        token_usage.c.day == day,
    )
    result = conn.execute(
        update(token_usage)
        .where(*key)
        .values(
            prompt_tokens=token_usage.c.prompt_tokens + prompt_tokens,
            completion_tokens=token_usage.c.completion_tokens + completion_tokens,
            requests=token_usage.c.requests + 1,
            cache_read_tokens=token_usage.c.cache_read_tokens + cache_read,
            cache_write_tokens=token_usage.c.cache_write_tokens + cache_write,
        )
    )
    # The channel row is locked by the caller, so no one else can insert this key in between.
    if result.rowcount == 0:
        conn.execute(
            insert(token_usage).values(
                channel_id=channel_id,
                persona_id=persona_id,
                day=day,
                prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens,
                requests=1,
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
        )


def usage(conn: Connection, channel_id: str, day: int) -> dict[str, tuple[int, int, int, int, int]]:
    """Per persona: prompt tokens, completion tokens, requests, cache reads and writes, for one UTC day."""
    rows = conn.execute(select(token_usage).where(token_usage.c.channel_id == channel_id, token_usage.c.day == day))
    return {
        row.persona_id: (
            row.prompt_tokens,
            row.completion_tokens,
            row.requests,
            row.cache_read_tokens,
            row.cache_write_tokens,
        )
        for row in rows
    }


def upsert_persona(conn: Connection, info: PersonaInfo, now: float) -> None:
    values = {
        "display_name": info.display_name,
        "aliases": list(info.aliases),
        "color": info.color,
        "platform_user_id": info.platform_user_id,
        "cannot_speak": info.cannot_speak,
        "updated_at": now,
    }
    statement = _upsert(conn, personas).values(id=info.id, **values)
    conn.execute(statement.on_conflict_do_update(index_elements=["id"], set_=values))


def persona_infos(conn: Connection) -> list[PersonaInfo]:
    rows = conn.execute(select(personas).order_by(personas.c.id))
    return [
        PersonaInfo(
            id=row.id,
            display_name=row.display_name,
            aliases=tuple(row.aliases),
            color=row.color,
            platform_user_id=row.platform_user_id,
            cannot_speak=row.cannot_speak,
        )
        for row in rows
    ]


# --- memories --------------------------------------------------------------------------------------------


def _memory_upsert(dialect_insert: Any) -> Any:
    """Store a dialogue state unless the one stored covers a newer message: one statement, its values bound at
    execution (built once per dialect: building it for each turn's notes was a tenth of a busy arbiter's CPU)."""
    statement = dialect_insert(memories).values(
        channel_id=bindparam("channel_id"),
        persona_id=bindparam("persona_id"),
        seq=bindparam("seq"),
        state=bindparam("state", type_=memories.c.state.type),
        updated_at=bindparam("updated_at"),
    )
    excluded = statement.excluded
    return statement.on_conflict_do_update(
        index_elements=["channel_id", "persona_id"],
        set_={"seq": excluded.seq, "state": excluded.state, "updated_at": excluded.updated_at},
        where=memories.c.seq <= excluded.seq,
    )


_SAVE_MEMORY = {"sqlite": _memory_upsert(sqlite_insert), "postgresql": _memory_upsert(postgresql_insert)}
# Saved with most speeches and releases, in the writer: on SQLite run on the driver, rendered once.
_SAVE_MEMORY_SQLITE = _Rendered(_SAVE_MEMORY["sqlite"], sqlite_dialect())


def save_memory(conn: Connection, memory: Memory) -> bool:
    """Store a persona's dialogue state unless the one stored covers a newer message (two workers of one persona,
    or a late write, never take it back). Whether it was stored."""
    values = {
        "channel_id": memory.channel_id,
        "persona_id": memory.persona_id,
        "seq": memory.seq,
        "state": dict(memory.state),
        "updated_at": memory.updated_at,
    }
    if conn.dialect.name == "sqlite":
        [row] = _SAVE_MEMORY_SQLITE.values([{**values, "state": json.dumps(values["state"])}])
        return sqlite_driver_change(conn, _SAVE_MEMORY_SQLITE.sql, row) == 1
    return conn.execute(_SAVE_MEMORY[conn.dialect.name], values).rowcount == 1


def load_memories(conn: Connection, channel_id: str, persona_id: str | None = None) -> list[Memory]:
    """The channel's dialogue states by persona id (or only ``persona_id``'s)."""
    if persona_id is not None:  # a persona's own, with its first claim in a channel: in the writer
        rows = _MEMORY_OF.rows(conn, {"channel_id": channel_id, "persona_id": persona_id})
        return [_memory_from(row) for row in rows]
    query = select(memories).where(memories.c.channel_id == channel_id).order_by(memories.c.persona_id)
    return [Memory(row.channel_id, row.persona_id, row.seq, row.state, row.updated_at) for row in conn.execute(query)]


_MEMORY_OF = _DriverQuery(
    select(memories.c.channel_id, memories.c.persona_id, memories.c.seq, memories.c.state, memories.c.updated_at).where(
        memories.c.channel_id == bindparam("channel_id"), memories.c.persona_id == bindparam("persona_id")
    )
)


def _memory_from(row: Sequence[Any]) -> Memory:
    """A memory from its row (the SQLite driver leaves its JSON as text)."""
    channel_id, persona_id, seq, state, updated_at = row
    return Memory(channel_id, persona_id, seq, json.loads(state) if isinstance(state, str) else state, updated_at)


def delete_memories(conn: Connection, channel_id: str, persona_id: str | None = None) -> list[str]:
    """Forget the channel's dialogue states (or only ``persona_id``'s); the personas whose state was deleted."""
    statement = delete(memories).where(memories.c.channel_id == channel_id)
    if persona_id is not None:
        statement = statement.where(memories.c.persona_id == persona_id)
    return sorted(row.persona_id for row in conn.execute(statement.returning(memories.c.persona_id)))


def count_messages(conn: Connection, channel_id: str) -> int:
    query = select(func.count()).select_from(messages).where(messages.c.channel_id == channel_id)
    return int((conn.execute(query)).scalar_one())
