"""PhiMoE's routing (transformers' ``sparsemixer``) as a first-class ``moe_router`` mode.

In eval mode PhiMoE picks two experts per token by two rounds of masked top-1; each pick's
weight is a softmax over only the experts whose logit lies within a ``router_jitter_noise``
band of it. ``moe_router(router="sparsemixer")`` computes that; the importer maps
``PhimoeSparseMoeBlock`` to it (`explorer.models.hf_leaves`). Checked here: the numpy
kernel picks the experts transformers' function picks (ties and all-zero logits
included) with weights equal to 1e-14; a
tiny PhiMoE (2 layers, 4 experts) traced in float64 has no opaque op and equals
transformers' logits to 1e-5 (torch runs the attention softmax in float32); the same graph
on 8 virtual devices (searched plan and expert-parallel plan) equals the unsharded run.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pytest

import explorer as ex
from explorer.ir import GraphBuilder, IRError
from explorer.ir.ops_moe import sparsemixer
from explorer.sharding import assign, node_strategies, reference, verify

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")

from transformers.models.phimoe import modeling_phimoe  # noqa: E402

from .spmd_cases import expert_parallel_annotations  # noqa: E402

ATOL = 1e-5  # float64 model, but torch's eager attention softmax runs in float32
BATCH, SEQ = 8, 8
MESH = ex.Mesh({"dp": 2, "ep": 4}, hardware=ex.hardware.load("h100-sxm"))
WIDE = 0.3  # a jitter band wide enough that most picks share their softmax with others


def _torch_dense(logits: np.ndarray, eps: float) -> np.ndarray:
    w, idx = modeling_phimoe.sparsemixer(torch.from_numpy(logits), eps, False)
    out = np.zeros_like(logits)
    np.put_along_axis(out, idx.numpy(), w.numpy(), axis=-1)
    return out


@pytest.mark.parametrize("eps", [0.0, 0.01, WIDE, 1.0])
@pytest.mark.parametrize("spread", [0.01, 1.0, 30.0])
def test_kernel_equals_transformers_sparsemixer(eps, spread):
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((300, 6)) * spread
    logits[:40, 3] = logits[:40, 1]  # ties: torch and numpy both take the first index
    logits[40:50] = 0.0  # 0/0 in the band test: no expert is masked
    logits[50:60] = -np.abs(logits[50:60])  # every logit negative
    got, want = sparsemixer(logits, eps), _torch_dense(logits, eps)
    np.testing.assert_array_equal(got > 0, want > 0)  # the same two picks per token
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)  # softmax rounding only
    assert ((got > 0).sum(axis=-1) == 2).all()


def test_band_decides_the_weights():
    """Two logits 0.5% apart share a softmax under eps=0.01; the third, 50% away, does not."""
    w = sparsemixer(np.array([[2.0, 1.99, 1.0, -1.0]]), 0.01)[0]
    np.testing.assert_allclose(w[:2], [1 / (1 + math.exp(-0.01)), 1.0])
    assert w[2] == w[3] == 0.0


def _router_graph(**attrs):
    b = GraphBuilder("r")
    x = b.input("x", (2, 8, 8))
    y = b.op("moe_router", x, b.param("w", (4, 8)), **attrs)
    return b.build([y]), y


def test_router_op_runs_the_kernel_and_keeps_experts_whole():
    g, y = _router_graph(k=2, norm_topk=False, router="sparsemixer", jitter_eps=WIDE)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 8, 8)), rng.standard_normal((4, 8))
    np.testing.assert_allclose(g.run({"x": x, "w": w})[y], _torch_dense(x @ w.T, WIDE),
                               rtol=1e-14, atol=0)  # fmt: skip
    assert g.node_flops(y) == 2 * 2 * 8 * 8 * 4  # the gate matmul, as for the top-k router
    split = {c for s in node_strategies(g, y, MESH) for c, _ in s.dim_axes}
    assert split == {"a", "b"}  # tokens split, the expert dim "e" never


@pytest.mark.parametrize("attrs, word", [
    ({"k": 3}, "k=3"),
    ({"k": 2}, "norm_topk=False"),
    ({"k": 2, "norm_topk": False, "score": "sigmoid"}, "score='softmax'"),
    ({"k": 2, "norm_topk": False, "jitter_eps": -0.1}, "jitter_eps=-0.1"),
    ({"k": 2, "norm_topk": False, "n_group": 2, "topk_group": 1}, "n_group=1"),
    ({"k": 2, "router": "sinkhorn"}, "'topk', 'sparsemixer'"),
])  # fmt: skip
def test_router_refuses_what_sparsemixer_is_not(attrs, word):
    attrs = {"router": "sparsemixer", **attrs}
    with pytest.raises(IRError, match=re.escape(word)):
        _router_graph(**attrs)


# --- a tiny PhiMoE, traced --------------------------------------------------------------


def _model(jitter: float):
    cfg = transformers.PhimoeConfig(vocab_size=128, hidden_size=32, intermediate_size=32,
                                    num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, num_local_experts=4,
                                    num_experts_per_tok=2, router_jitter_noise=jitter)  # fmt: skip
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).double().eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in m.parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in))
            if p.dim() == 1:
                p.add_(1.0)
    return m


@pytest.fixture(scope="module", params=[0.01, WIDE], ids=["default-band", "wide-band"])
def traced(request):
    """(graph, every input value, torch's logits, torch's routing weights per layer)."""
    m = _model(request.param)
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    g = ex.models.from_torch(m, (ids,), kwargs={"use_cache": False})
    routed = []
    hooks = [layer.mlp.router.register_forward_hook(lambda mod, i, o: routed.append(o[1:]))
             for layer in m.model.layers]  # fmt: skip
    with torch.no_grad():
        logits = m(ids, use_cache=False).logits.numpy()
    for h in hooks:
        h.remove()
    values = {k: v.detach().numpy() for k, v in m.named_parameters()}
    values.update({k: v.numpy() for k, v in m.named_buffers()})
    values = {k: v for k, v in values.items() if k in g}
    values.update({n.name: ids.numpy() for n in g.inputs if n.name not in values})
    dense = []
    for w, idx in routed:  # each layer's routing as dense [tokens, experts] weights
        d = np.zeros((BATCH * SEQ, m.config.num_local_experts))
        np.put_along_axis(d, idx.numpy(), w.numpy(), axis=-1)
        dense.append(d)
    return m, g, values, logits, dense


def test_traced_phimoe_has_no_opaque_op(traced):
    m, g, _, _, _ = traced
    assert g.report.exact, str(g.report)
    assert not g.report.opaque and "opaque" not in {n.op for n in g.ops}
    assert [p for p, h in g.report.leaves if h == "moe"] == ["model.layers.0.mlp",
                                                             "model.layers.1.mlp"]  # fmt: skip
    routers = [n for n in g.ops if n.op == "moe_router"]
    eps = m.config.router_jitter_noise
    assert [(n.attr("router"), n.attr("jitter_eps"), n.attr("k")) for n in routers] == [
        ("sparsemixer", eps, 2)
    ] * 2
    assert g.num_params() == sum(p.numel() for p in m.parameters())


def test_traced_phimoe_equals_transformers(traced):
    _, g, values, logits, routed = traced
    env = reference(g, values)
    np.testing.assert_allclose(env[g.outputs[0]], logits, rtol=0, atol=ATOL)
    routers = [n.name for n in g.ops if n.op == "moe_router"]
    for name, want in zip(routers, routed, strict=True):
        got = env[name].reshape(want.shape)
        np.testing.assert_array_equal(got > 0, want > 0)  # the same experts picked
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_band_is_exercised(traced):
    """Under the wide band many picks' weights are a softmax over several experts (below
    1), so the comparison above checks the band, not only the argmax; under PhiMoE's
    default 0.01 few are."""
    m, _, _, _, routed = traced
    w = np.concatenate(routed)
    banded = ((w > 0) & (w < 0.99)).sum() / (w > 0).sum()
    if m.config.router_jitter_noise == WIDE:
        assert banded > 0.2, banded
    else:
        assert banded < 0.2, banded


def test_traced_phimoe_sharded_on_8_devices_equals_unsharded(traced):
    _, g, values, logits, _ = traced
    unsharded = reference(g, values)[g.outputs[0]]
    searched = ex.search(g, MESH, method="sharding_propagation", params=ex.CostParams())
    for assignment in (searched.assignment, assign(g, MESH, expert_parallel_annotations(g, "ep"))):
        # the attention softmax runs in float32 (cast nodes, as torch): split sums round
        # differently, by ~3e-8 on these logits
        report = verify(g, assignment, MESH, inputs=values, rtol=0, atol=1e-6)
        assert report.ok, str(report)
        got = report.result.outputs[g.outputs[0]]
        np.testing.assert_allclose(got, unsharded, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, logits, rtol=0, atol=ATOL)
    kinds = Counter(c.kind.value for c, _ in report.result.collective_log)
    assert kinds["all-to-all"] >= 2, kinds  # the expert-parallel plan moved tokens


def test_block_alone_routes_two_experts_whatever_top_k():
    """transformers' sparsemixer picks two experts even when ``num_experts_per_tok`` says
    otherwise; so does the traced block (k=2), equal to torch's output in float64."""
    cfg = transformers.PhimoeConfig(hidden_size=16, intermediate_size=8, num_local_experts=4,
                                    num_experts_per_tok=1, router_jitter_noise=WIDE)  # fmt: skip
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    m = modeling_phimoe.PhimoeSparseMoeBlock(cfg).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64) / math.sqrt(p.shape[-1]))
    x = torch.randn(2, SEQ, 16, dtype=torch.float64)
    g = ex.models.from_torch(m, [x])
    (router,) = [n for n in g.ops if n.op == "moe_router"]
    assert router.attr("k") == 2 and g.report.exact, str(g.report)
    (xin,) = [n.name for n in g.inputs]
    values = {xin: x.numpy(), **{k: v.detach().numpy() for k, v in m.named_parameters()}}
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(reference(g, values)[g.outputs[0]], want, rtol=0, atol=1e-12)


def test_topk_router_refuses_a_jitter_band_it_would_ignore():
    with pytest.raises(IRError, match=re.escape("jitter_eps=0.3 with router='topk'")):
        _router_graph(k=2, jitter_eps=0.3)
