"""``CostTuner``: a control per CostParams field, the search method and the mesh shape;
every change re-plans and shows the cost against a pinned baseline and the ops that changed,
ranked by how much their cost moved."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from typing import Any

import ipywidgets as ipw
import plotly.graph_objects as go
import traitlets as tl

import explorer as ex
from explorer.hardware import Mesh
from explorer.ir import Graph
from explorer.search import EXHAUSTIVE_LIMIT, METHODS, CostParams, Planner

from .base import View, replace_figure
from .coalesce import Coalescer
from .errors import FieldError, field
from .figure_widget import FigureWidget
from .figures.cost import SCALES, change_rows, changes_html, cost_figure, fmt_cost
from .figures.errors import ViewError
from .format import fmt_bytes, fmt_number, fmt_percent, human_label
from .selection import Selection
from .steer import SteerPanel

__all__ = ["CostTuner", "PRESETS", "mesh_shapes", "method_notes", "preset_of"]

PRESETS = {"roofline": CostParams, "mindspore": CostParams.mindspore}
CUSTOM = "custom"
PLAN_CACHE_SIZE = 32  # plans are immutable values: moving a slider back is instant
LOG_FIELDS = ("alpha_compute", "beta_communication", "gamma_param_comm")
BYTE_FIELDS = (
    "device_memory_cap_bytes", "message_threshold_bytes", "message_constant_bytes",
    "message_bias_bytes",
)  # fmt: skip
STATUS_WORDS = {
    "optimal": "optimal: proved the best plan for this cost model",
    "heuristic": "heuristic: a good plan, not proved optimal",
}
_STYLE = {"description_width": "initial"}
LABELS = {"gamma_param_comm": "Gamma (gradient comm)", "grad_comm_overlap": "Gradient comm overlap",
          "memory_weight_per_byte": "Memory weight"}  # fmt: skip


def mesh_shapes(size: int, axes: int) -> tuple[tuple[int, ...], ...]:
    """Every way to factor ``size`` devices into ``axes`` ordered axis sizes.

    >>> mesh_shapes(8, 2)
    ((1, 8), (2, 4), (4, 2), (8, 1))
    """
    if axes == 1:
        return ((size,),)
    out = []
    for d in range(1, size + 1):
        if size % d == 0:
            out += [(d, *rest) for rest in mesh_shapes(size // d, axes - 1)]
    return tuple(out)


def preset_of(params: CostParams) -> str:
    """The preset ``params`` equal field by field, else ``"custom"``.

    >>> preset_of(CostParams.mindspore()), preset_of(CostParams(beta_communication=3.0))
    ('mindspore', 'custom')
    """
    return next((k for k, make in PRESETS.items() if make() == params), CUSTOM)


def method_notes(planner: Planner, params: CostParams) -> dict[str, str]:
    """Methods that cannot run on the planner's graph, with the reason (``{}``: all can).

    Exhaustive search refuses problems over ``EXHAUSTIVE_LIMIT`` assignments; the count is
    ``Planner.assignments`` (strategies per node of the folded problem, multiplied)."""
    try:
        count = planner.assignments(params)
    except Exception:  # noqa: BLE001  (a refusal still shows beside the menu on use)
        return {}
    if count > EXHAUSTIVE_LIMIT:
        return {"exhaustive": f"{count:.2g} assignments, over its limit of {EXHAUSTIVE_LIMIT:,}"}
    return {}


def _readout(name: str, value: Any) -> str:
    """The full value of a field with its unit, as shown beside its control."""
    if isinstance(value, bool) or name == "unit":
        return ""
    if name == "device_memory_cap_bytes":
        return "chip's memory" if not value else fmt_bytes(value)
    if name in BYTE_FIELDS:
        return fmt_bytes(value)
    if name in LOG_FIELDS or name.endswith("_ratio"):
        return f"×{fmt_number(value)}"
    if name.endswith("_efficiency") or name == "grad_comm_overlap":
        return fmt_percent(value, 0)
    if name == "memory_weight_per_byte":
        return f"{fmt_number(value)} per byte"
    return fmt_number(value)


def _control(name: str, value: Any) -> ipw.Widget:
    """The widget for one CostParams field: a human label, no built-in readout (the value
    with its unit is shown beside it), text fields that keep what was typed (a bad value
    is refused beside the control, never clamped)."""
    label = LABELS.get(name) or human_label(name)
    common = {"description": label, "style": _STYLE}
    slider = {**common, "readout": False, "continuous_update": False,
              "layout": ipw.Layout(width="22em")}  # fmt: skip
    if name == "unit":
        return ipw.Dropdown(options=("seconds", "bytes"), value=value, **common,
                            layout=ipw.Layout(width="auto"))  # fmt: skip
    if isinstance(value, bool):
        return ipw.Checkbox(value=value, indent=False, **common, layout=ipw.Layout(width="auto"))
    if name in LOG_FIELDS:
        return ipw.FloatLogSlider(value=value, base=10, min=-4, max=4, step=0.05, **slider)
    if name.endswith("_efficiency"):
        return ipw.FloatSlider(value=value, min=0.05, max=1.0, step=0.05, **slider)
    if name == "grad_comm_overlap":
        return ipw.FloatSlider(value=value, min=0.0, max=1.0, step=0.05, **slider)
    if name.endswith("_ratio"):
        return ipw.FloatSlider(value=value, min=0.0, max=4.0, step=0.1, **slider)
    text = {**common, "layout": ipw.Layout(width="22em")}
    if name == "device_memory_cap_bytes":  # None (the chip's memory) is shown as 0
        text["description"] = "Memory cap (B, 0: chip's)"
        text["layout"] = ipw.Layout(width="19em")
        return ipw.FloatText(value=value or 0.0, **text)
    if name in BYTE_FIELDS:
        text["description"] = f"{label} (B)"
    return ipw.FloatText(value=value, **text)


def _snap(slider: ipw.FloatLogSlider, value: float) -> float:
    """The value a browser's log slider moves to (its handle snaps to ``step``)."""
    if value <= 0:
        return value
    k = round((math.log(value, slider.base) - slider.min) / slider.step)
    return slider.base ** (slider.min + k * slider.step)


class CostTuner(View):
    """Tune the cost model live: every control change re-plans (through one cached
    ``Planner`` per mesh) and updates the linked views.

    The first plan is the pinned **baseline**: the chart, the title and the table of changed
    ops compare the current plan with it ("pin" makes the current plan the baseline, "reset
    to baseline" puts its parameters, method and mesh back).

    Args:
        graph: the graph to plan.
        mesh: the starting mesh; the ``mesh_shape`` control re-factors its device count.
        params: starting CostParams (default: the planner's default for the mesh).
        method: one of ``explorer.search.METHODS``.
        selection: a shared ``Selection``; each plan is published as ``selection.plan``
            and the ops whose strategy differs from the baseline as ``selection.highlight``.

    Controls: one per CostParams field (same key), ``method``, ``mesh_shape``, ``preset``,
    ``scale`` (log / linear / stacked), ``pin`` and ``reset`` (buttons). A bad value shows
    its error under its control (``field_errors[key]``), marks the results stale and keeps
    the last valid plan on screen; a valid re-plan clears both.

    >>> import explorer as ex
    >>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
    >>> tuner = CostTuner(g, ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g"))
    >>> tuner.controls["beta_communication"].value = 100.0
    >>> tuner.params.beta_communication, tuner.plan.params.beta_communication
    (100.0, 100.0)
    """

    # --- inputs -------------------------------------------------------------------------
    graph = tl.Instance(Graph)
    mesh = tl.Instance(Mesh)
    params = tl.Instance(CostParams)
    method = tl.Enum(METHODS, default_value="dynamic_programming")
    scale = tl.Enum(SCALES, default_value="log")
    # --- results ------------------------------------------------------------------------
    plan = tl.Any(None, allow_none=True)
    baseline = tl.Any(None, allow_none=True, help="the pinned plan every change compares to")
    previous = tl.Any(None, allow_none=True, help="the plan before the last re-plan")
    changed = tl.Tuple(help="ops whose strategy differs from the baseline")
    robustness = tl.Any(None, allow_none=True, help="ex.robustness of the plan, once checked")
    constraints = tl.Tuple(help="ex.Pin / ex.Forbid the search honours (the steer panel)")
    # --- timings (seconds, last re-plan) --------------------------------------------------
    search_s = tl.Float(0.0)
    update_s = tl.Float(0.0)

    selection_traits = ()
    name = "cost tuner"

    def __init__(
        self, graph: Graph, mesh: Mesh, *, params: CostParams | None = None,
        method: str = "dynamic_programming", selection: Selection | None = None,
        coalesce_s: float = 0.05, scale: str = "log",
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        self._planners: dict[Mesh, Planner] = {}
        self._plans: OrderedDict[tuple, Any] = OrderedDict()
        self._notes: dict[Mesh, dict[str, str]] = {}
        self._echoes: dict[str, list[float]] = {k: [] for k in LOG_FIELDS}
        self._trigger: str | None = None  # the control whose change the next re-plan applies
        self.graph, self.mesh, self.method, self.scale = graph, mesh, method, scale
        self.params = params or self._planner(mesh).default_params()
        self._bulk = False
        self._replan_soon = Coalescer(self.errors.guard(self._replan), delay_s=coalesce_s)
        self.readouts: dict[str, ipw.HTML] = {}
        self.field_errors: dict[str, FieldError] = {}
        self.controls = self._make_controls()
        self.changes = ipw.HTML(layout=ipw.Layout(width="auto", overflow="auto"))
        self.status = ipw.HTML(layout=ipw.Layout(width="auto"))
        self.robust = ipw.HTML(layout=ipw.Layout(width="auto"))
        self._replan(publish=False)
        self.baseline = self.plan
        # responsive, and its synced state kept current (see widgets.figure_widget)
        self.figure = FigureWidget(self._figure())
        self._publish()
        self.steer = SteerPanel(self.set_constraints, selection=self.selection)
        self._layout_children(*self._rows(), self.steer)

    # --- layout -------------------------------------------------------------------------
    def _boxed(self, key: str) -> ipw.Widget:
        """A control, its value with units beside it, and its error line under it."""
        c = self.controls[key]
        # a plain Box (not an HBox): the closest .widget-hbox of a slider stays the one that
        # also holds the chart (the browser test finds the figure that way)
        row = ipw.Box(
            [c, self.readouts[key]], layout=ipw.Layout(align_items="center", flex_flow="row wrap")
        )
        box, err = field(c)
        box.children = (row, err)
        self.field_errors[key] = err
        return box

    def _rows(self) -> tuple[ipw.Widget, ...]:
        c = self.controls
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        top = ipw.HBox([c["preset"], self._boxed("method"), self._boxed("mesh_shape")], layout=wrap)
        fields = ipw.VBox(
            [self._boxed(k) for k in self.params.fields()],
            layout=ipw.Layout(flex="0 0 auto", width="30em", margin="0 12px 0 0"),
        )
        buttons = ipw.HBox([c["scale"], c["pin"], c["reset"], c["robustness"]], layout=wrap)
        results = ipw.VBox(
            [buttons, self.figure, self.status, self.robust, self.changes],
            layout=ipw.Layout(flex="1 1 30em", min_width="0", width="auto"),
        )
        return top, ipw.HBox([fields, results], layout=wrap)

    # --- controls -----------------------------------------------------------------------
    def _make_controls(self) -> dict[str, ipw.Widget]:
        controls: dict[str, ipw.Widget] = {}
        for k, v in self.params.fields().items():
            controls[k] = _control(k, v)
            self.readouts[k] = ipw.HTML(
                _readout(k, v), layout=ipw.Layout(width="auto", min_width="6em", flex="0 0 auto")
            )
        for k in ("method", "mesh_shape"):
            self.readouts[k] = ipw.HTML(layout=ipw.Layout(width="auto"))
        controls["mesh_shape"] = ipw.Dropdown(
            options=self._shape_options(), value=self.mesh.shape, description="Mesh",
            style=_STYLE, layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        controls["method"] = ipw.Dropdown(
            options=self._method_options(), value=self.method, description="Search method",
            style=_STYLE, layout=ipw.Layout(width="auto"),
        )  # fmt: skip
        controls["preset"] = ipw.ToggleButtons(
            options=(*PRESETS, CUSTOM), value=preset_of(self.params), description="Preset",
            tooltips=("time-based roofline model (seconds)",
                      "MindSpore's byte-based model (alpha 1, beta 400, gamma 0.001)",
                      "the fields differ from every preset"),
            style={**_STYLE, "button_width": "auto"},
        )  # fmt: skip
        controls["scale"] = ipw.ToggleButtons(
            options=SCALES, value=self.scale, description="Scale",
            tooltips=("log axis: small communication next to large compute",
                      "linear axis", "one stacked bar per plan"),
            style={**_STYLE, "button_width": "auto"},
        )  # fmt: skip
        controls["pin"] = ipw.Button(description="pin as baseline", icon="thumb-tack",
                                     tooltip="compare every later plan with this one",
                                     layout=ipw.Layout(width="auto"))  # fmt: skip
        controls["reset"] = ipw.Button(description="reset to baseline", icon="undo",
                                       tooltip="put back the baseline's parameters, method "
                                       "and mesh", layout=ipw.Layout(width="auto"))  # fmt: skip
        for k, w in controls.items():
            if isinstance(w, ipw.Button):
                continue
            w.observe(self.errors.guard(lambda ch, k=k: self._on_control(k, ch)), names="value")
        controls["robustness"] = ipw.Button(
            description="check robustness", icon="balance-scale", layout=ipw.Layout(width="auto"),
            tooltip="how far each cost weight can move before the search picks another plan "
            "(searches again at every factor tried: ~40-70 searches)",
        )  # fmt: skip
        controls["pin"].on_click(self.errors.guard(lambda _: self.pin()))
        controls["robustness"].on_click(self.errors.guard(lambda _: self.check_robustness()))
        controls["reset"].on_click(self.errors.guard(lambda _: self.reset()))
        return controls

    def _shape_options(self) -> list[tuple[str, tuple[int, ...]]]:
        names = self.mesh.axis_names
        return [(" × ".join(f"{a}={n}" for a, n in zip(names, s, strict=True)), s)
                for s in mesh_shapes(self.mesh.size, len(names))]  # fmt: skip

    def _method_options(self) -> list[tuple[str, str]]:
        notes = self._notes.get(self.mesh)
        if notes is None:
            notes = self._notes[self.mesh] = method_notes(self._planner(self.mesh), self.params)
        return [(m.replace("_", " ") + (f" — unavailable: {notes[m]}" if m in notes else ""), m)
                for m in METHODS]  # fmt: skip

    def _set_method_options(self) -> None:
        """New notes for the new mesh without losing the method: ipywidgets selects the first
        option whenever a Dropdown's options change (that was "exhaustive", often unavailable,
        and its observer re-planned with it), so the options change silently and the method
        is put back."""
        bulk, self._bulk = self._bulk, True
        try:
            self.controls["method"].options = self._method_options()
            self.controls["method"].value = self.method
        finally:
            self._bulk = bulk

    def _set(self, key: str, value: Any) -> None:
        """Set a control from code without re-planning (``_bulk`` silences its observer)."""
        bulk, self._bulk = self._bulk, True
        try:
            self.controls[key].value = value
        finally:
            self._bulk = bulk

    def _is_echo(self, key: str, change: dict[str, Any]) -> bool:
        """A browser's log slider snaps a value set from Python to its step and sends the
        snapped value back (400 comes back as 398.1, possibly after a later value was set):
        such an echo keeps the exact parameter, and a late one is overwritten again."""
        w = change["owner"]
        if key not in LOG_FIELDS:
            return False
        new, expected = change["new"], self._echoes[key]
        if "value" not in w._property_lock:  # set from Python: remember its snapped echo
            snapped = _snap(w, new)
            if not math.isclose(snapped, new, rel_tol=1e-9):
                expected[:] = [*expected[-3:], snapped]
            return False
        hit = next((v for v in expected if math.isclose(v, new, rel_tol=1e-6)), None)
        if hit is None:
            return False
        expected.remove(hit)
        current = getattr(self.params, key)
        if not math.isclose(_snap(w, current), new, rel_tol=1e-6):
            self._set(key, current)  # a stale echo of an older value: show the current one
        return True

    def _on_control(self, key: str, change: dict[str, Any]) -> None:
        if self._is_echo(key, change) or self._bulk:
            return
        if key == "preset":
            if change["new"] != CUSTOM:
                self._trigger = key
                self.set_params(PRESETS[change["new"]]())
            return
        if key == "scale":
            self.scale = change["new"]
            self._redraw()
            return
        self._trigger = key
        if key == "method":
            self.method = change["new"]
        elif key == "mesh_shape":
            hw = self.mesh.hardware
            self.mesh = Mesh(dict(zip(self.mesh.axis_names, change["new"], strict=True)),
                             hardware=hw)  # fmt: skip
        else:
            self.readouts[key].value = _readout(key, change["new"])
            try:
                self.params = self._params_from_controls()
            except Exception as e:  # noqa: BLE001  (shown beside the control)
                self._refuse(key, e)
                return
            self._sync_preset()
        self._replan_soon.submit()

    def _params_from_controls(self) -> CostParams:
        values = {k: self.controls[k].value for k in self.params.fields()}
        for k, v in values.items():  # a number field left empty or not a number
            if isinstance(v, float) and not math.isfinite(v):
                raise ViewError(f"{human_label(k)} = {v}: enter a finite number")
        if not values["device_memory_cap_bytes"]:
            values["device_memory_cap_bytes"] = None
        return CostParams(**values)

    def _sync_preset(self) -> None:
        self._set("preset", preset_of(self.params))

    def set_params(self, params: CostParams) -> None:
        """Set every field control at once (one re-plan); the preset follows the fields."""
        for k, v in params.fields().items():
            self._set(k, 0.0 if v is None else v)
            self.readouts[k].value = _readout(k, v)
        self.params = params
        self._sync_preset()
        self._replan_soon.submit()

    def pin(self) -> None:
        """Make the current plan the baseline every later plan is compared with."""
        self.baseline = self.plan
        self._replan(publish=True)

    def reset(self) -> None:
        """Put back the baseline's parameters, method and mesh (and its plan)."""
        b = self.baseline
        if b.mesh != self.mesh:
            self.mesh = b.mesh
            self._set("mesh_shape", b.mesh.shape)
        self.method = b.method
        self._set_method_options()
        self._trigger = "reset"
        self.set_params(b.params)
        self.flush()

    # --- planning -----------------------------------------------------------------------
    def _planner(self, mesh: Mesh) -> Planner:
        planner = self._planners.get(mesh)
        if planner is None:
            with self.progress.task(f"cost tables for {mesh}", slow=True) as step:
                step("enumerating strategies and redistributions")
                planner = Planner(self.graph, mesh)
            self._planners[mesh] = planner
        return planner

    def set_constraints(self, constraints: tuple) -> None:
        """Re-plan now under ``constraints`` (the steer panel's list); a set no plan
        satisfies raises its ConstraintError and the constraints and plan stay as they were.
        """
        before = self.constraints
        self.constraints = tuple(constraints)
        try:
            self._search()
        except Exception:
            self.constraints = before
            raise
        self._replan()

    def _search(self):
        key = (self.mesh, self.method, self.params, self.constraints)
        plan = self._plans.get(key)
        if plan is None:
            planner = self._planner(self.mesh)
            with self.progress.task(f"re-planning ({self.method})"):
                plan = planner.search(self.method, self.params,
                                      constraints=self.constraints or None)  # fmt: skip
            self._plans[key] = plan
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def _refuse(self, key: str | None, exc: BaseException) -> None:
        """Show why a value cannot be planned beside its control; keep the last plan."""
        err = self.field_errors.get(key or "")
        if err is None:
            self.errors.report(exc, "re-plan")
        else:
            err.show(exc)
        what = human_label(key) if key in self.params.fields() else (key or "a control")
        self.mark_stale(f"{what}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")

    def _replan(self, publish: bool = True) -> None:
        t0 = time.perf_counter()
        key, self._trigger = self._trigger, None
        if key == "mesh_shape":
            self._set_method_options()
        try:
            plan = self._search()
        except Exception as e:  # noqa: BLE001  (shown beside the control that caused it)
            if self.plan is None:
                raise
            self._refuse(key, e)
            return
        t1 = time.perf_counter()
        self.previous, self.plan = self.plan, plan
        self.changed = plan.changed(self.baseline) if self.baseline is not None else ()
        self._valid()
        if publish:
            self._redraw()
            self._publish()
        self.search_s, self.update_s = t1 - t0, time.perf_counter() - t1
        self.robustness = None
        self.robust.value = ("<span style='color:#555'>robustness: not checked for this plan "
                             "(<i>check robustness</i>)</span>")  # fmt: skip
        word = STATUS_WORDS.get(plan.status, f"time-limited ({plan.status}): best found")
        self.status.value = (
            f"<b>{plan.method.replace('_', ' ')}</b> on {plan.mesh}: {word}; "
            f"search {fmt_cost(self.search_s, 'seconds')}, "
            f"views {fmt_cost(self.update_s, 'seconds')}"
        )

    def check_robustness(self) -> None:
        """How far each knob can move before the search picks another plan (the core's
        ``ex.robustness``, on this tuner's cost tables); its label is shown under the
        status: ``robust (...)`` or ``fragile (flips to plan #k, n ops changed, if knob
        x0.8)``."""
        with self.progress.task("robustness: searching again at each factor"):
            r = ex.robustness(self.plan, k=5, planner=self._planner(self.mesh))
        self.robustness = r
        color = "#D55E00" if r.verdict == "fragile" else "#009E73"
        self.robust.value = (f"<span style='color:{color}'><b>{r.verdict}</b></span> "
                             f"{r.label[len(r.verdict):]}")  # fmt: skip

    def _valid(self) -> None:
        """Every control's value was planned: record them as the last valid ones."""
        for k, err in self.field_errors.items():
            err.last_valid = self.controls[k].value
            if err.visible:
                err.clear()
        if self.stale:
            self.clear_stale()

    def _figure(self) -> go.Figure:
        before = self.baseline.cost if self.baseline is not None else None
        return cost_figure(self.plan.cost, before, changed=len(self.changed), scale=self.scale)

    def _redraw(self) -> None:
        replace_figure(self.figure, self._figure())

    def _on_linked(self, selection: Selection) -> None:
        """A new shared selection gets the current plan at once (views linked later or
        ``link(tuner, ...)`` after the first plan see it without waiting for a change); the
        steer panel follows the tuner to the new selection (its op is the one clicked there)."""
        if self.plan is not None:
            self._publish()
        steer = getattr(self, "steer", None)
        if steer is not None and steer.selection is not selection:
            steer.link(selection)

    def _publish(self) -> None:
        self.selection.publish(graph=self.graph, plan=self.plan, highlight=self.changed)
        b = self.baseline
        if b is None:
            self.changes.value = ""
            return
        rows = change_rows(b, self.plan, self.changed)
        self.changes.value = changes_html(rows, b.cost.unit, self.plan.cost.unit)

    def flush(self) -> None:
        """Run a coalesced re-plan now (tests and scripts; the kernel does it by itself)."""
        self._replan_soon.flush()
