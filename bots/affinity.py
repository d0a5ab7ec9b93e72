"""Channel affinity: which of several arbiter processes serves a channel's requests.

Several arbiter processes on one PostgreSQL database can each serve any channel, but each keeps the state it
committed last for a channel and reuses it while no other process has written that channel since (see
``arbiter.storage.writer``). A channel whose requests reach both processes makes each catch up on the other's
writes in every transaction; a channel whose requests all reach one process keeps that state warm. So every
persona process (and the benchmark) sends a channel's requests to the same process: the one a stable hash of the
channel id picks, the same everywhere the URLs are listed in the same order. When it cannot be reached the next
one in the list takes over; any process can serve any channel, so this changes only where the work is done.

The same hash splits a fleet's channels between persona processes (``ChannelShare``): with as many persona
processes as arbiter processes, and the shares numbered as the URLs are listed, each persona process's channels
are the ones its arbiter serves.
"""

from __future__ import annotations

import hashlib
import re
import time
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ("Affinity", "ChannelShare", "home", "parse_arbiter_urls")


def parse_arbiter_urls(value: str) -> tuple[str, ...]:
    """The arbiter URLs in a setting's value: one, or several separated by commas (one per arbiter process),
    each ``http(s)://host[:port][/path]`` with any trailing slash dropped. Raises ValueError saying which entry is
    at fault, by its position: a URL may hold a password, so the message never repeats one."""
    entries = [entry.strip() for entry in value.split(",")]
    urls: list[str] = []
    for position, entry in enumerate(entries, start=1):
        where = f"entry {position} of {len(entries)}" if len(entries) > 1 else "the URL"
        if not entry:
            raise ValueError(f"{where} is empty: list the arbiter processes' URLs separated by single commas")
        parts = urllib.parse.urlsplit(entry)
        try:
            port = parts.port
        except ValueError:
            port = -1
        if parts.scheme not in ("http", "https") or not parts.hostname or port == -1:
            raise ValueError(f"{where} is not an http:// or https:// URL with a host (and a valid port, if any)")
        if parts.query or parts.fragment:
            raise ValueError(f"{where} has a query or a fragment: give the arbiter's base URL")
        url = entry.rstrip("/")
        if url in urls:
            raise ValueError(f"{where} is listed twice")
        urls.append(url)
    return tuple(urls)


def home(channel_id: str, count: int) -> int:
    """The index, among ``count`` arbiter processes, of the one that serves the channel. Stable across processes
    and runs (Python's own ``hash`` of a str is not), and even: 8 bytes of BLAKE2b of the id, modulo ``count``."""
    digest = hashlib.blake2b(channel_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


class Affinity:
    """The arbiter URLs in the order to try them, for a channel or for calls that belong to no channel.

    A URL that could not be reached goes to the back of every order for ``retry_after_s``, so the calls after a
    failover do not each wait on the unreachable process first; after that it is tried again in its turn.
    """

    def __init__(
        self,
        urls: Sequence[str],
        *,
        own: int = 0,
        retry_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``own``: where the calls that belong to no channel start (the multiplexed stream, the registration):
        each client may start at a different process, to spread them."""
        if not urls:
            raise ValueError("no arbiter URL")
        self.urls = tuple(urls)
        self._own = own % len(self.urls)
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._unreachable: dict[str, float] = {}  # URL -> until when it goes last

    def order(self, channel_id: str | None = None) -> list[str]:
        """The channel's process first (or this client's own, for None), then the others in list order from
        there; the ones that were unreachable lately come last, in the same order."""
        count = len(self.urls)
        if count == 1:
            return list(self.urls)
        start = self._own if channel_id is None else home(channel_id, count)
        ring = [self.urls[(start + offset) % count] for offset in range(count)]
        if not self._unreachable:
            return ring
        now = self._clock()
        for url, until in list(self._unreachable.items()):
            if until <= now:
                del self._unreachable[url]
        return [url for url in ring if url not in self._unreachable] + [url for url in ring if url in self._unreachable]

    def unreachable(self, url: str) -> None:
        if len(self.urls) > 1:
            self._unreachable[url] = self._clock() + self._retry_after_s

    def reachable(self, url: str) -> None:
        if self._unreachable:
            self._unreachable.pop(url, None)


_MOST_SHARES = 1024


@dataclass(frozen=True, slots=True)
class ChannelShare:
    """A persona process's part of the fleet's channels: share ``number`` (from 1) of ``count``, the channels
    ``home`` puts at index ``number - 1``. The ``count`` shares split every channel between them, each channel to
    exactly one, whatever its id and wherever it is computed."""

    number: int
    count: int

    @classmethod
    def parse(cls, value: str) -> ChannelShare:
        """``"2/3"``: the second share of three. Raises ValueError saying what is wrong."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", value)
        if match is None:
            raise ValueError(f"{value!r} is not a share: write it as NUMBER/COUNT, say 1/2 for the first of two")
        number, count = int(match.group(1)), int(match.group(2))
        if not 1 <= count <= _MOST_SHARES:
            raise ValueError(f"the count of shares in {value!r} must be 1 to {_MOST_SHARES}")
        if not 1 <= number <= count:
            raise ValueError(f"the share number in {value!r} must be 1 to {count}")
        return cls(number, count)

    def holds(self, channel_id: str) -> bool:
        return self.count == 1 or home(channel_id, self.count) == self.number - 1

    def __str__(self) -> str:
        return f"{self.number}/{self.count}"
