"""What the moderators' commands say: the channel's status and the personas' notes as text. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arbiter.contract import MemoryList, PersonaList, PersonaUsageView, SettingsView, StatusView, UsageList

__all__ = ("MESSAGE_LIMIT", "gauge", "memory_text", "status_text", "usage_line")

MESSAGE_LIMIT = 2000  # Discord's limit on a message's characters, answers to commands included


def gauge(level: int, capacity: int, width: int = 20) -> str:
    filled = round(width * level / capacity) if capacity else 0
    return "█" * filled + "░" * (width - filled)


def usage_line(used: PersonaUsageView, name: str) -> str:
    """One persona's tokens today: calls, input (with what the prompt cache read and wrote of it), output."""
    cache = ""
    if used.cache_read_tokens or used.cache_write_tokens:
        cache = f" (cache: {used.cache_read_tokens:,} read, {used.cache_write_tokens:,} written)"
    calls = "call" if used.requests == 1 else "calls"
    return f"{name}: {used.requests:,} {calls}, {used.prompt_tokens:,} in{cache}, {used.completion_tokens:,} out"


def status_text(
    status: StatusView, settings: SettingsView, personas: PersonaList, usage: UsageList | None = None
) -> str:
    """``usage``: each persona's tokens today, shown under the day's total."""
    state = "paused" if status.paused else "running"
    if not status.enabled:
        state = "off in this channel (`/aizuchi enable` turns it on)"
    lines = [f"**aizuchi** - {state}"]
    refund = ""
    if status.refunds:
        refund = f", +{status.refunds[0].amount} in {max(0.0, status.refunds[0].at - status.now):.1f} s"
    lines.append(f"Pool `{gauge(status.level, status.capacity)}` {status.level} / {status.capacity}{refund}")
    tiers = " · ".join(
        f"{tier} {view.cost} (≤{view.max_length} cols, back in {view.recovery_s:g} s)"
        for tier, view in status.tiers.items()
    )
    lines.append(f"Tiers: {tiers}")
    lines.append(f"Idle cap: {status.bot_streak} of {status.idle_cap} bot turns since a human spoke")
    budget = "no budget" if status.daily_token_budget is None else f"{status.daily_token_budget:,}"
    lines.append(f"Tokens today: {status.tokens_today:,} / {budget} (cached input at its own price)")
    names = {info.id: info.display_name for info in personas.personas}
    for used in usage.personas if usage is not None else []:
        lines.append(f"- {usage_line(used, names.get(used.persona, used.persona))}")
    agents = {info.id for info in personas.personas if info.kind == "agent"}
    marks: dict[bool, list[str]] = {False: [], True: []}  # by whether the member is an external agent
    for member_id, policy in sorted(settings.personas.items()):
        mark = "muted" if policy.muted else "on" if policy.enabled else "off"
        if policy.cannot_post is not None:
            mark += f"; cannot post: {policy.cannot_post}"
        marks[member_id in agents].append(f"{names.get(member_id, member_id)} ({mark})")
    lines.append("Personas: " + (", ".join(marks[False]) if marks[False] else "none"))
    if marks[True]:
        lines.append("Agents (MCP): " + ", ".join(marks[True]))
    # Said by the persona for every channel at once: its model refused its key, say.
    silent = [f"{info.display_name}: {info.cannot_speak}" for info in personas.personas if info.cannot_speak]
    if silent:
        lines.append("Cannot speak anywhere: " + "; ".join(silent))
    if status.topic:
        lines.append(f"Topic: {status.topic}")
    return "\n".join(lines)


def memory_text(memories: MemoryList, personas: PersonaList) -> str:
    """Each persona's notes on the conversation here, within one Discord message (cut, saying so, if longer)."""
    if not memories.memories:
        return "No persona has notes on this channel yet: they start them the next time they take a turn."
    names = {info.id: info.display_name for info in personas.personas}
    lines: list[str] = []
    for memory in memories.memories:
        state = memory.state
        lines.append(f"**{names.get(memory.persona, memory.persona)}** (up to message {memory.seq})")
        lines.append(f"- topic: {state.topic or 'none yet'}")
        lines += [f"- open: {item}" for item in state.open_questions]
        lines += [f"- agreed: {item}" for item in state.agreed]
        lines += [f"- {speaker.name}: {speaker.note}" for speaker in state.speakers]
    lines.append("`/aizuchi memory reset:True` forgets them (for one persona with `persona:`).")
    text = "\n".join(lines)
    if len(text) <= MESSAGE_LIMIT:
        return text
    cut = "\n… (more than one message holds; name one persona with `persona:`)"
    return text[: MESSAGE_LIMIT - len(cut)].rsplit("\n", 1)[0] + cut
