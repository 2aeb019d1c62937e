"""Steer the planner from the views: pin and forbid on the selected op (``SteerPanel``,
under the CostTuner) and bounds and fixed values on the training plan (``TrainingSteer``,
under the dashboard's plan).

Both hold a list of constraints (``ex.Pin`` / ``ex.Forbid`` for the operator search,
``ex.Fix`` / ``ex.Bound`` / ``ex.Within`` / ``ex.StageLayers`` for ``plan_training``) and
hand every new list to a ``solve`` callback that re-plans at once. A list the planner
cannot satisfy (its ``ConstraintError`` names the smallest conflicting subset) or a value
it refuses is shown beside the control that added it, and the list stays as it was.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from typing import Any

import ipywidgets as ipw
import traitlets as tl

import explorer as ex

from .base import View
from .errors import FieldError, field
from .selection import Selection

__all__ = ["SteerPanel", "TrainingSteer", "layer_pattern", "COLLECTIVE_KINDS", "KNOBS"]

#: collective kinds a user may forbid (the names the search's collectives carry)
COLLECTIVE_KINDS = tuple(k.value.replace("-", "_") for k in ex.hardware.CollectiveKind)
_WIDE = {"description_width": "initial"}
_AUTO = ipw.Layout(width="auto")


def layer_pattern(node: str) -> str | None:
    """The glob that matches ``node`` in every layer (its layer index made ``*``), or None
    when its name has no layer index.

    >>> layer_pattern("layers.3.attn.qkv")
    'layers.*.attn.qkv'
    >>> layer_pattern("lm_head") is None
    True
    """
    pattern = re.sub(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.)", "*", node)
    return None if pattern == node else pattern


def _describe(c: object) -> str:
    """A constraint in the words of its repr (``Pin('layers.*.qkv', 'a=dp,n=tp')``)."""
    return html.escape(repr(c))


class _ConstraintList(View):
    """The shared part: a list of constraints with a remove button each, and ``add``."""

    constraints = tl.Tuple(help="the constraints the planner honours now")

    def __init__(
        self, solve: Callable[[tuple], None], constraints: Sequence[object] = (), *,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(selection=selection)
        self._solve = solve
        self.listing = ipw.VBox(layout=ipw.Layout(width="100%"))
        self.field_errors: dict[str, FieldError] = {}
        self.constraints = tuple(constraints)
        self._list()

    def apply(self, constraints: Sequence[object], key: str | None = None) -> bool:
        """Re-plan under ``constraints``; on refusal show why beside control ``key`` (the
        error pane without one), keep the list as it was and return False."""
        constraints = tuple(constraints)
        err = self.field_errors.get(key or "")
        try:
            self._solve(constraints)
        except ex.ExplorerError as e:
            if err is None:
                self.errors.report(e, "constraints")
            else:
                err.show(e)
            return False
        if err is not None and err.visible:
            err.clear()
        self.constraints = constraints
        self._list()
        return True

    def add(self, constraint: object, key: str | None = None) -> bool:
        """Add one constraint (refused if the list has it already)."""
        if constraint in self.constraints:
            err = self.field_errors.get(key or "")
            msg = f"{constraint!r} is in the list already"
            if err is not None:
                err.show(ex.ExplorerError(msg))
            else:
                self.errors.report(ex.ExplorerError(msg), "constraints")
            return False
        return self.apply((*self.constraints, constraint), key)

    def remove(self, index: int) -> bool:
        """Drop the ``index``-th constraint and re-plan."""
        if not 0 <= index < len(self.constraints):
            return False
        rest = self.constraints[:index] + self.constraints[index + 1 :]
        return self.apply(rest)

    def clear(self) -> bool:
        return self.apply(())

    def _list(self) -> None:
        rows: list[ipw.Widget] = []
        for i, c in enumerate(self.constraints):
            button = ipw.Button(description="remove", icon="times", layout=_AUTO,
                                tooltip=f"remove {c!r} and re-plan")  # fmt: skip
            button.on_click(self.errors.guard(lambda _, i=i: self.remove(i)))
            rows.append(ipw.HBox([button, ipw.HTML(f"<code>{_describe(c)}</code>")],
                                 layout=ipw.Layout(align_items="center")))  # fmt: skip
        if not rows:
            rows = [ipw.HTML("<i>no constraints: the planner chooses freely</i>")]
        self.listing.children = tuple(rows)


class SteerPanel(_ConstraintList):
    """Pin a strategy on the selected op (or on its copy in every layer), forbid a mesh axis
    for it, forbid a collective kind; each press re-plans through ``solve``.

    The op is the shared selection's node (a click in the GraphView); its strategies are
    listed with their cost against the chosen one (``plan.explain``).

    Controls: ``scope`` (this op / every layer / every op), ``strategy`` and ``pin``,
    ``axis`` and ``forbid_axis``, ``collective`` and ``forbid_collective``, ``clear``.
    """

    selection_traits = ("node", "plan")
    name = "steer"

    def __init__(
        self, solve: Callable[[tuple], None], constraints: Sequence[object] = (), *,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(solve, constraints, selection=None)
        self.op = ipw.HTML("<i>click an op in the graph to pin or forbid its strategies</i>")
        self.controls = {
            "scope": ipw.Dropdown(options=[("every op", "*")], value="*", description="apply to",
                                  style=_WIDE, layout=_AUTO),
            "strategy": ipw.Dropdown(options=[], description="strategy", style=_WIDE,
                                     layout=_AUTO),
            "pin": ipw.Button(description="pin", icon="thumb-tack", layout=_AUTO,
                              tooltip="keep this strategy, whatever the cost"),
            "axis": ipw.Dropdown(options=[], description="mesh axis", style=_WIDE, layout=_AUTO),
            "forbid_axis": ipw.Button(description="forbid axis", icon="ban", layout=_AUTO),
            "collective": ipw.Dropdown(options=list(COLLECTIVE_KINDS), description="collective",
                                       style=_WIDE, layout=_AUTO),
            "forbid_collective": ipw.Button(description="forbid collective", icon="ban",
                                            layout=_AUTO),
            "clear": ipw.Button(description="clear all", layout=_AUTO),
        }  # fmt: skip
        c, guard = self.controls, self.errors.guard
        c["pin"].on_click(guard(lambda _: self.pin_selected()))
        c["forbid_axis"].on_click(guard(lambda _: self.forbid_axis()))
        c["forbid_collective"].on_click(guard(lambda _: self.forbid_collective()))
        c["clear"].on_click(guard(lambda _: self.clear()))
        boxed = {}
        for k in ("pin", "forbid_axis", "forbid_collective"):
            boxed[k], self.field_errors[k] = field(c[k])
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HTML("<b>steer the search</b> (pin or forbid, then it re-solves)"), self.op,
            ipw.HBox([c["scope"]], layout=wrap),
            ipw.HBox([c["strategy"], boxed["pin"]], layout=wrap),
            ipw.HBox([c["axis"], boxed["forbid_axis"], c["collective"],
                      boxed["forbid_collective"], c["clear"]], layout=wrap),
            self.listing,
        )  # fmt: skip
        self.link(selection or Selection())

    # --- the selected op ------------------------------------------------------------------
    def on_selection(self, change: dict[str, Any]) -> None:
        self._show(self.selection.node)

    def _on_linked(self, selection: Selection) -> None:
        if "pin" in self.controls:  # not during View.__init__'s first link
            self._show(selection.node)

    def _show(self, node: str | None) -> None:
        plan, c = self.selection.plan, self.controls
        axes = list(plan.mesh.axis_names) if plan is not None else []
        if c["axis"].options != tuple(axes):
            c["axis"].options = axes
        if plan is None or not node or node not in plan.assignment:
            self.op.value = "<i>click an op in the graph to pin or forbid its strategies</i>"
            c["scope"].options = [("every op", "*")]
            c["strategy"].options = []
            c["pin"].disabled = c["forbid_axis"].disabled = True
            return
        chosen = plan.assignment[node].name
        why = plan.explain(node, k=64)
        options = [(f"{why.chosen.strategy.name} (chosen)", why.chosen.strategy.name)]
        unit = plan.cost.unit
        for a in why.runners_up:
            options.append((f"{a.strategy.name} ({a.delta.total:+.3g} {unit})", a.strategy.name))
        scopes = [(f"this op: {node}", node)]
        pattern = layer_pattern(node)
        if pattern is not None:
            scopes.append((f"every layer: {pattern}", pattern))
        scopes.append(("every op", "*"))
        keep = c["scope"].value  # a re-solve republishes the plan: the choice stays
        c["scope"].options = scopes
        c["scope"].value = keep if keep in [v for _, v in scopes] else node
        c["strategy"].options, c["strategy"].value = options, chosen
        c["pin"].disabled = c["forbid_axis"].disabled = False
        if c["axis"].value is None and axes:  # an axis the op uses, the first otherwise
            used = [a for a in axes if a in chosen.replace("+", ",").replace("=", ",").split(",")]
            c["axis"].value = (used or axes)[0]
        self.op.value = (f"selected op <b>{html.escape(node)}</b>: "
                         f"<code>{html.escape(chosen)}</code> in the current plan")  # fmt: skip

    # --- actions ----------------------------------------------------------------------------
    def pin_selected(self) -> bool:
        """Pin the chosen strategy on the scope (a strategy name fits every op of a layer
        pattern only where those ops share its letters: the planner says so otherwise)."""
        c = self.controls
        if not c["strategy"].value:
            self.field_errors["pin"].show(ex.ExplorerError(
                "no op selected; click an op in the graph first"))  # fmt: skip
            return False
        return self.add(ex.Pin(c["scope"].value, c["strategy"].value), "pin")

    def forbid_axis(self) -> bool:
        c = self.controls
        if not c["axis"].value:
            self.field_errors["forbid_axis"].show(ex.ExplorerError(
                "no mesh axis to forbid; the plan has no mesh yet"))  # fmt: skip
            return False
        return self.add(ex.Forbid(c["scope"].value, axis=c["axis"].value), "forbid_axis")

    def forbid_collective(self) -> bool:
        c = self.controls
        return self.add(ex.Forbid(c["scope"].value, collective=c["collective"].value),
                        "forbid_collective")  # fmt: skip


#: the training knobs the dashboard's steering row offers, and their choices
KNOBS: dict[str, tuple[object, ...]] = {
    "dp": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
    "tp": (1, 2, 4, 8, 16, 32, 64),
    "pp": (1, 2, 4, 8, 16, 32, 64),
    "cp": (1, 2, 4, 8, 16),
    "ep": (1, 2, 4, 8, 16, 32, 64),
    "microbatch": (1, 2, 4, 8),
    "zero": (0, 1, 2, 3),
    "recompute": ("none", "selective", "per_layer", "full"),
    "schedule": ("1f1b", "interleaved_1f1b", "gpipe"),
}
_NUMERIC = ("dp", "tp", "pp", "cp", "ep", "microbatch")


def _knob_options(knob: str) -> list[tuple[str, object]]:
    values = KNOBS[knob]
    options: list[tuple[str, object]] = [("any", None)]
    options += [(f"= {v}", ("fix", v)) for v in values]
    if knob in _NUMERIC:
        options += [(f"<= {v}", ("max", v)) for v in values[1:]]
        options += [(f">= {v}", ("min", v)) for v in values[1:]]
    return options


class TrainingSteer(_ConstraintList):
    """Bounds and fixed values for ``plan_training``: one menu per knob ("any", "= v",
    "<= v", ">= v"), "tp within a node", a per-stage layer split, and the alternatives of the
    current plan with a "pin" button each (it fixes that configuration's knobs).

    ``solve(constraints)`` re-plans; the menus show the constraints in force.
    """

    selection_traits = ("training",)
    name = "training steer"

    def __init__(
        self, solve: Callable[[tuple], None], constraints: Sequence[object] = (), *,
        selection: Selection | None = None,
    ) -> None:  # fmt: skip
        super().__init__(solve, constraints, selection=None)
        self.controls: dict[str, ipw.Widget] = {
            k: ipw.Dropdown(options=_knob_options(k), value=None, description=k, style=_WIDE,
                            layout=ipw.Layout(width="auto", min_width="9em"))
            for k in KNOBS
        }  # fmt: skip
        self.controls["within"] = ipw.Checkbox(value=False, description="tp within a node",
                                               indent=False, layout=_AUTO)  # fmt: skip
        self.controls["stage_layers"] = ipw.Text(
            value="", description="layers per stage", placeholder="e.g. 10,10,10,6",
            style=_WIDE, layout=ipw.Layout(width="22em"), continuous_update=False,
        )  # fmt: skip
        self.controls["clear"] = ipw.Button(description="clear all", layout=_AUTO)
        self._bulk = False
        boxed = {}
        for k in (*KNOBS, "within", "stage_layers"):
            boxed[k], self.field_errors[k] = field(self.controls[k])
            self.controls[k].observe(self.errors.guard(lambda ch, k=k: self._on_control(k, ch)),
                                     names="value")  # fmt: skip
        self.controls["clear"].on_click(self.errors.guard(lambda _: self._clear_all()))
        self.alternatives = ipw.VBox(layout=ipw.Layout(width="100%"))
        wrap = ipw.Layout(flex_flow="row wrap", align_items="flex-start", width="100%")
        self._layout_children(
            ipw.HTML("<b>steer the plan</b>: each choice re-plans under it"),
            ipw.HBox([boxed[k] for k in KNOBS], layout=wrap),
            ipw.HBox([boxed["within"], boxed["stage_layers"], self.controls["clear"]],
                     layout=wrap),
            self.listing, self.alternatives,
        )  # fmt: skip
        self.link(selection or Selection())

    # --- from the controls to constraints ----------------------------------------------------
    def _from_controls(self) -> tuple:
        out: list[object] = []
        for k in KNOBS:
            v = self.controls[k].value
            if v is None:
                continue
            how, value = v
            if how == "fix":
                out.append(ex.Fix(k, value))
            elif how == "max":
                out.append(ex.Bound(k, max=value))
            else:
                out.append(ex.Bound(k, min=value))
        if self.controls["within"].value:
            out.append(ex.Within("tp", "node"))
        split = self.controls["stage_layers"].value.strip()
        if split:
            out.append(ex.StageLayers(_layer_split(split)))
        return tuple(out)

    def _on_control(self, key: str, change: dict[str, Any]) -> None:
        if self._bulk:
            return
        err = self.field_errors[key]
        try:
            constraints = self._from_controls()
        except ex.ExplorerError as e:
            err.show(e)
            return
        if not self.apply(constraints, key):
            self._set(key, change["old"])  # the menu shows what is in force

    def _set(self, key: str, value: object) -> None:
        self._bulk = True
        try:
            self.controls[key].value = value
        finally:
            self._bulk = False

    def _clear_all(self) -> None:
        if self.clear():
            self._show_constraints()

    def remove(self, index: int) -> bool:
        done = super().remove(index)
        if done:
            self._show_constraints()
        return done

    def _show_constraints(self) -> None:
        """Put the menus in the state of ``constraints`` (after remove, clear or pin)."""
        self._bulk = True
        try:
            for k in KNOBS:
                self.controls[k].value = None
            self.controls["within"].value = False
            self.controls["stage_layers"].value = ""
            for c in self.constraints:
                if isinstance(c, ex.Fix) and c.knob in KNOBS:
                    self.controls[c.knob].value = ("fix", c.value)
                elif isinstance(c, ex.Bound) and c.knob in KNOBS:
                    how = ("max", c.max) if c.max is not None else ("min", c.min)
                    if how in [o[1] for o in self.controls[c.knob].options]:
                        self.controls[c.knob].value = how
                elif isinstance(c, ex.Within):
                    self.controls["within"].value = True
                elif isinstance(c, ex.StageLayers):
                    self.controls["stage_layers"].value = ",".join(map(str, c.layers))
        finally:
            self._bulk = False

    def pin_config(self, config: ex.ParallelConfig) -> bool:
        """Fix every knob of ``config`` (an alternative of the plan) and re-plan."""
        values = {"dp": config.dp, "tp": config.tp, "pp": config.pp, "ep": config.ep,
                  "cp": getattr(config, "cp", 1), "microbatch": config.microbatch_size,
                  "zero": config.zero, "recompute": config.recompute,
                  "schedule": config.schedule}  # fmt: skip
        kept = [c for c in self.constraints if not isinstance(c, ex.Fix | ex.Bound)]
        fixed = [ex.Fix(k, v) for k, v in values.items()]
        if self.apply((*kept, *fixed)):
            self._show_constraints()
            return True
        return False

    # --- the plan's alternatives -------------------------------------------------------------
    def on_selection(self, change: dict[str, Any]) -> None:
        self._alternatives(change["new"])

    def _on_linked(self, selection: Selection) -> None:
        if hasattr(self, "alternatives"):  # not during View.__init__'s first link
            self._alternatives(selection.training)

    def _alternatives(self, plan: object) -> None:
        alts = getattr(plan, "alternatives", None)
        if not alts:
            self.alternatives.children = ()
            return
        rows: list[ipw.Widget] = [ipw.HTML("<b>alternatives</b> (pin one to plan it)")]
        for a in alts[:5]:
            button = ipw.Button(description="pin", icon="thumb-tack", layout=_AUTO,
                                tooltip=f"fix every knob of {a.config}")  # fmt: skip
            button.on_click(self.errors.guard(lambda _, c=a.config: self.pin_config(c)))
            rows.append(ipw.HBox([button, ipw.HTML(f"<code>{html.escape(str(a))}</code>")],
                                 layout=ipw.Layout(align_items="center")))  # fmt: skip
        self.alternatives.children = tuple(rows)


def _layer_split(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.replace(";", ",").split(",") if p.strip()]
    if not parts or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ex.ExplorerError(
            f"layers per stage {text!r}: expected positive whole numbers separated by commas, "
            "one per pipeline stage, e.g. 10,10,10,6"
        )
    return tuple(int(p) for p in parts)
