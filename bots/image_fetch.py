"""Whether the images chosen for a prompt can be had, before the one model call that shows them.

Both providers fetch an image's address themselves, and both refuse the whole request when one cannot be
downloaded (a deleted attachment, a 403 or 404, a refused connection, a page that is not an image): the persona
would lose its turn over one picture. Two ways out: check each address before the call, or call again without the
image when the provider says it could not fetch it. The second spends a second model call on a post, against the
rule of one call per post, and the failed call's tokens with it; so each address is checked first, with a short
read of its first bytes (``Range: bytes=0-63``: the status and the file's signature, not the picture), at most
``timeout_s`` for all of a prompt's images together, the answer kept a few minutes per address, so a conversation's
next looks ask nothing. What cannot be had is skipped with one line in the log, as an expired image is, and the
message is read by its text. An address can still fail between the check and the provider's fetch; that call then
fails as any provider error does, and the next look checks again.

An image the arbiter holds itself (``local``: the room's, on a loopback address no provider reaches) is fetched
whole and sent inline, within what the provider takes inline (``bots.llm.images.INLINE_MAX_BYTES``); its bytes
never change (the address is their hash), so they are kept for the next looks, the newest within a bound."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import aiohttp

from bots.llm.images import INLINE_MAX_BYTES, media_type_of

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from bots.images import ChosenImage
    from bots.llm.base import ImageInput

__all__ = ("ImageFetcher",)

_log = logging.getLogger(__name__)

_PROBE_BYTES = 64
_DEFAULT_INLINE = 20 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Checked:
    problem: str | None  # None: the address answers with an image
    at: float


class ImageFetcher:
    """Checks and fetches the images of the prompts of the personas of one process (they share what it learnt)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout_s: float = 3.0,
        keep_s: float = 300.0,
        addresses: int = 1024,
        held_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._session = session
        self._timeout_s = timeout_s
        self._keep_s = keep_s
        self._addresses = addresses
        self._held_bytes = held_bytes
        self._clock = clock
        self._checked: OrderedDict[str, _Checked] = OrderedDict()
        self._held: OrderedDict[str, bytes] = OrderedDict()

    async def shown(
        self, chosen: Sequence[ChosenImage], *, persona: str, provider: str, time_left: float | None = None
    ) -> tuple[ImageInput, ...]:
        """The images of ``chosen`` the provider can be given (the local ones with their bytes), in order; the
        others skipped, one line each. ``provider``: "anthropic", "openai", ... (what it takes inline)."""
        if not chosen:
            return ()
        budget = self._timeout_s if time_left is None else max(0.0, min(self._timeout_s, time_left / 4))
        inline_max = INLINE_MAX_BYTES.get(provider, _DEFAULT_INLINE)
        found = await asyncio.gather(*(self._within(budget, item, inline_max) for item in chosen))
        shown: list[ImageInput] = []
        for item, (image, problem) in zip(chosen, found, strict=True):
            if image is None:
                _log.info("persona=%s: skipping an image of message %d: %s", persona, item.seq, problem)
            else:
                shown.append(image)
        return tuple(shown)

    async def _within(self, budget: float, item: ChosenImage, inline_max: int) -> tuple[ImageInput | None, str | None]:
        try:
            async with asyncio.timeout(budget):
                return await self._one(item, inline_max)
        except TimeoutError:
            problem = f"its address did not answer within {budget:.1f} s"
            if not item.local:
                self._remember(item.image.url, problem, self._clock())  # a slow host is not waited for again soon
            return None, problem

    async def _one(self, item: ChosenImage, inline_max: int) -> tuple[ImageInput | None, str | None]:
        if not item.local:
            problem = await self._check(item.image.url)
            return (item.image, None) if problem is None else (None, problem)
        if item.size is not None and item.size > inline_max:
            return None, f"at {item.size:,} bytes it is over the {inline_max:,} its provider takes inline"
        data = self._held.get(item.image.url)
        if data is None:
            data, problem = await self._fetch(item.image.url, inline_max)
            if data is None:
                return None, problem
            self._hold(item.image.url, data)
        kind = media_type_of(data)
        if kind != item.image.media_type:
            return None, f"its bytes are {kind or 'not an image'}, not {item.image.media_type}"
        return replace(item.image, data=data), None

    async def _check(self, url: str) -> str | None:
        """Why ``url`` cannot be had as an image (None: it can), asked once per address every ``keep_s``."""
        now = self._clock()
        known = self._checked.get(url)
        if known is not None and now - known.at < self._keep_s:
            return known.problem
        data, problem = await self._fetch(url, _PROBE_BYTES, probe=True)
        if data is not None and media_type_of(data) is None:
            problem = "its address answers with something that is not an image the models take"
        self._remember(url, problem, now)
        return problem

    def _remember(self, url: str, problem: str | None, now: float) -> None:
        self._checked[url] = _Checked(problem, now)
        self._checked.move_to_end(url)
        while len(self._checked) > self._addresses:
            self._checked.popitem(last=False)

    async def _fetch(self, url: str, limit: int, *, probe: bool = False) -> tuple[bytes | None, str | None]:
        """The first ``limit`` bytes (``probe``) or all of them (refused past ``limit``), or why not."""
        headers = {"Range": f"bytes=0-{limit - 1}"} if probe else {}
        try:
            async with self._session.get(url, headers=headers, allow_redirects=True) as response:
                if response.status not in (200, 206):
                    return None, f"its address answered {response.status}"
                data = await _read_up_to(response.content, limit if probe else limit + 1)
        except aiohttp.ClientError as error:
            return None, f"its address could not be reached ({type(error).__name__})"
        if not probe and len(data) > limit:
            return None, f"it is over the {limit:,} bytes its provider takes inline"
        return data, None

    def _hold(self, url: str, data: bytes) -> None:
        self._held[url] = data
        total = sum(len(held) for held in self._held.values())
        while total > self._held_bytes and len(self._held) > 1:
            _url, dropped = self._held.popitem(last=False)
            total -= len(dropped)


async def _read_up_to(content: aiohttp.StreamReader, count: int) -> bytes:
    """Up to ``count`` bytes of a body, fewer only at its end (one ``read`` may return less than it has)."""
    data = bytearray()
    while len(data) < count and (chunk := await content.read(count - len(data))):
        data += chunk
    return bytes(data)
