"""``TraceCompare``: one Python model run eagerly and under ``@jit``, side by side."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as ipw
import numpy as np
import plotly.graph_objects as go
import traitlets as tl

import explorer as ex
from explorer.trace import Trace

from .base import View, replace_figure
from .coalesce import Coalescer
from .figures.trace import (
    TRACE_PICKED,
    TRACE_STATIC,
    kernel_links,
    rewrite_figure,
    summary_figure,
    trace_figure,
)
from .selection import Selection

__all__ = ["TraceCompare", "gpt_workload"]


def _infer(model, tokens):
    return model(tokens)


def gpt_workload(
    vocab: int = 256, hidden: int = 64, layers: int = 2, heads: int = 4, max_seq: int = 128
) -> tuple[Callable, Callable[[int, int], tuple]]:
    """A small GPT: ``fn(model, tokens)`` and ``make_args(batch, size)`` (size = sequence)."""
    model = ex.nn.GPT(vocab_size=vocab, hidden=hidden, num_layers=layers, num_heads=heads,
                      max_seq_len=max_seq, seed=0)  # fmt: skip

    def make_args(batch: int, size: int) -> tuple:
        if size > max_seq:
            raise ValueError(f"size={size} exceeds the model's max_seq_len={max_seq}; pick "
                             f"a size up to {max_seq}")  # fmt: skip
        rng = np.random.default_rng(0)
        return model, ex.tensor(rng.integers(0, vocab, (batch, size)), "int32")

    return _infer, make_args


class TraceCompare(View):
    """Eager and static timelines, the summary table and the compiler's rewrite steps.

    Args:
        fn: the Python function (defined in a file: ``@jit`` converts its source); default:
            a 2-layer GPT forward (``gpt_workload``).
        make_args: ``(batch, size) -> args`` for ``fn``.
        batch, size: the starting input; the controls of the same names re-run both modes.
        level: ``@jit`` optimisation level (``"O0"``, ``"O1"``, ``"O2"``).

    One ``@jit`` function lives as long as the view: a shape seen before hits its cache; a
    new one shows a ``recompile`` bar with its reason.

    >>> view = TraceCompare(batch=1, size=16)
    >>> view.controls["batch"].value = 2
    >>> view.recompiles, view.figure.data[2].hovertext[0][:9]
    (1, 'recompile')
    """

    # --- inputs -------------------------------------------------------------------------
    batch = tl.Int(2)
    size = tl.Int(32)
    level = tl.Enum(("O0", "O1", "O2"), default_value="O2")
    # --- results ------------------------------------------------------------------------
    comparison = tl.Any(None, allow_none=True)
    steps = tl.List()
    recompiles = tl.Int(0, help="compilations after the first (new shapes)")
    # --- display ------------------------------------------------------------------------
    step = tl.Int(0)
    kernel = tl.Int(None, allow_none=True, help="the picked static kernel (index)")

    selection_traits = ()
    name = "traces"

    def __init__(
        self, fn: Callable | None = None, make_args: Callable[[int, int], tuple] | None = None,
        *, batch: int = 2, size: int = 32, level: str = "O2", selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        if (fn is None) != (make_args is None):
            raise ValueError("pass both fn and make_args, or neither (the default GPT)")
        if fn is None:
            fn, make_args = gpt_workload()
        self.fn, self.make_args = fn, make_args
        self.batch, self.size, self.level = batch, size, level
        self.jitted = ex.jit(fn, level=level)
        self._compiles = 0
        self._rerun_soon = Coalescer(self.errors.guard(self._run))
        self._run(draw=False)
        self.figure = go.FigureWidget(trace_figure(self.comparison))
        self.summary_figure = go.FigureWidget(summary_figure(self.comparison))
        self.steps_figure = go.FigureWidget(rewrite_figure(self._step()))
        self.controls = {
            "batch": ipw.IntSlider(value=batch, min=1, max=16, description="batch"),
            "size": ipw.IntSlider(value=size, min=8, max=128, step=8, description="size"),
            "step": ipw.IntSlider(value=0, min=0, max=max(len(self.steps) - 1, 0),
                                  description="pass step"),
        }  # fmt: skip
        for w in self.controls.values():
            w.observe(self.errors.guard(self._on_control), names="value")
        self.compile_info = ipw.HTML(self._compile_html())
        self.kernel_info = ipw.HTML()
        self.figure.data[TRACE_STATIC].on_click(self.errors.guard(self._on_click))
        c = self.controls
        self._layout_children(
            ipw.HBox([c["batch"], c["size"]]), self.compile_info, self.figure, self.kernel_info,
            self.summary_figure, c["step"], self.steps_figure,
        )  # fmt: skip

    # --- running ------------------------------------------------------------------------
    def _run(self, draw: bool = True) -> None:
        args = self.make_args(self.batch, self.size)
        with self.progress.task("running eager and @jit", steps=3) as step:
            self.fn(*args)  # warm-up, as the static side gets its first call
            with ex.trace.record("eager") as te:
                self.fn(*args)
            step("eager done")
            with ex.trace.record("static") as first:  # compiles when the shape is new
                self.jitted(*args)
            step("compiled")
            with ex.trace.record("static") as ts:  # steady state: what the speedup compares
                self.jitted(*args)
            step("static done")
        compiles = tuple(e for e in first.trace.events if e.kind in ("compile", "recompile"))
        kinds = [e.kind for e in compiles]
        self.recompiles += kinds.count("recompile")
        self._compiles += len(kinds)
        # The compilation is shown on its own row; timing the steady-state call keeps the
        # one-off compile time out of the eager/static ratio.
        static = Trace(compiles + ts.trace.events, "static", ts.trace.wall_us)
        self.comparison = ex.trace.compare(te.trace, static)
        self.steps = list(self.jitted.steps(*args))
        self.step = min(self.step, max(len(self.steps) - 1, 0))
        self._last_events = list(compiles)
        if draw:
            self.kernel = None
            self.kernel_info.value = ""
            replace_figure(self.figure, trace_figure(self.comparison))
            replace_figure(self.summary_figure, summary_figure(self.comparison))
            replace_figure(self.steps_figure, rewrite_figure(self._step()))
            self.controls["step"].max = max(len(self.steps) - 1, 0)
            self.compile_info.value = self._compile_html()

    def click_kernel(self, index: int) -> None:
        """What a click on a static kernel does: link it, bold, to the eager ops it replaced."""
        kernels = self.comparison.static.compute_events
        if not 0 <= index < len(kernels):
            raise ValueError(f"kernel {index} does not exist; the static run has {len(kernels)}")
        self.kernel = index
        x, y = kernel_links(self.comparison, index, fused_only=False)
        with self.figure.batch_update():
            self.figure.data[TRACE_PICKED].x = x
            self.figure.data[TRACE_PICKED].y = y
        k = kernels[index]
        row = next(ops for ops, kk in self.comparison.rows if kk is k)
        eager_us = sum(e.dur_us for e in row)
        names = " + ".join(e.name for e in row) or "(no eager op)"
        self.kernel_info.value = (
            f"kernel <b>{k.name}</b> {k.dur_us:.1f} µs stands for eager {names} ({eager_us:.1f} µs)"
        )

    def _on_click(self, trace, points, state) -> None:
        if points.point_inds:
            self.click_kernel(points.point_inds[0])

    def _step(self):
        return self.steps[self.step] if self.steps else None

    def _compile_html(self) -> str:
        cache = len(self.jitted.cache)
        if self._last_events:
            e = self._last_events[-1]
            what = f"<b>{e.kind}</b> ({e.dur_us / 1e3:.1f} ms): {e.detail}"
        else:
            what = "cache hit: this shape was compiled before"
        return f"{what} — {cache} compiled shape(s), {len(self.steps)} rewrite steps"

    def _on_control(self, change: dict[str, Any]) -> None:
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        setattr(self, key, change["new"])
        if key == "step":
            replace_figure(self.steps_figure, rewrite_figure(self._step()))
        else:
            self._rerun_soon.submit()

    def flush(self) -> None:
        self._rerun_soon.flush()
