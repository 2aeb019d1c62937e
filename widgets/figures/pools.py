"""Drawings of a job over pools of different chips (`explorer.training.HeteroPlan`).

- ``pools_map_figure(plan)``: one row per pool, its chips along x, cut into what they run:
  pipeline stages (pipeline mode: each stage block holds ``dp x tp`` chips, labelled with
  its layers) or data-parallel replicas (data mode: each block one replica, labelled with
  its configuration and the pool's batch share). One colour per pool, named in the legend.
- ``pools_pipeline_figure(plan)``: the simulated step as `pipeline_figure`'s Gantt chart
  (pipeline mode: one row per stage; data mode: the chosen pool's own pipeline), each row
  backed by its pool's colour and labelled with the pool, and one legend entry per pool.

Pool colours: `pool_color(i)`, by the pool's index in the plan (stable for a plan).
"""

from __future__ import annotations

import plotly.graph_objects as go

from explorer.training import HeteroPlan

from ..colors import PALETTE
from .errors import ViewError
from .pipeline import pipeline_figure
from .style import base_layout

__all__ = ["POOL_COLORS", "pool_color", "pools_map_figure", "pools_pipeline_figure"]

#: one hue per pool, far apart and apart from the Gantt's event colours (blue, olive,
#: purple, pink, then the palette).
POOL_COLORS: tuple[str, ...] = ("#1F77B4", "#BCBD22", "#9467BD", "#E377C2", *PALETTE)
_MAX_BLOCKS = 48  # blocks drawn per pool row; more are merged into runs ("stages 0-7")
_ROW_PX = 70


def pool_color(i: int) -> str:
    """The colour of the job's pool number ``i``.

    >>> pool_color(0), pool_color(1)
    ('#1F77B4', '#BCBD22')
    """
    return POOL_COLORS[i % len(POOL_COLORS)]


def _check(plan: object) -> HeteroPlan:
    if not isinstance(plan, HeteroPlan):
        raise ViewError(
            f"expected a HeteroPlan (ex.plan_hetero or ex.plan_training(pools=...)), got "
            f"{type(plan).__name__}"
        )
    return plan


def _blocks(plan: HeteroPlan, i: int) -> list[tuple[int, int, str, str]]:
    """(first chip, chips, label, hover) of each block the pool ``i`` row is cut into."""
    a = plan.assignments[i]
    c = a.config
    if plan.mode == "pipeline":
        per = c.dp * c.tp
        out = [
            (k * per, per, f"s{g}: {n}L", f"stage {g}: {n} layers on {c.dp} replicas x tp{c.tp}")
            for k, (g, n) in enumerate(zip(a.stages, a.layers, strict=True))
        ]  # fmt: skip
    else:
        per = a.pool.chips // max(c.dp, 1)
        share = a.sequences / max(c.dp, 1)
        out = [
            (r * per, per, f"r{r}: {share:g} seq", f"replica {r}: tp{c.tp} x pp{c.pp}, {share:g} sequences")
            for r in range(c.dp)
        ]  # fmt: skip
    if len(out) > _MAX_BLOCKS:  # merge into runs of equal blocks so labels stay readable
        step = -(-len(out) // _MAX_BLOCKS)
        merged = []
        for k in range(0, len(out), step):
            run = out[k : k + step]
            first, last = run[0], run[-1]
            label = f"{first[2].split(':')[0]}-{last[2].split(':')[0]}"
            merged.append((first[0], sum(b[1] for b in run), label, f"{first[3]} ... {last[3]}"))
        out = merged
    return out


def pools_map_figure(plan: HeteroPlan, *, title: str = "") -> go.Figure:
    """The pools' chips and what they run (module docstring).

    >>> import explorer as ex
    >>> plan = ex.plan_hetero("gpt2", [ex.Pool("h100-sxm", 8), ex.Pool("a100-80g", 8)], 64, 512)
    >>> fig = pools_map_figure(plan)
    >>> [t.name for t in fig.data]  # data-parallel across the pools here
    ['8 x h100-sxm: 48 sequences', '8 x a100-80g: 16 sequences']
    """
    plan = _check(plan)
    traces = []
    for i, a in enumerate(plan.assignments):
        blocks = _blocks(plan, i)
        traces.append(go.Bar(
            orientation="h", legendgroup=a.pool.label,
            name=str(a.pool) + (f": {a.sequences} sequences" if plan.mode == "data" else ""),
            y=[a.pool.label] * len(blocks), base=[b[0] for b in blocks],
            x=[b[1] for b in blocks], text=[b[2] for b in blocks],
            customdata=[[b[3]] for b in blocks], textposition="inside",
            insidetextanchor="middle", textangle=0, textfont={"size": 10, "color": "white"},
            marker={"color": pool_color(i), "line": {"width": 1, "color": "white"}},
            hovertemplate=f"{a.pool}<br>%{{customdata[0]}}<br>chips %{{base}}-"
            "%{x}<extra></extra>",
        ))  # fmt: skip
    what = "pipeline stages" if plan.mode == "pipeline" else "data-parallel replicas"
    fig = go.Figure(traces)
    fig.update_layout(
        **base_layout(
            title or f"{plan.model} over {len(plan.pools)} pools: {what}, step "
            f"{plan.step_time_s:.3g} s", height=120 + _ROW_PX * len(plan.pools),
        ),
        barmode="overlay", bargap=0.3, uniformtext={"minsize": 8, "mode": "hide"},
        xaxis={"title": {"text": "chips of the pool"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        plot_bgcolor="white",
    )  # fmt: skip
    return fig


def pools_pipeline_figure(plan: HeteroPlan, *, pool: int = 0, **kwargs) -> go.Figure:
    """The step's Gantt chart with the pools drawn: each pipeline row on its pool's colour,
    rows labelled ``stage g · pool``, a legend entry per pool (module docstring).

    Args:
        pool: in data mode, the pool whose own pipeline is drawn (index into ``plan.pools``).
        kwargs: passed to `pipeline_figure` (``selected_microbatch``, ``window``, ...).
    """
    plan = _check(plan)
    if plan.mode == "pipeline":
        if plan.timeline is None:
            raise ViewError("this HeteroPlan has no timeline; plan it again with plan_hetero")
        fig = pipeline_figure(plan.timeline, **kwargs)
        rows = [plan.stage_pool[g] for g in range(plan.partition.stages)]
        ticks = [
            f"stage {g} · {plan.pools[p].label} ({plan.partition.layers(g)}L)"
            for g, p in enumerate(rows)
        ]  # fmt: skip
        title = (
            f"{plan.model} across {len(plan.pools)} pools: 1F1B, {len(rows)} stages "
            f"({plan.partition}) — step {plan.step_time_s:.3g} s"
        )
    else:
        if not isinstance(pool, int) or not 0 <= pool < len(plan.pools):
            raise ViewError(f"pool={pool!r}; expected an index 0..{len(plan.pools) - 1}")
        sim = plan.pool_plans[pool].sim
        fig = pipeline_figure(sim, **kwargs)
        rows = [pool] * sim.timeline.devices
        base = fig.layout.yaxis.ticktext or [f"device {d}" for d in range(len(rows))]
        ticks = [f"{t} · {plan.pools[pool].label}" for t in base]
        title = (
            f"{plan.pools[pool]} (one of {len(plan.pools)} data-parallel pools): "
            f"{plan.assignments[pool].sequences} sequences — step {sim.step_time_s:.3g} s"
        )
    if not kwargs.get("title"):
        fig.update_layout(title={"text": title})
    fig.update_yaxes(ticktext=ticks)
    for d, p in enumerate(rows):  # the row's background in its pool's colour
        fig.add_shape(
            type="rect", xref="paper", x0=0, x1=1, yref="y", y0=d - 0.5, y1=d + 0.5,
            fillcolor=pool_color(p), opacity=0.12, line={"width": 0}, layer="below",
        )  # fmt: skip
    for p in sorted(set(rows)):
        fig.add_trace(go.Scatter(
            x=[None], y=[None], mode="markers", name=f"pool: {plan.pools[p]}",
            marker={"symbol": "square", "size": 12, "color": pool_color(p), "opacity": 0.35,
                    "line": {"width": 1.5, "color": pool_color(p)}},
            legendgroup=f"pool-{p}", hoverinfo="skip",
        ))  # fmt: skip
    return fig
