"""`to_mindspore`: a plan as MindSpore ``shard()`` strategies and the context call.

MindSpore's semi-auto parallel mode takes, per operator primitive, one tuple per input
giving how many pieces each dim is cut into (``MatMul().shard(((2, 1), (1, 4)))``), and
places devices with a device matrix equal to our mesh shape. The snippet is text: MindSpore
is not needed (its auto-parallel refuses the CPU backend, so nothing here runs it).

>>> import explorer as ex
>>> b = ex.GraphBuilder("mm"); x = b.input("x", (8, 16)); w = b.param("w", (16, 4))
>>> g = b.build([b.op("matmul", x, w, name="y")])
>>> mesh = ex.Mesh({"dp": 2, "tp": 4})
>>> ms = to_mindspore(g, ex.sharding.assign(g, mesh, {"y": "a=dp,n=tp"}), mesh)
>>> ms.strategies["y"]
('MatMul', ((2, 1), (1, 4)))
>>> print(ms.snippet().splitlines()[-1])
y = ops.MatMul().shard(((2, 1), (1, 4)))  # fp32[A_dp, B] x fp32[A, B_tp]
"""

from __future__ import annotations

from dataclasses import dataclass

from ..hardware import Mesh
from ..ir import Graph
from .jax_export import resolve_assignment, resolve_model

__all__ = ["MindSporeExport", "to_mindspore", "PRIMITIVES"]

# our op -> the MindSpore primitive that computes it (ops.<name>)
PRIMITIVES = {
    "matmul": "MatMul", "bmm": "BatchMatMul", "einsum": "BatchMatMul", "add": "Add",
    "sub": "Sub", "mul": "Mul", "div": "RealDiv", "gelu": "GeLU", "silu": "SiLU",
    "relu": "ReLU", "exp": "Exp", "tanh": "Tanh", "scale": "Mul", "causal_mask": "Select",
    "dropout": "Dropout", "cast": "Cast", "softmax": "Softmax", "layernorm": "LayerNorm",
    "rmsnorm": "RmsNorm", "cross_entropy": "SoftmaxCrossEntropyWithLogits", "sum": "ReduceSum",
    "mean": "ReduceMean", "transpose": "Transpose", "reshape": "Reshape",
    "embedding": "Gather",
}  # fmt: skip

# ops whose MindSpore primitive takes the inputs in another order: Gather(params, indices)
_INPUT_ORDER = {"embedding": (1, 0)}

# ops whose layout MindSpore infers (a shard() strategy is not accepted or not needed)
_NO_SHARD = frozenset({"reshape"})


@dataclass(frozen=True)
class MindSporeExport:
    """Strategies per operator and the auto-parallel context.

    Attributes:
        strategies: node -> (primitive name, one split-count tuple per input).
        context: keyword arguments of ``mindspore.set_auto_parallel_context``.
        layouts: node -> the printed input layouts (comments in the snippet).
    """

    strategies: dict[str, tuple[str, tuple[tuple[int, ...], ...]]]
    context: dict[str, object]
    layouts: dict[str, str]

    def snippet(self) -> str:
        """Python source: imports, the context call, one ``shard()`` line per operator."""
        ctx = ", ".join(f"{k}={v!r}" for k, v in self.context.items())
        lines = ["import mindspore as ms", "from mindspore import ops", "",
                 f"ms.set_auto_parallel_context({ctx})"]  # fmt: skip
        for node, (prim, strategy) in self.strategies.items():
            var = node.replace(".", "_")
            lines.append(f"{var} = ops.{prim}().shard({strategy!r})  # {self.layouts[node]}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.snippet()


def to_mindspore(model, plan, mesh: Mesh, *, batch: int | None = None, seq: int | None = None,
                 parallel_mode: str = "semi_auto_parallel") -> MindSporeExport:  # fmt: skip
    """Export ``plan`` as MindSpore ``shard()`` strategies (see the module docstring).

    Ops without a primitive in `PRIMITIVES` and reshapes are left out (MindSpore infers
    their layouts); partial sums need no strategy (MindSpore inserts the reduction).
    """
    graph: Graph = resolve_model(model, batch, seq)
    assignment = resolve_assignment(graph, plan, mesh)
    strategies, layouts = {}, {}
    for n in graph.ops:
        if n.op in _NO_SHARD or n.op not in PRIMITIVES:
            continue
        s = assignment[n.name]
        order = _INPUT_ORDER.get(n.op, tuple(range(len(n.inputs))))
        ins = [(s.in_layouts[i], graph.input_types(n.name)[i]) for i in order]
        strategies[n.name] = (PRIMITIVES[n.op], tuple(lay.split_counts(mesh) for lay, _ in ins))
        layouts[n.name] = " x ".join(lay.format(t) for lay, t in ins)
    context = {"parallel_mode": parallel_mode, "device_num": mesh.size, "full_batch": True}
    return MindSporeExport(strategies, context, layouts)
