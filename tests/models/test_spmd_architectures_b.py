"""Issue 16 item 4, part b: every tiny traced architecture runs sharded on 8 virtual devices.

For gpt_bigcode, falcon, opt, bloom, mpt, starcoder2, olmo2, stablelm, cohere, deepseek_v2,
deepseek_v3 (causal LMs), bert and roberta (masked LMs), t5 (seq2seq, with decoder inputs)
and vit (image classification, pixel values): the tiny config of `hf_cases.tiny` is built
with seeded random float32 weights and eager attention, traced with ``from_torch`` from
its real inputs, and

1. the unsharded graph (`reference`) equals torch's output to ATOL/RTOL below;
2. on a dp2 x tp4 mesh, `verify` runs (a) the plan sharding propagation finds and (b) a
   Megatron-style plan (column-parallel q/k/v/up projections split their output features
   over tp, row-parallel output/down projections their contracted features, MoE experts
   split over tp as experts, the rest propagated) and both equal the unsharded run, with
   the bytes moved equal to the bytes charged. Each plan is checked to split something
   and (b) to communicate over tp, so a test cannot pass by replicating.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import explorer as ex
from explorer.sharding import reference, verify

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")

from .hf_cases import SEQ, tiny  # noqa: E402

# T5's relative-position buckets take log(0) on the diagonal and cast it, as torch does;
# a ``where`` then discards that value
pytestmark = pytest.mark.filterwarnings(
    "ignore:divide by zero encountered in log:RuntimeWarning",
    "ignore:invalid value encountered in cast:RuntimeWarning",
)

# torch runs in float32, our numpy kernels in float64 from the same float32 weights (scale
# 1/sqrt(fan_in), logits up to ~6): measured up to 4.6e-6 apart (deepseek_v2)
RTOL, ATOL = 0.0, 2e-5
# sharded vs unsharded: both numpy runs compute in float64 (from the float32 weights);
# split contractions sum in another order: measured up to 1.2e-14 (t5)
SHARD_RTOL, SHARD_ATOL = 0.0, 1e-10
BATCH = 8  # tokens to split over all 8 devices before the experts
MESH = ex.Mesh({"dp": 2, "tp": 4}, hardware=ex.hardware.load("h100-sxm"))

CAUSAL = ("gpt_bigcode", "falcon", "opt", "bloom", "mpt", "starcoder2", "olmo2", "stablelm",
          "cohere", "deepseek_v2", "deepseek_v3")  # fmt: skip
ARCHS = (*CAUSAL, "bert", "roberta", "t5", "vit")

# The last module name of each linear layer: column-parallel ones split their output
# features over tp, row-parallel ones their contracted (input) features.
COLUMN = {
    "q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "fc1", "c_attn", "c_fc",
    "query_key_value", "dense_h_to_4h", "Wqkv", "query", "key", "value",
    "intermediate.dense", "q", "k", "v", "wi", "q_b_proj", "kv_b_proj",
}  # fmt: skip
ROW = {
    "o_proj", "down_proj", "fc2", "c_proj", "dense_4h_to_h", "out_proj", "output.dense",
    "self_attention.dense", "o", "wo",
}  # fmt: skip
assert not any(c.endswith("." + r) or r.endswith("." + c) for c in COLUMN for r in ROW)


def _auto(model_type: str):
    if model_type in ("bert", "roberta"):
        return transformers.AutoModelForMaskedLM
    if model_type == "t5":
        return transformers.AutoModelForSeq2SeqLM
    if model_type == "vit":
        return transformers.AutoModelForImageClassification
    return transformers.AutoModelForCausalLM


def _model(model_type: str, seed: int = 0):
    raw = {k: v for k, v in tiny(model_type).items() if k != "model_type"}
    if model_type in ("bert", "roberta"):
        raw["is_decoder"] = False  # a masked LM attends both ways
    cfg = transformers.AutoConfig.for_model(model_type, **raw)
    cfg._experts_implementation = "eager"
    torch.manual_seed(seed)
    m = _auto(model_type).from_config(cfg, attn_implementation="eager")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
    return m.float().eval()


def _inputs(model_type: str, config) -> tuple[tuple, dict]:
    """(args, kwargs) of the forward: token ids spread over the vocabulary, pixels."""
    if model_type == "vit":
        n = config.image_size
        gen = torch.Generator().manual_seed(1)
        return (torch.randn(BATCH, config.num_channels, n, n, generator=gen),), {}
    ids = (torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) * 7 + 3) % config.vocab_size
    if model_type == "t5":
        dec = (torch.arange(BATCH * SEQ).reshape(BATCH, SEQ) * 5 + 1) % config.vocab_size
        return (ids,), {"decoder_input_ids": dec, "use_cache": False}
    if model_type in ("bert", "roberta"):
        return (ids,), {}
    return (ids,), {"use_cache": False}


def _out(result):
    return (result.logits if hasattr(result, "logits") else result[0]).detach().numpy()


def _feeds(graph, model, args, kwargs) -> dict[str, np.ndarray]:
    """A value for every source: parameters and buffers by name, the forward's tensors by
    argument name; an input no op reads (a lifted constant the importer folded) zeros."""
    state = dict(model.named_parameters(remove_duplicate=False))
    state.update(dict(model.named_buffers()))
    given = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    first = "pixel_values" if model.main_input_name == "pixel_values" else "input_ids"
    given[first] = args[0]
    feeds = {}
    for n in (*graph.parameters, *graph.inputs):
        base, _, block = n.name.partition("[")
        if n.name in state:
            feeds[n.name] = state[n.name].detach().numpy()
        elif block and base in state:  # a block of a fused projection, `W[start:stop]`
            full = state[base].detach().numpy()
            (axis,) = [
                i for i, (a, b) in enumerate(zip(full.shape, n.type.shape, strict=True)) if a != b
            ]
            start, stop = (int(v) for v in block.rstrip("]").split(":"))
            feeds[n.name] = np.take(full, range(start, stop), axis=axis)
        elif n.name in given:
            feeds[n.name] = given[n.name].numpy()
        else:
            assert not graph.consumers(n.name), f"no value for the input %{n.name}"
            feeds[n.name] = np.zeros(n.type.shape, n.type.dtype.numpy)
    return feeds


class Case:
    def __init__(self, model_type: str):
        self.model_type = model_type
        self.model = _model(model_type)
        args, kwargs = _inputs(model_type, self.model.config)
        dtype = "fp32" if model_type == "vit" else "int64"
        self.graph = ex.models.from_torch(self.model, args, kwargs=kwargs, input_dtype=dtype)
        with torch.no_grad():
            self.want = _out(self.model(*args, **kwargs))
        self.feeds = _feeds(self.graph, self.model, args, kwargs)


_CASES: dict[str, Case] = {}


def _case(model_type: str) -> Case:
    if model_type not in _CASES:
        _CASES[model_type] = Case(model_type)
    return _CASES[model_type]


def _module(weight: str) -> str:
    return weight.rsplit(".", 1)[0]


def _linear_role(graph, node) -> tuple[str, str] | None:
    """('column' | 'row', the strategy letter to split) of a linear layer, else None: an
    einsum ``x, W[out, in]`` or a matmul ``x @ W[in, out]`` / ``x @ transpose(W[out, in])``."""
    if node.op not in ("einsum", "matmul") or len(node.inputs) != 2:
        return None
    w = graph.node(node.inputs[1])
    if node.op == "matmul" and w.op == "transpose" and w.attr("perm") == (1, 0):
        w = graph.node(w.inputs[0])
    if w.op != "param" or len(w.type.shape) != 2:
        return None
    if node.op == "einsum":
        out_letter, in_letter = node.attr("eq").split("->")[0].split(",")[1]
    else:
        out_letter, in_letter = "n", "k"
    mod = _module(w.name)
    for names, role, letter in ((ROW, "row", in_letter), (COLUMN, "column", out_letter)):
        if any(mod == n or mod.endswith("." + n) for n in names):
            return role, letter
    return None


# Expert parallelism over tp as in tests/sharding/test_traced_moe_mla.py: tokens split
# over every device before the experts, experts over tp (an all-to-all each way); MLA's
# heads split over tp.
EXPERT_PARALLEL = {
    "moe_router": "a=dp+tp", "moe_dispatch_grouped": "g=dp+tp",
    "moe_combine_grouped": "g=dp+tp", "moe_experts": "e=tp,g=dp", "mla_attention": "b=dp,n=tp",
}  # fmt: skip


def megatron_annotations(graph) -> tuple[dict[str, str], Counter]:
    """Column/row-parallel strategy names for the linear layers, expert parallel names for
    MoE/MLA ops; and how many of each kind were named."""
    names, kinds = {}, Counter()
    for n in graph.ops:
        if n.op in EXPERT_PARALLEL:
            names[n.name] = EXPERT_PARALLEL[n.op]
            kinds[n.op] += 1
            continue
        role = _linear_role(graph, n)
        if role is not None:
            names[n.name] = f"{role[1]}=tp"
            kinds[role[0]] += 1
    return names, kinds


@pytest.mark.parametrize("arch", ARCHS)
def test_traced_equals_torch(arch):
    c = _case(arch)
    assert c.graph.report.exact, str(c.graph.report)
    assert "opaque" not in {n.op for n in c.graph.ops}
    got = reference(c.graph, c.feeds)[c.graph.outputs[0]]
    np.testing.assert_allclose(got, c.want, rtol=RTOL, atol=ATOL)


def _check(c: Case, assignment):
    g = c.graph
    report = verify(g, assignment, MESH, inputs=c.feeds, rtol=SHARD_RTOL, atol=SHARD_ATOL)
    assert report.ok, str(report)
    got = report.result.outputs[g.outputs[0]]
    np.testing.assert_allclose(got, c.want, rtol=RTOL, atol=ATOL)
    return report


@pytest.mark.parametrize("arch", ARCHS)
def test_searched_plan_sharded_equals_unsharded(arch):
    c = _case(arch)
    plan = ex.search(c.graph, MESH, method="sharding_propagation", params=ex.CostParams())
    split = [n for n, s in plan.assignment.items() if s.dim_axes]
    assert split, "the searched plan splits something"
    _check(c, plan.assignment)


@pytest.mark.parametrize("arch", ARCHS)
def test_megatron_plan_sharded_equals_unsharded(arch):
    c = _case(arch)
    names, kinds = megatron_annotations(c.graph)
    assert kinds["column"] >= 2 and kinds["row"] >= 2, kinds  # one of each per layer at least
    plan = ex.search(c.graph, MESH, method="sharding_propagation", params=ex.CostParams(),
                     annotations=names)  # fmt: skip
    for node, name in names.items():
        assert plan.assignment[node].name == name
    report = _check(c, plan.assignment)
    axes = Counter(ax for coll, _ in report.result.collective_log for ax in coll.axes)
    assert axes["tp"] >= 2, axes  # the row-parallel sums were reduced over tp
    if kinds["moe_experts"]:  # expert parallelism moved tokens both ways
        moves = Counter(coll.kind.value for coll, _ in report.result.collective_log)
        assert moves["all-to-all"] >= 2 * kinds["moe_experts"], moves


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
