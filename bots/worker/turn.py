"""A turn's I/O once the claim is granted: the model's decision (stopped when overtaken, cut off before the claim
lapses, its tokens counted and reported), the speech, the post or the reaction, and what follows a post."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.contract import Tier
from bots.errors import BotError, PostFailed
from bots.images import prompt_images
from bots.llm.base import DecisionRequest, ImageInput, LLMAuthError, LLMBadOutput, LLMError, LLMTimeout
from bots.llm.tool_rounds import decide_with_tools
from bots.memory import MEMORY_SCHEMA
from bots.platforms.base import Posted as Shown
from bots.prompt import persona_prompt, rules_prompt, transcript_turn
from bots.scene import scene_of
from bots.worker.events import (
    Answer,
    Decided,
    Failed,
    Overtaken,
    Posted,
    SawBeforePosting,
    SpeakAnswered,
    Unusable,
)
from bots.worker.events import PostFailed as PostLost
from bots.worker.looking import hear_what_was_said

if TYPE_CHECKING:
    from collections.abc import Callable

    from bots.llm.base import DecisionResult, ToolSpec, Usage
    from bots.runtime import PersonaRuntime
    from bots.worker.actions import Decide, Post, Speak

__all__ = ("decide", "link", "post", "provider_answered", "provider_failed", "retract", "speak")

_log = logging.getLogger(__name__)


async def _images(runtime: PersonaRuntime, action: Decide) -> tuple[ImageInput, ...]:
    """The images the model is shown: those chosen within the bounds that can be had (``bots.image_fetch``)."""
    chosen = prompt_images(action.shown, action.status.now, runtime.config, persona=runtime.persona.id)
    if runtime.images is None:  # nothing to check or fetch with: the addresses as they are, none the room's
        return tuple(item.image for item in chosen if not item.local)
    provider = runtime.provider.name.partition("/")[0]
    return await runtime.images.shown(chosen, persona=runtime.persona.id, provider=provider, time_left=action.time_left)


def _cache_key(persona_id: str, channel_id: str) -> str:
    """What a provider may group a persona's cached prompts by: its prompts in one channel begin alike (the rules
    hold the channel's topic and lengths). A digest, so that no channel or persona id leaves for the provider."""
    return "aizuchi-" + hashlib.sha256(f"{persona_id}\0{channel_id}".encode()).hexdigest()[:32]


def _request(
    runtime: PersonaRuntime, channel_id: str, action: Decide, images: tuple[ImageInput, ...]
) -> DecisionRequest:
    persona = runtime.persona
    status, shown, own_lines, memory = action.status, list(action.shown), list(action.own_lines), action.memory
    # Its own emojis, where it can react with them (Discord, once uploaded): a nod it may choose.
    emoji = runtime.platform.emoji_nods() if persona.react_with_emoji else ()
    # Every tier's length, whatever the claim allows: the rules and the decide tool stay the same on each call of the
    # persona here (a provider caches them); what this claim allows is said at the end of the conversation.
    lengths = {str(tier): view.max_length for tier, view in status.tiers.items()}
    rules = rules_prompt(
        persona, lengths, status.topic, keeps_notes=True, emoji_nods=emoji, reactions=runtime.platform.reacts
    )
    transcript = transcript_turn(
        persona,
        shown,
        status,
        own_lines,
        memory=memory,
        keeps_notes=True,
        moves=action.actions,
        max_lengths=lengths,
    )
    return DecisionRequest(
        system=persona_prompt(persona) + "\n\n" + rules,
        turns=(dataclasses.replace(transcript, images=images),),
        actions=action.actions,  # type: ignore[arg-type]
        max_lengths=lengths,
        time_left_s=action.time_left,
        allow_pass=action.allow_pass,
        memory_schema=MEMORY_SCHEMA,
        scene=scene_of(
            persona,
            shown,
            status,
            own_lines,
            memory,
            emoji_nods=emoji,
            images=[image.url for image in images],
            moves=action.actions,
        ),
        cache_key=_cache_key(persona.id, channel_id),
    )


async def decide(runtime: PersonaRuntime, channel_id: str, action: Decide, overtaken: asyncio.Event) -> Decided:
    """One model call on the claim, showing it was typing meanwhile; stopped when ``overtaken`` is set (the arbiter
    would refuse the answer, so generating the rest of it would be spent for nothing)."""
    # Tools to look things up are for saying something: a nod needs none, and its claim is short.
    tools = runtime.tools.specs if runtime.tools is not None and action.claim.tier is not Tier.AIZUCHI else ()
    async with runtime.platform.typing(channel_id):
        request = _request(runtime, channel_id, action, await _images(runtime, action))
        try:
            # The provider keeps to time_left_s itself; this only makes sure of it, whatever the provider (and
            # whatever the tools do).
            async with asyncio.timeout(None if request.time_left_s is None else request.time_left_s + 0.5):
                result = await _unless_overtaken(runtime, channel_id, request, tools, overtaken)
        except TimeoutError:
            await provider_failed(runtime, channel_id, LLMTimeout("no answer while the claim held"))
            return Decided(Failed())
        except LLMBadOutput as error:
            runtime.stats.count_usage(error.usage)
            await _report_usage(runtime, channel_id, error.usage)
            _log.warning("persona=%s: unusable model output: %s", runtime.persona.id, error)
            return Decided(Unusable())
        except LLMError as error:
            await provider_failed(runtime, channel_id, error)
            return Decided(Failed())
        if result is None:
            return Decided(Overtaken())
        await provider_answered(runtime, channel_id, result.usage)
        return Decided(Answer(result.decision))


async def _unless_overtaken(
    runtime: PersonaRuntime,
    channel_id: str,
    request: DecisionRequest,
    tools: tuple[ToolSpec, ...],
    overtaken: asyncio.Event,
) -> DecisionResult | None:
    call = asyncio.ensure_future(_decide(runtime, channel_id, request, tools))
    stop = asyncio.ensure_future(overtaken.wait())
    try:
        await asyncio.wait((call, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not call.done():
            call.cancel()
        await asyncio.gather(call, stop, return_exceptions=True)
    if call.cancelled():
        return None
    # Finished, though perhaps overtaken at the same moment: then the arbiter refuses it, and it counts as wasted.
    return call.result()


async def _decide(
    runtime: PersonaRuntime, channel_id: str, request: DecisionRequest, tools: tuple[ToolSpec, ...]
) -> DecisionResult:
    """One forced decision; or, offered tools, a few rounds of tool calls and then the decision (each round an LLM
    request, its tokens counted and reported as it is answered)."""
    if not tools or runtime.tools is None:
        runtime.stats.llm_requests += 1
        return await runtime.provider.decide(request)

    def counted() -> None:
        runtime.stats.llm_requests += 1

    async def answered(usage: Usage) -> None:
        await provider_answered(runtime, channel_id, usage)

    return await decide_with_tools(
        runtime.provider,
        request,
        tools,
        runtime.tools.call,
        rounds=runtime.config.tool_rounds,
        on_request=counted,
        on_answer=answered,
    )


async def speak(runtime: PersonaRuntime, channel_id: str, action: Speak, heard: Callable[[], int]) -> SpeakAnswered:
    """Speak on the claim, once the arbiter has heard what was said while the model wrote (it judges the speech with
    it)."""
    await hear_what_was_said(runtime, channel_id, heard)
    # What the arbiter is known to have recorded, not what the account saw: if the wait above ran out (a busy
    # machine, an arbiter hearing late), a question it saw but the arbiter has not recorded must still be found
    # after the grant, and the speech retracted, not posted between the question and its answer.
    said_before = min(runtime.platform.latest_said(channel_id), heard())
    request = wire.SpeakRequest(text=action.text, tier=action.tier, based_on_seq=action.based_on, memory=action.memory)
    result = await runtime.arbiter.speak(channel_id, action.claim_id, request)
    return SpeakAnswered(result, said_before, runtime.platform.latest_said(channel_id))


async def post(runtime: PersonaRuntime, channel_id: str, action: Post) -> Posted | PostLost | SawBeforePosting:
    """Post the message; or, for a persona that nods with emoji, react to the message it answers. Not if the account
    has seen a person speak since the message's place was checked: the speak's answer and the post are apart by a
    turn of a busy event loop, long enough for a question to someone else to arrive."""
    if (seen := runtime.platform.latest_said(channel_id)) > action.seen:
        return SawBeforePosting(action, seen)
    try:
        shown = await _deliver(runtime, channel_id, action)
    except PostFailed as error:
        return PostLost(action.seq, str(error), runtime.cannot_post(channel_id))
    return Posted(action.tier, action.seq, shown.platform_message_id)


async def _deliver(runtime: PersonaRuntime, channel_id: str, action: Post) -> Shown:
    platform = runtime.platform
    target = action.react_to
    if target is not None and await platform.react(channel_id, target, action.text):
        return Shown(f"reaction-{target}-{action.seq}")
    return await platform.post(channel_id, action.text)


async def retract(runtime: PersonaRuntime, channel_id: str, seq: int) -> None:
    with contextlib.suppress(BotError):
        await runtime.arbiter.retract(channel_id, seq)


async def link(runtime: PersonaRuntime, channel_id: str, seq: int, platform_message_id: str) -> None:
    with contextlib.suppress(BotError):
        await runtime.arbiter.link(channel_id, seq, platform_message_id)


async def provider_failed(runtime: PersonaRuntime, channel_id: str, error: LLMError) -> None:
    """Back off, or stop calling for good when the key was refused; what the failed call spent (if the API answered
    at all) still counts."""
    runtime.stats.count_usage(error.usage)
    if isinstance(error, LLMAuthError):
        await runtime.stop_calling(error)
    else:
        runtime.provider_failed(error)
    await _report_usage(runtime, channel_id, error.usage)


async def provider_answered(runtime: PersonaRuntime, channel_id: str, usage: Usage) -> None:
    runtime.provider_ok()
    runtime.stats.count_usage(usage)
    await _report_usage(runtime, channel_id, usage)


async def _report_usage(runtime: PersonaRuntime, channel_id: str, usage: Usage | None) -> None:
    if usage is None or (usage.prompt_tokens == 0 and usage.completion_tokens == 0):
        return
    # The cache's reads and writes at the model's own prices; a model the price table does not know, at the rates
    # the arbiter assumes (those of the built-in models).
    price = runtime.provider.price
    rates = {} if price is None else {"cache_read_rate": price.read_rate, "cache_write_rate": price.write_rate}
    report = wire.UsageReport(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        **rates,
    )
    try:
        await runtime.arbiter.report_usage(channel_id, report)
    except BotError as error:
        _log.warning("persona=%s: could not report usage: %s", runtime.persona.id, error)
