"""Tiny traced architectures with real weights, for SPMD verification.

``case(model_type)`` builds the tiny config of `hf_cases.tiny` as the right transformers
Auto class with seeded random float32 weights and eager attention (and eager experts),
traces it with ``from_torch`` from real inputs, runs torch once, and gathers the value of
every graph source (`feeds`). ``megatron_annotations`` names a Megatron-style plan for
the traced graph: column-parallel projections split their output features over ``tp``,
row-parallel ones their contracted features, MoE experts split over ``tp`` as experts
(expert parallel), every split op's batch over ``dp``; sharding propagation fills in the
rest. Shared by tests/models/test_spmd_architectures_a.py and _b.py.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

import explorer as ex
from explorer.ir.signature import parse
from explorer.sharding import node_strategies

from .hf_cases import BATCH, SEQ, seed_weights, tiny

#: The dp2 x tp4 mesh every case runs on (8 virtual devices).
MESH = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("h100-sxm"))

# float32 torch against the float64 numpy reference: logits up to 6.8 agree to 3.1e-6 at
# most over the 31 architectures (measured); the claim leaves 3x margin
RTOL, ATOL = 1e-5, 1e-5
# sharded vs unsharded, both in float64 (casts to float32 stay float64 in the simulation):
# only split contractions summing in another order, 7.1e-15 at most (measured)
SHARD_RTOL, SHARD_ATOL = 0.0, 1e-12

#: The last module name of each linear layer that splits its output features (column
#: parallel) or its input features (row parallel) in Megatron's layer. Fused projections
#: (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj) are split into blocks by the
#: importer; each block keeps its module's name.
COLUMN = frozenset({
    "q_proj", "k_proj", "v_proj", "qkv_proj", "gate_proj", "up_proj", "gate_up_proj",
    "fc1", "fc_in", "c_attn", "c_fc", "query_key_value", "dense_h_to_4h", "w1", "w3",
    "Wqkv", "query", "key", "value", "q", "k", "v", "wi", "wi_0", "wi_1",
    "q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj",
})  # fmt: skip
ROW = frozenset({
    "o_proj", "down_proj", "fc2", "fc_out", "out_proj", "c_proj", "dense_4h_to_h", "w2",
    "o", "wo",
})  # fmt: skip
#: ``dense`` is row parallel after attention (Phi, GPT-NeoX), column parallel in BERT's
#: intermediate block: decided by the parent module.
DENSE_COLUMN_PARENTS = frozenset({"intermediate"})


def auto_class(model_type: str):
    """The transformers Auto class a tiny ``model_type`` is built as."""
    import transformers

    if model_type in ("bert", "roberta"):
        return transformers.AutoModelForMaskedLM
    if model_type == "t5":
        return transformers.AutoModelForSeq2SeqLM
    if model_type == "vit":
        return transformers.AutoModelForImageClassification
    return transformers.AutoModelForCausalLM


def real_model(model_type: str, seed: int = 0):
    """The tiny ``model_type`` with seeded N(0, 1/fan_in) float32 weights, eager attention
    and eager experts, in eval mode."""
    import torch
    import transformers

    raw = {k: v for k, v in tiny(model_type).items() if k != "model_type"}
    if model_type in ("bert", "roberta"):
        raw["is_decoder"] = False  # a masked LM attends both ways
    cfg = transformers.AutoConfig.for_model(model_type, **raw)
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    m = auto_class(model_type).from_config(cfg, attn_implementation="eager")
    return seed_weights(m, seed)


def example_inputs(model_type: str, config, batch: int = BATCH) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of the forward: token ids spread over the vocabulary, or pixels."""
    import torch

    if model_type == "vit":
        n = config.image_size
        gen = torch.Generator().manual_seed(1)
        return (torch.randn(batch, config.num_channels, n, n, generator=gen),), {}
    ids = (torch.arange(batch * SEQ).reshape(batch, SEQ) * 7 + 3) % config.vocab_size
    if model_type == "t5":
        dec = (torch.arange(batch * SEQ).reshape(batch, SEQ) * 5 + 1) % config.vocab_size
        return (ids,), {"decoder_input_ids": dec, "use_cache": False}
    if model_type in ("bert", "roberta"):
        return (ids,), {}
    return (ids,), {"use_cache": False}


_BLOCK = re.compile(r"^(?P<name>.+)\[(?P<start>\d+):(?P<stop>\d+)\]$")


def _state_value(state: dict, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The value of graph source ``name``: a parameter or buffer, or a block
    ``W[start:stop]`` of a fused projection's weight (`split_fused_projections`), cut from
    the one axis where the block's shape differs from the whole weight's."""
    if name in state:
        return state[name].detach().numpy()
    m = _BLOCK.match(name)
    if m is None or m["name"] not in state:
        raise KeyError(f"graph source {name!r} is neither a parameter, a buffer nor a block")
    whole = state[m["name"]].detach().numpy()
    (axis,) = [k for k, (a, b) in enumerate(zip(whole.shape, shape, strict=True)) if a != b]
    index = [slice(None)] * whole.ndim
    index[axis] = slice(int(m["start"]), int(m["stop"]))
    return whole[tuple(index)]


def feeds(graph, model, args, kwargs) -> dict[str, np.ndarray]:
    """Every source of ``graph``: parameters, buffers (and fused blocks) from ``model``,
    inputs from the traced ``args`` (in order) and tensor ``kwargs`` (by name)."""
    import torch

    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(dict(model.named_buffers()))
    out = {n.name: _state_value(state, n.name, n.type.shape) for n in graph.parameters}
    given = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    free = []
    for n in graph.inputs:
        if n.name in given:
            out[n.name] = given[n.name].numpy()
        elif n.name in state or _BLOCK.match(n.name):
            out[n.name] = _state_value(state, n.name, n.type.shape)
        else:
            free.append(n.name)
    for name, value in zip(free, args, strict=True):
        out[name] = value.numpy()
    return out


def torch_output(result) -> np.ndarray:
    """The logits of a transformers output (or its first tensor)."""
    return (result.logits if hasattr(result, "logits") else result[0]).detach().numpy()


@dataclass(frozen=True)
class Case:
    """One traced architecture: the model, its graph, every source's value, torch's output."""

    model_type: str
    model: Any
    graph: Any
    feeds: dict
    want: np.ndarray


def case(model_type: str, batch: int = BATCH) -> Case:
    """The traced tiny ``model_type`` on ``batch`` sequences (built once per process)."""
    return _case(model_type, batch)


@functools.cache
def _case(model_type: str, batch: int) -> Case:
    import torch

    model = real_model(model_type)
    args, kwargs = example_inputs(model_type, model.config, batch)
    dtype = "fp32" if model_type == "vit" else "int64"
    graph = ex.models.from_torch(model, args, kwargs=kwargs, input_dtype=dtype)
    with torch.no_grad():
        want = torch_output(model(*args, **kwargs))
    return Case(model_type, model, graph, feeds(graph, model, args, kwargs), want)


def projection_role(graph, node) -> tuple[str, str, str] | None:
    """('column' | 'row', output-feature letter, contracted letter) of a linear layer
    (``x @ W``, ``x @ W.T`` as Falcon traces, or an einsum with a 2-D parameter ``W``), by
    its module's name; else None."""
    if node.op not in ("einsum", "matmul") or len(node.inputs) != 2:
        return None
    w = graph.node(node.inputs[1])
    if node.op == "matmul" and w.op == "transpose" and w.attr("perm") == (1, 0):
        w = graph.node(w.inputs[0])
    if w.op != "param" or w.type.rank != 2:
        return None
    path = _BLOCK.sub(r"\g<name>", w.name).rsplit(".", 1)[0].split(".")
    leaf, parent = path[-1], path[-2] if len(path) > 1 else ""
    if leaf == "dense":
        role = "column" if parent in DENSE_COLUMN_PARENTS else "row"
    elif leaf in COLUMN:
        role = "column"
    elif leaf in ROW:
        role = "row"
    else:
        return None
    (_, wspec), out = parse(graph.signature(node.name))
    (feature,) = [c for c in wspec if c in out]
    (contracted,) = [c for c in wspec if c not in out]
    return role, feature, contracted


def strategy_named(graph, node: str, mesh, split: dict[str, str]):
    """The strategy of ``node`` that splits exactly ``split`` (letter -> one mesh axis)."""
    want = {c: (a,) for c, a in split.items()}
    for s in node_strategies(graph, node, mesh):
        if dict(s.dim_axes) == want:
            return s
    raise ValueError(f"%{node} has no strategy splitting {split}")


def attention_core(graph, node) -> bool:
    """Whether ``node`` is one of attention's batched-over-heads ops: the scores and the
    context einsums (two activations in, [batch, heads, q, k|d] out) and the softmax."""
    if node.type.rank != 4:
        return False
    if node.op == "softmax":
        return True
    return (
        node.op == "einsum"
        and len(node.inputs) == 2
        and not any(graph.node(a).op == "param" for a in node.inputs)
    )


def megatron_annotations(graph, mesh=MESH) -> dict[str, Any]:
    """Node -> Strategy (or its name) of a Megatron-style plan: linear layers column/row
    parallel over ``tp`` and attention's scores, softmax and context split by head over
    ``tp``, each with its batch over ``dp``; MoE experts split over ``tp`` (expert
    parallel), each device dispatching its batch's tokens to its own experts and the
    combine's partial sums reduced over ``tp`` (Megatron's all-gather token dispatcher;
    the all-to-all one needs the batch split over dp x tp, more sequences than these tests
    run). Pass as ``annotations`` to ``search(..., method="sharding_propagation")``."""
    out: dict[str, Any] = {}
    for n in graph.ops:
        (*_, spec) = parse(graph.signature(n.name))
        if n.op == "moe_dispatch_grouped":
            out[n.name] = "g=dp,e=tp"
        elif n.op in ("moe_experts", "moe_combine_grouped"):
            out[n.name] = "e=tp,g=dp"
        elif attention_core(graph, n):
            out[n.name] = strategy_named(graph, n.name, mesh, {spec[0]: "dp", spec[1]: "tp"})
        elif (role := projection_role(graph, n)) is not None:
            kind, feature, contracted = role
            tp = feature if kind == "column" else contracted
            out[n.name] = strategy_named(graph, n.name, mesh, {spec[0]: "dp", tp: "tp"})
    return out


def expert_parallel_annotations(graph, ep: str = "tp") -> dict[str, str]:
    """Node -> strategy name of expert parallelism over the ``ep`` axis with an all-to-all
    token dispatcher: routing, dispatch and combine split the sequences over dp x ep, the
    experts over ep (and their groups over dp), so tokens move to their experts' devices
    and back by all-to-all; the rest propagated. Needs a batch divisible by dp x ep
    (``case(model_type, batch=8)``)."""
    out = {}
    for n in graph.ops:
        if n.op == "moe_router":
            out[n.name] = f"a=dp+{ep}"
        elif n.op in ("moe_dispatch_grouped", "moe_combine_grouped"):
            out[n.name] = f"g=dp+{ep}"
        elif n.op == "moe_experts":
            out[n.name] = f"e={ep},g=dp"
    return out


def assert_traced_equals_torch(c) -> None:
    """No opaque op, the parameter count exact, the unsharded run equal to torch's."""
    from explorer.sharding import reference

    assert c.graph.report.exact, str(c.graph.report)
    assert "opaque" not in {n.op for n in c.graph.ops}
    assert c.graph.num_params() == sum(p.numel() for p in c.model.parameters())
    got = reference(c.graph, c.feeds)[c.graph.outputs[0]]
    np.testing.assert_allclose(got, c.want, rtol=RTOL, atol=ATOL)


def verify_case(c, assignment, mesh=MESH):
    """The sharded run of ``assignment`` equals the unsharded one (and torch's output)."""
    from explorer.sharding import verify

    g = c.graph
    report = verify(g, assignment, mesh, inputs=c.feeds, rtol=SHARD_RTOL, atol=SHARD_ATOL)
    assert report.ok, str(report)
    np.testing.assert_allclose(report.result.outputs[g.outputs[0]], c.want, rtol=RTOL,
                               atol=ATOL)  # fmt: skip
    return report


def check_megatron_plan(c, names: dict, rows: int):
    """Search with the Megatron-style ``names`` as annotations: the named strategies are
    kept, at least ``rows`` ops leave partial sums over tp, the plan runs sharded equal to
    the unsharded one (`verify_case`), and every partial sum is reduced over tp —
    all-reduced, or reduce-scattered where the propagated plan keeps the residual stream
    split (as sequence parallelism does). Returns the verify report."""
    g = c.graph
    plan = ex.search(g, MESH, method="sharding_propagation", params=ex.CostParams(),
                     annotations=names)  # fmt: skip
    for node, s in names.items():
        assert plan.assignment[node].name == getattr(s, "name", s), node
    partial = {n for n in names if "tp" in plan.assignment[n].out_layout.partial}
    assert len(partial) >= rows, partial  # row-parallel (and combine) sums
    report = verify_case(c, plan.assignment)
    reduced = {
        coll.tensor.split("->")[0]
        for coll, _ in report.result.collective_log
        if coll.kind.value in ("all-reduce", "reduce-scatter") and "tp" in coll.axes
    }
    assert partial <= reduced, sorted(partial - reduced)
    return report
