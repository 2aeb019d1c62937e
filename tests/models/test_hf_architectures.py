"""31 transformers architectures traced on the meta device.

For each model type: at a tiny size the traced parameter count equals
``sum(p.numel())`` of the transformers model and the traced contraction FLOPs equal
torch's FlopCounterMode on a real CPU forward with eager attention and eager experts (the
oracle counts no sdpa FLOPs on CPU and no grouped_mm experts, so both are switched to
eager there; the trace maps sdpa and grouped_mm to contractions itself); at the default
config, every layer of it (many are published checkpoints: Llama-2-7B, Mistral-7B,
Mixtral-8x7B, GPT-NeoX-20B, GPT-J-6B, Falcon-7B, DeepSeek-V3 671B, BERT-base, T5-small, ...),
the parameter count is exact too; mixed layer types (Gemma 2's alternating sliding
windows, DeepSeek's dense first layers) are all present there.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from explorer.ir import OpGroup  # noqa: E402
from explorer.models import from_hf  # noqa: E402
from explorer.models.hf import hf_model  # noqa: E402

from .hf_cases import (  # noqa: E402
    BATCH,
    MODEL_TYPES,
    SEQ,
    example_inputs,
    meta_model,
    tiny,
    traced,
)


def contraction_flops(graph) -> int:
    return sum(
        graph.node_flops(n.name) for n in graph.ops if graph.group(n.name) is OpGroup.CONTRACTION
    )


def oracle_flops(model_type: str, raw: dict | None = None) -> int:
    """FlopCounterMode of a real forward, eager attention and eager experts.

    ``raw`` is the config dict to build (``tiny(model_type)`` when not given)."""
    from torch.utils.flop_counter import FlopCounterMode

    raw = tiny(model_type) if raw is None else raw
    model, cfg = meta_model(model_type)
    cfg = type(cfg).from_dict({k: v for k, v in raw.items() if k != "model_type"})
    cfg._experts_implementation = "eager"
    torch.manual_seed(0)
    real = type(model)._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    args, kwargs = example_inputs(model_type, cfg)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        real.eval()(*args, **kwargs)
    return counter.get_total_flops()


def test_at_least_30_architectures():
    assert len(set(MODEL_TYPES)) >= 30


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_tiny_params_and_matmul_flops_equal_torch(model_type):
    graph = traced(model_type)
    model, _ = meta_model(model_type)
    assert graph.num_params() == sum(p.numel() for p in model.parameters())
    assert contraction_flops(graph) == oracle_flops(model_type)
    assert graph.report is graph.meta["import_report"]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_default_config_param_count_exact(model_type):
    from transformers import AutoConfig

    raw = AutoConfig.for_model(model_type).to_dict()
    if model_type == "deepseek_v2":  # its default leaves the routed expert count unset
        raw["num_experts_per_tok"] = 6
    raw["model_type"] = model_type
    graph = from_hf(raw, batch=1, seq=4)
    model, _, _ = hf_model(raw)
    assert graph.num_params() == sum(p.numel() for p in model.parameters())


def test_unset_expert_count_is_named():
    from transformers import AutoConfig

    from explorer import ExplorerError

    raw = AutoConfig.for_model("deepseek_v2").to_dict()
    raw["model_type"] = "deepseek_v2"
    assert raw["num_experts_per_tok"] is None
    with pytest.raises(ExplorerError, match="num_experts_per_tok.*positive integer"):
        from_hf(raw, batch=1, seq=4)


def test_dense_llama_has_no_opaque_op_on_the_data_path():
    graph = traced("llama", dtype=None)
    assert graph.report.exact, str(graph.report)
    assert {o.static for o in graph.report.opaque} <= {True}
    # RMSNorm modules are recognised by their code and emitted as one op each
    assert sum(n.op == "rmsnorm" for n in graph.ops) == 2 * 2 + 1


def test_moe_blocks_are_first_class_ops():
    """Mixtral's MoE blocks go through the leaf handlers (`explorer.models.hf_leaves`)."""
    graph = traced("mixtral", dtype=None)
    assert graph.report.exact, str(graph.report)
    assert [p for p, h in graph.report.leaves if h == "moe"] == [
        "model.layers.0.mlp",
        "model.layers.1.mlp",
    ]


def test_unmapped_routing_ops_are_listed_not_dropped(monkeypatch):
    """PhiMoE without its leaf handler (`hf_leaves` maps it to ``moe_router(router=
    "sparsemixer")``): its routing ops stay in the graph as opaque nodes."""
    from explorer.models.torch_import import LEAF_HANDLERS

    monkeypatch.delitem(LEAF_HANDLERS, "PhimoeSparseMoeBlock")
    graph = from_hf(tiny("phimoe"), batch=BATCH, seq=SEQ)  # not `traced`: the importer is patched
    data_path = {o.target for o in graph.report.opaque if not o.static}
    assert "aten.sort.default" in data_path and not graph.report.exact
    for o in graph.report.opaque:
        for name in o.nodes:
            assert graph.node(name).op == "opaque"
    assert sum(n.op == "grouped_mm" for n in graph.ops) == 2 * 2  # gate_up and down per layer
