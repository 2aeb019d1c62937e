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
    "source": "#B0B0B0",
    "elementwise": "#00CC96",
    "reduce": "#FFA15A",
    "contraction": "#636EFA",
    "movement": "#AB63FA",
}

COLLECTIVE_COLORS: dict[str, str] = {
    "all-reduce": "#EF553B",
    "all-gather": "#636EFA",
    "reduce-scatter": "#00CC96",
    "all-to-all": "#AB63FA",
    "send/recv": "#FFA15A",
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

# Timeline event kinds (explorer.training.pipeline.EVENT_KINDS): compute in blues and greens,
# communication in the colour of its collective family, the bubble pale grey.
EVENT_COLORS: dict[str, str] = {
    "compute-forward": "#636EFA",
    "compute-backward": "#00CC96",
    "recompute": "#B6E880",
    "tp-comm": "#EF553B",
    "ep-comm": "#AB63FA",
    "cp-comm": "#FF6692",
    "dp-comm": "#FF7F0E",
    "pp-comm": "#FFA15A",
    "zero-gather": "#19D3F3",
    "optimizer": "#8C564B",
    "idle": BUBBLE,
}

# MemoryBreakdown.ROWS: model states dark to light, activations orange, allowances greys.
MEMORY_COLORS: dict[str, str] = {
    "parameters": "#1F77B4",
    "gradients": "#636EFA",
    "optimizer_states": "#9EB9F3",
    "activations": "#FF7F0E",
    "recompute_working_set": "#FECB52",
    "zero_gather_buffer": "#19D3F3",
    "zero_reduce_buffer": "#54A24B",
    "runtime_context": "#7F7F7F",
    "communication_buffers": "#A6A6A6",
    "fragmentation": "#CFCFCF",
}


def stage_color(stage: int) -> str:
    """The colour of pipeline stage ``stage`` (GraphView's ``color_by="stage"`` uses the
    same): neighbouring stages get distinct hues (by index, not by hash)."""
    return PALETTE[stage % len(PALETTE)]
