"""Tool-loop mode, after the reference design: on each new message the model itself calls ``history``,
``status`` and ``consume`` as tools, in a bounded loop, until it answers without a tool call.

It is here for comparison (``aizuchi bench conversation`` runs both modes on one script) and for people who
prefer the model to decide everything. It costs several LLM calls per message and re-reads the whole history
each time; the default mode (``bots.runtime``) plans first and makes one call. Unlike the reference, messages
that arrive during a loop are not dropped: they start one more loop afterwards.

Tool dispatch is one loop over the provider-neutral ``ChatProvider.complete``; each provider adapter maps
tool declarations, calls and results to its own API.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from arbiter import contract as wire
from bots.errors import BotError, PostFailed
from bots.language.text import neutralize_mentions
from bots.llm.base import CompletionRequest, LLMError, ToolResult, ToolSpec, Turn
from bots.planner import refused_outright, stale
from bots.prompt import COLUMNS_NOTE, LANGUAGE_NAMES, length_limit, persona_prompt
from bots.runtime import ChannelWorker, PersonaRuntime
from bots.worker.turn import provider_answered, provider_failed

if TYPE_CHECKING:
    import random
    from collections.abc import Callable, Sequence

    from arbiter.contract import MessageView
    from bots.llm.base import ToolCall
    from bots.persona import Persona
    from bots.worker.config import RuntimeConfig

__all__ = ("TOOLS", "ToolLoopRuntime", "ToolLoopWorker")

_log = logging.getLogger(__name__)

MAX_STEPS = 8  # the reference's agent stopped at 20 steps; a reply never needs more than a handful
HISTORY_LIMIT = 200  # the reference returned the whole history on every call; this caps it

TOOLS = (
    ToolSpec(
        "history", "Read the conversation so far: who said what, oldest first.", {"type": "object", "properties": {}}
    ),
    ToolSpec(
        "status",
        "Check the shared speaking resource: its current level and what each kind of message costs.",
        {"type": "object", "properties": {}},
    ),
    ToolSpec(
        "consume",
        "Speak: spend from the shared resource and post your message. Fails, without posting, when the resource "
        "is too low or the message too long for the amount.",
        {
            "type": "object",
            "properties": {
                "amount": {"type": "integer", "description": "resource to spend: a tier's cost"},
                "message": {"type": "string", "description": "what you say, in your own voice"},
            },
            "required": ["amount", "message"],
        },
    ),
)


def _instructions(runtime: PersonaRuntime, status: wire.StatusView) -> str:
    persona = runtime.persona
    tiers = status.tiers
    aizuchi, remark, long = tiers[wire.Tier.AIZUCHI], tiers[wire.Tier.REMARK], tiers[wire.Tier.LONG]
    return (
        persona_prompt(persona) + "\n\nThe room takes turns with a shared resource. Each time, follow these steps:\n"
        "1. Call history and read what has been said; never repeat it.\n"
        "2. Call status to see the resource level.\n"
        f"3. Choose a length: a short nod costs {aizuchi.cost}"
        f" ({length_limit(aizuchi.max_length)});"
        f" a remark costs {remark.cost} ({length_limit(remark.max_length)}),"
        " only when you add an opinion and the level allows it;"
        f" a long remark costs {long.cost} ({length_limit(long.max_length)}),"
        f" only to start a new topic. {COLUMNS_NOTE}\n"
        "4. Call consume with that amount and your message. Then stop.\n"
        f"Write in {LANGUAGE_NAMES[persona.language]}. Plain text, no @-mentions."
    )


def _quick_pause(persona: Persona, config: RuntimeConfig, window: Sequence[MessageView], rng: random.Random) -> float:
    # The reference started a loop as soon as a message arrived; a small jitter keeps agents apart.
    return rng.uniform(0.05, 0.3) * config.base_delay_s


class ToolLoopWorker(ChannelWorker):
    __slots__ = ()

    def pause_rule(self) -> Callable[[Persona, RuntimeConfig, Sequence[MessageView], random.Random], float]:
        return _quick_pause

    async def look(self) -> None:
        await self._loop()

    async def _loop(self) -> None:
        runtime = self.runtime
        if self.window:
            self.dealt_with(self.window[-1].seq)
        status = await runtime.arbiter.status(self.channel_id)
        # The reference had no pause, mute or budget; here they hold in this mode too: no loop, no tokens spent.
        # Nor did it read the history back after a restart: what was said long ago is no cue here either.
        why = refused_outright(status) or stale(runtime.persona, status, list(self.window))
        if why is not None:
            _log.debug("persona=%s channel=%s: no loop: %s", runtime.persona.id, self.channel_id, why)
            return
        system = _instructions(runtime, status)
        turns: list[Turn] = [
            Turn(role="user", text="Check the resource level and the conversation history, then speak as instructed.")
        ]
        async with runtime.platform.typing(self.channel_id):
            for _step in range(MAX_STEPS):
                request = CompletionRequest(
                    system=system,
                    turns=tuple(turns),
                    tools=TOOLS,
                    tool_choice="auto",
                )
                runtime.stats.llm_requests += 1
                try:
                    completion = await runtime.provider.complete(request)
                except LLMError as error:
                    await provider_failed(runtime, self.channel_id, error)
                    return
                await provider_answered(runtime, self.channel_id, completion.usage)
                if not completion.tool_calls:
                    return
                turns.append(Turn(role="assistant", text=completion.text, tool_calls=completion.tool_calls))
                results = [await self._dispatch(call) for call in completion.tool_calls]
                turns.append(Turn(role="user", tool_results=tuple(results)))

    async def _dispatch(self, call: ToolCall) -> ToolResult:
        try:
            content = await self._run_tool(call.name, call.arguments)
        except BotError as error:
            return ToolResult(call.id, call.name, json.dumps({"error": str(error)}), is_error=True)
        return ToolResult(call.id, call.name, json.dumps(content, ensure_ascii=False))

    async def _run_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        arbiter = self.runtime.arbiter
        if name == "status":
            status = await arbiter.status(self.channel_id)
            costs = {str(tier): view.cost for tier, view in status.tiers.items()}
            return {"resource": status.level, "capacity": status.capacity, "costs": costs}
        if name == "history":
            page = await arbiter.history(
                self.channel_id, after=max(0, self.last_seq - HISTORY_LIMIT), limit=HISTORY_LIMIT
            )
            # The reference's shape, and who each speaker is: a model tells a person from a persona by it.
            history = [{"from": m.author_name, "author_kind": m.author_kind, "message": m.text} for m in page.messages]
            return {"history": history}
        if name == "consume":
            return await self._consume(arguments)
        return {"error": f"unknown tool {name!r}"}

    async def _consume(self, arguments: dict[str, Any]) -> dict[str, Any]:
        runtime = self.runtime
        amount, text = arguments.get("amount"), arguments.get("message")
        if not isinstance(amount, int) or isinstance(amount, bool) or not isinstance(text, str) or not text.strip():
            return {"success": False, "message": "consume needs an integer amount and a message"}
        text = " ".join(neutralize_mentions(text).split())
        try:
            result = await runtime.arbiter.consume(self.channel_id, wire.ConsumeRequest(amount=amount, text=text))
        except BotError as error:
            runtime.stats.wasted += 1
            return {"success": False, "message": str(error)}
        if not result.granted or result.message is None:
            runtime.stats.wasted += 1
            return {"success": False, "resource": result.level, "message": result.detail}
        seq = result.message.seq
        try:
            posted = await runtime.platform.post(self.channel_id, text)
        except PostFailed as error:
            runtime.stats.wasted += 1
            await runtime.arbiter.retract(self.channel_id, seq)
            return {"success": False, "resource": result.level, "message": f"could not post: {error}"}
        tier = result.message.tier or wire.Tier.AIZUCHI
        runtime.stats.posted[str(tier)] += 1
        await runtime.arbiter.link(self.channel_id, seq, posted.platform_message_id)
        return {"success": True, "resource": result.level, "message": "Resource consumed."}


class ToolLoopRuntime(PersonaRuntime):
    def _make_worker(self, channel_id: str) -> ChannelWorker:
        return ToolLoopWorker(self, channel_id)
