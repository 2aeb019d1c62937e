"""Pure figure builders: a core object in, a ``go.Figure`` out (no widget state).

The widget classes and the static HTML report use the same builders.
"""

from .cost import cost_figure
from .graph import graph_figure
from .layout import GraphLayout, graph_layout, layer_scopes
from .memory import memory_figure
from .mesh import mesh_figure, ring_figure, sharding_figure
from .pipeline import pipeline_figure
from .ring import ring_steps
from .scaling import scaling_figure
from .trace import rewrite_figure, summary_figure, trace_figure

__all__ = [
    "graph_figure", "graph_layout", "GraphLayout", "layer_scopes", "mesh_figure",
    "sharding_figure", "ring_figure", "ring_steps", "cost_figure", "trace_figure",
    "summary_figure", "rewrite_figure", "pipeline_figure", "memory_figure", "scaling_figure",
]  # fmt: skip
