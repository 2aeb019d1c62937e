"""Any PyTorch model in: ``from_torch(module, inputs)`` traces with torch.export into the IR.

Torch is imported only when a model is traced. The aten -> IR mappings live in `aten` and
`aten_nn`; `leaves` lets a module class be emitted whole (first-class MoE/MLA ops).
"""

from .convert import HANDLERS, Ref
from .leaves import LEAF_HANDLERS, LeafCall, LeafHandler, register_leaf, unregister_leaf
from .report import ImportReport, OpaqueOp, TorchImportError, TracedGraph
from .trace import from_torch

__all__ = [
    "from_torch", "TracedGraph", "ImportReport", "OpaqueOp", "TorchImportError", "Ref",
    "HANDLERS", "LEAF_HANDLERS", "LeafHandler", "LeafCall", "register_leaf", "unregister_leaf",
]  # fmt: skip

# transformers MoE blocks and MLA attention as first-class ops (registers their leaves)
from .. import hf_leaves as _hf_leaves  # noqa: E402, F401
