"""The prompt-cache rules of the local LLM wire servers (``tests.support.llm_server``): which prefix of a request
the real APIs cache, when they read it back, and how they report it.

Both APIs cache a request's beginning, in this order: the tools, then the system prompt, then the messages. A prefix
is cached at a *breakpoint*; one seen before within the cache's lifetime is read from the cache, the first time it
is written, and one shorter than the model's minimum is neither (no error: the usage shows nothing cached). Tokens
are counted as ``arbiter.contract.estimate_tokens`` counts them (the servers have no tokenizer); the scripted input
tokens of a reply stand for what comes after the last breakpoint, and the cache's share is added to them.

Anthropic Messages (platform.claude.com/docs/en/build-with-claude/prompt-caching): a breakpoint is a block with
``cache_control`` (``{"type": "ephemeral"}``, ``ttl`` "5m", the default, or "1h") on a tool, a system block or a
message's content block; a top-level ``cache_control`` puts one on the last block (automatic caching). At most 4
("A maximum of 4 blocks with cache_control may be provided. Found N.", as public issues quote it). The longest
prefix read back at an earlier breakpoint is read; the rest, up to the last breakpoint long enough, is written.
An entry lives 5 minutes (or 1 hour) from its last use. The usage says ``cache_read_input_tokens`` and
``cache_creation_input_tokens``; ``input_tokens`` is what came after the last breakpoint. The minimum is the
model's (``ClaudeModel.min_cacheable``: 512 for Claude Haiku, Sonnet and Opus 5.5 - each model's overview page -
and 4,096 for Haiku 4.5, the caching page's table).

OpenAI Chat Completions (developers.openai.com/api/docs/guides/prompt-caching): a prompt of 1,024 tokens or more is
cached; ``prompt_tokens_details.cached_tokens`` says what was read. On GPT-5.6 and later (``GPTModel.cache_writes``)
a cached prefix is matched exactly at a breakpoint, writes are billed (1.25x) and reported as
``prompt_tokens_details.cache_write_tokens``, and breakpoints are set by ``prompt_cache_options``: ``mode``
"implicit" (the default: one at the end of the newest message, and the latest three explicit ones) or "explicit"
(only the content parts marked ``prompt_cache_breakpoint``, the latest four; none marked, nothing cached); ``ttl``
"30m", the only value. Earlier models cache the prompt at its end, as the implicit breakpoint does, and report no
writes (they cost nothing there). ``prompt_cache_key`` only routes a request to where its prefix may be (a hit is
likelier, never different in kind), so entries are keyed by model and prefix alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from arbiter.contract import estimate_tokens

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ("CLAUDE_MAX_BREAKPOINTS", "CacheRefused", "Cached", "PromptCache", "claude_prefixes", "gpt_prefixes")

CLAUDE_MAX_BREAKPOINTS = 4
_CLAUDE_TTL = {"5m": 300.0, "1h": 3600.0}
_GPT_TTL = {"30m": 1800.0}
_GPT_MAX_WRITES = 4


class CacheRefused(Exception):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(frozen=True)
class Breakpoint:
    """The prefix up to a breakpoint: its digest, its tokens, and how long an entry of it lives."""

    digest: str
    tokens: int
    ttl_s: float


@dataclass(frozen=True)
class Cached:
    read: int = 0
    written: int = 0


@dataclass
class PromptCache:
    """The cache of one server (one organisation): prefix digests and when each entry expires."""

    clock: Callable[[], float]
    entries: dict[str, float] = field(default_factory=dict)

    def use(self, breakpoints: list[Breakpoint], minimum: int, *, writes: int = _GPT_MAX_WRITES) -> Cached:
        """Read the longest prefix cached at a breakpoint; write the later ones (the latest ``writes`` of them) that
        are long enough. Returns the tokens read and written."""
        now = self.clock()
        eligible = [point for point in breakpoints if point.tokens >= minimum]
        read_at = -1
        for index in range(len(eligible) - 1, -1, -1):
            point = eligible[index]
            if self.entries.get(point.digest, float("-inf")) > now:
                self.entries[point.digest] = now + point.ttl_s  # a read refreshes the entry's lifetime
                read_at = index
                break
        read = eligible[read_at].tokens if read_at >= 0 else 0
        later = eligible[read_at + 1 :][-writes:] if writes > 0 else []
        for point in later:
            self.entries[point.digest] = now + point.ttl_s
        written = later[-1].tokens - read if later else 0
        return Cached(read=read, written=written)


def _digest(model: str, segments: list[str]) -> str:
    return hashlib.sha256(json.dumps([model, *segments], ensure_ascii=False).encode()).hexdigest()


def _without(block: dict[str, Any], key: str) -> str:
    return json.dumps({name: value for name, value in block.items() if name != key}, ensure_ascii=False, sort_keys=True)


def claude_prefixes(body: dict[str, Any]) -> list[Breakpoint]:
    """The breakpoints of a Messages request, in order (refused past four, or with a ``cache_control`` the API does
    not take)."""
    segments: list[tuple[str, int, Any]] = []  # (text, tokens, cache_control)
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            text = _without(tool, "cache_control")
            segments.append((text, estimate_tokens(text), tool.get("cache_control")))
    system = body.get("system")
    for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
        if isinstance(block, dict):
            text = str(block.get("text", ""))
            segments.append((text, estimate_tokens(text), block.get("cache_control")))
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for block in blocks:
            if isinstance(block, dict):
                text = _without(block, "cache_control")
                segments.append((f"{message.get('role')}:{text}", estimate_tokens(text), block.get("cache_control")))
    marks = [index for index, (_, _, control) in enumerate(segments) if control is not None]
    automatic = body.get("cache_control")
    if automatic is not None and segments:
        marks = sorted({*marks, len(segments) - 1})
    if len(marks) > CLAUDE_MAX_BREAKPOINTS:
        raise CacheRefused(f"A maximum of 4 blocks with cache_control may be provided. Found {len(marks)}.")
    model = str(body.get("model", ""))
    points = []
    for index in marks:
        control = segments[index][2] if segments[index][2] is not None else automatic
        if not isinstance(control, dict) or control.get("type") != "ephemeral":
            raise CacheRefused("cache_control.type: Input should be 'ephemeral'")
        ttl = control.get("ttl", "5m")
        if ttl not in _CLAUDE_TTL:
            raise CacheRefused("cache_control.ttl: Input should be '5m' or '1h'")
        prefix = segments[: index + 1]
        points.append(
            Breakpoint(_digest(model, [text for text, _, _ in prefix]), sum(t for _, t, _ in prefix), _CLAUDE_TTL[ttl])
        )
    return points


def gpt_prefixes(body: dict[str, Any], *, explicit_breakpoints: bool) -> tuple[list[Breakpoint], int]:
    """The breakpoints of a Chat Completions request, in order, and how many of them may be written.
    ``explicit_breakpoints``: a GPT-5.6 or later model (which takes ``prompt_cache_options`` and marked parts)."""
    options = body.get("prompt_cache_options")
    mode, ttl = "implicit", "30m"
    if isinstance(options, dict) and explicit_breakpoints:
        mode = options.get("mode", "implicit")
        ttl = options.get("ttl", "30m")
        if mode not in ("implicit", "explicit"):
            raise CacheRefused(
                f"Invalid value: '{mode}'. Supported values are: 'implicit' and 'explicit'.",
                "prompt_cache_options.mode",
            )
        if ttl not in _GPT_TTL:
            raise CacheRefused(f"Invalid value: '{ttl}'. Supported values are: '30m'.", "prompt_cache_options.ttl")
    segments: list[tuple[str, int, bool]] = []  # (text, tokens, marked)
    for tool in body.get("tools") or []:
        text = json.dumps(tool, ensure_ascii=False, sort_keys=True)
        segments.append((text, estimate_tokens(text), False))
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for part in parts:
            if not isinstance(part, dict):
                continue
            text = (
                str(part.get("text", "")) if part.get("type") == "text" else _without(part, "prompt_cache_breakpoint")
            )
            marked = explicit_breakpoints and isinstance(part.get("prompt_cache_breakpoint"), dict)
            segments.append((f"{message.get('role')}:{text}", estimate_tokens(text), marked))
    marks = [index for index, (_, _, marked) in enumerate(segments) if marked]
    writes = _GPT_MAX_WRITES
    if mode == "implicit" and segments:
        marks = sorted({*marks[-(_GPT_MAX_WRITES - 1) :], len(segments) - 1})
    model = str(body.get("model", ""))
    points = [
        Breakpoint(
            _digest(model, [text for text, _, _ in segments[: index + 1]]),
            sum(tokens for _, tokens, _ in segments[: index + 1]),
            _GPT_TTL[ttl],
        )
        for index in marks
    ]
    return points, writes
