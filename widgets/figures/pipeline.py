"""``pipeline_figure``: a simulated training step as a device x time Gantt chart, in the manner
of Megatron-LM's 1F1B / interleaved figures (numbered microbatch boxes).

One horizontal-bar trace per event kind and virtual chunk (``TRACE_KEYS``: forward,
backward and recompute get one trace per chunk, each collective, the optimizer and idle one
trace), always in that order, so views update them by position and find them by name with
``trace_index`` / ``kind_traces``. Each trace has one colour and one pattern: a chunk's shade
and hatch are a trace's, not 6,000 per-box strings to validate and send on every redraw. The
legend shows one entry per kind (its chunk-0 trace, human names from ``EVENT_NAMES``);
``legendgroup`` keeps the kind, so a legend click hides every chunk of it. The bubble shows as
hatched grey ``idle`` bars; pipeline transfers (``pp-comm``, which overlap compute) are a thin
strip under their row. Then a trace outlines the selected microbatch.

Microbatch numbers at any size: every forward/backward box carries its number (``F12``,
``B3``); plotly hides a number that does not fit its box, so zooming in (the view's zoom
control or the toolbar) shows them. When the boxes at the current zoom are too narrow for
their numbers, the numbers are also written per group of consecutive boxes above each row
(``F16–19 B0–3``: the forwards and backwards of that stretch), groups sized so their labels
fit (``label_groups``). Hover shows each box's stage, chunk, microbatch and times.

Level of detail: where even the widest box in the window is narrower than a number needs,
or the boxes around it are too many for a browser to draw at once (``overview_mode``; a
whole GPT-3 175B step: 33,867 boxes of 0.1-1.5 px), the boxes are
drawn as an overview instead: after the group labels, one heatmap per (kind, chunk)
(``OVERVIEW_KEYS`` from ``TRACE_OVERVIEW``), ``OVERVIEW_BINS`` cells across the window, each
cell of a row in the colour of the trace busy longest in it (``overview_arrays``); the bars
then hold the pipeline transfers and one zero-length box per legend entry, the outline of
the selection stays on the real boxes.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from explorer.training import SimResult, Timeline
from explorer.training.pipeline import EVENT_KINDS

from ..colors import EVENT_COLORS, SELECTED
from ..format import fmt_seconds
from .errors import ViewError
from .style import base_layout

__all__ = [
    "pipeline_figure", "pipeline_title", "selected_arrays", "timeline_columns",
    "TRACE_SELECTED_MB", "row_labels", "figure_height", "EVENT_KINDS", "EVENT_NAMES",
    "time_unit", "hover_template", "trace_hover", "label_mode", "label_groups",
    "group_arrays", "TRACE_GROUPS",
    "microbatch_window", "pipeline_axes", "visible_groups", "PLOT_WIDTH_PX", "BOX_LABEL_PX",
    "trace_marker", "CHUNK_PATTERNS", "readable_window", "TRACE_KEYS", "trace_index",
    "kind_traces", "trace_arrays", "CHUNKED_KINDS", "MAX_CHUNKS", "drawn_range", "box_text",
    "BOX_TEXT_MIN_PX", "OVERVIEW_BINS", "OVERVIEW_MAX_BOXES", "OVERVIEW_KEYS", "TRACE_OVERVIEW", "overview_mode",
    "overview_arrays", "overview_hover", "overview_ygap", "overview_trace_data",
]  # fmt: skip

_SHORT = {"compute-forward": "F", "compute-backward": "B", "recompute": "R"}
CHUNKED_KINDS: tuple[str, ...] = tuple(_SHORT)  # the kinds drawn one trace per chunk
EVENT_NAMES: dict[str, str] = {
    "compute-forward": "Forward",
    "compute-backward": "Backward",
    "recompute": "Recompute",
    "tp-comm": "Tensor-parallel communication",
    "ep-comm": "Expert-parallel communication",
    "cp-comm": "Context-parallel key/value exchange",
    "dp-comm": "Data-parallel gradient reduction",
    "pp-comm": "Pipeline send / receive",
    "zero-gather": "ZeRO weight gather",
    "optimizer": "Optimizer step",
    "idle": "Idle (bubble)",
}
# The plot area label decisions are made for: plotly's default 700 px figure less the axis
# labels. A FigureWidget is first drawn at that width in JupyterLab 4 (the page does not
# autosize it until its first update); in the full notebook column (~1000 px at 1440x900
# with the file browser open) groups are then wider than their labels, never narrower.
PLOT_WIDTH_PX = 640
BOX_LABEL_PX = 20  # narrowest box that holds "F99" at 9 px (3 x 5.5 px and a margin)
# below this width (at PLOT_WIDTH_PX) no box number fits even on a plot 3x as wide ("F1" at
# plotly's 8 px minimum takes ~15 px)
BOX_TEXT_MIN_PX = 4
GROUP_LABEL_PX = 7  # width of one character of a group label (10 px font)
ROW_PX = 56  # one pipeline device: the bars and the group labels above them
LEGEND_PX = 64  # the legend under the time axis (up to three lines)
#: The pattern of each virtual chunk's boxes (chunk 0 plain): with the shade, chunks are told
#: apart without colour.
CHUNK_PATTERNS = ("", "/", ".", "x", "\\", "+", "-", "|")
_CHUNK_LIGHTEN = (0.0, 0.35, 0.15, 0.5, 0.25, 0.6, 0.05, 0.45)
#: Traces per chunked kind: chunk ``c`` is drawn by trace ``c % MAX_CHUNKS`` of its kind.
MAX_CHUNKS = len(CHUNK_PATTERNS)
#: (event kind, chunk) of every bar trace, in figure order.
TRACE_KEYS: tuple[tuple[str, int], ...] = tuple(
    (kind, c) for kind in EVENT_KINDS
    for c in (range(MAX_CHUNKS) if kind in _SHORT else (0,))
)  # fmt: skip
TRACE_SELECTED_MB = len(TRACE_KEYS)  # after the bar traces
TRACE_GROUPS = TRACE_SELECTED_MB + 1  # the group labels (text), last
_FIRST = {kind: TRACE_KEYS.index((kind, 0)) for kind in EVENT_KINDS}
# per event-kind code (its position in EVENT_KINDS): the index of its first trace, and
# whether it has one trace per chunk
_FIRST_OF_CODE = np.array([_FIRST[k] for k in EVENT_KINDS], dtype=np.int64)
_CHUNKED_CODE = np.array([k in _SHORT for k in EVENT_KINDS])
_LEGEND_SLOT = np.array([chunk == 0 for _, chunk in TRACE_KEYS])  # traces in the legend
_BAR = (-0.2, 0.55)  # bar offset and width in row units: the 0.3 above holds group labels
_STRIP = (0.37, 0.1)  # pp-comm strip under the bar


def trace_index(kind: str, chunk: int = 0) -> int:
    """The position in the figure of the bar trace of ``kind`` (and virtual ``chunk``,
    for forward, backward and recompute).

    >>> trace_index("compute-forward"), trace_index("compute-backward", 1)
    (0, 9)
    """
    if kind not in _FIRST:
        raise ViewError(f"event kind {kind!r} is not drawn; use one of {', '.join(EVENT_KINDS)}")
    return _FIRST[kind] + (chunk % MAX_CHUNKS if kind in _SHORT else 0)


def kind_traces(kind: str) -> tuple[int, ...]:
    """The positions of every bar trace of ``kind`` (one per chunk for compute kinds)."""
    first = trace_index(kind)
    return tuple(range(first, first + (MAX_CHUNKS if kind in _SHORT else 1)))


def time_unit(step_s: float) -> tuple[str, float]:
    """The axis unit for a step of ``step_s`` seconds: ("s", 1), ("ms", 1e3) or ("us", 1e6)."""
    if step_s >= 2.0:
        return "s", 1.0
    if step_s >= 2e-3:
        return "ms", 1e3
    return "us", 1e6


def figure_height(pp: int) -> int:
    return max(300, 150 + LEGEND_PX + ROW_PX * pp)


def row_labels(pp: int, chunks: int) -> list[str]:
    """``stage d`` per pipeline device (``dev d: stages d, d+p`` when interleaved)."""
    if chunks == 1:
        return [f"stage {d}" for d in range(pp)]
    return [f"dev {d}: st " + ",".join(str(c * pp + d) for c in range(chunks)) for d in range(pp)]


def timeline_columns(timeline: Timeline, scale: float | None = None) -> dict[str, np.ndarray]:
    """The events as numpy columns (one pass; the figure never loops over events again):
    kind (and its position in ``EVENT_KINDS``, ``code``), device, start/end (in the unit of
    ``time_unit``, or times ``scale``), stage, chunk, microbatch."""
    ev = timeline.events
    n = len(ev)
    if scale is None:
        scale = time_unit(timeline.step_time_s)[1]
    kind = np.array([e.kind for e in ev], dtype=object)
    code = {k: i for i, k in enumerate(EVENT_KINDS)}
    num = np.fromiter(
        (x for e in ev for x in (e.device, e.start_s, e.end_s, e.stage, e.microbatch, e.chunk)),
        dtype=float, count=6 * n,
    ).reshape(n, 6)  # fmt: skip
    return {
        # int32, not int64: plotly sends int64 arrays as JSON lists, int32 as binary buffers
        "kind": kind, "code": np.fromiter((code[e.kind] for e in ev), np.int64, count=n),
        "device": num[:, 0].astype(np.int32), "start": num[:, 1] * scale,
        "end": num[:, 2] * scale, "stage": num[:, 3].astype(np.int32),
        "mb": num[:, 4].astype(np.int32), "chunk": num[:, 5].astype(np.int32),
        "span": timeline.step_time_s * scale,
    }  # fmt: skip


def drawn_range(window: tuple[float, float] | None) -> tuple[float, float] | None:
    """The time range whose boxes a figure zoomed to ``window`` holds: the window and one
    window's width on each side (a pan or a small zoom-out shows boxes at once); None, every
    box, for the whole step. A browser takes seconds to draw a GPT-3 step's 33,867 boxes
    as SVG, and a fraction of a second for the ~1,400 around a readable window.

    >>> drawn_range((10.0, 12.0)), drawn_range(None)
    ((8.0, 14.0), None)
    """
    if window is None:
        return None
    lo, hi = window
    return (lo - (hi - lo), hi + (hi - lo))


def _in_range(cols: dict[str, np.ndarray], drawn: tuple[float, float] | None) -> np.ndarray:
    if drawn is None:
        return np.ones(len(cols["start"]), dtype=bool)
    return (cols["end"] > drawn[0]) & (cols["start"] < drawn[1])


def trace_arrays(
    cols: dict[str, np.ndarray], chunks: int, drawn: tuple[float, float] | None = None,
    overview: bool = False,
) -> list[dict]:  # fmt: skip
    """The bar data of every trace of ``TRACE_KEYS``: y (device), base and x (start and
    length), hovertext (the length again, as a number the hover formats: a bar's ``%{x}``
    in plotly's hover is where it ends), and for compute kinds text (the microbatch number
    the box shows) and customdata (the stage). Every per-box value is
    a flat numeric array: plotly sends those as binary buffers, where a two-column
    customdata went as nested JSON lists (17,000 of them per redraw at GPT-3 size), and
    labels and hover are per-trace templates, so no per-box string is made. The events of a
    compute kind are split by chunk when the schedule interleaves ``chunks`` > 1 model chunks
    per device (one chunk: all in the chunk-0 trace). Only the boxes that overlap ``drawn``
    (``drawn_range``; None: all), and the first box of a kind the range misses: plotly
    shows no legend entry for an empty trace, and each kind's entry (its chunk-0 trace)
    stays whatever the zoom (the box lies outside the window, clipped). One sort, no
    per-kind scan.

    ``overview``: the window is drawn by the overview heatmaps (``overview_arrays``), so
    the bars hold only the pipeline transfers' strip, and each legend trace one box of
    zero length (its legend entry; nothing drawn over the overview)."""
    code = cols["code"]
    slot = _FIRST_OF_CODE[code]
    if chunks > 1:
        slot = slot + np.where(_CHUNKED_CODE[code], cols["chunk"] % MAX_CHUNKS, 0)
    keep = _in_range(cols, drawn)
    if overview:
        keep &= cols["kind"] == "pp-comm"
    rescued = np.zeros(len(keep), dtype=bool)
    if drawn is not None or overview:  # a legend trace with boxes in the step, none in
        shown = np.zeros(len(TRACE_KEYS), dtype=bool)  # range: its first
        shown[slot[keep]] = True
        slots, first = np.unique(slot, return_index=True)
        rescued[first[_LEGEND_SLOT[slots] & ~shown[slots]]] = True
        keep |= rescued
    slot = np.where(keep, slot, len(TRACE_KEYS))  # past the last trace
    order = np.argsort(slot, kind="stable")  # events keep their time order in a trace
    bounds = np.searchsorted(slot[order], np.arange(len(TRACE_KEYS) + 1))
    start, end = cols["start"], cols["end"]
    width = np.maximum(end - start, 0.0)
    if overview:
        width = np.where(rescued, 0.0, width)
    out = []
    for (kind, _), lo, hi in zip(TRACE_KEYS, bounds[:-1], bounds[1:], strict=True):
        i = order[lo:hi]
        a = {"y": cols["device"][i], "base": start[i], "x": width[i], "hovertext": width[i]}
        if kind in _SHORT:
            a.update(text=cols["mb"][i], customdata=cols["stage"][i])
        out.append(a)
    return out


def trace_marker(kind: str, chunk: int) -> dict:
    """The colour and pattern of the trace of ``kind``'s ``chunk``: chunk ``c`` gets
    ``CHUNK_PATTERNS[c]`` and a lighter shade of the kind's colour (chunk 0: the plain
    colour); the idle bubble is hatched grey."""
    base = EVENT_COLORS[kind]
    if kind == "idle":
        return {"color": base, "pattern": {"shape": "/", "fgcolor": "#B0B0B0", "size": 6}}
    if kind not in _SHORT:
        return {"color": base}
    c = chunk % MAX_CHUNKS
    return {"color": _lighter(base, _CHUNK_LIGHTEN[c]),
            "pattern": {"shape": CHUNK_PATTERNS[c], "fgcolor": "#FFFFFF", "fgopacity": 0.4,
                        "size": 8}}  # fmt: skip


def _lighter(hex_color: str, amount: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    r, g, b = (round(c + (255 - c) * amount) for c in (r, g, b))
    return f"#{r:02X}{g:02X}{b:02X}"


def readable_window(cols: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """The window a view opens on: None (the whole step) when every forward/backward box is
    wide enough for its number at ``PLOT_WIDTH_PX``; else the start of the step, as long as
    ``BOX_LABEL_PX`` per short box (the 5th percentile: forwards are shorter) needs (a pp 8
    x 48 microbatch step opens on its first stretch of numbered boxes; the zoom control
    widens it)."""
    if label_mode(cols, None) == "boxes":
        return None
    m = _visible(cols, None)
    lengths = cols["end"][m] - cols["start"][m]
    short = float(np.percentile(lengths[lengths > 0], 5))  # forwards are the short boxes
    width = short * PLOT_WIDTH_PX / BOX_LABEL_PX
    span = float(cols["span"])
    return (0.0, min(span, width * 0.98))


def selected_arrays(
    cols: dict[str, np.ndarray], microbatch: int | None, stage: int | None,
    drawn: tuple[float, float] | None = None,
) -> dict[str, np.ndarray]:  # fmt: skip
    """Outline bars: the compute steps of ``microbatch`` (on ``stage`` only, if given), or
    of every microbatch on ``stage``; nothing when neither is given. Only those that overlap
    ``drawn`` (None: all)."""
    if microbatch is None and stage is None:
        return {"y": np.array([], np.int32), "base": np.array([]), "x": np.array([])}
    m = np.isin(cols["kind"], ("compute-forward", "compute-backward", "recompute"))
    m &= _in_range(cols, drawn)
    if microbatch is not None:
        m &= cols["mb"] == microbatch
    if stage is not None:
        m &= cols["stage"] == stage
    return {"y": cols["device"][m], "base": cols["start"][m],
            "x": cols["end"][m] - cols["start"][m]}  # fmt: skip


def microbatch_window(cols: dict[str, np.ndarray], lo: int, hi: int) -> tuple[float, float]:
    """The time window that shows microbatches ``lo``..``hi``: from the first of their
    forwards to the last of their backwards on the first pipeline device (the one that
    starts and ends every microbatch)."""
    m = (cols["device"] == 0) & (cols["mb"] >= lo) & (cols["mb"] <= hi)
    m &= np.isin(cols["kind"], ("compute-forward", "compute-backward"))
    if not m.any():
        return 0.0, float(cols["span"])
    return float(cols["start"][m].min()), float(cols["end"][m].max())


def _visible(cols, window) -> np.ndarray:
    m = np.isin(cols["kind"], ("compute-forward", "compute-backward"))
    if window is not None:
        m &= (cols["end"] > window[0]) & (cols["start"] < window[1])
    return m


def box_text(cols: dict[str, np.ndarray], window: tuple[float, float] | None = None) -> str:
    """The compute traces' ``textposition`` for ``window``: ``"inside"`` (each box shows its
    number where it fits) unless even the widest box in the window is narrower than
    ``BOX_TEXT_MIN_PX``, where no number can fit and ``"none"`` spares the browser making
    and hiding one text per box (a whole GPT-3 step: 7-8 s -> 2.7-2.9 s to draw, measured
    in headless Chromium under load; the numbers are then on the group labels).

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)
    >>> box_text(timeline_columns(sim.timeline))
    'inside'
    """
    m = _visible(cols, window)
    if not m.any():
        return "inside"
    span = (window[1] - window[0]) if window is not None else float(cols["span"])
    widest = float(np.max(cols["end"][m] - cols["start"][m])) * PLOT_WIDTH_PX / max(span, 1e-30)
    return "inside" if widest >= BOX_TEXT_MIN_PX else "none"


def label_mode(cols: dict[str, np.ndarray], window: tuple[float, float] | None = None) -> str:
    """``"boxes"`` when the median forward/backward box in ``window`` (default: the whole
    step) is at least ``BOX_LABEL_PX`` wide on a ``PLOT_WIDTH_PX`` plot, else ``"groups"``."""
    m = _visible(cols, window)
    if not m.any():
        return "boxes"
    span = (window[1] - window[0]) if window is not None else float(cols["span"])
    px = np.median(cols["end"][m] - cols["start"][m]) * PLOT_WIDTH_PX / max(span, 1e-30)
    return "boxes" if px >= BOX_LABEL_PX else "groups"


def label_groups(
    cols: dict[str, np.ndarray], window: tuple[float, float] | None = None
) -> list[dict]:
    """Groups of consecutive forward/backward boxes per device, each as wide as its label:
    ``{"device", "x0", "x1", "x", "text", "boxes"}`` (``x``: where its label is centred) with
    text such as ``"F16–19 B0–3"`` (the
    range of microbatch numbers of each phase in the group). The row is cut into stretches
    of one label's width (at ``PLOT_WIDTH_PX`` over ``window``) and the boxes starting in a
    stretch form its group, so every box in ``window`` is in exactly one group (vectorised:
    GPT-3's 46,000 events group in milliseconds)."""
    m = _visible(cols, window)
    idx = np.flatnonzero(m)
    if not len(idx):
        return []
    origin, span = (window[0], window[1] - window[0]) if window else (0.0, float(cols["span"]))
    digits = len(str(int(cols["mb"].max())))
    label_px = (2 * (2 * digits + 2) + 3) * GROUP_LABEL_PX  # "F12–15 B8–11" and a margin
    width = label_px * max(span, 1e-30) / PLOT_WIDTH_PX
    idx = idx[np.lexsort((cols["start"][idx], cols["device"][idx]))]
    dev, start, end = cols["device"][idx], cols["start"][idx], cols["end"][idx]
    fwd = cols["kind"][idx] == "compute-forward"
    mb = cols["mb"][idx].astype(float)
    # whole stretches only: the boxes of a last, narrower stretch join the one before, so
    # every group is at least a label wide and its label fits inside the plot
    whole = max(1, int(span // width))
    stretch = np.clip(np.floor((start - origin) / width), 0, whole - 1).astype(np.int64)
    key = dev.astype(np.int64) * (int(stretch.max()) + 2) + stretch
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    count = np.diff(np.r_[first, len(idx)])
    x0 = np.minimum.reduceat(start, first)
    x1 = np.maximum.reduceat(end, first)
    inf = np.inf
    ranges = [
        (np.minimum.reduceat(np.where(sel, mb, inf), first),
         np.maximum.reduceat(np.where(sel, mb, -inf), first))
        for sel in (fwd, ~fwd)
    ]  # fmt: skip
    out = []
    for g, i in enumerate(first):
        parts = [
            f"{short}{_ranges(int(lo[g]), int(hi[g]))}"
            for short, (lo, hi) in zip("FB", ranges, strict=True)
            if np.isfinite(lo[g])
        ]
        # centred above the group, but kept whole inside the plot: a group at either end
        # of the window would put half its label past the axis, clipped
        x = min(max((x0[g] + x1[g]) / 2, origin + width / 2), origin + span - width / 2)
        out.append({"device": int(dev[i]), "x0": float(x0[g]), "x1": float(x1[g]),
                    "x": float(x), "text": " ".join(parts), "boxes": int(count[g])})  # fmt: skip
    return out


def _ranges(lo: int, hi: int) -> str:
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def group_arrays(groups: list[dict]) -> dict:
    """The text trace of ``label_groups``: each label centred above its group's boxes, moved
    inwards where that would cut it at the plot's edge (one trace, not layout annotations:
    hundreds of annotations take plotly seconds to validate, a text trace milliseconds)."""
    return {
        "x": np.array([g["x"] for g in groups], dtype=float),
        "y": np.array([g["device"] + _BAR[0] - 0.15 for g in groups], dtype=float),
        "text": [g["text"] for g in groups],
    }


# --- the overview: boxes too narrow or too many ----------------------------------------------
#: Cells per window width of the overview (``overview_arrays``): at least the plot's pixels
#: at any notebook width (1440x900: ~1000 px; the bench draws 1100 px), so a cell is at most
#: a pixel wide.
OVERVIEW_BINS = 1280
#: The (kind, chunk) of each overview heatmap, one per bar trace but the pipeline
#: transfers' thin strip (it stays bars: it overlaps the compute it runs beside).
OVERVIEW_KEYS: tuple[tuple[str, int], ...] = tuple(k for k in TRACE_KEYS if k[0] != "pp-comm")
#: The position of the first overview heatmap (one per ``OVERVIEW_KEYS``), after the labels.
TRACE_OVERVIEW = TRACE_GROUPS + 1
#: Above this many boxes around the window the overview is drawn, however wide the boxes.
OVERVIEW_MAX_BOXES = 4000
_OVERVIEW_SLOTS = np.array([TRACE_KEYS.index(k) for k in OVERVIEW_KEYS])


def overview_mode(cols: dict[str, np.ndarray], window: tuple[float, float] | None = None) -> bool:
    """Whether ``window`` is drawn as the overview: even its widest forward/backward box is
    narrower than ``BOX_TEXT_MIN_PX`` (no number can show; ``box_text`` is ``"none"``), or
    the boxes of ``drawn_range(window)`` are more than ``OVERVIEW_MAX_BOXES`` (a browser
    draws each bar as an SVG path: at 10-15% of a GPT-3 175B step, 7,132-10,665 bars took
    Chromium 0.67-0.89 s to draw, 3,620 bars 0.31 s, measured under load). A whole GPT-3
    step holds 33,867 boxes of 0.1-1.5 px at 1100 px; the overview is one image per trace.

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4), global_batch=32, seq=512)
    >>> overview_mode(timeline_columns(sim.timeline))
    False
    """
    if box_text(cols, window) == "none":
        return True
    return int(_in_range(cols, drawn_range(window)).sum()) > OVERVIEW_MAX_BOXES


def overview_arrays(
    cols: dict[str, np.ndarray], pp: int, window: tuple[float, float] | None
) -> list[dict]:
    """The cells of each ``OVERVIEW_KEYS`` heatmap for ``window``: the window is cut into
    ``OVERVIEW_BINS`` cells, and each cell of a row shows the (kind, chunk) busy longest in
    it (the colour a pixel of sub-pixel boxes takes), or nothing when less than half of it
    is busy (an idle gap wider than a pixel stays a gap). Per trace, flat arrays in
    plotly's column form (x, y, z: one entry per cell; plotly sends 1-D numeric arrays as
    binary buffers, 2-D ones as nested lists): ``x`` the cell's centre, ``y`` its device,
    ``z`` how many of the trace's boxes overlap it (NaN: not this trace's), ``text`` and
    ``hovertext`` the lowest and highest microbatch among them; a NaN frame first (every
    column on row 0, every row in column 0) so the grid's columns and rows are the same in
    every trace. ``boxes``: the trace's boxes in the window; ``cell``: a cell's width.
    Busy time per cell from the cumulative busy time at the cell edges (one searchsorted
    per row and trace: GPT-3's 33,867 events in tens of milliseconds)."""
    span = float(cols["span"])
    lo, hi = window if window is not None else (0.0, span)
    cell = (hi - lo) / OVERVIEW_BINS
    lo, hi = max(lo, 0.0), min(hi, span)
    first_cell = int(np.floor(lo / cell))
    nb = max(1, int(np.ceil(hi / cell - 1e-9)) - first_cell)
    edges = cell * (first_cell + np.arange(nb + 1))
    code = cols["code"]
    slot = _FIRST_OF_CODE[code] + np.where(_CHUNKED_CODE[code], cols["chunk"] % MAX_CHUNKS, 0)
    drawn = (cols["kind"] != "pp-comm") & (cols["end"] > edges[0]) & (cols["start"] < edges[-1])
    shape = (pp, len(TRACE_KEYS), nb)
    busy, count = np.zeros(shape), np.zeros(shape, dtype=np.int32)
    mb_lo, mb_hi = np.zeros(shape, dtype=np.int32), np.zeros(shape, dtype=np.int32)
    for d in range(pp):
        on_row = drawn & (cols["device"] == d)
        for s in np.unique(slot[on_row]):
            i = np.flatnonzero(on_row & (slot == s))
            i = i[np.argsort(cols["start"][i], kind="stable")]
            start, end, mb = cols["start"][i], cols["end"][i], cols["mb"][i]
            busy[d, s] = np.diff(_busy_until(start, end, edges))
            # the boxes overlapping cell k: from the first ending after its left edge to
            # the last starting before its right edge (a trace's boxes on a row follow
            # one another)
            first = np.searchsorted(end, edges[:-1], side="right")
            last = np.searchsorted(start, edges[1:], side="left")
            n = np.maximum(last - first, 0)
            count[d, s] = n
            has = np.flatnonzero(n)
            if len(has):
                pairs = np.column_stack((first[has], last[has])).ravel()
                ext = np.r_[mb, 0]  # reduceat's right end may be one past the last box
                mb_lo[d, s, has] = np.minimum.reduceat(ext, pairs)[::2]
                mb_hi[d, s, has] = np.maximum.reduceat(ext, pairs)[::2]
    shown = busy.argmax(axis=1)  # (pp, nb): the trace busy longest in each cell
    shown[busy.sum(axis=1) < 0.5 * cell] = -1
    centres = (edges[:-1] + edges[1:]) / 2
    frame_x = np.r_[centres, np.full(pp - 1, centres[0])]
    frame_y = np.r_[np.zeros(nb, np.int32), np.arange(1, pp, dtype=np.int32)]
    nan = np.full(len(frame_x), np.nan, dtype=np.float32)
    out = []
    for s in _OVERVIEW_SLOTS:
        d, k = np.nonzero(shown == s)
        out.append({
            "x": np.r_[frame_x, centres[k]], "y": np.r_[frame_y, d].astype(np.int32),
            "z": np.r_[nan, count[d, s, k]].astype(np.float32),
            "text": np.r_[nan, mb_lo[d, s, k]].astype(np.float32),
            "hovertext": np.r_[nan, mb_hi[d, s, k]].astype(np.float32),
            "boxes": int((drawn & (slot == s)).sum()), "cells": len(d), "cell": cell,
        })  # fmt: skip
    return out


def _busy_until(start: np.ndarray, end: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Time covered by the boxes ``start``..``end`` (sorted by start, not overlapping)
    before each time of ``at``: the sum over boxes of clip(t - start, 0, length)."""
    cs = np.r_[0.0, np.cumsum(start)]
    ce = np.r_[0.0, np.cumsum(end)]
    ns = np.searchsorted(start, at, side="left")
    ne = np.searchsorted(end, at, side="left")
    return (ns * at - cs[ns]) - (ne * at - ce[ne])


def overview_hover(kind: str, chunk: int, unit: str, cell: float) -> str:
    """Hover of an overview cell: how many boxes of ``kind`` (and ``chunk``) it holds, their
    microbatches (compute kinds) and the time it spans (its centre, half a cell either
    side)."""
    what = (f"chunk {chunk}: %{{z}} boxes, microbatches %{{text}}–%{{hovertext}}"
            if kind in _SHORT else "%{z} boxes")  # fmt: skip
    return (
        f"{what} (an overview: zoom in for each box)<br>%{{x:.4g}} ± "
        f"{cell / 2:.2g} {unit}<extra>{EVENT_NAMES[kind]}</extra>"
    )


def overview_ygap(layout: go.Layout, pp: int) -> float:
    """The pixels between two rows of overview cells, so a cell is as tall as a bar
    (``_BAR``): the plot's height over the y range, times the part of a row bars leave
    empty."""
    m = layout.margin
    plot = layout.height - m.t - m.b
    return max(0.0, plot / (pp + 0.05) * (1.0 - _BAR[1]))


def pipeline_title(sim: SimResult | None, timeline: Timeline, formula: float | None = None) -> str:
    if sim is None:
        return f"{timeline}"
    c = sim.config
    sched = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved_1f1b": "interleaved 1F1B"}.get(
        c.schedule, c.schedule
    ) + (f" (v={c.virtual_stages})" if c.virtual_stages > 1 else "")
    bubble = f"bubble {timeline.bubble_fraction():.1%} simulated"
    if formula is not None:
        bubble += f" / {formula:.1%} formula"
    return (
        f"{sched}: pp={c.pp}, {c.num_microbatches} "
        f"microbatch{'' if c.num_microbatches == 1 else 'es'} of {c.microbatch_size} "
        f"(global batch {sim.global_batch}) — step {fmt_seconds(sim.step_time_s)}, {bubble}"
    )


def hover_template(kind: str, unit: str, chunk: int | None = 0) -> str:
    """Hover of one box of ``kind`` (of virtual ``chunk``; None: not named): stage, chunk
    and microbatch (compute), start, end and length (``trace_arrays`` says where each value
    is; the length read ``%{x}``, which plotly's hover gives as the end)."""
    where = (
        "stage %{customdata}" + ("" if chunk is None else f" (chunk {chunk})")
        + ", microbatch %{text}<br>"
        if kind in _SHORT else ""
    )  # fmt: skip
    return (
        f"{where}%{{base:.4g}} → %{{x:.4g}} {unit} "
        f"(%{{hovertext:.3g}} {unit})<extra>{EVENT_NAMES[kind]}</extra>"
    )


def trace_hover(kind: str, chunk: int, chunks: int, unit: str) -> str:
    """The hover of the trace of (``kind``, ``chunk``) when the step has ``chunks`` chunks
    per device (more than ``MAX_CHUNKS``: chunks share traces, the stage alone names one)."""
    return hover_template(kind, unit, chunk if chunks <= MAX_CHUNKS else None)


def _bar_trace(kind: str, chunk: int, a: dict, unit: str, chunks: int, text: str) -> go.Bar:
    thin = kind == "pp-comm"
    marker: dict = {**trace_marker(kind, chunk), "line": {"width": 0}}
    short = _SHORT.get(kind)
    offset, width = _STRIP if thin else _BAR
    name = EVENT_NAMES[kind] + (f", chunk {chunk}" if chunk else "")
    return go.Bar(
        orientation="h", name=name, legendgroup=kind, showlegend=chunk == 0, y=a["y"],
        base=a["base"], x=a["x"], hovertext=a["hovertext"], text=a.get("text"),
        customdata=a.get("customdata"), texttemplate=f"{short}%{{text}}" if short else None,
        hovertemplate=trace_hover(kind, chunk, chunks, unit),
        textposition=text if short else "none", insidetextanchor="middle", textangle=0,
        textfont={"size": 9, "color": "white"}, marker=marker, width=width, offset=offset,
        cliponaxis=True,
    )  # fmt: skip


def overview_trace_data(a: dict | None, kind: str, chunk: int, unit: str) -> dict:
    """What an overview heatmap holds: ``overview_arrays``' cells (None, or no cell of the
    trace: nothing, the window is drawn as boxes); ``meta`` keeps how many boxes the cells
    stand for (the screen-reader summary says it)."""
    if a is None or not a["cells"]:
        empty = np.zeros(0, np.float32)
        return {"x": empty, "y": np.zeros(0, np.int32), "z": empty, "text": empty,
                "hovertext": empty, "meta": None}  # fmt: skip
    return {"x": a["x"], "y": a["y"], "z": a["z"], "text": a["text"],
            "hovertext": a["hovertext"], "meta": {"boxes": a["boxes"]},
            "hovertemplate": overview_hover(kind, chunk, unit, a["cell"])}  # fmt: skip


def _overview_trace(kind: str, chunk: int, a: dict | None, unit: str) -> go.Heatmap:
    color = trace_marker(kind, chunk)["color"]
    return go.Heatmap(
        name=EVENT_NAMES[kind] + (f", chunk {chunk}" if chunk else ""), legendgroup=kind,
        showlegend=False, showscale=False, colorscale=[[0, color], [1, color]],
        zsmooth=False, hoverongaps=False, **overview_trace_data(a, kind, chunk, unit),
    )  # fmt: skip


def pipeline_figure(
    result: SimResult | Timeline, *, selected_microbatch: int | None = None,
    selected_stage: int | None = None, title: str = "", height: int | None = None,
    window: tuple[float, float] | None = None, formula: float | None = None,
) -> go.Figure:  # fmt: skip
    """The Gantt chart of a simulated step (``SimResult`` with a timeline, or a Timeline).

    Rows are the pipeline's devices (stage d on device d; with interleaving device d runs
    stages d, d+p, ...); x is time in the unit of ``time_unit(step)``. Traces: one per
    ``TRACE_KEYS`` entry (event kind and chunk), then ``selected`` (the outline of the
    selected microbatch, or of a stage's steps), then the group labels (a text trace) that
    number groups of boxes when boxes are too narrow for their numbers, then one overview
    heatmap per ``OVERVIEW_KEYS`` entry, empty unless ``overview_mode`` (see the module
    docstring).

    Args:
        window: the visible time range (x axis units); default the whole step. Zoomed, the
            figure holds only the boxes of ``drawn_range(window)`` (a view re-slices them
            when its window leaves that range).
        formula: the closed-form bubble, shown in the title next to the simulated one.

    >>> import explorer as ex
    >>> sim = ex.simulate("gpt2", ex.ParallelConfig(dp=2, pp=4, microbatch_size=2),
    ...                   global_batch=32, seq=512)
    >>> fig = pipeline_figure(sim)
    >>> t = fig.data[0]  # forward boxes: the stage in customdata, the microbatch in text
    >>> t.name, t.texttemplate, int(t.customdata[0]), int(t.text[0])
    ('Forward', 'F%{text}', 0, 0)
    """
    sim = result if isinstance(result, SimResult) else None
    timeline = sim.timeline if sim is not None else result
    if timeline is None:
        raise ViewError(
            "pipeline_figure needs an event timeline: pass ex.simulate(...)'s result (an "
            "estimate has none) or a Timeline"
        )
    unit, scale = time_unit(timeline.step_time_s)
    cols = timeline_columns(timeline, scale)
    # a bare Timeline: its chunks are those its events name
    chunks = (sim.config.virtual_stages if sim is not None
              else int(cols["chunk"].max()) + 1 if len(cols["chunk"]) else 1)  # fmt: skip
    drawn = drawn_range(window)
    overview = overview_mode(cols, window)
    arrays = trace_arrays(cols, chunks, drawn, overview)
    text = box_text(cols, window)
    traces = [_bar_trace(kind, chunk, a, unit, chunks, text)
              for (kind, chunk), a in zip(TRACE_KEYS, arrays, strict=True)]  # fmt: skip
    sel = selected_arrays(cols, selected_microbatch, selected_stage, drawn)
    traces.append(go.Bar(
        orientation="h", name="selected", y=sel["y"], base=sel["base"], x=sel["x"],
        marker={"color": "rgba(0,0,0,0)", "line": {"width": 2.5, "color": SELECTED}},
        width=_BAR[1], offset=_BAR[0], hoverinfo="skip", showlegend=False,
    ))  # fmt: skip
    g = group_arrays(visible_groups(cols, window))
    traces.append(go.Scatter(
        x=g["x"], y=g["y"], text=g["text"], mode="text", name="microbatch groups",
        textfont={"size": 10, "color": "#333"}, textposition="middle center",
        hoverinfo="skip", showlegend=False, cliponaxis=True,
    ))  # fmt: skip
    pp = timeline.devices
    views = overview_arrays(cols, pp, window) if overview else [None] * len(OVERVIEW_KEYS)
    traces += [_overview_trace(kind, chunk, a, unit)
               for (kind, chunk), a in zip(OVERVIEW_KEYS, views, strict=True)]  # fmt: skip
    fig = go.Figure(traces)
    fig.update_layout(
        **base_layout(title or pipeline_title(sim, timeline, formula),
                      height=height or figure_height(pp), legend=False),
        **pipeline_axes(cols, pp, chunks, unit, window),
        barmode="overlay", bargap=0.0, uniformtext={"minsize": 8, "mode": "hide"},
        plot_bgcolor="white", clickmode="event",
    )  # fmt: skip
    # the legend under the time axis (ten kinds wrap to two or three lines: above the plot
    # they would cover the title)
    fig.update_layout(
        showlegend=True,
        legend={"orientation": "h", "x": 0.0, "xanchor": "left", "yref": "container", "y": 0.0,
                "yanchor": "bottom", "font": {"size": 11}},
        margin={"b": 44 + LEGEND_PX},
    )  # fmt: skip
    fig.update_traces(ygap=overview_ygap(fig.layout, pp), selector={"type": "heatmap"})
    return fig


def visible_groups(cols: dict[str, np.ndarray], window=None) -> list[dict]:
    """The groups to label in ``window``: none when every box holds its own number."""
    return label_groups(cols, window) if label_mode(cols, window) == "groups" else []


def pipeline_axes(cols, pp: int, chunks: int, unit: str, window) -> dict:
    """The layout keys that change with the data or the zoom."""
    return {
        # autoscale (the toolbar, a double click) spans the step, not the boxes held
        "xaxis": {"title": {"text": f"time ({unit})"}, "range": list(window) if window else
                  [0, float(cols["span"])], "autorange": False, "showgrid": True,
                  "gridcolor": "#EEE",
                  "autorangeoptions": {"include": [0, float(cols["span"])]}},
        "yaxis": {"tickmode": "array", "tickvals": list(range(pp)),
                  "ticktext": row_labels(pp, chunks), "range": [pp - 0.45, -0.5],
                  "autorange": False, "automargin": True},
    }  # fmt: skip
