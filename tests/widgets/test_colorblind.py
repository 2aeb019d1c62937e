"""The categorical palettes stay apart for colour-blind readers, checked by simulation.

Each colour is seen as normal vision would, and as protanopia, deuteranopia and tritanopia
would (Machado, Oliveira & Fernandes 2009, "A physiologically-based model for simulation of
color vision deficiency", severity 1.0 matrices, applied in linear RGB); any two colours of
one palette must stay at least ``MIN_DELTA_E`` apart (CIE76 Delta-E in CIELAB, D65) in every
one of the four. The old plotly palette failed: forward compute and expert-parallel
communication were 1.6 apart under protanopia, two memory rows 1.7 under deuteranopia.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from widgets import colors

MIN_DELTA_E = 12.0
MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                   [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                     [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                   [0.004733, 0.691367, 0.303900]],
}  # fmt: skip
SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722],
                        [0.0193, 0.1192, 0.9505]])  # fmt: skip
D65 = np.array([0.95047, 1.0, 1.08883])


def _linear(hex_color: str) -> np.ndarray:
    c = np.array([int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def _lab(linear_rgb: np.ndarray) -> np.ndarray:
    xyz = SRGB_TO_XYZ @ np.clip(linear_rgb, 0, 1) / D65
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def seen(hex_color: str) -> dict[str, np.ndarray]:
    """The colour in CIELAB for each of the four kinds of vision."""
    lin = _linear(hex_color)
    return {"normal": _lab(lin)} | {k: _lab(np.array(m) @ lin) for k, m in MACHADO.items()}


PALETTES = {
    "op groups": colors.GROUP_COLORS,
    "collectives": colors.COLLECTIVE_COLORS,
    "timeline events": colors.EVENT_COLORS,
    "memory rows": colors.MEMORY_COLORS,
}


@pytest.mark.parametrize("name", sorted(PALETTES))
def test_palette_is_told_apart_under_simulated_colour_blindness(name):
    palette = PALETTES[name]
    views = {k: seen(c) for k, c in palette.items()}
    worst = min(
        (float(np.linalg.norm(views[a][v] - views[b][v])), a, b, v)
        for a, b in itertools.combinations(palette, 2)
        for v in views[a]
    )  # fmt: skip
    assert worst[0] >= MIN_DELTA_E, (name, worst)


def test_the_simulation_tells_a_known_confusion_apart_from_a_safe_pair():
    """The check can fail: red and green, apart for normal vision, merge under deuteranopia;
    blue and orange (Okabe-Ito) stay apart."""
    red, green = seen("#D62728"), seen("#2CA02C")
    assert np.linalg.norm(red["normal"] - green["normal"]) > 50
    assert np.linalg.norm(red["deuteranopia"] - green["deuteranopia"]) < MIN_DELTA_E
    blue, orange = seen("#0072B2"), seen("#E69F00")
    assert min(np.linalg.norm(blue[v] - orange[v]) for v in blue) > 40
