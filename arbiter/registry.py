"""The members an arbiter serves, and how each presents itself (names, colour, platform account).

The members are its personas (the fleet's bots) and its external agents (any MCP client given a token of its own):
both speak through the same rules, so both are here, told apart only by ``kind``. Which members exist is fixed at
start-up (each has a token). How they present themselves changes while the arbiter
runs: a persona registers, here or through another arbiter process. Writer steps read this from the writer's thread
while the event loop updates it, so it is a snapshot replaced whole, never a dict changed in place.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

from arbiter import contract as wire
from arbiter.core.errors import NotFound
from arbiter.core.models import AuthorKind, PersonaInfo
from arbiter.core.rules import Author
from arbiter.events import PersonaEvent
from arbiter.views import persona_view

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping

    from arbiter.events import Event

__all__ = ("PersonaRegistry",)


class PersonaRegistry:
    def __init__(self, persona_ids: Collection[str], agent_ids: Collection[str] = ()) -> None:
        self.agent_ids = frozenset(agent_ids)
        self.ids = frozenset(persona_ids) | self.agent_ids
        self._infos: Mapping[str, PersonaInfo] = MappingProxyType({})

    def kind(self, member_id: str) -> wire.MemberKind:
        return "agent" if member_id in self.agent_ids else "persona"

    def require(self, persona_id: str) -> None:
        if persona_id not in self.ids:
            raise NotFound(f"unknown persona {persona_id}", field="persona", code="unknown_persona")

    def info(self, persona_id: str) -> PersonaInfo:
        """How the persona registered; by its id alone until it does."""
        return self._infos.get(persona_id) or PersonaInfo(persona_id, persona_id)

    def name(self, persona_id: str) -> str:
        return self.info(persona_id).display_name

    def author(self, persona_id: str) -> Author:
        return Author(persona_id, self.name(persona_id), AuthorKind.PERSONA)

    def display_names(self) -> dict[str, str]:
        return {pid: self.name(pid) for pid in self.ids}

    def names(self) -> dict[str, tuple[str, ...]]:
        """Every persona's names (display name and aliases; none until it registers): who a message addresses. One
        that cannot speak is left out, so nobody's message addresses it and the others answer at once."""
        infos = self._infos  # one snapshot for the whole answer
        speaking = (pid for pid in self.ids if pid not in infos or infos[pid].cannot_speak is None)
        return {pid: infos[pid].names if pid in infos else () for pid in speaking}

    def persona_of_platform_user(self, platform_user_id: str) -> str | None:
        """The persona whose platform account this is, if any."""
        return next((i.id for i in self._infos.values() if i.platform_user_id == platform_user_id), None)

    def persona_named(self, display_name: str) -> str | None:
        """The persona that shows itself as ``display_name`` (a webhook's message carries only the name it was posted
        under), if exactly one does; one without an account of its own on the platform first."""
        infos = list(self._infos.values())  # one snapshot
        named = [i for i in infos if i.display_name == display_name and i.id in self.ids]
        unaccounted = [i for i in named if i.platform_user_id is None]
        found = unaccounted or named
        return found[0].id if len(found) == 1 else None

    def views(self, *, former: bool = False) -> wire.PersonaList:
        """Every member with a token here (personas and agents), as registered (or by its id until it registers);
        with ``former``, also those registered before that have no token now (the local room shows their old
        messages in their colour)."""
        ids = self.ids | (set(self._infos) if former else set())
        return wire.PersonaList(personas=[persona_view(self.info(pid), kind=self.kind(pid)) for pid in sorted(ids)])

    def update(self, infos: Iterable[PersonaInfo]) -> None:
        self._infos = MappingProxyType({**self._infos, **{info.id: info for info in infos}})

    def on_event(self, event: Event) -> None:
        """Keep current, also when another arbiter process registered the persona."""
        if isinstance(event, PersonaEvent):
            info = PersonaInfo(
                event.id,
                event.display_name,
                tuple(event.aliases),
                event.color,
                event.platform_user_id,
                event.cannot_speak,
            )
            self.update([info])
