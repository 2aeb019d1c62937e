"""Interactive views of the explorer core for JupyterLab (ipywidgets 8 + plotly FigureWidget).

Every view exposes ``.figure`` (its main ``go.FigureWidget``) and ``.controls`` (a dict of
ipywidgets keyed by parameter name) and is itself an ``ipw.VBox``. Views share a
``Selection`` (``link(a, b, c)``): a click in one selects in all, and a re-plan in the
CostTuner re-colours the graph and the mesh.

>>> import explorer as ex
>>> from widgets import CostTuner, GraphView, MeshView, link
>>> g = ex.models.build(ex.models.load("mlp-small"), batch=8)
>>> mesh = ex.Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
>>> tuner, graph, devices = CostTuner(g, mesh), GraphView(g), MeshView(mesh)
>>> sel = link(tuner, graph, devices)
>>> graph.click("layers.0.fc1"); devices.tensor
'layers.0.fc1'

PipelineView, MemoryView, ScalingView and the StrategyExplorer dashboard follow once the
training planner (issue 5) lands; they join through the same ``Selection``.
"""

from .base import View
from .coalesce import Coalescer
from .cost_tuner import CostTuner
from .errors import ErrorPane
from .graph_view import GraphView
from .mesh_view import MeshView
from .progress import Progress
from .selection import Selection, link
from .trace_compare import TraceCompare

__all__ = [
    "GraphView", "MeshView", "CostTuner", "TraceCompare", "Selection", "link", "View",
    "ErrorPane", "Coalescer", "Progress",
]  # fmt: skip
