"""Part b: every tiny traced architecture runs sharded on 8 virtual devices.

For gpt_bigcode, falcon, opt, bloom, mpt, starcoder2, olmo2, stablelm, cohere, deepseek_v2,
deepseek_v3 (causal LMs), bert and roberta (masked LMs), t5 (seq2seq, with decoder inputs)
and vit (image classification, pixel values): the tiny config of `hf_cases.tiny` is built
as its transformers Auto class with seeded random float32 weights, eager attention and
eager experts, traced with ``from_torch`` from real inputs (`spmd_cases.case`), and

1. the traced graph has no opaque op, its parameters are torch's, and its unsharded run
   (`reference`, float64) equals torch's output to spmd_cases.RTOL/ATOL;
2. on a dp2 x tp4 mesh `verify` runs (a) the plan sharding propagation finds alone and
   (b) a Megatron-style plan (`spmd_cases.megatron_annotations`: column-parallel
   q/k/v/up projections, row-parallel output/down projections, attention split by head,
   MoE experts split over tp, the rest propagated) and both equal the unsharded run to
   spmd_cases.SHARD_RTOL/ATOL with the bytes moved equal to the bytes charged. Each plan is
   checked to split a quarter of its ops at least, and (b) to keep the named strategies
   and to reduce every row-parallel (and expert-combine) partial sum over tp, so a test
   cannot pass by replicating;
3. every distinct op of the graph, alone, verifies under every strategy its rule
   enumerates on that mesh, fed the values the model gives it;
4. the searched and Megatron-style plans verify on a dp2 x tp2 x sp2 mesh too;
5. traced on the meta device from shapes, the graph is the one verified, node for node:
   traced by `from_hf` itself for the causal LMs (`hf_cases.traced`), from the verified
   model's class and config for BERT, RoBERTa, T5 and ViT (from_hf would build another
   head for them: a decoder BERT, T5Model, ViTModel).

BLOOM's alibi ``repeat``, Cohere's rotary ``repeat_interleave`` and Falcon's head picks
trace to first-class ops on the meta device too (tests/models/test_repeat_ops.py and
test_mask_index_ops.py), so 5 holds for them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import explorer as ex
from explorer.sharding import assign, node_strategies, reference, verify

pytest.importorskip("torch", reason="the torch extra is not installed")
pytest.importorskip("transformers", reason="the hf extra is not installed")

from .hf_cases import traced  # noqa: E402
from .spmd_cases import (  # noqa: E402
    MESH,
    SHARD_ATOL,
    SHARD_RTOL,
    assert_traced_equals_torch,
    auto_class,
    case,
    check_megatron_plan,
    example_inputs,
    megatron_annotations,
    projection_role,
    verify_case,
)

# T5's relative-position buckets take log(0) on the diagonal and cast it, as torch does;
# a ``where`` then discards that value
pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero encountered in log:RuntimeWarning",
    "ignore:invalid value encountered in cast:RuntimeWarning",
)


ARCHS = ("gpt_bigcode", "falcon", "opt", "bloom", "mpt", "starcoder2", "olmo2", "stablelm",
         "cohere", "deepseek_v2", "deepseek_v3", "bert", "roberta", "t5", "vit")  # fmt: skip
MOE = ("deepseek_v2", "deepseek_v3")  # first layer dense, second MoE (first_k_dense_replace)


@pytest.mark.parametrize("arch", ARCHS)
def test_traced_equals_torch(arch):
    assert_traced_equals_torch(case(arch))


@pytest.mark.parametrize("arch", ARCHS)
def test_searched_plan_sharded_equals_unsharded(arch):
    c = case(arch)
    plan = ex.search(c.graph, MESH, method="sharding_propagation", params=ex.CostParams())
    split = [n for n in c.graph.ops if plan.assignment[n.name].dim_axes]
    assert len(split) >= len(c.graph.ops) // 4, f"{len(split)} of {len(c.graph.ops)} split"
    verify_case(c, plan.assignment)


@pytest.mark.parametrize("arch", ARCHS)
def test_megatron_plan_sharded_equals_unsharded(arch):
    c = case(arch)
    g = c.graph
    names = megatron_annotations(g)
    roles = Counter(r[0] for n in g.ops if (r := projection_role(g, n)) is not None)
    assert roles["column"] >= 2 and roles["row"] >= 2, roles  # per layer, at least one each
    experts = sum(g.node(n).op == "moe_experts" for n in names)
    assert experts == (1 if arch in MOE else 0), experts
    check_megatron_plan(c, names, roles["row"])


CUBE = ex.Mesh({"dp": 2, "tp": 2, "sp": 2}, hardware=ex.hardware.load("h100-sxm"))


@pytest.mark.parametrize("arch", ARCHS)
def test_three_axis_mesh_plans_equal_unsharded(arch):
    """On a dp2 x tp2 x sp2 cube, under MindSpore's byte cost model (which splits more
    than the roofline at these sizes), the searched plan and the Megatron-style one (sp
    left to propagation) equal the unsharded run: layouts over two or three axes and
    their redistributions."""
    c = case(arch)
    params = ex.CostParams.mindspore()
    for names in (None, megatron_annotations(c.graph, CUBE)):
        plan = ex.search(c.graph, CUBE, method="sharding_propagation", params=params,
                         annotations=names)  # fmt: skip
        axes = {a for s in plan.assignment.values() for _, split in s.dim_axes for a in split}
        assert {"dp", "tp"} <= axes, axes
        report = verify(c.graph, plan.assignment, CUBE, inputs=c.feeds, rtol=SHARD_RTOL,
                        atol=SHARD_ATOL)  # fmt: skip
        assert report.ok and report.num_collectives > 0, str(report)


def _nodes(graph):
    return [(n.name, n.op, n.inputs, n.type, n.attrs) for n in graph.nodes]


@pytest.mark.parametrize("arch", ARCHS)
def test_meta_device_trace_is_the_verified_graph(arch):
    """Traced on the meta device from input shapes, as `from_hf` plans a model, each
    architecture gives the graph verified above from real weights, node for node (names,
    ops, inputs, types, attributes): BLOOM's alibi, Cohere's rotary table and Falcon's head
    picks included, so what the planner shards is what ran sharded here. The causal LMs'
    graph is `from_hf`'s own (shared with the import tests); the others are traced from
    the verified model's class, which from_hf does not pick for them."""
    import torch

    c = case(arch)
    if auto_class(arch).__name__ == "AutoModelForCausalLM":
        g = traced(arch)
    else:
        with torch.device("meta"):
            meta = auto_class(arch).from_config(c.model.config, attn_implementation="eager")
        args, kwargs = example_inputs(arch, c.model.config)

        def shape(v):
            return tuple(v.shape) if isinstance(v, torch.Tensor) else v

        g = ex.models.from_torch(meta, tuple(shape(a) for a in args),
                                 kwargs={k: shape(v) for k, v in kwargs.items()},
                                 input_dtype="fp32" if arch == "vit" else "int64")  # fmt: skip
    assert g.report.exact, str(g.report)
    assert _nodes(g) == _nodes(c.graph)


def _alone(graph, node, env):
    """``node`` as a one-op graph ``y`` reading inputs ``in0, in1, ...`` with the values
    it reads in the whole graph's run."""
    b = ex.ir.GraphBuilder(f"{node.op} alone")
    refs, values = [], {}
    for k, a in enumerate(node.inputs):
        if a in node.inputs[:k]:  # the same tensor twice (x * x)
            refs.append(refs[node.inputs.index(a)])
            continue
        t = graph.node(a).type
        refs.append(b.input(f"in{k}", t.shape, t.dtype))
        values[f"in{k}"] = np.asarray(env[a])
    y = b.op(node.op, *refs, name="y", **dict(node.attrs))
    return b.build([y]), values


@pytest.mark.parametrize("arch", ARCHS)
def test_every_strategy_of_every_traced_op_verifies(arch):
    """Each distinct op of the traced graph (op, attributes, input types), alone, under
    every strategy its rule enumerates on dp2 x tp4 (not only those a plan picks), with
    the values the model feeds it: the sharded run equals the unsharded one."""
    c = case(arch)
    g = c.graph
    env = {**reference(g, c.feeds), **c.feeds}
    seen, tried = set(), Counter()
    for n in g.ops:
        key = (n.op, n.attrs, tuple(g.node(a).type for a in n.inputs))
        if key in seen:
            continue
        seen.add(key)
        one, values = _alone(g, n, env)
        for s in node_strategies(one, "y", MESH):
            report = verify(one, assign(one, MESH, {"y": s.name}), MESH, inputs=values,
                            rtol=SHARD_RTOL, atol=SHARD_ATOL)  # fmt: skip
            assert report.ok, f"%{n.name} = {n.op} under {s.name}: {report}"
            tried[bool(s.dim_axes)] += 1
    assert tried[True] >= 2 * len(seen), tried  # split strategies, not only replicated


def test_scale_keeps_an_integer_input_integer():
    """T5's relative-position buckets multiply an int64 tensor by 16 (``scale`` stores the
    factor as a float); the kernel keeps the declared int64, so an embedding can index
    with it (it used to return float64 and the lookup failed)."""
    b = ex.ir.GraphBuilder("buckets")
    x = b.input("x", (2, 3), ex.ir.DType.INT64)
    y = b.op("scale", x, factor=16.0)
    g = b.build([y])
    assert g.node(y).type.dtype == ex.ir.DType.INT64
    got = g.run({"x": np.arange(6, dtype=np.int64).reshape(2, 3)})[y]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.arange(6).reshape(2, 3) * 16)


def test_integer_tensor_with_a_float_scalar_runs_in_float():
    """``ids * 0.5`` and ``ids / 2`` are float in torch: the importer casts the integer
    tensor first (they used to run in int64 and be cast after, truncated: 1 * 0.5 -> 0),
    while ``ids * 3`` stays int64."""
    import torch

    class Mixed(torch.nn.Module):
        def forward(self, x):
            return x * 0.5, x / 2, x * 3

    x = torch.arange(6).reshape(2, 3)
    g = ex.models.from_torch(Mixed(), (x,))
    got = g.run({g.inputs[0].name: x.numpy()})
    for out, want in zip(g.outputs, Mixed()(x), strict=True):
        assert got[out].dtype == want.numpy().dtype
        np.testing.assert_array_equal(got[out], want.numpy())
    assert [g.node(o).op for o in g.outputs] == ["scale", "scale", "scale"]
    assert g.node(g.node(g.outputs[0]).inputs[0]).op == "cast"
