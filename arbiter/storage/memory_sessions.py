"""The in-memory twin of the MCP sessions' subscriptions (``arbiter.storage.subscriptions``): a ``SessionStore``
(``arbiter.storage.port``) on a dict, gone when the process ends."""

from __future__ import annotations

__all__ = ("MemorySessions",)


class MemorySessions:
    """Each subscription's member and when its session was last used, by (session id, channel id)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], tuple[str, float]] = {}

    async def subscribe(self, session_id: str, channel_id: str, member: str, now: float, *, keep: int) -> list[str]:
        owner, _ = self.rows.get((session_id, channel_id), (member, now))  # (the member it was kept for stays)
        self.rows[(session_id, channel_id)] = (owner, now)
        await self.touch(session_id, now)
        last_use: dict[str, float] = {}
        for (sid, _channel), (who, touched) in self.rows.items():
            if who == member:
                last_use[sid] = max(touched, last_use.get(sid, touched))
        ranked = sorted(last_use, key=lambda sid: (-last_use[sid], sid))
        evicted = ranked[keep:]
        for sid in evicted:
            await self.forget(sid)
        return evicted

    async def unsubscribe(self, session_id: str, channel_id: str) -> None:
        self.rows.pop((session_id, channel_id), None)

    async def channels_of(self, session_id: str) -> list[str]:
        return [channel_id for sid, channel_id in self.rows if sid == session_id]

    async def touch(self, session_id: str, now: float) -> None:
        for key, (member, _) in self.rows.items():
            if key[0] == session_id:
                self.rows[key] = (member, now)

    async def forget(self, session_id: str) -> None:
        for key in [key for key in self.rows if key[0] == session_id]:
            del self.rows[key]

    async def expire(self, before: float) -> int:
        idle = [key for key, (_, touched) in self.rows.items() if touched < before]
        for key in idle:
            del self.rows[key]
        return len(idle)
