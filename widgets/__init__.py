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

The training views study one ``ParallelConfig`` (PipelineView: the schedule as a Gantt;
MemoryView: memory per stage against capacity; ScalingView: throughput vs devices), and the
``StrategyExplorer`` dashboard runs ``plan_training`` and links them all:

>>> dash = StrategyExplorer("gpt2", devices=8, global_batch=64, seq=512)  # doctest: +SKIP
>>> dash.views["graph"].click("layers.0.mlp.fc1")  # doctest: +SKIP
>>> dash.views["memory"].stage  # doctest: +SKIP
0
"""

from .base import View
from .busy import busy
from .calibration_view import CalibrationView
from .coalesce import Coalescer
from .cost_tuner import CostTuner
from .errors import ErrorPane
from .exercise import ExerciseSet, ExerciseWidget
from .fit import figure_box
from .graph_view import GraphView
from .memory_view import MemoryView
from .mesh_view import MeshView
from .parallelism_lesson import ParallelismLesson
from .pareto_view import ParetoView
from .pipeline_view import PipelineView
from .plan_diff import PlanDiffView
from .pools_view import PoolsView
from .progress import Progress
from .rank_map_view import RankMapView
from .scaling_view import ScalingView, Series
from .selection import Selection, link
from .strategy_explorer import StrategyExplorer
from .trace_compare import TraceCompare
from .training_view import TrainingView

__all__ = [
    "StrategyExplorer", "GraphView", "MeshView", "CostTuner", "TraceCompare", "PipelineView",
    "MemoryView", "ScalingView", "Series", "TrainingView", "Selection", "link", "View",
    "ErrorPane", "Coalescer", "Progress", "busy", "figure_box", "ParallelismLesson",
    "CalibrationView", "ParetoView", "PoolsView", "ExerciseWidget", "ExerciseSet", "RankMapView",
    "PlanDiffView",
]  # fmt: skip
