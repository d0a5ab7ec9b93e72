"""Events between arbiter processes that share one PostgreSQL database: NOTIFY in the writer's transaction
(delivered at commit, never for a rollback), LISTEN on a dedicated connection in every process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from arbiter.events import Event
from arbiter.storage.writer import pg_notify

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from sqlalchemy import Connection
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ("PostgresRelay",)

_log = logging.getLogger(__name__)

CHANNEL = "aizuchi_events"
# PostgreSQL refuses NOTIFY payloads of 8000 bytes or more.
_MAX_PAYLOAD = 7_900


class PostgresRelay:
    def __init__(self, engine: AsyncEngine, publish: Callable[[Sequence[Event]], None]) -> None:
        self._engine = engine
        self._publish = publish
        self.origin = uuid.uuid4().hex[:12]
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()

    def notify(self, conn: Connection, events: Sequence[Event]) -> None:
        pg_notify(conn, CHANNEL, [self._payload(event) for event in events])

    def _payload(self, event: Event) -> str:
        payload = json.dumps({"origin": self.origin, "event": event.to_json()}, ensure_ascii=False)
        if len(payload.encode()) < _MAX_PAYLOAD:
            return payload
        # Too big to carry (a very long message): send it with the text cut; readers can fetch the history.
        data: dict[str, Any] = dict(event.data)
        if "message" in data:
            message = dict(data["message"])
            message["text"] = message["text"][:1000]
            data["message"] = message
            data["truncated"] = True
        return json.dumps({"origin": self.origin, "event": Event(event.channel_id, event.type, data).to_json()})

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen_forever(), name="aizuchi-pg-listen")
        await asyncio.wait_for(self._connected.wait(), timeout=30)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_notify(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        try:
            envelope = json.loads(payload)
            if envelope.get("origin") == self.origin:
                return  # our own: already published locally when the transaction committed
            self._publish([Event.from_json(envelope["event"])])
        except (ValueError, KeyError) as error:
            _log.warning("ignoring a malformed notification: %s", error)

    async def _listen_forever(self) -> None:
        delay = 0.5
        while True:
            try:
                async with self._engine.connect() as conn:
                    raw = await conn.get_raw_connection()
                    driver = raw.driver_connection
                    assert driver is not None
                    lost = asyncio.Event()
                    driver.add_termination_listener(lambda _c, lost=lost: lost.set())
                    await driver.add_listener(CHANNEL, self._on_notify)
                    self._connected.set()
                    delay = 0.5
                    _log.debug("listening for events from other arbiter processes")
                    await lost.wait()
                    _log.warning("lost the PostgreSQL listen connection; reconnecting")
            except asyncio.CancelledError:
                raise
            except Exception as error:
                _log.warning("cannot listen for events (%s); retrying in %.1fs", error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 10.0)
