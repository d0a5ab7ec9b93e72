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

Every table takes its rows as one JSON parameter (``json_to_recordset``), so the statement's text is the same for
every batch and the driver prepares it once per connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arbiter.storage.repository import message_columns, spend_columns, state_columns

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
    # (channel, persona, day, tokens in and out, requests, cache read and write), one per channel, persona and day
    usage: list[tuple[str, str, int, int, int, int, int, int]] = field(default_factory=list)


# Each table's rows come as one JSON array of objects (json_to_recordset): the driver sends a parameter as it is,
# where an array parameter has it check every element (whether it is an array too), more CPU than the statement.
_COMMIT = """
WITH saved AS (
    UPDATE channels AS c SET
        version = c.version + 1, last_seq = u.last_seq, bot_streak = u.bot_streak, last_human_seq = u.last_human_seq,
        last_human_at = u.last_human_at, priority = u.priority, recent_substantive = u.recent_substantive,
        recent_said = u.recent_said, tokens_day = u.tokens_day, tokens_used = u.tokens_used,
        history_since = u.history_since, cleared_seq = u.cleared_seq, updated_at = u.updated_at
    FROM json_to_recordset($1::json) AS u(
        id varchar, version bigint, last_seq bigint, bot_streak int, last_human_seq bigint, last_human_at float8,
        priority json, recent_substantive json, recent_said json, tokens_day int, tokens_used bigint,
        history_since float8, cleared_seq bigint, updated_at float8
    )
    WHERE c.id = u.id AND c.version = u.version
    RETURNING c.id
), new_spends AS (
    INSERT INTO spends (id, channel_id, persona_id, tier, cost, state, created_at, refund_at, message_seq, version)
    SELECT * FROM json_to_recordset($2::json) AS u(
        id varchar, channel_id varchar, persona_id varchar, tier varchar, cost int, state varchar, created_at float8,
        refund_at float8, message_seq bigint, version bigint
    )
), changed_spends AS (
    UPDATE spends AS s SET
        tier = u.tier, cost = u.cost, state = u.state, refund_at = u.refund_at, message_seq = u.message_seq,
        version = u.version
    FROM json_to_recordset($3::json) AS u(
        id varchar, tier varchar, cost int, state varchar, refund_at float8, message_seq bigint, version bigint
    )
    WHERE s.id = u.id
), new_messages AS (
    INSERT INTO messages (
        channel_id, seq, author_id, author_kind, author_name, text, created_at, tier, cost, platform_message_id,
        spend_id, retracted, addressed, deleted, edited_at, images
    )
    SELECT * FROM json_to_recordset($4::json) AS u(
        channel_id varchar, seq bigint, author_id varchar, author_kind varchar, author_name varchar, text text,
        created_at float8, tier varchar, cost int, platform_message_id varchar, spend_id varchar, retracted boolean,
        addressed json, deleted boolean, edited_at float8, images json
    )
), changed_messages AS (
    UPDATE messages AS m SET
        text = u.text, platform_message_id = u.platform_message_id, retracted = u.retracted, deleted = u.deleted,
        edited_at = u.edited_at
    FROM json_to_recordset($5::json) AS u(
        channel_id varchar, seq bigint, text text, platform_message_id varchar, retracted boolean, deleted boolean,
        edited_at float8
    )
    WHERE m.channel_id = u.channel_id AND m.seq = u.seq
), stored_memories AS (
    INSERT INTO memories AS m (channel_id, persona_id, seq, state, updated_at)
    SELECT * FROM json_to_recordset($6::json)
        AS u(channel_id varchar, persona_id varchar, seq bigint, state json, updated_at float8)
    ON CONFLICT (channel_id, persona_id) DO UPDATE
        SET seq = excluded.seq, state = excluded.state, updated_at = excluded.updated_at
        WHERE m.seq <= excluded.seq
    RETURNING 1
), used AS (
    INSERT INTO token_usage AS t (
        channel_id, persona_id, day, prompt_tokens, completion_tokens, requests, cache_read_tokens, cache_write_tokens
    )
    SELECT * FROM json_to_recordset($7::json) AS u(
        channel_id varchar, persona_id varchar, day int, prompt_tokens bigint, completion_tokens bigint, requests int,
        cache_read_tokens bigint, cache_write_tokens bigint
    )
    ON CONFLICT (channel_id, persona_id, day) DO UPDATE SET
        prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = t.completion_tokens + excluded.completion_tokens,
        requests = t.requests + excluded.requests,
        cache_read_tokens = t.cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = t.cache_write_tokens + excluded.cache_write_tokens
), notified AS (
    SELECT pg_notify($8, payload) FROM json_array_elements_text($9::json) AS payload
)
SELECT CASE
    WHEN (SELECT count(*) FROM saved) = json_array_length($1::json)
        AND (SELECT count(*) FROM stored_memories) = json_array_length($6::json)
        AND (
            SELECT count(*) FROM channels AS c JOIN json_to_recordset($10::json) AS k(id varchar, version bigint)
                ON c.id = k.id AND c.version = k.version
        ) = json_array_length($10::json)
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
        {**state_columns(state), "id": state.channel_id, "version": version, "updated_at": now}
        for state, version in writes.channels
    ]
    new_spends = [
        {**spend_columns(channel_id, spend), "version": versions[channel_id]} for channel_id, spend in writes.new_spends
    ]
    changed_spends = [
        {**spend_columns(channel_id, spend), "version": versions[channel_id]}
        for channel_id, spend in writes.changed_spends
    ]
    memories = [
        {
            "channel_id": m.channel_id,
            "persona_id": m.persona_id,
            "seq": m.seq,
            "state": m.state,
            "updated_at": m.updated_at,
        }
        for m in writes.memories
    ]
    usage = [dict(zip(_USAGE_COLUMNS, row, strict=True)) for row in writes.usage]
    unchanged = [{"id": channel_id, "version": version} for channel_id, version in writes.unchanged]
    params = (
        _json(channels),
        _json(new_spends),
        _json(changed_spends),
        _json([message_columns(message) for message in writes.new_messages]),
        _json([message_columns(message) for message in writes.changed_messages]),
        _json(memories),
        _json(usage),
        notify_channel,
        _json(notifications),
        _json(unchanged),
    )
    return _COMMIT, params


_USAGE_COLUMNS = (
    "channel_id",
    "persona_id",
    "day",
    "prompt_tokens",
    "completion_tokens",
    "requests",
    "cache_read_tokens",
    "cache_write_tokens",
)


def _json(rows: list[Any]) -> str:
    # Keys the statement does not ask for are left aside by json_to_recordset; NaN and the infinities are no JSON.
    return json.dumps(rows, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
