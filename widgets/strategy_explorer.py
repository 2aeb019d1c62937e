"""``StrategyExplorer``: the dashboard. Choose a model, a chip, a device count, a global
batch and a sequence length; ``plan_training`` finds the fastest configuration that fits
(with a progress bar), and every view follows through one shared ``Selection``:

* the operator level: GraphView (coloured by pipeline stage), MeshView and CostTuner on the
  chosen dp x tp mesh, on a graph built with a few layers (``draw_layers``; layers repeat,
  so their strategies are the same — the UI says so);
* the step level: PipelineView and MemoryView of the chosen configuration;
* ScalingView of the model on the chip; TraceCompare (eager vs @jit) as a last tab.

Tabs other than the graph, pipeline and memory are built when first opened (the scaling
curve plans ten device counts; the tuner builds cost tables), which keeps the first build
to the plan itself plus ~1 s of drawing.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from typing import Any

import ipywidgets as ipw
import traitlets as tl

import explorer as ex

from .base import View
from .coalesce import Coalescer
from .colors import stage_color
from .cost_tuner import CostTuner
from .errors import FieldError, field
from .figures.errors import ViewError
from .format import fmt_bytes
from .graph_view import GraphView
from .heap import gc_paused, settle_heap
from .memory_view import MemoryView
from .mesh_view import MeshView
from .pipeline_view import PipelineView
from .plan_ahead import PlanAhead, Stopped, in_kernel
from .scaling_view import ScalingView
from .selection import Selection
from .steer import TrainingSteer

__all__ = ["StrategyExplorer", "TABS", "DEVICE_CHOICES", "SEQ_CHOICES"]

TABS = ("graph", "mesh", "cost tuner", "pipeline", "memory", "scaling", "traces")
DEVICE_CHOICES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SEQ_CHOICES = (512, 1024, 2048, 4096, 8192)
FIELDS = ("model", "hardware", "stack", "devices", "global_batch", "seq")
_SHARDING: OrderedDict[tuple, Any] = OrderedDict()
#: plans by job (model, hardware, stack, devices, batch, sequence, constraints): a job seen
#: before in this process (a device count tried and changed back) is not planned again
_PLANS: OrderedDict[tuple, Any] = OrderedDict()
_PLAN_CACHE_SIZE = 32
_CACHE_LOCK = threading.Lock()  # plans computed in the background share the caches


class _Replaced(Exception):
    """A background plan whose job was changed since it started stops."""


def _band_html(s) -> str:
    """Where a measured step (and peak memory) is expected, with the rows behind it."""
    parts = []
    for what, b, value, fmt in (("step", s.band, s.step_time_s, lambda v: f"{v:.3f} s"),
                                ("peak memory", s.memory_band, s.memory.total, fmt_bytes)):  # fmt: skip
        if b is not None:
            lo, hi = b.around(value)
            parts.append(f"<span title='{_escape(b.basis)}'>measured {what} expected "
                         f"{fmt(lo)}-{fmt(hi)} (x{b.low:.2f}-x{b.high:.2f}, {b.rows} "
                         "check rows)</span>")  # fmt: skip
    return ("<br>" + "; ".join(parts) + "<br>") if parts else ""


class StrategyExplorer(View):
    """One dashboard for a training job: the plan, why, and every view linked.

    Args:
        model: a name of ``ex.models.names()``; ``hardware``: of ``ex.hardware.names()``.
        stack: the training stack the step model assumes, of ``ex.stacks.names()``
            (default ``ex.stacks.DEFAULT_STACK``).
        devices, global_batch, seq: the job.
        draw_layers: layers in the operator-level graph (GraphView, MeshView, CostTuner,
            explain panel); the model's layers are identical, so a few stand for all.
        selection: a shared Selection (default: a new one).
        background: plan a control's change in a thread (the control returns at once; the
            views keep the last plan under a "planning ..." banner with the progress bar and
            redraw when the new plan is ready; ``wait()`` waits for it). ``None`` (default):
            in a kernel (a running event loop) yes, in scripts and tests no. The first plan
            is always computed before the constructor returns.
        plan_ahead: after a plan is drawn, plan in a thread the jobs of the device counts
            next to it in the menu (one smaller, one larger), so that changing the device
            count is answered from the plan cache (`PlanAhead`; a change before they are done
            plans itself, or waits for the one in flight when it is that job);
            ``ahead.wait()`` waits for it.
            ``None`` (default): in a kernel (a running event loop), not in scripts and tests.

    Views out of sight (tabs not shown) keep what is published to them and draw the last
    plan when their tab opens (`View.defer`); a job planned before in this process comes
    from a plan cache (the summary says so).

    Controls: ``model``, ``hardware``, ``stack``, ``devices``, ``global_batch``, ``seq`` (each change
    re-plans, coalesced), ``plan`` (re-plan now).

    >>> dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512)  # doctest: +SKIP
    >>> dash.plan.config  # doctest: +SKIP
    """

    plan = tl.Any(None, allow_none=True, help="the current TrainingPlan")
    sharding = tl.Any(None, allow_none=True, help="its ShardingPlan (draw_layers layers)")
    plan_s = tl.Float(0.0, help="seconds of the last plan_training + sharding plan")
    constraints = tl.Tuple(help="ex.Fix / ex.Bound / ex.Within / ex.StageLayers in force")

    selection_traits = ("node",)
    name = "dashboard"

    def __init__(
        self, model: str = "gpt2-medium", *, hardware: str = "a100-80g", devices: int = 64,
        global_batch: int = 256, seq: int = 1024, draw_layers: int = 4,
        selection: Selection | None = None, coalesce_s: float = 0.3, stack: str | None = None,
        background: bool | None = None, plan_ahead: bool | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        self.background = background
        # decided here: a kernel's cell runs in its event loop, a worker thread does not
        self.plan_ahead = in_kernel() if plan_ahead is None else plan_ahead
        self.ahead = PlanAhead("dashboard")
        self.planning = False  # a re-plan is running in the background
        self.plan_cached = False  # the plan shown came from the plan cache
        self._plan_lock = threading.Lock()
        self._generation = 0  # bumped by every re-plan: an older background plan is dropped
        self._worker: threading.Thread | None = None
        self.draw_layers = draw_layers
        self.stages: dict[str, int] = {}
        self.views: dict[str, View] = {}
        opt = {"style": {"description_width": "initial"}, "layout": ipw.Layout(width="auto")}
        self.controls = {
            "model": ipw.Dropdown(options=ex.models.names(), value=model, description="Model",
                                  **opt),
            "hardware": ipw.Dropdown(options=ex.hardware.names(), value=hardware,
                                     description="Hardware", **opt),
            "stack": ipw.Dropdown(options=ex.stacks.names(),
                                  value=ex.stacks.get(stack or ex.stacks.DEFAULT_STACK).name,
                                  description="Stack", **opt),
            "devices": ipw.Dropdown(options=sorted({*DEVICE_CHOICES, devices}), value=devices,
                                    description="Devices", **opt),
            # A plain IntText: a bad batch (0, -5) is refused beside it, never clamped.
            "global_batch": ipw.IntText(value=global_batch, description="Global batch",
                                        style=opt["style"], layout=ipw.Layout(width="14em")),
            "seq": ipw.Dropdown(options=sorted({*SEQ_CHOICES, seq}), value=seq,
                                description="Sequence length", **opt),
            "plan": ipw.Button(description="plan", button_style="primary", icon="play",
                               layout=ipw.Layout(width="auto")),
        }  # fmt: skip
        self.field_errors: dict[str, FieldError] = {}
        self._fields: dict[str, ipw.Widget] = {}
        for k in FIELDS:
            self._fields[k], self.field_errors[k] = field(self.controls[k])
        self._trigger: str | None = None
        self._replan_soon = Coalescer(self.errors.guard(self._replan_now), delay_s=coalesce_s)
        for k in FIELDS:
            self.controls[k].observe(self.errors.guard(lambda _, k=k: self._on_control(k)),
                                     "value")  # fmt: skip
        self.controls["plan"].on_click(self.errors.guard(lambda _: self._on_control(None, 0)))
        self.summary = ipw.HTML()
        # the robustness of the choice (issue 29): a scan re-simulates the rivals at ~40
        # knob factors (seconds on a 96-layer model), so it runs when asked, not per re-plan
        self.robust = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.controls["robustness"] = ipw.Button(
            description="check robustness", icon="balance-scale", layout=ipw.Layout(width="auto"),
            tooltip="how far each efficiency, bandwidth and overlap knob can move before an "
            "alternative is faster (plan.robustness())")  # fmt: skip
        self.controls["robustness"].on_click(self.errors.guard(lambda _: self.check_robustness()))
        self.report = ipw.HTML()
        self.explain = ipw.HTML("<i>click an op in the graph to see why its strategy won</i>")
        self.note = ipw.HTML()
        self.tabs = ipw.Tab(
            children=[ipw.VBox([_placeholder(t)], layout=ipw.Layout(width="100%"))
                      for t in TABS],
            layout=ipw.Layout(flex="1 1 60em", min_width="0"),
        )  # fmt: skip
        for i, t in enumerate(TABS):
            self.tabs.set_title(i, t)
        self.tabs.observe(self.errors.guard(self._on_tab), names="selected_index")
        self.replan()  # builds the graph, pipeline and memory views the first time
        self.steer = TrainingSteer(self.set_constraints, selection=self.selection)
        steer = ipw.Accordion(children=[self.steer], titles=("steer the plan: fix or bound dp, "
                                                             "tp, pp, ... and pin an "
                                                             "alternative",))  # fmt: skip
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        f = self._fields
        # Errors and progress sit under the controls, in view, not under the tabs.
        self.children = (
            ipw.HBox([*(f[k] for k in FIELDS), self.controls["plan"]], layout=wrap),
            self.stale_banner, self.progress, self.errors, self.summary,
            ipw.HBox([self.controls["robustness"], self.robust], layout=wrap),
            ipw.Accordion(children=[self.report], titles=("full report",)), steer,
            ipw.HBox([self.tabs, ipw.VBox([ipw.HTML("<b>explain</b>"), self.explain],
                                          layout=ipw.Layout(flex="1 1 20em", min_width="0"))],
                     layout=wrap),
            self.note,
        )  # fmt: skip
        settle_heap()  # in a kernel, once: short full collections from now on (heap.py)

    # --- planning -----------------------------------------------------------------------
    def _on_control(self, key: str | None, delay: float | None = None) -> None:
        """A control changed (``None``: the plan button): re-plan, coalesced."""
        self._trigger = key
        if delay == 0:
            self._replan_soon.cancel()
            self._replan_now()
        else:
            self._replan_soon.submit()

    def _replan_now(self) -> None:
        """``replan`` with its errors beside the control that caused them: the results
        are marked stale and the last valid plan stays on screen until a valid re-plan (in
        a kernel the plan is computed in the background, see ``background``)."""
        key, self._trigger = self._trigger, None
        if self.plan is not None and self._in_background():
            self._start_replan(key)
            return
        try:
            self.replan()
        except Exception as e:  # noqa: BLE001  (shown beside its control)
            if self.plan is None:
                raise
            self._refused(key, e)
            return
        self._accepted()

    def _refused(self, key: str | None, e: Exception) -> None:
        err = self.field_errors.get(key or "")
        if err is None:
            self.errors.report(e, "plan")
        else:
            err.show(e)
        what = self.controls[key].description if err is not None else "plan"
        self.mark_stale(f"{what}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")

    def _accepted(self) -> None:
        for k, err in self.field_errors.items():
            err.last_valid = self.controls[k].value
            if err.visible:
                err.clear()
        self.clear_stale()

    def flush(self) -> None:
        """Run a coalesced re-plan now (tests and scripts; the kernel does it by itself)."""
        self._replan_soon.flush()

    def set_constraints(self, constraints: tuple) -> None:
        """Re-plan now under ``constraints`` (the steering row's); a set no configuration
        satisfies raises its error and the constraints and the plan stay as they were."""
        before = self.constraints
        self.constraints = tuple(constraints)
        try:
            self.replan()
        except Exception:
            self.constraints = before
            raise

    def replan(self) -> None:
        """Run ``plan_training`` for the controls' job (with progress), then publish the
        plan and its operator-level plan to every linked view (a plan still computing in the
        background for an earlier change is dropped)."""
        with self._plan_lock:
            self._generation += 1
        job = self._job()
        self._own_turn(job)
        self._apply(*self._compute(job))
        self.look_ahead()

    def _job(self) -> tuple:
        """The job the controls ask for: (model, hardware, stack, devices, global batch,
        sequence, constraints); also the key of the plan cache."""
        c = self.controls
        return (c["model"].value, c["hardware"].value, c["stack"].value, c["devices"].value,
                c["global_batch"].value, c["seq"].value, tuple(self.constraints))  # fmt: skip

    def _compute(self, job: tuple, live=None) -> tuple:
        """Plan ``job`` (from the cache when this job was planned before in this process)
        and its operator-level plan; no widget but the progress bar is touched, so a
        background thread may run it. ``live()`` False stops it at the next progress step.
        The user's own change: planned with the cyclic collector paused (`heap.gc_paused`:
        a full collection of the kernel's heap, ~250 ms, fell inside a re-plan or a batch
        change, holding the interpreter; planning ahead leaves it on)."""
        import time

        model, hw, _, devices = job[:4]
        t0 = time.perf_counter()
        with (
            gc_paused(),
            self.progress.task(f"planning {model} on {devices} x {hw}", steps=2) as step,
        ):
            shown = self.errors.guard(self.progress.callback("configurations"))

            def report(done: int, total: int) -> None:
                if live is not None and not live():
                    raise _Replaced
                shown(done, total)

            plan, cached = self._plan(job, report)
            step("operator strategies of the chosen dp x tp mesh")
            sharding = self._sharding_plan(plan)
        return plan, sharding, time.perf_counter() - t0, cached

    def _plan(self, job: tuple, report) -> tuple[Any, bool]:
        """(the TrainingPlan of ``job``, whether it came from the plan cache)."""
        model, hw, stack, devices, gb, seq, constraints = job
        with _CACHE_LOCK:
            plan = _PLANS.get(job)
        if plan is not None:
            return plan, True
        plan = ex.plan_training(model, devices=devices, hardware=hw, global_batch=gb, seq=seq,
                                progress=report, stack=stack,
                                constraints=list(constraints) or None)  # fmt: skip
        with _CACHE_LOCK:
            _PLANS[job] = plan
            if len(_PLANS) > _PLAN_CACHE_SIZE:
                _PLANS.popitem(last=False)
        return plan, False

    # --- planning ahead -----------------------------------------------------------------
    def next_jobs(self) -> list[tuple]:
        """The jobs a next change most likely asks for: the device counts next to the
        current one in the menu (the smaller first), the rest of the job as it is; those
        planned before are left out."""
        job = self._job()
        options = sorted(self.controls["devices"].options)
        i = options.index(job[3])
        counts = [options[k] for k in (i - 1, i + 1) if 0 <= k < len(options)]
        jobs = [(*job[:3], n, *job[4:]) for n in counts]
        with _CACHE_LOCK:
            return [j for j in jobs if j not in _PLANS]

    def look_ahead(self) -> None:
        """A plan drawn: plan the next likely jobs (`next_jobs`) in a thread (see
        ``plan_ahead``; called after each plan drawn, and by hand to start it)."""
        if not self.plan_ahead:
            return

        def compute(job: tuple, live) -> None:
            def report(done: int, total: int) -> None:
                if not live():
                    raise Stopped

            plan, _ = self._plan(job, report)
            if live():
                self._sharding_plan(plan)

        self.ahead.start(self.next_jobs(), compute)

    def _own_turn(self, job: tuple) -> None:
        """Before planning ``job``: when it is the job being planned ahead, wait for it (it
        is partly done); otherwise stop planning ahead. Every view's planning ahead stops:
        the change's own plan gets the interpreter."""
        self.ahead.finish(job)
        PlanAhead.stop_all()

    def _apply(self, plan, sharding, plan_s: float, cached: bool = False) -> None:
        """Publish ``plan`` to the views: those on screen redraw now, the others when their
        tab is next opened (`View.defer`)."""
        self.plan_s, self.plan_cached = plan_s, cached
        self.plan, self.sharding = plan, sharding
        self.stages = plan.stage_map(sharding.graph)
        self._ensure_views()
        graph_view = self.views["graph"]
        graph_view.stages = self.stages  # before the plan: GraphView redraws on the plan
        # one pipeline stage colours every op alike: colour by strategy instead (and back)
        want = "stage" if plan.config.stages > 1 else "strategy"
        if graph_view.controls["color_by"].value in ("stage", "strategy"):
            graph_view.controls["color_by"].value = want
        self.selection.publish(graph=sharding.graph, plan=sharding, training=plan, highlight=())
        self._stale_tuner()
        self._stale_traces()
        self.summary.value = self._summary()
        self.report.value = (
            f"<pre style='font-size:11px'>{_escape(plan.report(robust=False))}</pre>"
        )
        self.robust.value = "<span style='color:#555'>robustness: not checked for this plan</span>"
        self.note.value = self._note()
        self.explain.value = self._explain(self.selection.node)

    # --- planning in the background -----------------------------------------------------
    def _in_background(self) -> bool:
        if self.background is not None:
            return self.background
        try:  # in a kernel (a running event loop): plan without blocking it
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    def _start_replan(self, key: str | None) -> None:
        """Plan the controls' job in a thread: the control returns at once, the views keep
        the last plan under a banner that says what is being planned (with the progress bar)
        and redraw when it is ready; a plan that fails is refused beside the control that
        asked for it, as in the foreground. A newer change stops an older plan."""
        job = self._job()
        with self._plan_lock:
            self._generation += 1
            generation = self._generation
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        self.planning = True
        model, hw, _, devices = job[:4]
        self.mark_stale(f"planning {model} on {devices} x {hw}: the views show the last plan "
                        "until the new one is ready")  # fmt: skip
        worker = threading.Thread(target=self._work, args=(generation, key, job, loop),
                                  name=f"dashboard plan {generation}", daemon=True)  # fmt: skip
        self._worker = worker
        worker.start()

    def _work(self, generation: int, key: str | None, job: tuple, loop) -> None:
        def live() -> bool:
            return generation == self._generation

        self._own_turn(job)
        try:
            result: Any = self._compute(job, live)
        except _Replaced:
            return
        except Exception as e:  # noqa: BLE001  (refused beside its control, in _finish)
            result = e

        def finish() -> None:
            if not live():
                return
            try:
                if isinstance(result, Exception):
                    self._refused(key, result)
                else:
                    self._apply(*result)
                    self._accepted()
                    self.look_ahead()
            finally:
                self.planning = False

        finish = self.errors.guard(finish)
        if loop is not None and loop.is_running():  # the kernel's thread draws, in order
            loop.call_soon_threadsafe(finish)
        else:
            finish()

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for a re-plan running in the background (nothing to wait for without one;
        in a kernel the views are redrawn by the kernel's loop after the thread ends)."""
        worker = self._worker
        if worker is None:
            return
        worker.join(timeout_s)
        if worker.is_alive():
            raise ViewError(f"the plan is still being computed after {timeout_s} s; wait longer")

    def check_robustness(self) -> None:
        """``plan.robustness()`` (the core's scan): its label beside the button, its table
        at the end of the full report."""
        with self.progress.task("robustness: simulating the alternatives at each factor"):
            r = self.plan.robustness()
        color = "#D55E00" if r.verdict == "fragile" else "#009E73"
        self.robust.value = (f"<span style='color:{color}'><b>{r.verdict}</b></span>"
                             f"{_escape(r.label[len(r.verdict):])}")  # fmt: skip
        self.report.value = (f"<pre style='font-size:11px'>{_escape(self.plan.report())}"
                             "</pre>")  # fmt: skip

    def _sharding_plan(self, plan):
        c, layers = plan.config, self.draw_layers
        key = (plan.model, plan.hardware, plan.seq, c.dp, c.tp, c.microbatch_size, layers)
        with _CACHE_LOCK:
            sp = _SHARDING.get(key)
        if sp is None:
            sp = plan.sharding_plan(layers=layers)
            with _CACHE_LOCK:
                _SHARDING[key] = sp
                if len(_SHARDING) > 16:
                    _SHARDING.popitem(last=False)
        return sp

    # --- views --------------------------------------------------------------------------
    def _ensure_views(self) -> None:
        """Build the always-visible views once (later plans reach them by the selection)."""
        if "graph" in self.views:
            return
        sp, plan = self.sharding, self.plan
        self.views["graph"] = GraphView(sp.graph, sp, color_by="stage", stages=self.stages,
                                        selection=self.selection)  # fmt: skip
        self.views["pipeline"] = PipelineView(
            plan.model_config, plan.config, hardware=plan.hardware,
            global_batch=plan.global_batch, seq=plan.seq, selection=self.selection,
            stack=plan.sim.stack,
        )  # fmt: skip
        self.views["memory"] = MemoryView(
            plan.model_config, plan.config, hardware=plan.hardware,
            global_batch=plan.global_batch, seq=plan.seq, selection=self.selection,
            stack=plan.sim.stack,
        )  # fmt: skip
        for name in ("graph", "pipeline", "memory"):
            self._place(name)
        self.tabs.selected_index = TABS.index("graph")
        self._defer_hidden()

    def _defer_hidden(self) -> None:
        """Views out of sight keep the plans published to them and draw the last when their
        tab opens: a re-plan redraws the tab on screen only."""
        index = self.tabs.selected_index
        shown = TABS[index] if index is not None else None
        for name, view in self.views.items():
            if isinstance(view, View):
                view.defer(name != shown)

    def _place(self, name: str) -> None:
        self._set_tab(name, self.views[name])

    def open_tab(self, name: str) -> View:
        """Show tab ``name`` (building its view the first time); returns the view."""
        if name not in TABS:
            raise ViewError(f"unknown tab {name!r}; tabs: {', '.join(TABS)}")
        self.tabs.selected_index = TABS.index(name)
        self._build_tab(name)
        self._defer_hidden()
        return self.views[name]

    def _on_tab(self, change: dict[str, Any]) -> None:
        if change["new"] is None:
            return
        self._build_tab(TABS[change["new"]])
        self._defer_hidden()

    def _build_tab(self, name: str) -> None:
        if name in self.views or name not in _BUILT_LATER:
            return
        with self.progress.task(f"building the {name} tab ({_BUILT_LATER[name]})"):
            self._build_view(name)

    def _build_view(self, name: str) -> None:
        sp, plan = self.sharding, self.plan
        if name == "mesh":
            view: View = MeshView(sp.mesh, sp, selection=self.selection)
        elif name == "cost tuner":
            view = CostTuner(sp.graph, sp.mesh, params=sp.params, method="dynamic_programming",
                             selection=self.selection)  # fmt: skip
        elif name == "scaling":
            view = ScalingView(model=plan.model, hardware=plan.hardware, seq=plan.seq,
                               counts=DEVICE_CHOICES, selection=self.selection,
                               background=True)  # fmt: skip
        else:  # traces: a miniature of the chosen model, eager and under @jit
            from .trace_compare import TraceCompare, miniature_workload

            try:
                fn, make_args, note = miniature_workload(plan.model_config)
            except ViewError as e:
                self._set_tab(name, ipw.HTML(f"<i>{_escape(str(e))}</i>"))
                self._traces_model = plan.model
                return
            view = TraceCompare(fn, make_args, batch=1, size=32, runs=5,
                                selection=self.selection, note=note)  # fmt: skip
        self.views[name] = view
        self._place(name)
        if name == "traces":
            self._traces_model = plan.model

    def _set_tab(self, name: str, widget: ipw.Widget) -> None:
        """Put ``widget`` in tab ``name``. Each tab holds one box for its whole life and only
        the box's content changes: replacing the Tab's own children re-renders the tab bar,
        and a replacement sent while the page's click on another tab was still on its way to
        the kernel showed the old tab again (the browser test saw it under load)."""
        self.tabs.children[TABS.index(name)].children = (widget,)

    def tab_content(self, name: str) -> ipw.Widget:
        """What tab ``name`` shows now (its view, or what building it will do)."""
        return self.tabs.children[TABS.index(name)].children[0]

    def _stale_traces(self) -> None:
        """The traces run a miniature of the chosen model: another model rebuilds them (now
        if the tab is open, else when it is next opened)."""
        built = getattr(self, "_traces_model", None)
        if built is None or built == self.plan.model:
            return
        self.views.pop("traces", None)
        self._traces_model = None
        self._set_tab("traces", _placeholder("traces"))
        if self.tabs.selected_index == TABS.index("traces"):
            self._build_tab("traces")

    def _stale_tuner(self) -> None:
        """The tuner plans one graph; a new plan brings a new graph: rebuild it (now if its
        tab is open, else when it is next opened)."""
        tuner = self.views.get("cost tuner")
        if tuner is None or tuner.graph is self.sharding.graph:
            return
        del self.views["cost tuner"]
        self._set_tab("cost tuner", _placeholder("cost tuner"))
        if self.tabs.selected_index == TABS.index("cost tuner"):
            self._build_tab("cost tuner")

    # --- selection ----------------------------------------------------------------------
    def on_selection(self, change: dict[str, Any]) -> None:
        node = change["new"]
        self.explain.value = self._explain(node)
        stage = self.stages.get(node) if node else None
        if stage is not None:  # the pipeline and memory views frame the node's stage
            self._select(stage=stage, microbatch=None)

    # --- text ---------------------------------------------------------------------------
    def _explain(self, node: str | None) -> str:
        sp = self.sharding
        if not node or sp is None or node not in sp.assignment:
            return "<i>click an op in the graph to see why its strategy won</i>"
        stage = self.stages.get(node)
        where = ""
        if stage is not None:
            pp = self.plan.config.pp
            where = f"pipeline stage {stage} (device {stage % pp} of the pipeline)<br>"
        return f"{where}<pre style='font-size:11px'>{_escape(str(sp.explain(node)))}</pre>"

    def _summary(self) -> str:
        p, s = self.plan, self.plan.sim
        fits = "fits" if s.fits else "<b style='color:#E4002B'>over memory</b>"
        return (
            f"<b>{p.model}</b> on {p.devices} x {p.hardware} (stack "
            f"{self.controls['stack'].value}), global batch {p.global_batch}, "
            f"sequence {p.seq}<br>chosen <b>{p.config}</b>: step {s.step_time_s:.3f} s, "
            f"{s.tokens_per_s:,.0f} tokens/s, {s.tflops_per_device:.0f} TFLOP/s per device "
            f"(MFU {s.mfu:.1%}), bubble {s.bubble_fraction:.1%}, memory "
            f"{fmt_bytes(s.memory.total)} of {fmt_bytes(s.memory_cap_bytes)} ({fits}); "
            f"{_band_html(s)}"
            f"{p.searched} estimates in {p.search_time_s:.2f} s"
            + (f" ({p.pruned} configurations skipped by their step-time floor)"
               if p.pruned else "")
            + (" (planned earlier in this session: from the plan cache)" if self.plan_cached
               else "")
        )  # fmt: skip

    def _note(self) -> str:
        return self._legend() + "<br>" + self._drawn()

    def _legend(self) -> str:
        """Swatches of the stage colours GraphView uses (``color_by="stage"``)."""
        c = self.plan.config
        if c.stages == 1:
            return ("one pipeline stage (pp=1): the graph colours ops by their strategy "
                    "(colour by stage again when a plan has pp > 1)")  # fmt: skip
        cells = "".join(
            f"<span style='background:{stage_color(g)};padding:0 6px;margin-right:3px'>{g}</span>"
            for g in range(c.stages)
        )
        return f"pipeline stages ({c.pp} devices x {c.virtual_stages} chunks): {cells}"

    def _drawn(self) -> str:
        L = self.plan.model_config.num_layers
        n = min(self.draw_layers, L)
        if n == L:
            return f"graph: all {L} layers"
        return (
            f"<i>graph, mesh, cost tuner and explain: the model drawn with {n} of its {L} "
            f"layers (identical layers get identical strategies); stage colours map drawn "
            f"layer k to model layer k·{L}/{n}. Graph batch: one global microbatch "
            f"(dp x microbatch size = {self.plan.config.dp * self.plan.config.microbatch_size}"
            f" sequences) on the dp x tp mesh.</i>"
        )


#: The tabs built when first opened, and what building them does (shown while it runs).
_BUILT_LATER = {
    "mesh": "layouts and collectives of the selected op",
    "cost tuner": "cost tables of every op's strategies: a few seconds",
    "scaling": "plans the job at ten device counts, drawing each as it is planned",
    "traces": "runs a miniature of the model eagerly and under @jit",
}


def _placeholder(tab: str) -> ipw.Widget:
    """What a tab shows before its view exists: what opening it builds (its progress then
    shows under the controls), never an empty pane."""
    what = _BUILT_LATER.get(tab, "drawn with the first plan")
    return ipw.HTML(f"<div style='padding:12px;color:#444'>&#8987; <b>{tab}</b>: building "
                    f"when opened — {what}; progress shows under the controls above</div>")  # fmt: skip


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
