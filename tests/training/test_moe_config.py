"""ModelConfig describes MLA, shared experts, expert sizes and dense first layers exactly.

Oracles: transformers' models on the meta device (``sum(p.numel())``) for the parameter
counts of DeepSeek-V3, DeepSeek-V2, Qwen3-MoE-235B, Qwen2-MoE-57B and Mixtral (published
widths, layers cut to 5 so that dense and MoE layers both appear), and torch's
FlopCounterMode (eager attention, eager experts) on tiny configs for the matmul FLOPs.
Our own builder's graph is checked against the config's counters (parameters exactly,
contraction FLOPs exactly when every expert's capacity equals its average load).
"""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.ir import OpGroup
from explorer.models import ModelConfig, ModelConfigError, from_hf_config
from explorer.models.config_counts import active_params, forward_flops, layer_params

# Numbers and relations set on the 2021 physics: runs without params use the
# megatron-lm-2021 stack (tests/training/conftest.py).
pytestmark = pytest.mark.usefixtures("stack_2021")

TINY = dict(
    name="tiny-v3", arch="decoder", hidden_size=32, num_layers=3, num_heads=4, vocab_size=128,
    norm="rmsnorm", activation="swiglu", position="rope", tied_embeddings=False, bias=False,
    attention="mla", q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4,
    v_head_dim=8, num_experts=8, experts_top_k=2, moe_intermediate_size=16,
    num_shared_experts=1, first_dense_layers=1, ffn_hidden_size=64,
)  # fmt: skip

#: published widths (from each model's config.json), layers cut to 5
PUBLISHED = {
    "deepseek_v3": ("DeepseekV3Config", {}),
    "deepseek_v2": ("DeepseekV2Config", dict(
        hidden_size=5120, num_attention_heads=128, num_key_value_heads=128,
        intermediate_size=12288, moe_intermediate_size=1536, n_routed_experts=160,
        num_experts_per_tok=6, n_shared_experts=2, first_k_dense_replace=1, q_lora_rank=1536,
        kv_lora_rank=512, vocab_size=102400)),
    "qwen3_moe": ("Qwen3MoeConfig", dict(
        hidden_size=4096, num_attention_heads=64, num_key_value_heads=4, head_dim=128,
        intermediate_size=12288, moe_intermediate_size=1536, num_experts=128,
        num_experts_per_tok=8, vocab_size=151936)),
    "qwen2_moe": ("Qwen2MoeConfig", dict(
        hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
        intermediate_size=18944, moe_intermediate_size=2560,
        shared_expert_intermediate_size=20480, num_experts=64, num_experts_per_tok=8,
        vocab_size=151936)),
    "mixtral": ("MixtralConfig", {}),
}  # fmt: skip


def _contraction_flops(g) -> int:
    return sum(g.node_flops(n.name) for n in g.ops if g.group(n.name) is OpGroup.CONTRACTION)


def test_defaults_keep_old_configs_unchanged():
    cfg = ex.models.load("mixtral-8x7b")
    assert (cfg.attention_kind, cfg.moe_ffn, cfg.shared_ffn, cfg.dense_layers) == (
        "gqa", cfg.ffn, 0, 0)  # fmt: skip
    assert cfg.num_params() == ex.models.build(
        cfg.replace(num_layers=2), seq=16
    ).num_params() + 30 * (sum(layer_params(cfg, 0).values()))
    for name in ex.models.names():
        c = ex.models.load(name)
        c = c.replace(num_layers=min(c.num_layers, 2))
        seq = min(32, c.max_seq_len)
        g = ex.models.build(c, batch=1, seq=seq)
        assert c.num_params() == g.num_params(), name
        if c.arch != "mlp":
            assert forward_flops(c, seq) == _contraction_flops(g), name


def test_built_graph_matches_counters_with_mla_shared_and_dense_layers():
    for kw in ({}, {"q_lora_rank": None}, {"first_dense_layers": 0}, {"first_dense_layers": 9}):
        cfg = ModelConfig(**{**TINY, **kw})
        g = ex.models.build(cfg, batch=2, seq=8)  # 16 tokens x 2 / 8 experts: capacity 4
        assert g.num_params() == cfg.num_params()
        assert _contraction_flops(g) == forward_flops(cfg, 8, 2)
    cfg = ModelConfig(**TINY)
    g = ex.models.build(cfg, batch=1, seq=8)
    assert [s for s in g.scopes(depth=3) if s.startswith("layers.")][:4] == [
        "layers.0.attn", "layers.0.mlp", "layers.1.attn", "layers.1.moe"]  # fmt: skip
    qwen2 = ModelConfig(**{**TINY, "attention": None, "q_lora_rank": None, "kv_lora_rank": None,
                           "qk_nope_head_dim": None, "qk_rope_head_dim": None,
                           "v_head_dim": None, "num_kv_heads": 2, "qkv_bias": True,
                           "qk_norm": True, "shared_expert_size": 24,
                           "shared_expert_gate": True})  # fmt: skip
    g = ex.models.build(qwen2, batch=2, seq=8)
    assert g.num_params() == qwen2.num_params()
    assert _contraction_flops(g) == forward_flops(qwen2, 8, 2)


@pytest.mark.parametrize(
    "kw, needle",
    [
        ({"attention": "mla", "kv_lora_rank": None}, "needs kv_lora_rank"),
        ({"attention": None}, "multi-head latent attention sizes"),
        ({"num_experts": 0}, "set on a dense model"),
        ({"num_shared_experts": 0, "shared_expert_gate": True}, "without shared experts"),
        ({"first_dense_layers": -1}, "expected ints >= 0"),
        ({"bias": True}, "without attention biases"),
        ({"num_kv_heads": 2}, "leave num_kv_heads null"),
        ({"attention": "flash"}, "expected one of 'mha', 'gqa', 'mla'"),
        ({"moe_intermediate_size": 0}, "expected an int > 0"),
    ],
)
def test_bad_extensions_raise_named_errors(kw, needle):
    with pytest.raises(ModelConfigError, match=needle):
        ModelConfig(**{**TINY, **kw})


def test_slices_with_fewer_layers_than_dense_ones_are_all_dense():
    cfg = ModelConfig(**{**TINY, "first_dense_layers": 3, "num_layers": 61})
    one = cfg.replace(num_layers=1)
    assert (one.dense_layers, one.moe_layers) == (1, 0)
    assert (cfg.dense_layers, cfg.moe_layers) == (3, 58)


def test_active_params_of_deepseek_v3_shape():
    cfg = ModelConfig(**TINY)
    layer = layer_params(cfg, 2)
    idle = layer["experts"] * (8 - 2) // 8
    assert active_params(cfg) == cfg.num_params() - 2 * idle


# --- against transformers ---------------------------------------------------------------------


@pytest.mark.parametrize("model_type", sorted(PUBLISHED))
def test_params_equal_transformers_meta_model(model_type):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cls, kw = PUBLISHED[model_type]
    hf = getattr(transformers, cls)(num_hidden_layers=5, **kw)
    cfg = from_hf_config(hf.to_dict(), name=model_type)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf)
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())
    if model_type.startswith("deepseek"):
        assert cfg.is_mla and cfg.dense_layers == (3 if model_type == "deepseek_v3" else 1)


def test_deepseek_v3_whole_model_is_671b():
    transformers = pytest.importorskip("transformers")
    cfg = from_hf_config(transformers.DeepseekV3Config().to_dict(), name="deepseek-v3")
    # transformers' DeepseekV3ForCausalLM (no MTP module); notebook 09 traces the same count
    assert cfg.num_params() == 671_026_404_352
    assert round(active_params(cfg) / 1e9, 1) == 37.6  # "37B activated" (DeepSeek-V3 report)


@pytest.mark.parametrize("model_type", ["deepseek_v3", "deepseek_v2", "qwen2_moe", "qwen3_moe",
                                        "mixtral"])  # fmt: skip
def test_tiny_matmul_flops_equal_flop_counter(model_type):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.models.hf_cases import BATCH, SEQ, tiny
    from tests.models.test_hf_architectures import oracle_flops

    raw = tiny(model_type)
    if model_type == "mixtral":
        raw.pop("num_experts", None)  # transformers' alias of num_local_experts
    cfg = from_hf_config(raw, name=model_type, strict=False)
    assert forward_flops(cfg, SEQ, BATCH) == oracle_flops(model_type, raw)


# --- the training step model -------------------------------------------------------------------

STEP = dict(
    TINY, name="tiny-v3-step", hidden_size=256, num_heads=8, num_layers=8, vocab_size=1024,
    q_lora_rank=128, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
    num_experts=16, experts_top_k=4, moe_intermediate_size=128, first_dense_layers=2,
    ffn_hidden_size=1024, max_seq_len=256,
)  # fmt: skip


def _step(cfg, par, gb=8, seq=256):
    from explorer.training import TrainingParams
    from explorer.training.step_model.model import StepModel

    return StepModel(cfg, par, ex.hardware.load("h100-sxm"), gb, seq, TrainingParams())


def test_step_model_costs_dense_first_layers_as_dense():
    from explorer.training.pipeline.partition import StagePartition
    from explorer.training.step_model.terms import dense

    cfg = ModelConfig(**STEP)
    par = ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2, microbatch_size=2)
    s = _step(cfg, par)
    assert s.dense is not None and s.dense.count == 2
    # the layer costed is a MoE layer, the dense one is the config's dense MLP
    assert s.costs.layer.expert_params == 16 * 3 * 256 * 128
    assert s.costs.layer.params == layer_sum(cfg, 2) and s.dense.layer.params == layer_sum(cfg, 0)
    part = StagePartition((0, 4, 10), 8)  # embed + layers 0-2 | layers 3-7 + head
    assert [dense.dense_in_stage(s, part, g) for g in (0, 1)] == [2, 0]
    assert dense.moe_layers_in(s, part, (0, 1)) == 6
    # stage 0: two dense layers (tp-split) and one MoE layer (experts over tp * ep)
    moe_dev = (layer_sum(cfg, 2) - s.costs.layer.expert_params) / 2 + (
        s.costs.layer.expert_params / 8
    )
    embed = s.embed_params
    assert s.stage_params(part, 0) == pytest.approx(embed + 2 * layer_sum(cfg, 0) / 2 + moe_dev)
    fwd0 = s.stage_compute_s(part, 0)[0]
    base = 3 * s.costs.layer.forward_s + s.costs.embed.forward_s
    assert fwd0 - base == pytest.approx(2 * (s.dense.layer.forward_s - s.costs.layer.forward_s))
    # the all-to-alls run for the MoE layer only
    seg = dict(s.stage_segments(part, 0, None)[0])
    assert seg["ep-comm"] == pytest.approx(s.ep_s)


def layer_sum(cfg, i):
    return sum(layer_params(cfg, i).values())


def test_step_flops_equal_the_whole_built_graph():
    cfg = ModelConfig(**STEP)
    par = ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2, microbatch_size=2)
    s = _step(cfg, par, gb=8, seq=256)
    g = ex.models.build(cfg, batch=2, seq=256)
    model, _ = s.flops()
    factor = 1 + s.tparams.cost.backward_compute_ratio
    assert model == pytest.approx(factor * g.flops() * 8 / 2, rel=1e-12)


def test_simulate_and_plan_a_deepseek_like_model():
    cfg = ModelConfig(**STEP)
    par = ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2, microbatch_size=2)
    r = ex.simulate(cfg, par, "h100-sxm", global_batch=16, seq=256)
    u = ex.simulate(cfg.replace(first_dense_layers=0), par, "h100-sxm", global_batch=16, seq=256)
    assert str(r.partition) == str(u.partition) == "embed+4 | 4+head"
    # stage 0 runs 2 dense + 2 MoE layers: half the all-to-all bytes of 4 MoE layers, and
    # the dense layers' tp-split weights are more per device than the experts' tp*ep share
    assert dict(r.comm_bytes)["ep"] == dict(u.comm_bytes)["ep"] / 2
    assert r.memory_per_device[0].parameters > u.memory_per_device[0].parameters
    assert r.memory_per_device[1].parameters == u.memory_per_device[1].parameters
    plan = ex.plan_training(cfg, 16, "h100-sxm", global_batch=16, seq=256, time_limit_s=120)
    assert plan.config.devices == 16 and plan.sim.fits


def test_expert_gemms_are_timed_as_an_ep_group_runs_them():
    from explorer.training.step_model.kernels import part_times

    cfg = ModelConfig(**STEP)
    one = _step(cfg, ex.ParallelConfig(dp=4, ep=1, tp=2, pp=2, microbatch_size=2))
    four = _step(cfg, ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2, microbatch_size=2))
    by_name = {o.name: o for o in one.costs.layer.kernels}
    experts = [o for o in four.costs.layer.kernels if o.name.endswith((".moe.up", ".moe.down"))]
    assert len(experts) == 2
    for o in experts:  # 16 experts of c rows -> 4 experts of 4c rows: same FLOPs
        base = by_name[o.name]
        assert (o.batch, o.m, o.n, o.k) == (base.batch // 4, base.m * 4, base.n, base.k)
        assert o.batch * o.m * o.n * o.k == base.batch * base.m * base.n * base.k
    p = four.tparams
    delta = (
        part_times(four.costs.layer.kernels, four.cluster.chip, p).forward_s
        - part_times(one.costs.layer.kernels, one.cluster.chip, p).forward_s
    )
    assert four.costs.layer.forward_s - one.costs.layer.forward_s == pytest.approx(delta)


@pytest.mark.parametrize(
    "model_type, change, needle",
    [
        ("deepseek_v3", {"attention_bias": True}, "'attention_bias' is True"),
        ("deepseek_v2", {"moe_layer_freq": 2}, "'moe_layer_freq' is 2"),
        ("deepseek_v3", {"num_key_value_heads": 2}, "expands its latent to all"),
        ("qwen3_moe", {"decoder_sparse_step": 2}, "'decoder_sparse_step' is 2"),
        ("qwen2_moe", {"mlp_only_layers": [0]}, "first_dense_layers"),
        ("qwen3_moe", {"num_experts_per_tok": 0}, "expected an integer > 0"),
    ],
)
def test_moe_readers_refuse_what_they_do_not_model(model_type, change, needle):
    raw = {
        "deepseek_v3": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                            vocab_size=128, intermediate_size=128, kv_lora_rank=16,
                            q_lora_rank=32, qk_nope_head_dim=8, qk_rope_head_dim=8,
                            v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
                            moe_intermediate_size=32),
        "qwen3_moe": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                          vocab_size=128, intermediate_size=128, num_experts=4,
                          num_experts_per_tok=2, moe_intermediate_size=32),
    }  # fmt: skip
    raw["deepseek_v2"], raw["qwen2_moe"] = raw["deepseek_v3"], raw["qwen3_moe"]
    base = {**raw[model_type], "model_type": model_type}
    assert from_hf_config(base).is_moe  # the base reads
    with pytest.raises(ModelConfigError, match=needle):
        from_hf_config({**base, **change})


def test_multi_token_prediction_modules_are_counted_built_and_planned():
    for kw in ({"mtp_layers": 1}, {"mtp_layers": 2, "tied_embeddings": True}):
        cfg = ModelConfig(**{**TINY, **kw})
        g = ex.models.build(cfg, batch=2, seq=8)
        assert g.num_params() == cfg.num_params()
        assert _contraction_flops(g) == forward_flops(cfg, 8, 2)
    base = ModelConfig(**TINY)
    one = base.replace(mtp_layers=1)
    h = base.hidden_size  # one layer like the last (MoE), the [2h, h] projection, 3 norms
    assert one.num_params() - base.num_params() == layer_sum(base, 2) + 2 * h * h + 3 * h
    with pytest.raises(ModelConfigError, match="mtp_layers=-1"):
        base.replace(mtp_layers=-1)
    # the step model: the MTP layer's experts split over tp * ep on the head's stage, and
    # its all-to-alls run there
    from explorer.training.pipeline.partition import StagePartition
    from explorer.training.step_model.terms import dense

    cfg = ModelConfig(**{**STEP, "mtp_layers": 1})
    s0 = _step(cfg.replace(mtp_layers=0), ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2))
    s1 = _step(cfg, ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2))
    part = StagePartition((0, 4, 10), 8)
    experts = s1.costs.head.expert_params
    assert experts == s1.costs.layer.expert_params
    extra = s1.stage_params(part, 1) - s0.stage_params(part, 1)
    mtp_dense = s1.costs.head.params - s0.costs.head.params - experts
    assert extra == pytest.approx(mtp_dense / 2 + experts / 8)
    assert dense.moe_layers_in(s1, part, (1,)) == dense.moe_layers_in(s0, part, (1,)) + 1
    assert s1.stage_params(part, 0) == s0.stage_params(part, 0)


def test_megatron_arguments_describe_mla_and_experts_or_refuse():
    from explorer.export.errors import ExportError
    from explorer.export.launch_args import megatron_args

    cfg = ModelConfig(**{**TINY, "mtp_layers": 1})
    par = ex.ParallelConfig(dp=2, ep=2)
    args = " ".join(megatron_args(par, model=cfg))
    for flag in ("--multi-latent-attention", "--q-lora-rank 16", "--kv-lora-rank 8",
                 "--qk-head-dim 8", "--qk-pos-emb-head-dim 4", "--v-head-dim 8",
                 "--moe-ffn-hidden-size 16", "--moe-shared-expert-intermediate-size 16",
                 "--moe-layer-freq ([0]*1+[1]*2)", "--mtp-num-layers 1"):  # fmt: skip
        assert flag in args, flag
    gated = cfg.replace(num_shared_experts=1, shared_expert_gate=True)
    with pytest.raises(ExportError, match="gates its shared expert"):
        megatron_args(par, model=gated)


def test_activations_scale_with_the_layer_insides():
    from explorer.training.step_model.terms import dense, recompute

    gpt = ex.models.load("gpt3-1.3b")  # multi-head attention, 4h GELU MLP: Korthikanti's 24h
    assert dense.inner_bytes_per_token(gpt) == 24 * gpt.hidden_size
    cfg = ModelConfig(**STEP)
    h, n, f = cfg.hidden_size, cfg.num_heads, cfg.moe_intermediate_size
    mla = 2 * n * (2 * (32 + 16) + 2 * 32) + 4 * (128 + 64) + 2 * 16
    routed = 4 * (4 * h + 6 * f)  # top-4 copies: in, out, gate/up outputs and product
    assert dense.inner_bytes_per_token(cfg) == mla + 8 * 16 + routed + 6 * 128
    par = ex.ParallelConfig(dp=4, ep=4, tp=2, pp=2, microbatch_size=2)
    s = _step(cfg, par)
    base = _step(cfg.replace(first_dense_layers=0), par)  # same terms: every layer scaled
    assert dense.activation_terms(s).split_bytes == pytest.approx(
        24 * dense.inner_bytes_per_token(cfg) / (24 * h)
    )
    full = recompute.layer_act(s, "full")  # the layer input only: no inside kept
    assert full == recompute.layer_act(base, "full")
    assert recompute.layer_act(s, "selective") > 2 * full


def test_qk_norm_attention_rotates_queries_and_keys_and_shards_exactly():
    # Qwen3-style attention (q/k RMSNorm, grouped-query) with rope: one rope op on q and one
    # on k per layer, and a sharded run equals the unsharded one.
    from explorer.models.builders import build
    from explorer.models.config import ModelConfig

    cfg = ModelConfig(
        name="qk-norm-rope", arch="decoder", num_layers=2, hidden_size=64, num_heads=4,
        num_kv_heads=2, vocab_size=128, norm="rmsnorm", activation="swiglu", position="rope",
        tied_embeddings=False, bias=False, qk_norm=True, ffn_hidden_size=128,
    )  # fmt: skip
    g = build(cfg, batch=2, seq=16)
    assert sorted(n.name.rsplit(".", 1)[-1] for n in g.ops if n.op == "rope") == [
        "k_rope", "k_rope", "q_rope", "q_rope",
    ]  # fmt: skip
    mesh = ex.Mesh({"dp": 2, "tp": 2}, hardware=ex.hardware.load("a100-80g"))
    plan = ex.search(g, mesh, method="dynamic_programming")
    report = ex.sharding.verify(g, plan, mesh, rtol=1e-5, atol=1e-6)
    assert report.ok, report
