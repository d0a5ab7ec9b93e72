"""PostgreSQL: a batch's writes and its notifications in one statement, committed only if no other process changed
its channels since this one committed them last.

The batch writer on a shared database runs a batch on the channels as it remembers them, and then commits
everything the batch changed with this one statement, in autocommit: each channel's row is updated only where its
version is still the one remembered (a compare-and-set), the channels the batch read and did not change are checked
the same way, and unless all of them were as remembered (and every persona's notes were stored: none newer was
there), the statement raises and nothing of it stays (``aizuchi_changed_elsewhere``, migration 0007): the writer
then runs the batch again the locked way, which reads what changed. So every answer, a refusal too, held when the
statement ran. One round trip a batch, where a locked transaction takes six to nine (BEGIN, the row locks, a
statement per table written, the notifications, COMMIT); a channel's requests go to one process
(``bots.affinity``), so another process's change in between is rare.

Every table takes its rows as arrays (``unnest``), so the statement's text is the same for every batch and the
driver prepares it once per connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arbiter.storage.repository import JSON_COLUMNS, message_columns, spend_columns, state_columns

if TYPE_CHECKING:
    from arbiter.core.models import ChannelState, Memory, Message, Spend

__all__ = ("BatchWrites", "commit_statement")


@dataclass
class BatchWrites:
    """What a batch changed, and the versions it read its channels at."""

    channels: list[tuple[ChannelState, int]] = field(default_factory=list)  # (state to save, version it was at)
    unchanged: list[tuple[str, int]] = field(default_factory=list)  # (id, version) of channels read and not written
    new_spends: list[tuple[str, Spend]] = field(default_factory=list)  # (channel id, spend)
    changed_spends: list[tuple[str, Spend]] = field(default_factory=list)
    new_messages: list[Message] = field(default_factory=list)
    changed_messages: list[Message] = field(default_factory=list)
    memories: list[Memory] = field(default_factory=list)  # at most one per channel and persona
    usage: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)  # (channel, persona, day, tokens
    # in and out, requests), at most one per channel, persona and day


_COMMIT = """
WITH saved AS (
    UPDATE channels AS c SET
        version = c.version + 1, last_seq = u.last_seq, bot_streak = u.bot_streak, last_human_seq = u.last_human_seq,
        last_human_at = u.last_human_at, priority = u.priority::json, recent_substantive = u.recent_substantive::json,
        recent_said = u.recent_said::json, tokens_day = u.tokens_day, tokens_used = u.tokens_used,
        history_since = u.history_since, updated_at = u.updated_at
    FROM unnest(
        $1::varchar[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::float8[], $7::text[], $8::text[],
        $9::text[], $10::int[], $11::bigint[], $12::float8[], $13::float8[]
    ) AS u(
        id, version, last_seq, bot_streak, last_human_seq, last_human_at, priority, recent_substantive, recent_said,
        tokens_day, tokens_used, history_since, updated_at
    )
    WHERE c.id = u.id AND c.version = u.version
    RETURNING c.id
), new_spends AS (
    INSERT INTO spends (id, channel_id, persona_id, tier, cost, state, created_at, refund_at, message_seq, version)
    SELECT * FROM unnest(
        $14::varchar[], $15::varchar[], $16::varchar[], $17::varchar[], $18::int[], $19::varchar[], $20::float8[],
        $21::float8[], $22::bigint[], $23::bigint[]
    )
), changed_spends AS (
    UPDATE spends AS s SET
        tier = u.tier, cost = u.cost, state = u.state, refund_at = u.refund_at, message_seq = u.message_seq,
        version = u.version
    FROM unnest(
        $24::varchar[], $25::varchar[], $26::int[], $27::varchar[], $28::float8[], $29::bigint[], $30::bigint[]
    ) AS u(id, tier, cost, state, refund_at, message_seq, version)
    WHERE s.id = u.id
), new_messages AS (
    INSERT INTO messages (
        channel_id, seq, author_id, author_kind, author_name, text, created_at, tier, cost, platform_message_id,
        spend_id, retracted, addressed, deleted, edited_at
    )
    SELECT channel_id, seq, author_id, author_kind, author_name, text, created_at, tier, cost, platform_message_id,
        spend_id, retracted, addressed::json, deleted, edited_at
    FROM unnest(
        $31::varchar[], $32::bigint[], $33::varchar[], $34::varchar[], $35::varchar[], $36::text[], $37::float8[],
        $38::varchar[], $39::int[], $40::varchar[], $41::varchar[], $42::boolean[], $43::text[], $44::boolean[],
        $45::float8[]
    ) AS u(
        channel_id, seq, author_id, author_kind, author_name, text, created_at, tier, cost, platform_message_id,
        spend_id, retracted, addressed, deleted, edited_at
    )
), changed_messages AS (
    UPDATE messages AS m SET
        text = u.text, platform_message_id = u.platform_message_id, retracted = u.retracted, deleted = u.deleted,
        edited_at = u.edited_at
    FROM unnest(
        $46::varchar[], $47::bigint[], $48::text[], $49::varchar[], $50::boolean[], $51::boolean[], $52::float8[]
    ) AS u(channel_id, seq, text, platform_message_id, retracted, deleted, edited_at)
    WHERE m.channel_id = u.channel_id AND m.seq = u.seq
), stored_memories AS (
    INSERT INTO memories AS m (channel_id, persona_id, seq, state, updated_at)
    SELECT channel_id, persona_id, seq, state::json, updated_at
    FROM unnest($53::varchar[], $54::varchar[], $55::bigint[], $56::text[], $57::float8[])
        AS u(channel_id, persona_id, seq, state, updated_at)
    ON CONFLICT (channel_id, persona_id) DO UPDATE
        SET seq = excluded.seq, state = excluded.state, updated_at = excluded.updated_at
        WHERE m.seq <= excluded.seq
    RETURNING 1
), used AS (
    INSERT INTO token_usage AS t (channel_id, persona_id, day, prompt_tokens, completion_tokens, requests)
    SELECT * FROM unnest($58::varchar[], $59::varchar[], $60::int[], $61::bigint[], $62::bigint[], $63::int[])
    ON CONFLICT (channel_id, persona_id, day) DO UPDATE SET
        prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = t.completion_tokens + excluded.completion_tokens,
        requests = t.requests + excluded.requests
), notified AS (
    SELECT pg_notify($64, payload) FROM unnest($65::text[]) AS payload
)
SELECT CASE
    WHEN (SELECT count(*) FROM saved) = cardinality($1::varchar[])
        AND (SELECT count(*) FROM stored_memories) = cardinality($53::varchar[])
        AND (
            SELECT count(*) FROM channels AS c JOIN unnest($66::varchar[], $67::bigint[]) AS k(id, version)
                ON c.id = k.id AND c.version = k.version
        ) = cardinality($66::varchar[])
    THEN (SELECT count(*) FROM notified)
    ELSE aizuchi_changed_elsewhere()
END
"""


def commit_statement(
    writes: BatchWrites, *, now: float, notify_channel: str, notifications: list[str]
) -> tuple[str, tuple[Any, ...]]:
    """The statement (and its parameters) that writes the batch and queues its notifications, all or nothing: it
    raises (SQLSTATE 40001) when a channel's version is no longer the one read, or when a persona's notes newer
    than the batch's are stored (the locked way keeps those and leaves the batch's, telling no one of them)."""
    versions = {state.channel_id: version + 1 for state, version in writes.channels}
    channels = [
        (state.channel_id, version, *_values(state_columns(state), _CHANNEL_COLUMNS), now)
        for state, version in writes.channels
    ]
    new_spends = [
        (*_values(spend_columns(channel_id, spend), _SPEND_COLUMNS), versions[channel_id])
        for channel_id, spend in writes.new_spends
    ]
    changed_spends = [
        (spend.id, *_values(spend_columns(channel_id, spend), _SPEND_CHANGES), versions[channel_id])
        for channel_id, spend in writes.changed_spends
    ]
    new_messages = [_values(message_columns(message), _MESSAGE_COLUMNS) for message in writes.new_messages]
    changed_messages = [
        (message.channel_id, message.seq, *_values(message_columns(message), _MESSAGE_CHANGES))
        for message in writes.changed_messages
    ]
    memories = [(m.channel_id, m.persona_id, m.seq, json.dumps(m.state), m.updated_at) for m in writes.memories]
    params = (
        *_columns(channels, 13),
        *_columns(new_spends, 10),
        *_columns(changed_spends, 7),
        *_columns(new_messages, 15),
        *_columns(changed_messages, 7),
        *_columns(memories, 5),
        *_columns(writes.usage, 6),
        notify_channel,
        notifications,
        *_columns(writes.unchanged, 2),
    )
    return _COMMIT, params


# Each table's columns in the order the statement takes them (after the key, where it leads).
_CHANNEL_COLUMNS = (
    "last_seq", "bot_streak", "last_human_seq", "last_human_at", "priority", "recent_substantive", "recent_said",
    "tokens_day", "tokens_used", "history_since",
)  # fmt: skip
_SPEND_COLUMNS = (
    "id", "channel_id", "persona_id", "tier", "cost", "state", "created_at", "refund_at", "message_seq"
)  # fmt: skip
_SPEND_CHANGES = ("tier", "cost", "state", "refund_at", "message_seq")
_MESSAGE_COLUMNS = (
    "channel_id", "seq", "author_id", "author_kind", "author_name", "text", "created_at", "tier", "cost",
    "platform_message_id", "spend_id", "retracted", "addressed", "deleted", "edited_at",
)  # fmt: skip
_MESSAGE_CHANGES = ("text", "platform_message_id", "retracted", "deleted", "edited_at")


def _values(columns: dict[str, Any], names: tuple[str, ...]) -> tuple[Any, ...]:
    """The named columns' values, JSON columns as their text (the statement casts them)."""
    return tuple(json.dumps(columns[name]) if name in JSON_COLUMNS else columns[name] for name in names)


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows as one list per column (``unnest`` takes each column as an array)."""
    if not rows:
        return [[] for _ in range(width)]
    return [list(column) for column in zip(*rows, strict=True)]
