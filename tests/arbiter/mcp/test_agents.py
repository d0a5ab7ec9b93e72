"""External agents are members like the personas: in the registry (told apart by kind), in the history, under the
same rules, and listed by the moderators' ``/aizuchi status``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arbiter.core.models import AuthorKind, PersonaInfo, RefusalReason, Tier
from arbiter.discord_bot.render import status_text
from arbiter.registry import PersonaRegistry
from arbiter.server import open_arbiter
from tests.conftest import make_settings
from tests.support.clock import FakeClock

if TYPE_CHECKING:
    from pathlib import Path

AGENTS = {"aya": "aya-token-0123456789abcdef"}


def test_the_registry_knows_agents_beside_personas() -> None:
    registry = PersonaRegistry(["rin"], ["aya"])
    assert registry.ids == {"rin", "aya"}
    assert (registry.kind("rin"), registry.kind("aya")) == ("persona", "agent")
    registry.update([PersonaInfo("aya", "Aya", ("あや",))])
    assert registry.names()["aya"] == ("Aya", "あや")
    assert [(view.id, view.kind) for view in registry.views().personas] == [("aya", "agent"), ("rin", "persona")]


async def test_an_agent_speaks_under_the_personas_rules_and_is_listed_by_status(tmp_path: Path) -> None:
    settings = make_settings(f"sqlite:///{tmp_path / 'arbiter.db'}", agent_tokens=AGENTS)
    async with open_arbiter(settings, clock=FakeClock()) as arbiter:
        service = arbiter.service
        await service.ensure_channel("lobby", {"idle_cap": 1})
        await service.register_persona("aya", "Aya")
        await service.set_persona("lobby", "mio", muted=True)
        spoken = await service.consume("lobby", "aya", "なるほど", tier=Tier.AIZUCHI)
        assert spoken.granted and spoken.message is not None
        assert (spoken.message.author_kind, spoken.message.author_name) == (AuthorKind.PERSONA, "Aya")
        # One bot turn reaches the idle cap of 1, for a persona as for the agent that took it.
        capped = await service.consume("lobby", "hana", "Quite.", tier=Tier.REMARK)
        assert capped.reason is RefusalReason.IDLE_CAP
        text = status_text(await service.status("lobby"), await service.settings("lobby"), service.registry.views())
    assert "Personas: hana (on), kai (on), mio (muted)" in text
    assert "Agents (MCP): Aya (on)" in text
