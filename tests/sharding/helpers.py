"""Small graphs shared by the sharding tests."""

from __future__ import annotations

import explorer as ex
from explorer.ir import DType, GraphBuilder
from explorer.models.layers import attention, mlp, norm

MESH_1D = ex.Mesh({"x": 4})
MESH_2D = ex.Mesh({"a": 2, "b": 4})
TINY = ex.models.ModelConfig(
    name="tiny", arch="decoder", hidden_size=64, num_layers=1, num_heads=4, vocab_size=128,
    max_seq_len=32, dtype="fp32",
)  # fmt: skip


def layer_graph(cfg=TINY, batch: int = 2, seq: int = 8):
    """One pre-norm transformer layer on an input ``x: [batch, seq, hidden]``."""
    b = GraphBuilder("layer", dtype=cfg.dtype)
    x = b.input("x", (batch, seq, cfg.hidden_size))
    with b.scope("attn"):
        x = b.op("add", x, attention(b, cfg, norm(b, cfg, x), causal=True), name="residual")
    with b.scope("mlp"):
        x = b.op("add", x, mlp(b, cfg, norm(b, cfg, x)), name="residual")
    return b.build([x])


def op_graph(op: str):
    """(graph, target node) with ``op`` applied to sources of small divisible shapes."""
    b = GraphBuilder(op, dtype=DType.FP32)
    if op in ("matmul",):
        y = b.op(op, b.input("x", (8, 4, 8)), b.param("w", (8, 16)), name="y")
    elif op == "bmm":
        y = b.op(op, b.input("x", (4, 8, 8)), b.input("z", (4, 8, 16)), name="y")
    elif op == "einsum":
        q, k = b.input("q", (4, 8, 4, 8)), b.input("k", (4, 8, 4, 8))
        y = b.op(op, q, k, name="y", eq="bsnd,btnd->bnst")
    elif op in ("add", "sub", "mul", "div"):
        y = b.op(op, b.input("x", (8, 8, 4)), b.param("c", (8, 4)), name="y")
    elif op in ("gelu", "silu", "relu", "exp", "tanh", "softmax"):
        y = b.op(op, b.input("x", (4, 8, 8)), name="y")
    elif op == "scale":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", factor=0.37)
    elif op == "causal_mask":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", offset=1)
    elif op in ("window_mask", "window_mask_grad"):
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", window=3, offset=1)
    elif op == "dropout":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", p=0.3, seed=7)
    elif op == "cast":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", dtype="bf16")
    elif op == "layernorm":
        x = b.input("x", (4, 8, 16))
        y = b.op(op, x, b.param("g", (16,)), b.param("b", (16,)), name="y")
    elif op == "rmsnorm":
        y = b.op(op, b.input("x", (4, 8, 16)), b.param("g", (16,)), name="y")
    elif op == "cross_entropy":
        logits, labels = b.input("logits", (4, 8, 16)), b.input("labels", (4, 8), "int32")
        y = b.op(op, logits, labels, name="y")
    elif op in ("sum", "mean"):
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", axes=(1,))
    elif op == "transpose":
        y = b.op(op, b.input("x", (4, 8, 16)), name="y", perm=(2, 0, 1))
    elif op == "reshape":
        y = b.op(op, b.input("x", (4, 8, 16)), name="y", shape=(4, 8, 4, 4))
    elif op == "embedding":
        y = b.op(op, b.input("ids", (4, 8), "int32"), b.param("table", (16, 8)), name="y")
    elif op == "topk_gate":
        y = b.op(op, b.input("logits", (16, 8)), name="y", k=2)
    elif op == "moe_dispatch":
        gate = b.op("topk_gate", b.input("logits", (16, 8)), name="gate", k=2)
        y = b.op(op, b.input("tokens", (16, 8)), gate, name="y", capacity=4)
    elif op == "moe_combine":
        gate = b.op("topk_gate", b.input("logits", (16, 8)), name="gate", k=2)
        y = b.op(op, b.input("expert_out", (8, 4, 8)), gate, name="y", k=2)
    elif op in ("abs", "neg", "sqrt", "log", "logical_not"):
        dt = "bool" if op == "logical_not" else None
        y = b.op(op, b.input("x", (4, 8, 8), dt), name="y")
    elif op in (
        "eq",
        "ge",
        "gt",
        "le",
        "lt",
        "ne",
        "maximum",
        "minimum",
        "pow",
        "gelu_grad",
        "silu_grad",
        "softmax_grad",
    ):
        y = b.op(op, b.input("x", (4, 8, 8)), b.input("z", (4, 8, 8)), name="y")
    elif op == "where":
        c = b.input("c", (4, 8, 8), "bool")
        y = b.op(op, c, b.input("x", (4, 8, 8)), b.param("z", (8,)), name="y")
    elif op == "causal_mask_grad":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", offset=-1)
    elif op == "max":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", axes=(2,))
    elif op in ("layernorm_grad", "rmsnorm_grad"):
        x, gy = b.input("x", (4, 8, 16)), b.input("gy", (4, 8, 16))
        y = b.op(op, x, b.param("g", (16,)), gy, name="y", wrt=0)
    elif op == "cross_entropy_grad":
        logits, labels = b.input("logits", (4, 8, 16)), b.input("labels", (4, 8), "int32")
        y = b.op(op, logits, labels, b.input("g", (4, 8)), name="y")
    elif op == "embedding_grad":
        ids = b.input("ids", (4, 8), "int32")
        y = b.op(op, ids, b.input("g", (4, 8, 8)), name="y", vocab=16)
    elif op in ("rsqrt", "sin", "cos", "sigmoid", "reciprocal", "erf"):
        y = b.op(op, b.input("x", (4, 8, 8)), name="y")
    elif op in ("logical_and", "logical_or"):
        y = b.op(op, b.input("x", (4, 8, 8), "bool"), b.input("z", (8, 8), "bool"), name="y")
    elif op == "scalar_op":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", fn="rsub", value=0.5)
    elif op == "cat":
        y = b.op(op, b.input("x", (4, 8, 8)), b.input("z", (4, 8, 4)), name="y", axis=2)
    elif op == "slice":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", axis=1, start=2, stop=7, step=2)
    elif op == "expand":
        y = b.op(op, b.input("x", (4, 1, 8)), name="y", shape=(4, 3, 8), axes=(1,))
    elif op == "rope":
        cos, sin = b.input("cos", (1, 8, 8)), b.input("sin", (1, 8, 8))
        y = b.op(op, b.input("x", (4, 8, 8)), cos, sin, name="y")
    elif op == "cumsum":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", axis=1)
    elif op == "repeat_interleave":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", repeats=3, axis=1)
    elif op == "repeat":
        y = b.op(op, b.input("x", (4, 8, 8)), name="y", repeats=(1, 2, 1))
    elif op == "gather":
        idx = b.input("idx", (4, 8, 8), "int64")  # values below 4 (random_inputs)
        y = b.op(op, b.input("x", (4, 6, 8)), idx, name="y", axis=1)
    elif op == "grouped_mm":
        offs = b.input("offs", (2,), "int64")
        y = b.op(op, b.input("x", (4, 8)), b.param("w", (2, 8, 16)), offs, name="y")
    elif op in ("moe_router", "moe_dispatch_grouped", "moe_combine_grouped"):
        x = b.input("x", (4, 8, 16))
        gate = b.op("moe_router", x, b.param("router_w", (8, 16)), b.input("bias", (8,)),
                    name="y" if op == "moe_router" else "gate", k=2, score="sigmoid",
                    n_group=4, topk_group=2, scale=2.5)  # fmt: skip
        if op == "moe_dispatch_grouped":
            y = b.op(op, x, gate, name="y", capacity=4)
        elif op == "moe_combine_grouped":
            y = b.op(op, b.input("expert_out", (8, 4, 4, 16)), gate, name="y", k=2)
        else:
            y = gate
    elif op == "moe_experts":
        x = b.input("x", (4, 4, 4, 8))
        y = b.op(op, x, b.param("gate_up", (4, 2, 8, 8)), b.param("down", (4, 8, 8)), name="y")
    elif op == "mla_attention":
        q, ckv = b.input("q", (4, 4, 4, 12)), b.input("ckv", (4, 4, 20))
        cos, sin = b.input("cos", (4, 4, 4)), b.input("sin", (4, 4, 4))
        y = b.op(op, q, ckv, b.param("kv_norm", (16,)), b.param("kv_b", (4, 16, 16)), cos, sin,
                 name="y", nope=8, scaling=0.3)  # fmt: skip
    else:
        raise KeyError(op)
    return b.build([y]), y


OPS = (
    "matmul", "bmm", "einsum", "add", "sub", "mul", "div", "gelu", "silu", "relu", "exp",
    "tanh", "scale", "causal_mask", "dropout", "cast", "softmax", "layernorm", "rmsnorm",
    "cross_entropy", "sum", "mean", "transpose", "reshape", "embedding", "topk_gate",
    "moe_dispatch", "moe_combine", "abs", "neg", "sqrt", "log", "logical_not", "eq", "ge",
    "gt", "le", "lt", "ne", "maximum", "minimum", "pow", "gelu_grad", "silu_grad",
    "softmax_grad", "where", "causal_mask_grad", "max", "layernorm_grad", "rmsnorm_grad",
    "cross_entropy_grad", "embedding_grad", "rsqrt", "sin", "cos", "sigmoid", "reciprocal",
    "erf", "logical_and", "logical_or", "scalar_op", "cat", "slice", "expand", "grouped_mm", "rope",
    "moe_router", "moe_dispatch_grouped", "moe_combine_grouped", "moe_experts", "mla_attention",
    "cumsum", "gather", "window_mask", "window_mask_grad",
    "repeat", "repeat_interleave",
)  # fmt: skip
