"""A standalone HTML report of one training plan: the summary and the graph, mesh, memory,
pipeline and scaling figures, drawn by the same builders as the widgets; with a profiler
trace, a section of its breakdown and its step next to the predicted one.

One file, plotly.js inlined once, no server: open it in any browser or attach it to a mail.
Every piece of text that comes from a config (the model name, node and op names) is escaped
both in the HTML and inside the figures (plotly renders a subset of HTML in its labels).

>>> html = build_report("gpt2", devices=8, global_batch=64, seq=512)  # doctest: +SKIP
>>> write_report("report.html", "gpt2", devices=8, global_batch=64)  # doctest: +SKIP
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

import explorer as ex
from explorer.models import ModelConfig

from .figures import graph_figure, memory_figure, mesh_figure, pipeline_figure, scaling_figure
from .figures.trace_breakdown import breakdown_figure, side_by_side_figure

__all__ = ["Report", "build_report", "write_report", "scaling_counts", "escape_figure"]

DRAW_LAYERS = 2  # identical layers get identical strategies: two stand for all
SCALING_FACTORS = (1 / 4, 1 / 2, 1, 2, 4)  # device counts of the scaling section, x devices
SPECIAL = ("<", ">", "&", '"', "'")


@dataclass(frozen=True)
class Report:
    """The report's parts: ``html`` (the whole file) and the figures it holds, by section."""

    html: str
    figures: tuple[tuple[str, go.Figure], ...]
    plan: Any  # TrainingPlan
    build_s: float


def scaling_counts(devices: int) -> tuple[int, ...]:
    """Device counts around ``devices`` (a quarter to four times), whole numbers only.

    >>> scaling_counts(64)
    (16, 32, 64, 128, 256)
    >>> scaling_counts(2)
    (1, 2, 4, 8)
    """
    counts = {round(devices * f) for f in SCALING_FACTORS if float(devices * f).is_integer()}
    return tuple(sorted(c for c in counts if c >= 1))


def _user_strings(cfg: ModelConfig, graph: ex.Graph | None) -> list[str]:
    """Config-controlled strings that carry HTML-special characters, longest first (so a
    name that contains another is replaced whole)."""
    names = {cfg.name}
    if graph is not None:
        names.add(graph.name)
        for n in graph.nodes:
            names.update((n.name, n.op, n.scope or ""))
    return sorted((s for s in names if s and any(c in s for c in SPECIAL)), key=len, reverse=True)


def _escape_value(value: Any, names: Sequence[str]) -> Any:
    if isinstance(value, str):
        for s in names:
            if s in value:
                value = value.replace(s, html.escape(s))
        return value
    if isinstance(value, dict):
        return {k: _escape_value(v, names) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_escape_value(v, names) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "OUS":  # labels of heatmaps
        return _escape_value(value.tolist(), names)
    return value


def escape_figure(fig: go.Figure, names: Iterable[str]) -> go.Figure:
    """A copy of ``fig`` whose labels show ``names`` literally: each occurrence in a title,
    trace name, hover or text is HTML-escaped (the builders' own ``<b>``/``<br>`` stay).

    >>> fig = escape_figure(go.Figure(layout={"title": "<b>x<i></b>"}), ["x<i>"])
    >>> fig.layout.title.text
    '<b>x&lt;i&gt;</b>'
    """
    names = sorted(set(names), key=len, reverse=True)
    if not names:
        return fig
    return go.Figure(_escape_value(fig.to_plotly_json(), names))


def _mesh_section(sharding) -> go.Figure:
    """The mesh with the first split matmul output of the plan drawn on it (or bare)."""
    g, mesh = sharding.graph, sharding.mesh
    for n in g.nodes:
        s = sharding.assignment.get(n.name)
        if n.op == "matmul" and s is not None and any(s.out_layout.dims):
            return mesh_figure(mesh, s.out_layout, n.type, tensor=n.name)
    return mesh_figure(mesh)


def _figures(plan, cfg: ModelConfig, hardware: str, counts: Sequence[int], draw_layers: int,
             params=None):  # fmt: skip
    sharding = plan.sharding_plan(layers=draw_layers)
    stages = plan.stage_map(sharding.graph)
    gb = plan.global_batch * counts[0] // plan.config.devices
    curve = ex.scaling_curve(cfg, hardware, list(counts), global_batch=max(gb, 1), seq=plan.seq,
                             params=params)  # fmt: skip
    figs = [
        ("graph", graph_figure(sharding.graph, sharding, color_by="stage", stages=stages)),
        ("mesh", _mesh_section(sharding)),
        ("memory", memory_figure(plan.sim)),
        ("pipeline", pipeline_figure(plan.sim)),
        ("scaling", scaling_figure([curve])),
    ]
    return figs, sharding, curve


SECTIONS = {
    "graph": "Graph ({layers} of {total} layers drawn; colour = pipeline stage)",
    "mesh": "Device mesh of one pipeline stage (dp x tp)",
    "memory": "Memory per pipeline device",
    "pipeline": "Pipeline schedule of one step",
    "scaling": "Scaling (weak: the global batch grows with the devices)",
    "trace": "Measured trace (PyTorch profiler)",
    "trace-vs-predicted": "Measured and predicted step on one time axis",
}

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 12px; }
h1 { margin-bottom: 0.2em; } .meta { color: #666; } section { margin-top: 2em; }
"""


def _trace_section(trace, axes, config, plan, cfg, hardware, params) -> tuple[str, list]:
    """The measured-trace section: the trace's breakdown and its step next to the predicted
    step of ``config`` (default: the plan's layout), both as text and as figures."""
    t = trace if isinstance(trace, ex.traces.KinetoTrace) else ex.traces.load_kineto(trace)
    config = config or plan.config
    sim = ex.simulate(cfg, config, hardware, plan.global_batch, plan.seq, params)
    b = ex.traces.breakdown(t, axes)
    sbs = ex.traces.side_by_side(t, sim, axes=axes)
    e = html.escape
    text = (f"<pre>{e(str(t))}\n\n{e(str(b))}</pre><p>Measured step {sbs.step} next to the "
            f"predicted step of {e(str(config))}:</p><pre>{e(sbs.text())}</pre>")  # fmt: skip
    figs = [("trace", breakdown_figure(b, "where each measured step went")),
            ("trace-vs-predicted", side_by_side_figure(sbs))]  # fmt: skip
    return text, figs


def build_report(
    model: str | ModelConfig, devices: int, hardware: str = "a100-80g",
    global_batch: int | None = None, seq: int | None = None, *,
    draw_layers: int = DRAW_LAYERS, counts: Sequence[int] | None = None,
    stack: str | None = None, trace=None, trace_axes: dict[str, int] | None = None,
    trace_config=None,
) -> Report:  # fmt: skip
    """Plan ``model`` on ``devices`` chips and lay the result out as one HTML page.

    Args:
        model: a zoo name or a ``ModelConfig`` (e.g. ``ex.models.load_file(path)``).
        global_batch: sequences per step (default: one per device); ``seq``: the model's
            default sequence length when None.
        draw_layers: layers drawn in the graph and planned op by op.
        counts: device counts of the scaling section (default ``scaling_counts(devices)``).
        stack: the training stack the plan and the scaling section assume (``ex.stacks``;
            default ``ex.stacks.DEFAULT_STACK``), named on the page.
        trace: a PyTorch profiler trace (a path for ``ex.traces.load_kineto``, or a loaded
            `KinetoTrace`): adds a section with its breakdown and its step next to the
            predicted step of ``trace_config`` (the `ParallelConfig` it ran; default the
            plan's), collective groups named with ``trace_axes`` (``{"tp": 8, "dp": 4}``).
    """
    t0 = time.perf_counter()
    cfg = ex.models.load(model) if isinstance(model, str) else model
    global_batch = global_batch or devices
    stack_name = ex.stacks.get(stack or ex.stacks.DEFAULT_STACK).name
    plan = ex.plan_training(cfg, devices=devices, hardware=hardware, global_batch=global_batch,
                            seq=seq, stack=stack_name)  # fmt: skip
    counts = tuple(counts or scaling_counts(devices))
    figs, sharding, curve = _figures(plan, cfg, hardware, counts, draw_layers,
                                     ex.stacks.params(stack_name))  # fmt: skip
    trace_html = ""
    if trace is not None:
        trace_html, trace_figs = _trace_section(trace, trace_axes, trace_config, plan, cfg,
                                                hardware, ex.stacks.params(stack_name))  # fmt: skip
        figs += trace_figs
    names = _user_strings(cfg, sharding.graph)
    figs = [(k, escape_figure(f, names)) for k, f in figs]
    e = html.escape
    parts = [
        "<!DOCTYPE html>", "<html><head><meta charset='utf-8'>",
        f"<title>{e(cfg.name)} on {devices} x {e(hardware)} — Parallel Explorer</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{e(cfg.name)} on {devices} x {e(hardware)}</h1>",
        f"<p class='meta'>{e(str(cfg))}<br>global batch {global_batch}, sequence {plan.seq}, "
        f"stack {e(stack_name)}{'' if stack else ' (the default)'}; "
        f"made by Parallel Explorer {e(ex.__version__)} on "
        f"{datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}</p>",
        "<section><h2>Plan</h2>", f"<pre>{e(plan.report())}</pre>",
        *_runner_up(plan),
        f"<h3>Scaling</h3><pre>{e(curve.table())}</pre></section>",
    ]  # fmt: skip
    for i, (key, fig) in enumerate(figs):
        title = SECTIONS[key].format(layers=min(draw_layers, cfg.num_layers), total=cfg.num_layers)
        body = fig.to_html(full_html=False, include_plotlyjs=i == 0, div_id=f"fig-{key}",
                           config={"displaylogo": False})  # fmt: skip
        if key == "trace":
            body = trace_html + body
        parts += [f"<section id='{key}'><h2>{e(title)}</h2>", body, "</section>"]
    parts.append("</body></html>")
    return Report("\n".join(parts), tuple(figs), plan, time.perf_counter() - t0)


def _runner_up(plan) -> list[str]:
    """The chosen plan against the next best, term by term (``ex.diff``'s text form)."""
    if not plan.alternatives:
        return []
    alt = plan.alternatives[0].config
    d = ex.diff(plan, alt)
    return [f"<h3>Against the runner-up ({html.escape(str(alt))})</h3>",
            f"<pre>{html.escape(d.text())}</pre>"]  # fmt: skip


def write_report(path: str | Path, model: str | ModelConfig, devices: int, **kwargs: Any) -> Report:
    """``build_report`` and write the page to ``path`` (UTF-8)."""
    report = build_report(model, devices, **kwargs)
    Path(path).write_text(report.html, encoding="utf-8")
    return report


def run_cli(args) -> int:
    """``python -m explorer report``: the core's command line finds this through the
    ``explorer.commands`` entry point (the core never imports widgets)."""
    path = Path(args.model)
    cfg = ex.models.load_file(path) if path.suffix == ".json" else ex.models.load(args.model)
    report = write_report(
        args.output, cfg, args.devices, hardware=args.hardware,
        global_batch=args.global_batch, seq=args.seq, draw_layers=args.layers,
        stack=getattr(args, "stack", None), trace=getattr(args, "trace", None),
    )  # fmt: skip
    size = Path(args.output).stat().st_size
    print(f"wrote {args.output} ({size / 2**20:.1f} MiB, {report.build_s:.1f} s): "
          f"{report.plan.config}")  # fmt: skip
    return 0
