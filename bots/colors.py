"""A persona's colour in the local room when its file gives none: made from its id, readable on both themes.

The room (arbiter/room/static/room.js) paints a persona's colour as the background of its name chip, with the name
in near-black or white on it, whichever ``inkFor`` finds reads better; the chip sits on a panel, light or dark as
the system says (room.css). So a colour here is one whose name text reaches WCAG AA (4.5:1) with the ink the room
picks for it, and whose chip stands out from the panels and pages of both themes by WCAG's 3:1 for a shape. (No
colour reaches 4.5:1 against both a white and a near-black background: the first needs a relative luminance at
most 0.18, the second at least 0.20.) The human's chip is a neutral grey; these colours are never near it.

The hue is room.js's own ``hashColor`` of the id (FNV-1a over its code points, modulo 360), so a persona keeps the
hue the room would give it; the lightness is set so that the colour's luminance is one of two levels (one for
white ink, one for near-black ink), chosen by the next part of the same hash.
"""

from __future__ import annotations

import colorsys
import math

__all__ = (
    "HUMAN_COLOR",
    "SURFACES",
    "chip_ink",
    "contrast",
    "delta_e",
    "persona_color",
    "relative_luminance",
    "room_readable",
)

# What room.css and room.js use (a test reads those files and checks these against them).
SURFACES = {  # where a chip is shown: the panels, and the page behind them
    "light panel": "#ffffff",
    "light page": "#f3f4f6",
    "dark panel": "#1a1d21",
    "dark page": "#111315",
}
HUMAN_COLOR = "#5f6368"  # room.js: every human's chip
INKS = ("#111111", "#ffffff")  # room.js inkFor: the chip's text, near-black above this luminance, else white
INK_THRESHOLD = 0.179

TEXT_CONTRAST = 4.5  # WCAG AA for the name on the chip
SHAPE_CONTRAST = 3.0  # WCAG AA (1.4.11) for the chip against what is around it
HUMAN_DISTANCE = 20.0  # CIE76 distance from the human's grey; the old default #888888 was 15 from it, a grey too

_SATURATION = 0.65
_LEVELS = (0.155, 0.235)  # relative luminance: white ink reads 5.1:1, near-black ink 5.1:1; both clear 3:1 around


def persona_color(persona_id: str) -> str:
    """``#rrggbb`` for a persona with this id: the same for the same id in every run, room and process."""
    digest = _fnv1a(persona_id)
    hue = digest % 360
    level = _LEVELS[(digest // 360) % len(_LEVELS)]
    return _at_luminance(hue / 360, level)


def room_readable(color: str) -> bool:
    """Whether ``color`` as a name chip reads at AA on both themes and is not the human's grey."""
    return (
        contrast(color, chip_ink(color)) >= TEXT_CONTRAST
        and all(contrast(color, surface) >= SHAPE_CONTRAST for surface in SURFACES.values())
        and delta_e(color, HUMAN_COLOR) >= HUMAN_DISTANCE
    )


def chip_ink(color: str) -> str:
    """The text colour room.js puts on a chip of ``color``."""
    return INKS[0] if relative_luminance(color) > INK_THRESHOLD else INKS[1]


def contrast(first: str, second: str) -> float:
    """WCAG 2 contrast ratio of two ``#rrggbb`` colours, 1 to 21."""
    lighter, darker = sorted((relative_luminance(first), relative_luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def relative_luminance(color: str) -> float:
    """WCAG 2 relative luminance of ``#rrggbb``: 0 for black, 1 for white."""
    red, green, blue = (_linear(channel) for channel in _channels(color))
    return 0.2126 * red + 0.7152 * green + 0.0722 * blue


def delta_e(first: str, second: str) -> float:
    """CIE76 colour difference (Euclidean in CIELAB, D65): about 2 is just noticeable, 10 plainly different."""
    return math.dist(_lab(first), _lab(second))


def _fnv1a(text: str) -> int:
    digest = 0x811C9DC5
    for char in text:
        digest = ((digest ^ ord(char)) * 0x01000193) & 0xFFFFFFFF
    return digest


def _at_luminance(hue: float, target: float) -> str:
    """The colour of ``hue`` and the set saturation whose luminance is closest to ``target``: luminance only grows
    with HSL lightness, so halving the range 30 times finds it."""
    low, high = 0.0, 1.0
    for _ in range(30):
        middle = (low + high) / 2
        if relative_luminance(_hex(colorsys.hls_to_rgb(hue, middle, _SATURATION))) < target:
            low = middle
        else:
            high = middle
    return _hex(colorsys.hls_to_rgb(hue, (low + high) / 2, _SATURATION))


def _hex(rgb: tuple[float, float, float]) -> str:
    return "#" + "".join(f"{round(channel * 255):02x}" for channel in rgb)


def _channels(color: str) -> tuple[float, float, float]:
    value = color.removeprefix("#")
    if len(value) != 6:
        raise ValueError(f"not a #rrggbb colour: {color!r}")
    return (int(value[0:2], 16) / 255, int(value[2:4], 16) / 255, int(value[4:6], 16) / 255)


def _linear(channel: float) -> float:
    return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4


def _lab(color: str) -> tuple[float, float, float]:
    red, green, blue = (_linear(channel) for channel in _channels(color))
    x = (0.4124 * red + 0.3576 * green + 0.1805 * blue) / 0.95047
    y = 0.2126 * red + 0.7152 * green + 0.0722 * blue
    z = (0.0193 * red + 0.1192 * green + 0.9505 * blue) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > (6 / 29) ** 3 else t / (3 * (6 / 29) ** 2) + 4 / 29

    return (116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z)))
