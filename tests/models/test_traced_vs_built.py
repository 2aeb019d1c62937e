"""A traced transformers model and the builder's graph of the same zoo
config agree. LLaMA and GPT families, at small widths (2 layers, hidden 512).

What makes them agree is what is right for a planner on both sides: the causal mask that
transformers builds from shapes is computed at trace time and becomes one ``causal_mask``
op (`explorer.models.torch_import.constants`); the loss reads the logits unflattened;
the builders rotate q and k with ``rope`` ops as LLaMA does and repeat grouped key/value
heads as ``repeat_kv`` does; transposes and expands are views that move no data
(``OpDef.view``)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import explorer as ex  # noqa: E402
from explorer.ir import OpGroup  # noqa: E402


def hf_config_of(cfg: ex.models.ModelConfig) -> dict:
    """The transformers config.json of a zoo config (LLaMA: RMSNorm/SwiGLU/rope; GPT-2)."""
    if cfg.norm == "rmsnorm":
        return {
            "model_type": "llama", "hidden_size": cfg.hidden_size,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.kv_heads, "intermediate_size": cfg.ffn,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len,
            "tie_word_embeddings": cfg.tied_embeddings, "attention_bias": cfg.bias,
        }  # fmt: skip
    return {
        "model_type": "gpt2", "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers,
        "n_head": cfg.num_heads, "n_inner": cfg.ffn, "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_seq_len, "tie_word_embeddings": cfg.tied_embeddings,
    }  # fmt: skip


def contraction_flops(graph) -> int:
    return sum(
        graph.node_flops(n.name) for n in graph.ops if graph.group(n.name) is OpGroup.CONTRACTION
    )


BATCH = 4  # divisible by every mesh below (see test_plan_cost_close)
CASES = {
    "llama2-7b": {"num_kv_heads": None},
    "llama3-8b": {"num_kv_heads": 2},
    "gpt2": {},
    "gpt3-1.3b": {},
}


@pytest.fixture(scope="module", params=sorted(CASES))
def pair(request):
    base = ex.models.load(request.param)
    cfg = base.replace(hidden_size=512, num_layers=2, num_heads=8, ffn_hidden_size=1536,
                       vocab_size=1024, max_seq_len=1024, head_dim=None,
                       **CASES[request.param])  # fmt: skip
    built = ex.models.build(cfg, batch=BATCH, seq=512)
    traced = ex.models.from_hf(hf_config_of(cfg), batch=BATCH, seq=512, dtype=cfg.dtype,
                               labels=True)  # fmt: skip
    return built, traced


def test_parameters_exact(pair):
    built, traced = pair
    assert traced.num_params() == built.num_params()


def test_contraction_flops_exact(pair):
    built, traced = pair
    assert contraction_flops(traced) == contraction_flops(built)


@pytest.mark.parametrize("axes", [{"dp": 4}, {"dp": 2, "tp": 2}, {"dp": 2, "tp": 4}],
                         ids=["dp4", "dp2tp2", "dp2tp4"])  # fmt: skip
def test_plan_cost_within_one_percent(pair, axes):
    """Measured (batch 4): traced/built - 1 is +0.04 to +0.05% (GPT-3 1.3B shape), +0.5%
    (LLaMA 2 and 3 shapes: transformers computes the rotary cos/sin tables in the forward
    and reshapes them per layer, the builders take them as inputs) and 0 to +0.3% (GPT-2
    shape). At batch 2 on 4 devices
    GPT-2 is +1.6%: transformers shifts the labels inside the forward (pad and slice along
    the sequence), which a sequence split of the loss cannot follow, and a batch of 2
    does not split 4 ways; the builders take shifted labels."""
    built, traced = pair
    mesh = ex.Mesh(axes, hardware=ex.hardware.load("a100-80g"))
    cb = ex.search(built, mesh, method="dynamic_programming").cost.total
    ct = ex.search(traced, mesh, method="dynamic_programming").cost.total
    assert abs(ct / cb - 1) <= 0.01


def test_shape_only_mask_is_one_causal_mask_op(pair):
    """The mask transformers builds from arange/compare/where is computed at trace time:
    one ``causal_mask`` op per layer, as in the built graph, and none of the ops that
    built it (they are reported as folded)."""
    built, traced = pair
    count = lambda g, op: sum(n.op == op for n in g.ops)  # noqa: E731
    assert count(traced, "causal_mask") == count(built, "causal_mask") == 2
    for op in ("where", "eq", "le", "logical_and", "opaque"):
        assert count(traced, op) == 0, op
    assert any("shape-only ops computed at trace time" in n for n in traced.report.notes)


def test_rope_in_both(pair):
    """LLaMA rotates q and k in every layer, traced (fused) and built alike."""
    built, traced = pair
    n_rope = sum(n.op == "rope" for n in built.ops)
    assert n_rope == sum(n.op == "rope" for n in traced.ops)
    assert n_rope == (4 if traced.report.module == "LlamaForCausalLM" else 0)


def test_views_move_no_data(pair):
    """Head transposes (and the expands of grouped-query heads) are views in both graphs;
    a reshape keeps its bytes (it copies when its input is not contiguous)."""
    built, traced = pair
    for g in (built, traced):
        views = [n.name for n in g.ops if n.op in ("transpose", "expand")]
        assert all(g.node_bytes(v) == (0, 0) for v in views)
        reshapes = [n.name for n in g.ops if n.op == "reshape"]
        assert all(g.node_bytes(r)[1] == g.node(r).type.nbytes for r in reshapes)
    assert any(n.op == "transpose" for n in traced.ops)


def test_loss_reads_unflattened_logits(pair):
    _, traced = pair
    (ce,) = [n for n in traced.ops if n.op == "cross_entropy"]
    assert traced.node(ce.inputs[0]).op == "einsum"  # the lm_head, not a [b*s, V] copy


def test_fused_qkv_is_split_into_blocks(pair):
    """GPT-2's c_attn [h, 3h] becomes three [h, h] weight blocks (tensor-parallel like the
    builders' q, k, v); the parameter count is unchanged (test_parameters_exact)."""
    _, traced = pair
    if traced.report.module != "GPT2LMHeadModel":
        pytest.skip("LLaMA has separate q, k and v weights")
    names = [n.name for n in traced.parameters if n.scope == "transformer.h.0.attn.c_attn"]
    assert sorted(names) == sorted(
        f"transformer.h.0.attn.c_attn.{w}[{a}:{a + 512}]" for w in ("weight", "bias")
        for a in (0, 512, 1024)
    )  # fmt: skip
    assert not any(n.op == "slice" for n in traced.in_scope("transformer.h.0.attn"))
