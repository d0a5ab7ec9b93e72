"""What the moderators' commands say: the channel's status as text. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from arbiter.contract import PersonaList, SettingsView, StatusView

__all__ = ("gauge", "status_text")


def gauge(level: int, capacity: int, width: int = 20) -> str:
    filled = round(width * level / capacity) if capacity else 0
    return "█" * filled + "░" * (width - filled)


def status_text(status: StatusView, settings: SettingsView, personas: PersonaList) -> str:
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
    lines.append(f"Tokens today: {status.tokens_today:,} / {budget}")
    names = {info.id: info.display_name for info in personas.personas}
    agents = {info.id for info in personas.personas if info.kind == "agent"}
    marks: dict[bool, list[str]] = {False: [], True: []}  # by whether the member is an external agent
    for member_id, policy in sorted(settings.personas.items()):
        mark = "muted" if policy.muted else "on" if policy.enabled else "off"
        marks[member_id in agents].append(f"{names.get(member_id, member_id)} ({mark})")
    lines.append("Personas: " + (", ".join(marks[False]) if marks[False] else "none"))
    if marks[True]:
        lines.append("Agents (MCP): " + ", ".join(marks[True]))
    if status.topic:
        lines.append(f"Topic: {status.topic}")
    return "\n".join(lines)
