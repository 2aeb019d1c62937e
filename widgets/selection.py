"""``Selection``: the one object linked views share.

Views never talk to each other. Each holds the same ``Selection``; a click sets a trait on
it and every other view observes that trait. The traits are of two kinds:

* what the person picked (``node``, ``device``, and for the training views ``stage`` and
  ``microbatch``), and
* what the core last produced, published by the view that did the work (``plan`` and
  ``highlight`` by the CostTuner; ``training`` by the StrategyExplorer in part 2), so that a
  re-plan re-colours the graph and the mesh without the tuner knowing they exist.

A view that wants to join (PipelineView, MemoryView, ScalingView) subclasses
``widgets.base.View``, lists the trait names it cares about in ``selection_traits``, and
implements ``on_selection(change)``.

>>> import explorer as ex
>>> from widgets.selection import Selection
>>> sel = Selection()
>>> sel.select(node="layers.0.fc1", source="test"); sel.node, sel.source
('layers.0.fc1', 'test')
"""

from __future__ import annotations

from typing import Any

import traitlets as tl

__all__ = ["Selection", "link"]


class Selection(tl.HasTraits):
    # --- what is selected (set by clicks) -----------------------------------------------
    node = tl.Unicode(None, allow_none=True, help="a graph node (op or tensor) name")
    device = tl.Int(None, allow_none=True, help="a device id of the mesh")
    stage = tl.Int(None, allow_none=True, help="a pipeline stage (training views, part 2)")
    microbatch = tl.Int(None, allow_none=True, help="a microbatch (PipelineView, part 2)")
    source = tl.Unicode("", help="name of the view that made the last selection")

    # --- what the core produced (published by the view that ran it) -----------------------
    graph = tl.Any(None, help="the explorer.ir.Graph the node names refer to")
    plan = tl.Any(None, help="the current explorer.search.ShardingPlan")
    training = tl.Any(None, help="the current TrainingPlan / SimResult (part 2)")
    highlight = tl.Tuple(help="node names to emphasise, e.g. ops whose strategy changed")

    @tl.validate("node")
    def _check_node(self, proposal: dict[str, Any]) -> str | None:
        node = proposal["value"]
        if node is not None and self.graph is not None and node not in self.graph:
            raise tl.TraitError(
                f"selection.node={node!r} is not a node of graph {self.graph.name!r}; "
                "select a node of the linked graph or publish the new graph first"
            )
        return node

    @tl.validate("plan")
    def _check_plan(self, proposal: dict[str, Any]) -> Any:
        plan = proposal["value"]
        if plan is not None and self.graph is not None and plan.graph is not self.graph:
            # a plan of another graph: the node names would not match; adopt its graph
            self.graph = plan.graph
        return plan

    def select(self, source: str = "", **picked: Any) -> None:
        """Set several picked traits at once (observers see one consistent state)."""
        with self.hold_trait_notifications():
            self.source = source
            for k, v in picked.items():
                if k not in ("node", "device", "stage", "microbatch"):
                    raise tl.TraitError(
                        f"select({k}=...): unknown selection field; use node, device, stage "
                        "or microbatch"
                    )
                setattr(self, k, v)

    def publish(self, **produced: Any) -> None:
        """Set several produced traits at once (``graph``, ``plan``, ``training``,
        ``highlight``)."""
        with self.hold_trait_notifications():
            for k, v in produced.items():
                if k not in ("graph", "plan", "training", "highlight"):
                    raise tl.TraitError(
                        f"publish({k}=...): unknown field; use graph, plan, training or highlight"
                    )
                setattr(self, k, v)


def link(*views: Any, selection: Selection | None = None) -> Selection:
    """Give every view the same ``Selection`` (a new one unless given); returns it.

    >>> from widgets import link  # doctest: +SKIP
    >>> sel = link(graph_view, mesh_view, tuner)  # doctest: +SKIP
    """
    selection = selection or Selection()
    for v in views:
        v.link(selection)
    return selection
