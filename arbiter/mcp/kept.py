"""MCP sessions the arbiter need not remember: a session id proves itself, and what a session keeps (its
subscriptions) lives in storage.

A session id is a random nonce and a MAC of it keyed by the caller's token, so any arbiter process that knows the
token (every one of a deployment, and the same one after a restart) recognises the session without having seen it,
and no other token can use it. Opening a session therefore stores nothing: a client that opens ten thousand and
walks away costs nothing. What a session keeps, its subscriptions to channel histories, is in a ``SessionStore``
(``arbiter.storage.port``: a row per channel in ``mcp_subscriptions``, or the in-memory twin's), capped per token (the
least recently used of a token's sessions gives way to its newest, never another token's) and forgotten after
``idle_s`` without a sign of use.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import logging
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from arbiter.storage.port import SessionStore

__all__ = ("KeptSessions", "SessionLimits", "new_session_id", "session_key", "session_of")

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SessionLimits:
    per_token: int = 16  # kept sessions (with subscriptions) and open streams, per token
    idle_s: float = 300.0  # how long a kept session outlives its last sign of use


# Both cached: OpenSSL 3 looks its algorithm up on every call, which costs more than the hash, and a client sends
# the same token and session id with each of its requests.
@functools.lru_cache(maxsize=1024)
def session_key(token: str) -> bytes:
    """The key a token's session ids are signed with: the token's, so rotating a token ends its sessions."""
    return hashlib.sha256(b"aizuchi mcp session\0" + token.encode()).digest()


@functools.lru_cache(maxsize=4096)
def _mac(key: bytes, nonce: str) -> str:
    digest = hmac.digest(key, nonce.encode(), "sha256")[:16]
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def new_session_id(key: bytes) -> str:
    nonce = secrets.token_urlsafe(16)
    return f"{nonce}.{_mac(key, nonce)}"


def session_of(session_id: str | None, key: bytes) -> str | None:
    """``session_id`` if it is one of this token's sessions, else None."""
    if not session_id:
        return None
    nonce, dot, mac = session_id.partition(".")
    return session_id if dot and nonce and hmac.compare_digest(mac.encode(), _mac(key, nonce).encode()) else None


class KeptSessions:
    """The subscriptions of every session, in storage; ``member`` is ``""`` for the administrator."""

    def __init__(self, store: SessionStore, clock: Callable[[], float], limits: SessionLimits) -> None:
        self._store = store
        self._clock = clock
        self.limits = limits

    async def subscribe(self, session_id: str, member: str, channel_id: str) -> list[str]:
        """Keep the subscription; the ids of the member's sessions that gave way to it (over the cap)."""
        evicted = await self._store.subscribe(session_id, channel_id, member, self._clock(), keep=self.limits.per_token)
        if evicted:
            _log.info("%s: %d MCP session(s) over the cap of %d gave way", member or "admin", len(evicted),
                      self.limits.per_token)  # fmt: skip
        return evicted

    async def unsubscribe(self, session_id: str, channel_id: str) -> None:
        await self._store.unsubscribe(session_id, channel_id)

    async def channels(self, session_id: str) -> set[str]:
        return set(await self._store.channels_of(session_id))

    async def touch(self, session_id: str) -> None:
        await self._store.touch(session_id, self._clock())

    async def forget(self, session_id: str) -> None:
        await self._store.forget(session_id)

    async def expire(self) -> int:
        """Forget what idle sessions kept; how many subscriptions went."""
        return await self._store.expire(self._clock() - self.limits.idle_s)
