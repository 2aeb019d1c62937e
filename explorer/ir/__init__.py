"""The graph IR shared by the planner and the compiler.

>>> from explorer.ir import GraphBuilder
>>> b = GraphBuilder("demo")
>>> y = b.op("gelu", b.input("x", (4, 8)))
>>> print(b.build([y]))
graph demo {
  %x : fp32[4, 8] = input()
  %gelu : fp32[4, 8] = gelu(%x)  # 256 FLOP
  return %gelu
}
"""

from . import ops as _ops  # noqa: F401  (registers the ops)
from . import ops_aten as _ops_aten  # noqa: F401  (ops of traced PyTorch programs)
from . import ops_mask as _ops_mask  # noqa: F401  (sliding-window attention masks)
from . import ops_mla as _ops_mla  # noqa: F401  (multi-head latent attention)
from . import ops_moe as _ops_moe  # noqa: F401  (mixture-of-experts routing)
from . import ops_repeat as _ops_repeat  # noqa: F401  (repeat, repeat_interleave)
from . import ops_tensor as _ops_tensor  # noqa: F401  (the tensor framework's ops)
from .builder import GraphBuilder
from .dtype import DType
from .errors import IRError
from .graph import Graph
from .hierarchy import (
    CHANGE_THRESHOLD,
    ROOT,
    Group,
    GroupKind,
    Hierarchy,
    HierarchyError,
    Match,
    changed_materially,
    hierarchy,
)
from .interpreter import Interpreter
from .node import Node
from .opdef import ELEMENTWISE, REGISTRY, OpDef, OpGroup, get, names, register
from .ops import moe_slots, reshape_groups
from .printer import format_bytes, format_flops, format_graph, format_node
from .tensor_type import TensorType

__all__ = [
    "DType", "TensorType", "OpDef", "OpGroup", "Node", "Graph", "GraphBuilder", "IRError",
    "Interpreter",
    "REGISTRY", "ELEMENTWISE", "get", "names", "register", "format_graph", "format_node",
    "format_flops", "format_bytes", "moe_slots", "reshape_groups",
    "hierarchy", "Hierarchy", "Group", "GroupKind", "Match", "HierarchyError", "ROOT",
    "CHANGE_THRESHOLD", "changed_materially",
]  # fmt: skip
