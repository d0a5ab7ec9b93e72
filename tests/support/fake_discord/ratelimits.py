"""Discord's REST rate limits, as the fake enforces them: per-route buckets and a per-bot global limit.

A bucket is per bot and per major parameter (the channel, the guild), as on Discord; several routes can share
one (adding and removing one's own reaction do). Each answer from a limited bucket carries the X-RateLimit-*
headers discord.py paces itself by; a request over the limit is answered 429 with ``retry_after`` (and counts
for nothing). The global limit (Discord: 50 requests a second per bot) has no headers: a client learns of it
only by a 429 with ``"global": true``. Windows are fixed: they start with a bucket's first request and last
``per_s`` seconds, on the event loop's clock (the one discord.py sleeps on), not the fake's message clock.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

__all__ = ("BUCKETS", "DISCORD_RATE_LIMITS", "Limit", "RateLimits", "Verdict")

# Which routes each named bucket holds (method and template, as in rest.ROUTES), and its major parameter.
BUCKETS: dict[str, tuple[tuple[str, ...], str]] = {
    "messages": (("POST /channels/{channel_id}/messages",), "channel_id"),
    "reactions": (
        (
            "PUT /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
            "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me",
            "DELETE /channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}",
        ),
        "channel_id",
    ),
    "typing": (("POST /channels/{channel_id}/typing",), "channel_id"),
    "edits": (("PATCH /channels/{channel_id}/messages/{message_id}",), "channel_id"),
    "deletes": (("DELETE /channels/{channel_id}/messages/{message_id}",), "channel_id"),
}

# What Discord answers in its headers for these buckets (a bot's messages: 5 per 5 s per channel; reactions:
# 1 per 0.25 s per channel), and its global limit. Pass ``rate_limits=DISCORD_RATE_LIMITS`` for Discord's pace.
DISCORD_RATE_LIMITS: dict[str, tuple[int, float]] = {
    "messages": (5, 5.0),
    "reactions": (1, 0.25),
    "typing": (5, 5.0),
    "edits": (5, 5.0),
    "deletes": (5, 1.0),
}
DISCORD_GLOBAL_LIMIT = (50, 1.0)

_BY_ROUTE = {route: name for name, (routes, _) in BUCKETS.items() for route in routes}


@dataclass(frozen=True)
class Limit:
    count: int
    per_s: float


@dataclass
class _Window:
    used: int = 0
    resets_at: float = 0.0


@dataclass(frozen=True)
class Verdict:
    """The answer to one request: let through (``retry_after`` None) or 429; ``headers`` go on the response;
    ``bucket`` names what it counted against (``messages:<channel id>``, ``global``), or None if unlimited."""

    headers: dict[str, str]
    bucket: str | None = None
    retry_after: float | None = None
    scope: str | None = None  # on a 429: "user" (a route's bucket) or "global"
    body: dict[str, Any] | None = None


class RateLimits:
    def __init__(
        self,
        routes: Mapping[str, tuple[int, float]] | None = None,
        global_limit: tuple[int, float] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        unknown = set(routes or {}) - set(BUCKETS)
        if unknown:
            raise ValueError(f"no such rate-limit bucket: {sorted(unknown)} (known: {sorted(BUCKETS)})")
        self.routes = {name: Limit(*limit) for name, limit in (routes or {}).items()}
        self.global_limit = None if global_limit is None else Limit(*global_limit)
        self.clock = clock
        self._windows: dict[tuple[int, str], _Window] = {}

    def bucket_of(self, method: str, template: str | None, params: Mapping[str, str]) -> tuple[str, Limit] | None:
        """The bucket a request counts against (``reactions:<channel id>``) and its limit; None if unlimited."""
        name = None if template is None else _BY_ROUTE.get(f"{method} {template}")
        if name is None or name not in self.routes:
            return None
        return f"{name}:{params.get(BUCKETS[name][1], '')}", self.routes[name]

    def check(self, bot_id: int, method: str, template: str | None, params: Mapping[str, str]) -> Verdict:
        """Count the request if both its bucket and the global limit allow it; otherwise a 429."""
        now = self.clock()
        found = self.bucket_of(method, template, params)
        route: tuple[str, Limit, _Window] | None = None
        if found is not None:
            bucket, limit = found
            window = self._window(bot_id, bucket, limit, now)
            if window.used >= limit.count:
                wait = _up(window.resets_at - now)
                headers = {**_headers(bucket, limit, window, now), **_refusal("user", wait)}
                return Verdict(headers, bucket, wait, "user", _body(wait, is_global=False))
            route = (bucket, limit, window)
        if self.global_limit is not None:
            window = self._window(bot_id, "global", self.global_limit, now)
            if window.used >= self.global_limit.count:
                wait = _up(window.resets_at - now)
                headers = {"X-RateLimit-Global": "true", **_refusal("global", wait)}
                return Verdict(headers, "global", wait, "global", _body(wait, is_global=True))
            window.used += 1
        if route is None:
            return Verdict({})
        bucket, limit, window = route
        window.used += 1
        return Verdict(_headers(bucket, limit, window, now), bucket)

    def _window(self, bot_id: int, bucket: str, limit: Limit, now: float) -> _Window:
        window = self._windows.setdefault((bot_id, bucket), _Window())
        if now >= window.resets_at:
            window.used, window.resets_at = 0, now + limit.per_s
        return window


def _headers(bucket: str, limit: Limit, window: _Window, now: float) -> dict[str, str]:
    reset_after = _up(window.resets_at - now)
    name = bucket.partition(":")[0]
    return {
        "X-RateLimit-Limit": str(limit.count),
        "X-RateLimit-Remaining": str(max(0, limit.count - window.used)),
        "X-RateLimit-Reset": f"{time.time() + reset_after:.3f}",
        "X-RateLimit-Reset-After": f"{reset_after:.3f}",
        "X-RateLimit-Bucket": hashlib.sha1(name.encode()).hexdigest()[:32],
    }


def _up(seconds: float) -> float:
    """Rounded up to the millisecond, as Discord's headers are: a client waiting this long is never early."""
    return max(0.001, math.ceil(seconds * 1000) / 1000)


def _refusal(scope: str, wait: float) -> dict[str, str]:
    # discord.py honours a 429 only if it came through Discord's proxy (a Via header): else it takes it for a
    # Cloudflare ban and raises at once.
    return {"Retry-After": str(math.ceil(wait)), "X-RateLimit-Scope": scope, "Via": "1.1 google"}


def _body(wait: float, *, is_global: bool) -> dict[str, Any]:
    return {"message": "You are being rate limited.", "retry_after": wait, "global": is_global, "code": 0}
