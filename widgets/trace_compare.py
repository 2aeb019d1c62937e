"""``TraceCompare``: one Python model run eagerly and under ``@jit``, read like Perfetto.

Tracks per run with every slice named, a colour per op name with its legend, flows from
each eager op to the kernel that absorbed it, the compilation on its own track (a
recompile in red with its reason), the speed-up as the median of N runs with its spread,
the compiler's rewrite steps as a before/after diff, and the Chrome-trace file for Perfetto.
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ipywidgets as ipw
import numpy as np
import plotly.graph_objects as go
import traitlets as tl

import explorer as ex
from explorer.compiler import rewrite_diff
from explorer.trace import comparison_to_chrome, repeat_runs, slice_names

from .base import View, replace_figure
from .coalesce import Coalescer
from .errors import field
from .figure_widget import FigureWidget
from .figures.errors import ViewError
from .figures.trace import (
    TRACE_OTHER,
    TRACE_PICKED,
    flow_lines,
    rewrite_figure,
    speedup_text,
    summary_html,
    time_unit,
    trace_figure,
)
from .format import fmt_seconds
from .selection import Selection

__all__ = ["TraceCompare", "TorchRuns", "gpt_workload", "miniature_workload"]

DATA_URI_MAX_BYTES = 4 * 2**20  # a larger trace is offered as a file path only
MEASURED_KEPT = 16  # (batch, size, runs) measurements a TraceCompare keeps for going back


def _infer(model, tokens):
    return model(tokens)


def gpt_workload(
    vocab: int = 256, hidden: int = 64, layers: int = 2, heads: int = 4, max_seq: int = 128
) -> tuple[Callable, Callable[[int, int], tuple]]:
    """A small GPT: ``fn(model, tokens)`` and ``make_args(batch, size)`` (size = sequence)."""
    model = ex.nn.GPT(vocab_size=vocab, hidden=hidden, num_layers=layers, num_heads=heads,
                      max_seq_len=max_seq, seed=0)  # fmt: skip
    return _infer, _token_args(model, vocab, max_seq, "the model")


def _token_args(model, vocab: int, max_seq: int, what: str) -> Callable[[int, int], tuple]:
    """``make_args(batch, size)``: ``model`` and seeded random tokens, refusing a size past
    ``max_seq``."""

    def make_args(batch: int, size: int) -> tuple:
        if size > max_seq:
            raise ViewError(f"size={size} exceeds {what}'s max_seq_len={max_seq}; pick "
                             f"a size up to {max_seq}")  # fmt: skip
        rng = np.random.default_rng(0)
        return model, ex.tensor(rng.integers(0, vocab, (batch, size)), "int32")

    return make_args


def miniature_workload(
    cfg, *, hidden: int = 64, layers: int = 2, heads: int = 4, vocab: int = 256,
    max_seq: int = 128,
) -> tuple[Callable, Callable[[int, int], tuple], str]:  # fmt: skip
    """A runnable miniature of a decoder ``ModelConfig`` for the traces: its norm,
    activation, bias, grouped-query ratio and FFN ratio at ``hidden`` x ``layers``;
    returns ``(fn, make_args, note)``, the note saying what the miniature keeps and what
    it draws differently (rotary positions as learned ones, experts as one dense MLP).
    Raises ViewError for an encoder or an MLP (the traces run a decoder forward)."""
    if cfg.arch != "decoder":
        raise ViewError(
            f"the traces tab runs a decoder forward; {cfg.name!r} is a {cfg.arch}: open "
            "TraceCompare with your own fn and make_args"
        )
    group = max(1, cfg.num_heads // (cfg.num_kv_heads or cfg.num_heads))
    kv = max(1, heads // group) if heads % max(1, heads // group) == 0 else heads
    ffn = hidden * max(1, round(cfg.ffn / cfg.hidden_size))
    model = ex.nn.GPT(vocab_size=vocab, hidden=hidden, num_layers=layers, num_heads=heads,
                      max_seq_len=max_seq, ffn=ffn, num_kv_heads=kv, norm=cfg.norm,
                      activation=cfg.activation, bias=cfg.bias, seed=0)  # fmt: skip
    differs = []
    if cfg.position != "learned":
        differs.append(f"{cfg.position} positions drawn as learned ones")
    if getattr(cfg, "num_experts", 0):
        differs.append(f"its {cfg.num_experts} experts as one dense MLP")
    note = (f"a {layers}-layer miniature of <b>{cfg.name}</b> (hidden {hidden}, {heads} heads, "
            f"{kv} key/value heads, {cfg.norm}, {cfg.activation}, FFN x{ffn // hidden})"
            + (f"; {', '.join(differs)}" if differs else ""))  # fmt: skip
    return _infer, _token_args(model, vocab, max_seq, "the miniature"), note


class TorchRuns:
    """A PyTorch module for `TraceCompare`, through ``ex.compile``: the eager track is our
    IR interpreter over the traced graph (op by op, each op named with its module path),
    the static track the compiled program, both from one trace with the real weights.
    Sequence lengths run in ``buckets`` (one program per bucket, a ``recompile`` with its
    reason when a new bucket or a new batch size compiles).

    ``TraceCompare(runs.eager, runs.make_args, static=runs)``; ``make_args(batch, size)``
    gives seeded token ids ``[batch, size]`` below ``vocab``.
    """

    def __init__(self, module: Any, vocab: int, buckets: tuple[int, ...] = (16, 32, 64, 128),
                 **compile_kw: Any) -> None:  # fmt: skip
        self.module, self.vocab, self.buckets = module, vocab, tuple(buckets)
        self.compile_kw = compile_kw
        self.programs: dict[int, Any] = {}  # batch size -> BucketedProgram
        self.level = compile_kw.get("level", "O2")

    def make_args(self, batch: int, size: int) -> tuple:
        if size > self.buckets[-1]:
            raise ViewError(f"size={size} exceeds the last bucket {self.buckets[-1]}; pick a "
                            f"size up to {self.buckets[-1]}")  # fmt: skip
        rng = np.random.default_rng(0)
        return (rng.integers(0, self.vocab, (batch, size)).astype(np.int64),)

    def program(self, ids: np.ndarray) -> Any:
        """The `BucketedProgram` of this batch size (compiled on its first call)."""
        b = ids.shape[0]
        prog = self.programs.get(b)
        if prog is None:
            outer = ex.trace.active()
            with ex.trace.record("compile"):  # its own compile note, replaced below
                prog = ex.compile(self.module, (ids,), buckets=self.buckets, **self.compile_kw)
            self.programs[b] = prog
            if outer is not None:
                c = prog.compiles[0]
                kind = "recompile" if len(self.programs) > 1 else "compile"
                why = (
                    "the first call"
                    if kind == "compile"
                    else f"batch {b}: compiled for "
                    f"batch {', '.join(str(k) for k in sorted(self.programs) if k != b)}"
                )
                outer.note(kind, f"{prog.name}[{b}x{c.bucket}]",
                           f"{why}; sequence bucket {c.bucket}", dur_us=c.ms * 1e3)  # fmt: skip
        return prog

    def eager(self, ids: np.ndarray) -> Any:
        return self.program(ids).run_eager(ids)

    def __call__(self, ids: np.ndarray) -> Any:
        return self.program(ids)(ids)

    def steps(self, ids: np.ndarray) -> list:
        """The rewrite steps of the program that runs ``ids`` (its bucket's)."""
        return list(self.program(ids).program_for(ids.shape[1]).steps)

    @property
    def cache(self) -> list[tuple[int, int]]:
        """The (batch, bucket) programs compiled so far."""
        return [(b, k) for b, p in sorted(self.programs.items()) for k in sorted(p.programs)]


def _slider(value: int, lo: int, hi: int, step: int, text: str, tip: str) -> ipw.IntSlider:
    return ipw.IntSlider(
        value=value, min=lo, max=hi, step=step, description=text, tooltip=tip,
        readout_format="d", continuous_update=False, style={"description_width": "initial"},
        layout=ipw.Layout(width="19em", min_width="15em"),
    )  # fmt: skip


class TraceCompare(View):
    """Eager and static tracks, the summary table and the compiler's rewrite steps.

    Args:
        fn: the Python function (defined in a file: ``@jit`` converts its source); default:
            a 2-layer GPT forward (``gpt_workload``).
        make_args: ``(batch, size) -> args`` for ``fn``.
        static: the static side when it is not ``ex.jit(fn)``: a `TorchRuns` (a PyTorch
            module through ``ex.compile``; ``fn`` its ``eager``); ``level``, ``dynamic`` and
            ``backend`` then come from it.
        batch, size: the starting input; the controls of the same names re-run both modes.
        level: ``@jit`` optimisation level (``"O0"``, ``"O1"``, ``"O2"``).
        runs: how many eager and static runs the speed-up is the median of.
        perfetto_path: where "Write Perfetto trace" writes the Chrome-trace JSON.

    One ``@jit`` function lives as long as the view: a shape seen before hits its cache; a
    new one shows a red ``recompile`` bar with its reason on the compile track.

    >>> view = TraceCompare(batch=1, size=16, runs=3)
    >>> view.controls["batch"].value = 2
    >>> view.recompiles, view.figure.data[0].marker.color[0]
    (1, '#E4002B')
    """

    # --- inputs -------------------------------------------------------------------------
    batch = tl.Int(2)
    size = tl.Int(32)
    runs_n = tl.Int(7, help="runs of each mode behind the median speed-up")
    level = tl.Enum(("O0", "O1", "O2"), default_value="O2")
    # --- results ------------------------------------------------------------------------
    comparison = tl.Any(None, allow_none=True)
    runs = tl.Any(None, allow_none=True, help="explorer.trace.RepeatedRuns")
    compile_events = tl.Tuple()
    steps = tl.List()
    recompiles = tl.Int(0, help="compilations after the first (new shapes)")
    guard_failures = tl.Int(0, help="recompiles caused by a failed shape guard (dynamic dims)")
    # --- display ------------------------------------------------------------------------
    step = tl.Int(0)
    kernel = tl.Int(None, allow_none=True, help="the picked static kernel (index)")
    all_flows = tl.Bool(True)

    selection_traits = ()
    name = "traces"

    def __init__(
        self, fn: Callable | None = None, make_args: Callable[[int, int], tuple] | None = None,
        *, batch: int = 2, size: int = 32, level: str = "O2", runs: int = 7,
        perfetto_path: str | Path = "eager_vs_jit.trace.json",
        selection: Selection | None = None, dynamic: Mapping[str, Mapping[int, str]] | None = None,
        backend: str = "numpy", note: str = "", static: TorchRuns | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        if (fn is None) != (make_args is None):
            raise ViewError("pass both fn and make_args, or neither (the default GPT)")
        if fn is None:
            fn, make_args = gpt_workload()
        self.fn, self.make_args = fn, make_args
        self.level = static.level if static is not None else level
        self.perfetto_path = Path(perfetto_path)
        # dynamic: symbolic dims; backend="numba": generated kernels, their source per step
        self.jitted = (
            static
            if static is not None
            else ex.jit(fn, level=level, dynamic=dynamic, backend=backend)
        )
        self._compiles = 0
        # (batch, size, runs) -> (runs, rewrite steps, their diffs) measured, newest last: a
        # change back to a shape measured before shows those runs instead of re-running
        # both modes ``runs`` times (~0.5 s on the default GPT); a new shape still measures
        self._measured: dict[tuple[int, int, int], tuple] = {}
        self._rerun_soon = Coalescer(self._rerun)
        self._compute(batch, size, runs)  # bad starting values raise here, to the caller
        self.batch, self.size, self.runs_n = batch, size, runs
        self.names = slice_names(*self.runs.eager, *self.runs.static)
        self.figure = FigureWidget(self._trace_fig())
        # width auto: the HTML widget's own 2 px margins on top of 100% scrolled sideways
        self.summary = ipw.HTML(
            summary_html(self.comparison, self.runs), layout=ipw.Layout(width="auto")
        )
        self.steps_figure = FigureWidget(self._steps_fig())
        self.controls = {
            "batch": _slider(batch, 1, 16, 1, "batch", "input batch size: re-runs both"),
            "size": _slider(size, 8, 128, 8, "sequence length", "tokens per input"),
            "runs": _slider(runs, 1, 21, 2, "runs (median of)",
                            "eager and static runs behind the median speed-up"),
            "kernel": ipw.Dropdown(options=self._kernel_options(), value=-1,
                                   description="flows of kernel",
                                   style={"description_width": "initial"},
                                   layout=ipw.Layout(width="auto", max_width="100%")),
            "all_flows": ipw.Checkbox(value=True, description="all fused-kernel flows",
                                      indent=False, layout=ipw.Layout(width="auto")),
            "step": _slider(0, 0, max(len(self.steps) - 1, 0), 1, "pass step",
                            "one rewrite of the compiler's passes"),
        }  # fmt: skip
        self.controls["step"].disabled = not self.steps
        boxes, self.field_errors = {}, {}
        for key in ("batch", "size", "runs"):
            boxes[key], self.field_errors[key] = field(self.controls[key])
        for w in self.controls.values():
            w.observe(self.errors.guard(self._on_control), names="value")
        self.perfetto_button = ipw.Button(
            description="Write Perfetto trace", icon="download",
            tooltip="write the Chrome-trace JSON of both runs (opens in ui.perfetto.dev)",
            layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        self.perfetto_button.on_click(self.errors.guard(lambda _: self.write_perfetto()))
        self.perfetto_info = ipw.HTML(
            "Open in Perfetto: press the button, then at <b>ui.perfetto.dev</b> choose "
            "<b>Open trace file</b> and pick the file.",
            layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        self.headline = ipw.HTML(self._headline_html(), layout=ipw.Layout(width="auto"))
        self.kernel_info = ipw.HTML(
            "Click a slice (or pick a kernel above) to draw its flows in bold.",
            layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        self.step_info = ipw.HTML(self._step_html(), layout=ipw.Layout(width="auto"))
        for k in range(TRACE_OTHER, len(self.figure.data)):
            self.figure.data[k].on_click(self.errors.guard(self._on_click))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        c = self.controls
        #: what runs (the dashboard: a miniature of its model); empty for a user's fn
        self.note = ipw.HTML(note or "", layout=ipw.Layout(width="auto"))
        self._layout_children(
            self.note,
            ipw.HBox([boxes["batch"], boxes["size"], boxes["runs"]], layout=wrap),
            self.headline,
            ipw.HBox([c["kernel"], c["all_flows"], self.perfetto_button],
                     layout=ipw.Layout(flex_flow="row wrap", align_items="center",
                                       width="100%")),
            self.perfetto_info, self.figure, self.kernel_info, self.summary,
            ipw.HBox([c["step"], self.step_info], layout=ipw.Layout(
                flex_flow="row wrap", align_items="center", width="100%")),
            self.steps_figure,
        )  # fmt: skip

    # --- running ------------------------------------------------------------------------
    def _compute(self, batch: int, size: int, n: int) -> None:
        """Run both modes for (batch, size), ``n`` times each; commit results on success."""
        if not isinstance(n, int) or n < 1:
            raise ViewError(f"runs={n!r}: need a whole number >= 1 (7 gives a stable median)")
        measured = self._measured.get((batch, size, n))
        if measured is not None:
            # measured before (the user went back to it): the same runs, no new ones; the
            # jitted function has this shape compiled, so its first call compiles nothing
            runs, steps, diffs = measured
            self._measured[(batch, size, n)] = self._measured.pop((batch, size, n))  # newest
            compiles: tuple = ()
        else:
            runs, steps, compiles = self._measure(batch, size, n)
            diffs = [rewrite_diff(s) for s in steps]
            self._measured[(batch, size, n)] = (runs, steps, diffs)
            if len(self._measured) > MEASURED_KEPT:
                self._measured.pop(next(iter(self._measured)))  # the oldest
        kinds = [e.kind for e in compiles if e.kind != "note"]
        self.recompiles += kinds.count("recompile")
        self.guard_failures += len(compiles) - len(kinds)
        self._compiles += len(kinds)
        self.compile_events = compiles
        self.runs = runs
        self.comparison = runs.comparison()
        self.steps = steps
        self._diffs = diffs
        self.step = min(self.step, max(len(steps) - 1, 0))

    def _measure(self, batch: int, size: int, n: int) -> tuple[Any, list, tuple]:
        """Compile (a new shape), run both modes ``n`` times and take the rewrite steps:
        (runs, steps, the first call's compile events)."""
        args = self.make_args(batch, size)
        with self.progress.task("running eager and @jit", steps=3) as step:
            with ex.trace.record("static") as first:  # compiles when the shape is new
                self.fn(*args)  # warm-up, as the static side gets its first call
                self.jitted(*args)
            step("compiled")
            runs = repeat_runs(self.fn, self.jitted, args, n)
            step(f"{n} runs of each mode")
            steps = list(self.jitted.steps(*args))
            step("rewrite steps")
        compiles = tuple(e for e in first.trace.events if e.kind in ("compile", "recompile")
                         or (e.kind == "note" and e.name == "guard failed"))  # fmt: skip
        return runs, steps, compiles

    def _rerun(self, key: str) -> None:
        c = self.controls
        batch, size, n = c["batch"].value, c["size"].value, c["runs"].value
        err = self.field_errors[key]
        if not err.run(lambda _: self._compute(batch, size, n), c[key].value):
            self.mark_stale(f"{key} = {c[key].value} was not run: {err.text.splitlines()[0]}")
            return
        for e in self.field_errors.values():
            if e is not err and e.visible:
                e.last_valid = e.control.value
                e.clear()
        self.batch, self.size, self.runs_n = batch, size, n
        self.clear_stale()
        self.kernel = None
        self._draw()

    def _draw(self) -> None:
        replace_figure(self.figure, self._trace_fig())
        self.summary.value = summary_html(self.comparison, self.runs)
        replace_figure(self.steps_figure, self._steps_fig())
        kernel = self.controls["kernel"]
        kernel.options = self._kernel_options()
        kernel.value = -1
        s = self.controls["step"]
        s.max = max(len(self.steps) - 1, 0)
        s.disabled = not self.steps
        self.headline.value = self._headline_html()
        self.step_info.value = self._step_html()
        self.kernel_info.value = "Click a slice (or pick a kernel above) to draw its flows in bold."

    def _trace_fig(self) -> go.Figure:
        return trace_figure(self.comparison, self.names, runs=self.runs,
                            compile_events=self.compile_events, picked=self.kernel,
                            all_flows=self.all_flows, level=self.level)  # fmt: skip

    def _steps_fig(self) -> go.Figure:
        if not self.steps:
            return rewrite_figure(None)
        return rewrite_figure(self.steps[self.step], self._diffs[self.step])

    def _kernel_options(self) -> list[tuple[str, int]]:
        opts = [("none", -1)]
        for i, k in enumerate(self.comparison.static.compute_events):
            rep = f" = {' + '.join(k.replaced)}" if len(k.replaced) > 1 else ""
            opts.append((f"#{i} {k.name}{rep}", i))
        return opts

    # --- picking ------------------------------------------------------------------------
    def click_kernel(self, index: int | None) -> None:
        """Draw the flows of static kernel ``index`` in bold (None: none) and say what it
        stands for."""
        kernels = self.comparison.static.compute_events
        if index is not None and not 0 <= index < len(kernels):
            raise ViewError(f"kernel {index} does not exist; the static run has "
                             f"{len(kernels)} kernels (0-{len(kernels) - 1})")  # fmt: skip
        self.kernel = index
        if self.controls["kernel"].value != (-1 if index is None else index):
            self.controls["kernel"].value = -1 if index is None else index
        eager, static = self.comparison.eager.compute_events, kernels
        span = max([e.start_us - eager[0].start_us + e.dur_us for e in eager]
                   + [k.start_us - static[0].start_us + k.dur_us for k in static] + [1.0])  # fmt: skip
        _, scale = time_unit(span)
        x, y = flow_lines(self.comparison, index, fused_only=False, scale=scale) if (
            index is not None) else ([], [])  # fmt: skip
        with self.figure.batch_update():
            t = self.figure.data[TRACE_PICKED]
            t.x, t.y, t.visible = x, y, bool(x)
        if index is None:
            self.kernel_info.value = "No kernel picked."
            return
        k = kernels[index]
        row = next(ops for ops, kk in self.comparison.rows if kk is k)
        eager_us = sum(e.dur_us for e in row)
        names = " + ".join(e.name for e in row) or "(no eager op)"
        self.kernel_info.value = (
            f"kernel #{index} <b>{k.name}</b> ({fmt_seconds(k.dur_us * 1e-6)}) does the work "
            f"of eager <b>{names}</b> ({fmt_seconds(eager_us * 1e-6)} in {len(row)} op(s))"
        )

    def _on_click(self, trace, points, state) -> None:
        if not points.point_inds:
            return
        row, _name, kernel = trace.customdata[points.point_inds[0]]
        if kernel is not None and kernel >= 0:
            self.click_kernel(int(kernel))

    # --- Perfetto -----------------------------------------------------------------------
    def write_perfetto(self, path: str | Path | None = None) -> Path:
        """Write the Chrome-trace JSON (eager, static, compilation; flows between them) and
        show its path with a download link."""
        path = Path(path) if path is not None else self.perfetto_path
        data = comparison_to_chrome(self._chrome_comparison())
        text = json.dumps(data)
        path.write_text(text)
        link = ""
        if len(text) <= DATA_URI_MAX_BYTES:
            b64 = base64.b64encode(text.encode()).decode()
            link = (f" <a download='{path.name}' href='data:application/json;base64,{b64}' "
                    f"style='text-decoration:underline'>download {path.name}</a>")  # fmt: skip
        self.perfetto_info.value = (
            f"Wrote <code>{path}</code> ({len(text) / 1024:.0f} KiB).{link} Open in Perfetto: "
            "at <b>ui.perfetto.dev</b> choose <b>Open trace file</b> and pick this file."
        )  # fmt: skip
        return path

    def _chrome_comparison(self):
        cmp = self.comparison
        static = ex.trace.Trace(self.compile_events + cmp.static.compute_events, cmp.static.name,
                                cmp.static.wall_us)  # fmt: skip
        return ex.trace.compare(cmp.eager, static)

    # --- text ---------------------------------------------------------------------------
    def _headline_html(self) -> str:
        r = self.runs
        e, s = r.eager_time, r.static_time
        comp = [e for e in self.compile_events if e.kind != "note"]
        if comp:
            ev = comp[-1]
            color = "#E4002B" if ev.kind == "recompile" else "#B35A00"
            what = (f"<b style='color:{color}'>{ev.kind}</b> "
                    f"{fmt_seconds(ev.dur_us * 1e-6)}: {ev.detail or 'first call'}")  # fmt: skip
        else:
            what = "<b>cache hit</b>: this input shape was compiled before"
        return (
            f"<b>@jit {self.level} speed-up {speedup_text(r, self.comparison)}</b>; eager "
            f"{fmt_seconds(e.median * 1e-6)}, static {fmt_seconds(s.median * 1e-6)} (medians)."
            f"<br>{what}; {len(self.jitted.cache)} compiled shape(s), "
            f"{self.recompiles} recompile(s)"
            + (
                f" ({self.guard_failures} after a failed shape guard)"
                if self.guard_failures
                else ""
            )
            + f", {len(self.steps)} rewrite step(s)."
        )

    def _step_html(self) -> str:
        if not self.steps:
            return f"level {self.level} runs no rewriting pass"
        d = self._diffs[self.step]
        code = (f"<pre style='font-size:11px;max-height:18em;overflow:auto'>"
                f"{html.escape(d.source)}</pre>") if d.source else ""  # fmt: skip
        # the number the "pass step" slider reads (0 .. n-1)
        return (f"step {self.step} of 0–{len(self.steps) - 1}: pass <b>{d.pass_name}</b>, rule "
                f"<b>{d.rule}</b>{code}")  # fmt: skip

    # --- controls -----------------------------------------------------------------------
    def _on_control(self, change: dict[str, Any]) -> None:
        key = next(k for k, w in self.controls.items() if w is change["owner"])
        if key == "step":
            self.step = change["new"]
            replace_figure(self.steps_figure, self._steps_fig())
            self.step_info.value = self._step_html()
        elif key == "kernel":
            new = change["new"]
            if (new if new >= 0 else None) != self.kernel:
                self.click_kernel(None if new < 0 else new)
        elif key == "all_flows":
            self.all_flows = change["new"]
            with self.figure.batch_update():
                t = self.figure.data[1]
                t.visible = bool(self.all_flows and t.x)
        else:
            self._rerun_soon.submit(key)

    def flush(self) -> None:
        self._rerun_soon.flush()
