"""Stable id -> colour maps: the same op group, strategy, collective or device gets the same
colour in every view and on every run (hashing the id, never the order of first sight)."""

from __future__ import annotations

import hashlib

__all__ = [
    "PALETTE", "GROUP_COLORS", "COLLECTIVE_COLORS", "COST_COLORSCALE", "color_for", "group_color",
    "collective_color", "NEUTRAL", "SELECTED", "CHANGED", "EVENT_COLORS", "MEMORY_COLORS",
    "stage_color", "BUBBLE",
]  # fmt: skip

# Plotly's qualitative "Plotly" + "D3" palettes, deduplicated (20 distinguishable hues).
PALETTE: tuple[str, ...] = (
    "#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880",
    "#FF97FF", "#FECB52", "#1F77B4", "#FF7F0E", "#2CA02C", "#D62728", "#9467BD", "#8C564B",
    "#E377C2", "#7F7F7F", "#BCBD22", "#17BECF",
)  # fmt: skip

GROUP_COLORS: dict[str, str] = {
    "source": "#C8C8C8",
    "elementwise": "#009E73",
    "reduce": "#E69F00",
    "contraction": "#0072B2",
    "movement": "#CC79A7",
}

COLLECTIVE_COLORS: dict[str, str] = {
    "all-reduce": "#D55E00",
    "all-gather": "#0072B2",
    "reduce-scatter": "#009E73",
    "all-to-all": "#CC79A7",
    "send/recv": "#E69F00",
}

COST_COLORSCALE = "Viridis"
NEUTRAL = "#D0D0D0"
SELECTED = "#111111"
CHANGED = "#E4002B"


def color_for(key: str, palette: tuple[str, ...] = PALETTE) -> str:
    """A colour that depends only on ``key`` (md5, not ``hash()``: that one is salted per run).

    >>> color_for("b=dp,n=tp") == color_for("b=dp,n=tp")
    True
    """
    digest = hashlib.md5(key.encode()).digest()
    return palette[int.from_bytes(digest[:4], "little") % len(palette)]


def group_color(group: str) -> str:
    return GROUP_COLORS.get(group, color_for(group))


def collective_color(kind: str) -> str:
    return COLLECTIVE_COLORS.get(kind, color_for(kind))


BUBBLE = "#E8E8E8"

# The categorical palettes below (op groups, collectives, timeline events, memory rows) are
# Okabe & Ito's colour-blind-safe palette with Paul Tol's "muted" indigo and wine: any two
# colours of one palette stay at least 12 CIE76 Delta-E apart under normal vision and under
# simulated protanopia, deuteranopia and tritanopia (Machado et al. 2009, severity 1;
# tests/widgets/test_colorblind.py checks it). Views also label or pattern what they colour.
# Timeline event kinds (explorer.training.pipeline.EVENT_KINDS): compute in blues and greens,
# communication in warm colours, the ZeRO gather black, the bubble pale grey and hatched.
EVENT_COLORS: dict[str, str] = {
    "compute-forward": "#0072B2",
    "compute-backward": "#009E73",
    "recompute": "#56B4E9",
    "tp-comm": "#D55E00",
    "ep-comm": "#CC79A7",
    "cp-comm": "#882255",
    "dp-comm": "#E69F00",
    "pp-comm": "#F0E442",
    "zero-gather": "#000000",
    "optimizer": "#332288",
    "idle": BUBBLE,
}

# MemoryBreakdown.ROWS: model states dark to light, activations orange, allowances greys.
MEMORY_COLORS: dict[str, str] = {
    "parameters": "#0072B2",
    "gradients": "#56B4E9",
    "optimizer_states": "#332288",
    "activations": "#E69F00",
    "recompute_working_set": "#F0E442",
    "zero_gather_buffer": "#997700",
    "zero_reduce_buffer": "#009E73",
    "runtime_context": "#6E6E6E",
    "communication_buffers": "#A6A6A6",
    "fragmentation": "#D9D9D9",
}


def stage_color(stage: int) -> str:
    """The colour of pipeline stage ``stage`` (GraphView's ``color_by="stage"`` uses the
    same): neighbouring stages get distinct hues (by index, not by hash)."""
    return PALETTE[stage % len(PALETTE)]
