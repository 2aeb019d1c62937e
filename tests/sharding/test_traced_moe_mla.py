"""SPMD runs of traced transformers models on 8 virtual devices equal torch's eager output.

Tiny LLaMA, Mixtral, Qwen3-MoE, DeepSeek-V2 and DeepSeek-V3 are traced with ``from_torch`` (MoE blocks
and MLA as first-class ops, `explorer.models.hf_leaves`), given seeded float64 weights, and
run sharded by `explorer.sharding.verify` under a searched plan and under a named
expert-parallel plan. The sharded logits equal torch's to 1e-5 (torch runs routers, norms
and softmax in float32 even for a float64 model); the bytes each collective moved equal
the bytes the cost side charged.

The causal mask goes in as a 4-D ``attention_mask`` input: transformers then uses it as
given, instead of building it with ops the importer keeps opaque (packed-sequence checks).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

import explorer as ex
from explorer.models.deepseek import DeepSeekSpec, build_deepseek
from explorer.sharding import assign, node_strategies, verify

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
transformers = pytest.importorskip("transformers", reason="the hf extra is not installed")

ATOL = 1e-5  # logits of magnitude up to ~6 behind two layers of float32 norms/softmax
BATCH, SEQ = 8, 8
MESH = ex.Mesh({"dp": 2, "ep": 4}, hardware=ex.hardware.load("h100-sxm"))

COMMON = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=4)  # fmt: skip
CONFIGS = {
    "llama": ("LlamaConfig", dict(intermediate_size=64, num_key_value_heads=2)),
    "mixtral": ("MixtralConfig", dict(intermediate_size=32, num_local_experts=8,
                                      num_experts_per_tok=2)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(intermediate_size=64, moe_intermediate_size=16,
                                         num_experts=8, num_experts_per_tok=2, head_dim=8)),
    "deepseek_v2": ("DeepseekV2Config", dict(
        intermediate_size=64, moe_intermediate_size=16, q_lora_rank=None, kv_lora_rank=8,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=1, n_group=4,
        topk_group=2, topk_method="group_limited_greedy")),
    "deepseek_v3": ("DeepseekV3Config", dict(
        intermediate_size=64, moe_intermediate_size=16, q_lora_rank=16, kv_lora_rank=8,
        qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, n_routed_experts=8,
        num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1, n_group=4,
        topk_group=2)),
}  # fmt: skip


def _model(case: str):
    cls, kw = CONFIGS[case]
    cfg = getattr(transformers, cls)(**{**COMMON, **kw})
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    m = transformers.AutoModelForCausalLM.from_config(cfg).double().eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, p in m.named_parameters():
            fan_in = p.shape[-1] if p.dim() > 1 else 1
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64) / math.sqrt(fan_in))
            if p.dim() == 1:
                p.add_(1.0)
        for name, buf in m.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.linspace(-0.1, 0.1, buf.numel()))
    return m


def _live(g):
    """The graph without ops nothing reads. DeepSeek-V2's complex rotary table (an opaque
    ``aten.polar``) is dead once the MLA leaf rebuilds cos/sin, but the importer keeps it."""
    live = set(g.outputs)
    for n in reversed(g.nodes):
        if n.name in live:
            live.update(n.inputs)
    nodes = tuple(n for n in g.nodes if n.name in live or n.is_source)
    return ex.ir.Graph(nodes, g.outputs, g.name)


def _traced(case: str):
    """(torch model, traced graph, every input value, torch's logits)."""
    m = _model(case)
    mask = torch.full((SEQ, SEQ), float("-inf"), dtype=torch.float64).triu(1)
    mask = mask[None, None].expand(BATCH, 1, SEQ, SEQ).contiguous()
    ids = torch.randint(0, 128, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
    g = ex.models.from_torch(m, [(BATCH, SEQ)], kwargs={"use_cache": False, "attention_mask": mask})
    with torch.no_grad():
        logits = m(ids, attention_mask=mask, use_cache=False).logits.numpy()
    values = {k: v.detach().numpy() for k, v in m.named_parameters()}
    values.update({k: v.numpy() for k, v in m.named_buffers() if k in g})
    values.update({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    return m, g, {k: v for k, v in values.items() if k in g}, logits


def _ep_names(g) -> dict[str, str]:
    """Expert parallel over ep, data parallel over dp: the MoE ops by hand."""
    names = {}
    for n in g.ops:
        if n.op == "moe_router":
            names[n.name] = "a=dp+ep"
        elif n.op in ("moe_dispatch_grouped", "moe_combine_grouped"):
            names[n.name] = "g=dp+ep"
        elif n.op == "moe_experts":
            names[n.name] = "e=ep,g=dp"
        elif n.op == "mla_attention":
            names[n.name] = "b=dp,n=ep"
    return names


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_traced_model_sharded_equals_torch(case):
    m, g, values, logits = _traced(case)
    assert g.num_params() == sum(p.numel() for p in m.parameters())
    assert g.report.exact, str(g.report)
    g = _live(g)
    plan = ex.search(g, MESH, method="sharding_propagation", params=ex.CostParams())
    plans = [plan.assignment]
    if case != "llama":
        ops = {n.op for n in g.ops}
        assert {"moe_router", "moe_dispatch_grouped", "moe_experts"} <= ops
        assert ("mla_attention" in ops) == case.startswith("deepseek")
        plans.append(assign(g, MESH, _ep_names(g)))
    for assignment in plans:
        report = verify(g, assignment, MESH, inputs=values)
        assert report.ok, str(report)
        (out,) = g.outputs
        np.testing.assert_allclose(report.result.outputs[out], logits, rtol=0, atol=ATOL)
    if case != "llama":  # expert parallelism moved tokens by all-to-all over ep
        kinds = Counter(c.kind.value for c, _ in report.result.collective_log)
        assert kinds["all-to-all"] >= 2, kinds


def test_llama4_moe_block_traced_sharded_equals_torch():
    """Llama 4's MoE block traced alone: transformers runs every expert on every token (the
    weights of the experts not chosen are zero); the ops route each token to its top-k
    experts only, scaled before them, and give the same output and router logits."""
    from transformers.models.llama4.modeling_llama4 import Llama4TextMoe

    cfg = transformers.Llama4TextConfig(hidden_size=32, intermediate_size=16,
                                        num_local_experts=4, num_experts_per_tok=2)  # fmt: skip
    torch.manual_seed(0)
    m = Llama4TextMoe(cfg).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, dtype=torch.float64) / math.sqrt(p.shape[-1]))
    x = torch.randn(BATCH, SEQ, 32, dtype=torch.float64)
    g = ex.models.from_torch(m, [x])
    assert {"moe_router", "moe_dispatch_grouped", "moe_experts"} <= {n.op for n in g.ops}
    assert g.num_params() == sum(p.numel() for p in m.parameters())
    with torch.no_grad():
        want_out, want_logits = (t.numpy() for t in m(x))
    (xin,) = [n.name for n in g.inputs if n.op == "input"]
    values = {xin: x.numpy(), **{k: v.detach().numpy() for k, v in m.named_parameters()}}
    report = verify(g, assign(g, MESH, _ep_names(g)), MESH, inputs=values)
    assert report.ok, str(report)
    out, logits = (report.result.outputs[o] for o in g.outputs)
    np.testing.assert_allclose(out, want_out, rtol=0, atol=ATOL)
    np.testing.assert_allclose(logits, want_logits, rtol=0, atol=ATOL)


# --- the built DeepSeek-V3 graph: each parallelism on its own ------------------------------

SPEC = DeepSeekSpec(vocab_size=128, hidden_size=32, intermediate_size=64,
                    moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=4,
                    q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4,
                    v_head_dim=8, n_routed_experts=8, num_experts_per_tok=2,
                    n_shared_experts=1, first_k_dense_replace=1, n_group=4, topk_group=2)  # fmt: skip


@pytest.fixture(scope="module")
def built():
    return build_deepseek(SPEC, batch=BATCH, seq=SEQ, dtype="fp32")


@pytest.mark.parametrize("names, kind", [
    ({"moe_dispatch_grouped": "g=dp+ep", "moe_experts": "e=ep,g=dp",
      "moe_combine_grouped": "g=dp+ep"}, "all-to-all"),   # expert parallel
    ({"moe_dispatch_grouped": "g=dp,e=ep", "moe_experts": "e=ep,g=dp",
      "moe_combine_grouped": "e=ep,g=dp"}, "all-reduce"),  # experts local, partial combine
    ({"moe_experts": "f=ep"}, "all-reduce"),                # tensor parallel inside experts
    ({"mla_attention": "b=dp,n=ep"}, "all-gather"),          # heads split
], ids=["ep-all-to-all", "ep-partial-combine", "tp-in-experts", "mla-heads"])  # fmt: skip
def test_each_parallelism_of_the_built_graph_verifies(built, names, kind):
    by_node = {n.name: names[n.op] for n in built.ops if n.op in names}
    report = verify(built, assign(built, MESH, by_node), MESH)
    assert report.ok, str(report)
    assert kind in {c.kind.value for c, _ in report.result.collective_log}


def test_hand_rules_keep_routing_dims_whole(built):
    """The router never splits experts; dispatch/combine never split tokens or capacity;
    MLA never splits queries; the experts split experts (ep) and f (tp)."""

    def split_letters(op):
        node = next(n for n in built.ops if n.op == op)
        return {c for s in node_strategies(built, node.name, MESH) for c, _ in s.dim_axes}

    assert split_letters("moe_router") == {"a", "b"}  # batch and sequence of "abd,ed,e->abe"
    assert split_letters("moe_dispatch_grouped") == {"g", "e", "h"}
    assert split_letters("moe_combine_grouped") == {"g", "e", "h"}
    assert split_letters("moe_experts") == {"e", "g", "c", "f", "h"}
    assert split_letters("mla_attention") == {"b", "n"}
