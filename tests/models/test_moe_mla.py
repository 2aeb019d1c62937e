"""MoE routing and MLA attention as first-class ops, checked against transformers' modules.

Every comparison runs torch in float64 with real (seeded random) weights: outputs agree to
1e-6 (see ATOL), parameter counts and names exactly, matmul FLOPs (the ops of the contraction group)
exactly against torch's FlopCounterMode with eager attention and eager experts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import explorer as ex
from explorer.ir import GraphBuilder, IRError, OpGroup
from explorer.ir.ops_moe import group_slots, moe_capacity, route
from explorer.models.deepseek import (
    BuilderEmitter,
    DeepSeekSpec,
    build_deepseek,
    emit_mla,
    emit_moe,
    moe_spec_of,
)  # fmt: skip
from explorer.sharding.executor import reference

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")

# transformers computes routers, RMS norms and attention softmax in float32 whatever the
# model's dtype, so a float64 module carries float32 rounding (relative 6e-8) there: the
# blocks agree with our float64 run to 1e-6 absolute on outputs of order 1.
ATOL = 1e-6

TINY_V3 = dict(
    vocab_size=128, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=16,
    kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=8,
    num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=4,
    topk_group=2,
)  # fmt: skip


def _randomize(module, seed: int = 0):
    """Seeded normal weights (transformers initialises routers to zero: every tie)."""
    gen = torch.Generator().manual_seed(seed)
    module.double()
    with torch.no_grad():
        for _, p in module.named_parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in))
            if p.dim() == 1:
                p.add_(1.0)
    return module


def _weights(module, prefix: str = "") -> dict[str, np.ndarray]:
    return {prefix + k: v.detach().numpy() for k, v in module.named_parameters()}


def _matmul_flops(graph) -> int:
    return sum(graph.node_flops(n.name) for n in graph.ops
               if graph.group(n.name) is OpGroup.CONTRACTION)  # fmt: skip


def _torch_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc, torch.no_grad():
        fn()
    return fc.get_total_flops()


# --- MoE blocks ---------------------------------------------------------------------------

MOE_CASES = {
    "mixtral": ("MixtralConfig", "models.mixtral.modeling_mixtral", "MixtralSparseMoeBlock",
                dict(num_local_experts=8, num_experts_per_tok=2, intermediate_size=24)),
    "qwen2_moe": ("Qwen2MoeConfig", "models.qwen2_moe.modeling_qwen2_moe",
                  "Qwen2MoeSparseMoeBlock",
                  dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                       shared_expert_intermediate_size=40, norm_topk_prob=False)),
    "qwen3_moe": ("Qwen3MoeConfig", "models.qwen3_moe.modeling_qwen3_moe",
                  "Qwen3MoeSparseMoeBlock",
                  dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=16,
                       norm_topk_prob=True)),
    "deepseek_v2": ("DeepseekV2Config", "models.deepseek_v2.modeling_deepseek_v2",
                    "DeepseekV2Moe",
                    dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                         n_shared_experts=2, n_group=4, topk_group=2,
                         topk_method="group_limited_greedy", routed_scaling_factor=1.5)),
    "deepseek_v3": ("DeepseekV3Config", "models.deepseek_v3.modeling_deepseek_v3",
                    "DeepseekV3MoE",
                    dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                         n_shared_experts=1, n_group=4, topk_group=2)),
}  # fmt: skip


def _moe_module(case: str):
    import importlib

    cfg_name, mod_path, cls_name, kw = MOE_CASES[case]
    cfg = getattr(transformers, cfg_name)(hidden_size=32, **kw)
    cfg._experts_implementation = "eager"  # the per-expert loop (FlopCounterMode counts it)
    cls = getattr(importlib.import_module(f"transformers.{mod_path}"), cls_name)
    return _randomize(cls(cfg)).eval(), cfg


def _moe_graph(case: str, m, batch: int, seq: int, capacity_factor=None):
    """The MoE block built from the first-class ops with the module's parameter names."""
    b = GraphBuilder(case, dtype="fp32")
    x = b.input("x", (batch, seq, 32))
    p = {k: b.param(k, tuple(v.shape)) for k, v in m.named_parameters()}
    bias = None
    if hasattr(m.gate, "e_score_correction_bias"):
        bias = b.input("gate.e_score_correction_bias", (m.gate.num_experts,))
    shared = None
    for pre in ("shared_experts", "shared_expert"):
        if f"{pre}.gate_proj.weight" in p:
            shared = tuple(p[f"{pre}.{w}_proj.weight"] for w in ("gate", "up", "down"))
    y = emit_moe(BuilderEmitter(b), x, moe_spec_of(m, capacity_factor),
                 router_w=p["gate.weight"], gate_up=p["experts.gate_up_proj"],
                 down=p["experts.down_proj"], bias=bias, shared=shared,
                 shared_gate=p.get("shared_expert_gate.weight"))  # fmt: skip
    return b.build([y])


@pytest.mark.parametrize("case", sorted(MOE_CASES))
def test_moe_block_equals_transformers(case):
    m, _ = _moe_module(case)
    batch, seq = 2, 6
    g = _moe_graph(case, m, batch, seq)
    assert g.num_params() == sum(p.numel() for p in m.parameters())
    x = torch.randn(batch, seq, 32, generator=torch.Generator().manual_seed(1),
                    dtype=torch.float64)  # fmt: skip
    inputs = {"x": x.numpy(), **_weights(m)}
    if "gate.e_score_correction_bias" in g:
        bias = torch.linspace(-0.2, 0.2, m.gate.num_experts, dtype=torch.float64)
        m.gate.e_score_correction_bias.copy_(bias)
        inputs["gate.e_score_correction_bias"] = bias.numpy()
    with torch.no_grad():
        want = m(x).numpy()
    got = reference(g, inputs)[g.outputs[0]]
    atol = ATOL
    np.testing.assert_allclose(got, want, rtol=0, atol=atol)
    assert _matmul_flops(g) == _torch_flops(lambda: m(x))


def test_moe_capacity_drops_the_tokens_past_capacity():
    """With capacity c, a group's tokens fill each expert's c slots in token order; the
    op's output equals a per-token loop that skips the (token, expert) pairs past c."""
    m, _ = _moe_module("qwen3_moe")
    g = _moe_graph("qwen3_moe", m, 2, 12, capacity_factor=0.5)
    cap = g.node("dispatch").attr("capacity")
    assert cap == moe_capacity(12, 3, 8, 0.5) == 3
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 12, 32))
    w = _weights(m)
    got = reference(g, {"x": x, **w})[g.outputs[0]]
    gate = route(np.einsum("gsh,eh->gse", x, w["gate.weight"]), k=3, norm_topk=True)
    gu, down = w["experts.gate_up_proj"], w["experts.down_proj"]
    want = np.zeros_like(x)
    dropped = 0
    for gi in range(2):
        used = np.zeros(8, dtype=int)
        for si in range(12):
            for e in np.nonzero(gate[gi, si])[0]:
                if used[e] == cap:
                    dropped += 1
                    continue
                used[e] += 1
                hgu = gu[e] @ x[gi, si]
                a = hgu[:16] / (1 + np.exp(-hgu[:16])) * hgu[16:]
                want[gi, si] += gate[gi, si, e] * (down[e] @ a)
    assert dropped > 0  # the case exercises dropping
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert (group_slots(gate, cap) >= 0).sum() == 2 * 12 * 3 - dropped


def test_moe_flops_count_active_experts_only():
    """Expert FLOPs are top_k / num_experts of the dense FLOPs, whatever the capacity."""
    m, _ = _moe_module("mixtral")
    for factor in (None, 1.0, 2.0):
        g = _moe_graph("mixtral", m, 4, 16, capacity_factor=factor)
        dense = 2 * 4 * 16 * 8 * (2 * 24 * 32 + 24 * 32)
        assert g.node_flops("experts") == dense * 2 // 8


def test_router_refuses_bad_attributes():
    b = GraphBuilder("r")
    x, w = b.input("x", (2, 4, 8)), b.param("w", (6, 8))
    with pytest.raises(IRError, match="k=7 is not in"):
        b.op("moe_router", x, w, k=7)
    with pytest.raises(IRError, match="n_group=4"):
        b.op("moe_router", x, w, k=2, n_group=4)
    with pytest.raises(IRError, match="score='relu'"):
        b.op("moe_router", x, w, k=2, score="relu")
    with pytest.raises(IRError, match="capacity"):
        b.op("moe_dispatch_grouped", x, b.op("moe_router", x, w, k=2), capacity=0)


# --- MLA ----------------------------------------------------------------------------------


def _mla_module(**over):
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )  # fmt: skip

    cfg = transformers.DeepseekV3Config(**{**TINY_V3, **over})
    cfg._attn_implementation = "eager"
    return (
        _randomize(DeepseekV3Attention(cfg, layer_idx=0)).eval(),
        DeepseekV3RotaryEmbedding(cfg),
        cfg,
    )


@pytest.mark.parametrize("over", [{}, {"rope_interleave": False}, {"q_lora_rank": None},
                                  {"rope_parameters": {"rope_type": "yarn", "factor": 40.0,
                                   "mscale_all_dim": 1.0, "rope_theta": 10000.0,
                                   "original_max_position_embeddings": 64}}],
                         ids=["v3", "no-interleave", "no-q-lora", "yarn"])  # fmt: skip
def test_mla_equals_transformers(over):
    m, rotary, cfg = _mla_module(**over)
    batch, seq = 2, 7
    x = torch.randn(batch, seq, 32, generator=torch.Generator().manual_seed(2),
                    dtype=torch.float64)  # fmt: skip
    pos = torch.arange(seq)[None].expand(batch, seq)
    cos, sin = (t.double() for t in rotary(x, pos))
    mask = torch.full((seq, seq), float("-inf"), dtype=torch.float64).triu(1)
    mask = mask[None, None].expand(batch, 1, seq, seq)
    spec = DeepSeekSpec.from_hf(cfg).mla()
    assert spec.scaling == pytest.approx(m.scaling, rel=1e-12)
    b = GraphBuilder("mla", dtype="fp32")
    xin = b.input("x", (batch, seq, 32))
    c, s = b.input("cos", (batch, seq, 4)), b.input("sin", (batch, seq, 4))
    p = {k: b.param(k, tuple(v.shape)) for k, v in m.named_parameters()}
    g = b.build([emit_mla(BuilderEmitter(b), xin, spec, p, c, s)])
    assert g.num_params() == sum(q.numel() for q in m.parameters())
    with torch.no_grad():
        want = m(x, (cos, sin), mask)[0].numpy()
    inputs = {"x": x.numpy(), "cos": cos.numpy(), "sin": sin.numpy(), **_weights(m)}
    got = reference(g, inputs)[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert _matmul_flops(g) == _torch_flops(lambda: m(x, (cos, sin), mask))


def test_mla_refuses_mismatched_inputs():
    b = GraphBuilder("mla")
    q, ckv = b.input("q", (1, 4, 2, 12)), b.input("ckv", (1, 4, 20))
    cos = b.input("cos", (1, 4, 4))
    with pytest.raises(IRError, match="nope=6"):
        b.op("mla_attention", q, ckv, b.param("n", (16,)), b.param("w", (2, 16, 16)), cos, cos,
             nope=6, scaling=0.1)  # fmt: skip


# --- a whole DeepSeek-V3 ------------------------------------------------------------------


def test_tiny_deepseek_v3_loss_equals_transformers():
    cfg = transformers.DeepseekV3Config(**TINY_V3)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    m = _randomize(transformers.AutoModelForCausalLM.from_config(cfg)).eval()
    with torch.no_grad():  # a non-zero choice bias, so the test sees it used
        for layer in m.model.layers[1:]:
            layer.mlp.gate.e_score_correction_bias.copy_(torch.linspace(-0.1, 0.1, 8))
    batch, seq = 2, 8
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 128, (batch, seq), generator=gen)
    labels = torch.randint(0, 128, (batch, seq), generator=gen)
    g = build_deepseek(DeepSeekSpec.from_hf(cfg), batch, seq, dtype="fp32")
    assert g.num_params() == sum(p.numel() for p in m.parameters())
    assert {n.name for n in g.parameters} == {k for k, _ in m.named_parameters()}
    with torch.no_grad():
        logits = m(tokens, use_cache=False).logits
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, 128), labels.reshape(-1))
        pos = torch.arange(seq)[None].expand(batch, seq)
        cos, sin = m.model.rotary_emb(logits, pos)
    inputs = {"tokens": tokens.numpy(), "labels": labels.numpy(), "cos": cos.double().numpy(),
              "sin": sin.double().numpy(), **_weights(m)}  # fmt: skip
    for layer in range(1, 2):
        key = f"model.layers.{layer}.mlp.gate.e_score_correction_bias"
        inputs[key] = m.model.layers[layer].mlp.gate.e_score_correction_bias.numpy()
    got = reference(g, inputs)["loss"]
    assert abs(float(got) - float(want)) < ATOL
    assert _matmul_flops(g) == _torch_flops(lambda: m(tokens, use_cache=False))


def test_deepseek_v3_full_size_parameters_exact():
    """The published DeepSeek-V3 (transformers' default config, 671B without the MTP
    module) built from the first-class ops has exactly the meta-device model's parameters."""
    cfg = transformers.DeepseekV3Config()
    with torch.device("meta"):
        m = transformers.AutoModelForCausalLM.from_config(cfg)
    g = build_deepseek(DeepSeekSpec.from_hf(cfg), batch=1, seq=16)
    assert g.num_params() == sum(p.numel() for p in m.parameters()) == 671_026_404_352


def test_deepseek_spec_names_missing_fields():
    with pytest.raises(ex.models.ModelConfigError, match="DeepSeek config"):
        DeepSeekSpec.from_hf({"hidden_size": 8})


# --- properties of the grouped dispatch and combine --------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True)
@given(g=st.integers(1, 3), s=st.integers(1, 9), e=st.integers(1, 6), k=st.integers(1, 3),
       cap=st.integers(1, 9), seed=st.integers(0, 2**16))  # fmt: skip
def test_dispatch_then_combine_is_the_weighted_sum_of_kept_pairs(g, s, e, k, cap, seed):
    """combine(dispatch(x)) = sum over the kept (token, expert) pairs of weight x token, where
    a pair is kept when fewer than ``cap`` earlier tokens of its group chose that expert."""
    k = min(k, e)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((g, s, 5))
    gate = route(rng.standard_normal((g, s, e)), k=k)
    b = GraphBuilder("p")
    xi, gi = b.input("x", x.shape), b.input("gate", gate.shape)
    y = b.op("moe_combine_grouped", b.op("moe_dispatch_grouped", xi, gi, capacity=cap), gi, k=k)
    got = b.build([y]).run({"x": x, "gate": gate})[y]
    want = np.zeros_like(x)
    for gg in range(g):
        used = np.zeros(e, dtype=int)
        for t in range(s):
            for ex_ in np.nonzero(gate[gg, t])[0]:
                if used[ex_] < cap:
                    used[ex_] += 1
                    want[gg, t] += gate[gg, t, ex_] * x[gg, t]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    assert (np.count_nonzero(gate, axis=-1) == k).all()


def test_moe_with_exact_gelu_equals_transformers():
    """hidden_act='gelu' is torch's exact (erf) GELU, in the experts and the shared expert."""
    import importlib

    mod = importlib.import_module("transformers.models.qwen2_moe.modeling_qwen2_moe")
    cfg = transformers.Qwen2MoeConfig(hidden_size=32, num_experts=4, num_experts_per_tok=2,
                                      moe_intermediate_size=8, shared_expert_intermediate_size=16,
                                      hidden_act="gelu")  # fmt: skip
    cfg._experts_implementation = "eager"
    m = _randomize(mod.Qwen2MoeSparseMoeBlock(cfg)).eval()
    assert moe_spec_of(m).act == "gelu_erf"
    g = _moe_graph("qwen2_moe", m, 2, 5)
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    with torch.no_grad():
        want = m(x).numpy()
    got = reference(g, {"x": x.numpy(), **_weights(m)})[g.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
