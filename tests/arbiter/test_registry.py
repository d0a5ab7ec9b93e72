"""The persona registry: who has a token here (fixed) and how each presents itself (a snapshot, replaced whole)."""

from __future__ import annotations

import pytest

from arbiter.core.errors import NotFound
from arbiter.core.models import PersonaInfo
from arbiter.events import PersonaEvent
from arbiter.registry import PersonaRegistry


def test_a_persona_is_known_by_its_id_until_it_registers() -> None:
    registry = PersonaRegistry(["rin", "theo"])
    assert registry.name("rin") == "rin"
    assert registry.names() == {"rin": (), "theo": ()}
    registry.update([PersonaInfo("rin", "Rin", ("Rinny",), "#e4572e", "111")])
    assert registry.name("rin") == "Rin"
    assert registry.names() == {"rin": ("Rin", "Rinny"), "theo": ()}
    assert registry.persona_of_platform_user("111") == "rin"
    assert registry.persona_of_platform_user("222") is None
    assert [(view.id, view.display_name) for view in registry.views().personas] == [("rin", "Rin"), ("theo", "theo")]


def test_a_persona_without_a_token_here_is_unknown() -> None:
    registry = PersonaRegistry(["rin"])
    with pytest.raises(NotFound) as raised:
        registry.require("nobody")
    assert raised.value.field == "persona"
    # Registered elsewhere (another process's token list), it still is not one of ours to address.
    registry.update([PersonaInfo("nobody", "Nobody")])
    assert "nobody" not in registry.names()


def test_what_a_reader_holds_does_not_change_under_it() -> None:
    registry = PersonaRegistry(["rin"])
    registry.update([PersonaInfo("rin", "Rin")])
    held = registry._infos  # what a writer step on another thread is reading
    registry.update([PersonaInfo("rin", "Rin 2")])
    assert held["rin"].display_name == "Rin"
    assert registry.name("rin") == "Rin 2"
    with pytest.raises(TypeError):
        held["rin"] = PersonaInfo("rin", "changed in place")  # type: ignore[index]


def test_another_process_registering_a_persona_reaches_this_registry() -> None:
    registry = PersonaRegistry(["rin"])
    registry.on_event(PersonaEvent(id="rin", display_name="Rin", aliases=["R"], platform_user_id="9"))
    assert registry.names() == {"rin": ("Rin", "R")}
    assert registry.persona_of_platform_user("9") == "rin"
    # It says, through another process, that it cannot speak: nobody's message addresses it there either.
    registry.on_event(PersonaEvent(id="rin", display_name="Rin", aliases=["R"], cannot_speak="its key was refused"))
    assert registry.names() == {}
    assert registry.info("rin").cannot_speak == "its key was refused"
