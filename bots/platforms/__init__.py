"""Where personas' messages appear: Discord, the local room, or memory (tests)."""

from bots.platforms.base import Platform, Posted

__all__ = ("Platform", "Posted")
