"""MoE parallel folding (Megatron-Core; Liu et al. 2025, arXiv 2504.14960): the expert
layers of a pipeline stage on their own mesh ``etp x ep x edp`` over the attention's
``tp x cp x dp`` devices, so ``ep`` need not divide ``dp``.

Oracles: Megatron-Core's rank generator (``etp`` innermost, then ``ep``, then ``edp``, within
``pp``; ``edp = world / (etp * ep * pp)``, ``etp`` defaulting to ``tp``), written out by hand
for small layouts; the unfolded layouts' all-to-all seconds and bytes pinned on main before
folding existed (commit f3da458), independent of `TrainingParams` (seconds times the
bandwidth efficiency: the mesh's own figure).
"""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.hardware import Mesh
from explorer.models import from_hf_config
from explorer.training import ParallelConfig, ParallelConfigError, TrainingParams
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.placement import (
    expert_mesh,
    expert_mesh_order,
    expert_ranks,
    mesh_order,
    stage_ranks,
)
from explorer.training.step_model.terms import ep as ep_terms

#: Qwen3-235B-A22B's config.json (Hugging Face, Qwen/Qwen3-235B-A22B)
QWEN3_235B = dict(
    model_type="qwen3_moe", hidden_size=4096, num_hidden_layers=94, num_attention_heads=64,
    num_key_value_heads=4, head_dim=128, intermediate_size=12288, moe_intermediate_size=1536,
    num_experts=128, num_experts_per_tok=8, vocab_size=151936, max_position_embeddings=40960,
    rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, hidden_act="silu",
    decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True, attention_bias=False,
)  # fmt: skip

#: the published layout: TP2 PP8 EP32 on 256 GPUs (dp 16), experts whole (ETP1)
QWEN3_LAYOUT = ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1, sp=True)


def _step(cfg, par, hardware="h100-sxm", gb=8, seq=256):
    return StepModel(cfg, par, ex.hardware.load(hardware), gb, seq, TrainingParams())


# ----- the configuration -------------------------------------------------------------------
def test_etp_defaults_to_tp_and_unfolded_layouts_keep_their_meaning():
    old = ParallelConfig(dp=8, tp=2, ep=4)
    assert (old.etp, old.expert_tp, old.edp, old.experts_folded) == (None, 2, 2, False)
    assert ParallelConfig(dp=8, tp=2, ep=4, etp=2) == old  # one spelling per layout
    assert str(old) == "dp8 x tp2 x pp1 ep4, mb1, 1f1b, zero0, recompute none"
    assert mesh_order(old) == {"pp": 1, "dp": 2, "ep": 4, "cp": 1, "tp": 2}
    assert old.replace(etp=1).experts_folded


def test_qwen3_layout_is_accepted():
    par = QWEN3_LAYOUT
    assert (par.devices, par.edp, par.expert_tp, par.experts_folded) == (256, 1, 1, True)
    assert "ep32 etp1" in str(par)
    assert expert_mesh_order(par) == {"pp": 8, "edp": 1, "ep": 32, "etp": 1}
    assert mesh_order(par) == {"pp": 8, "dp": 16, "ep": 1, "cp": 1, "tp": 2}


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(dp=16, tp=2, pp=8, ep=32), ["ep=32", "dp=16", "tp=2", "set etp=1", "folding"]),
        (dict(dp=4, ep=3), ["ep=3", "dp=4", "divisors of 4"]),
        (dict(dp=4, tp=2, etp=3), ["etp=3", "8 devices", "divisors of 8"]),
        (dict(dp=4, tp=2, ep=8, etp=2), ["etp x ep = 2 x ep=8 = 16", "divisors of 4"]),
        (dict(dp=4, etp=0), ["etp=0", ">= 1"]),
    ],
)
def test_bad_folds_name_value_reason_fix(kwargs, words):
    with pytest.raises(ParallelConfigError) as e:
        ParallelConfig(**kwargs)
    for w in words:
        assert w in str(e.value)


# ----- placement: Megatron-Core's expert rank order ---------------------------------------
def test_expert_ranks_follow_megatron_core_rank_generator():
    # tp2 x dp4 on one stage, ep4 etp1 (folded): ranks 0-7; ep groups of 4 consecutive
    # ranks (etp innermost = 1), edp 2
    par = ParallelConfig(dp=4, tp=2, ep=4, etp=1)
    assert expert_ranks(par)[0, :, :, 0].tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # etp2 ep2 on tp2 x dp4: etp pairs (0,1), ep stride 2, edp stride 4
    par = ParallelConfig(dp=4, tp=2, ep=2, etp=2)  # unfolded (ep divides dp, etp = tp)
    assert expert_ranks(par)[0, :, :, :].tolist() == [[[0, 1], [2, 3]], [[4, 5], [6, 7]]]
    # ep folded across tp and cp: tp2 cp2 dp2, ep8 etp1 -> the whole stage is one ep group
    par = ParallelConfig(dp=2, tp=2, cp=2, pp=2, ep=8, etp=1)
    assert expert_ranks(par)[1, 0, :, 0].tolist() == list(range(8, 16))


LAYOUTS = [
    (ParallelConfig(dp=4, tp=2, pp=2, ep=2), False),
    (ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2), False),
    (ParallelConfig(dp=4, tp=2, pp=2, cp=2, ep=2), True),
    (ParallelConfig(dp=2, tp=2, pp=2, ep=4, etp=1), False),
    (ParallelConfig(dp=4, tp=4, pp=2, ep=4, etp=2), False),
    (ParallelConfig(dp=2, tp=2, pp=2, cp=2, ep=8, etp=1), False),
    (ParallelConfig(dp=4, tp=4, pp=2, ep=2, etp=2), True),
    (ParallelConfig(dp=3, tp=4, pp=2, ep=4, etp=1), True),
]


@pytest.mark.parametrize("par, dp_outermost", LAYOUTS, ids=str)
def test_expert_ranks_are_the_expert_mesh_groups(par, dp_outermost):
    """The all-to-all the step model prices runs over the groups `expert_ranks` lists, and
    the expert mesh covers each stage's devices exactly (the same ranks as the attention)."""
    grid = expert_ranks(par, dp_outermost)
    mesh = Mesh(expert_mesh_order(par, dp_outermost))
    groups = sorted(tuple(sorted(g)) for g in grid.transpose(0, 1, 3, 2).reshape(-1, par.ep))
    assert groups == sorted(mesh.groups(("ep",)))
    stages = stage_ranks(par, dp_outermost)
    for d in range(par.pp):
        assert sorted(grid[d].ravel().tolist()) == sorted(stages[d].ravel().tolist())


def test_across_datacenters_an_expert_group_stays_in_a_replica():
    with pytest.raises(ParallelConfigError, match="inside one data-parallel replica"):
        expert_mesh_order(QWEN3_LAYOUT, dp_outermost=True)


# ----- the step model ---------------------------------------------------------------------
#: (model, config, hardware, seq): all-to-all seconds x bandwidth efficiency and bytes per
#: MoE layer and microbatch, measured on main at f3da458 (before folding)
PINNED = [
    ("mixtral-8x7b", dict(dp=8, tp=8, ep=8, sp=True), "h100-sxm", 1024, 0.00021340032, 3670016.0),
    ("mixtral-8x7b", dict(dp=4, tp=2, pp=2, ep=4), "a100-80g", 1024, 7.194304e-05, 12582912.0),
    (
        "mixtral-8x7b",
        dict(dp=4, tp=2, pp=2, cp=2, ep=2),
        "a100-80g",
        2048,
        3.7962026666666664e-05,
        8388608.0,
    ),
    (
        "mixtral-8x7b",
        dict(dp=8, tp=1, pp=2, ep=8, microbatch_size=2),
        "h100-sxm",
        512,
        0.00013524472888888888,
        29360128.0,
    ),
]


@pytest.mark.parametrize("model, kw, hardware, seq, seconds, sent", PINNED)
def test_unfolded_all_to_all_pinned(model, kw, hardware, seq, seconds, sent):
    par = ParallelConfig(**kw)
    s = _step(ex.models.load(model), par, hardware, gb=par.dp * par.microbatch_size * 2, seq=seq)
    assert not par.experts_folded
    assert s.ep_s * s.tparams.cost.bandwidth_efficiency == pytest.approx(seconds, rel=1e-12)
    assert s.ep_bytes == pytest.approx(sent, rel=1e-12)


def test_folded_mesh_gives_the_unfolded_numbers_on_the_same_ranks():
    # with cp = 1 Megatron-Core's expert mesh (pp, edp, ep, etp) and the unfolded mesh
    # (pp, dp/ep, ep, cp, tp) hold the same ep groups: the same all-to-all
    for kw, hw in (
        (dict(dp=8, tp=8, ep=8), "h100-sxm"),
        (dict(dp=8, tp=2, pp=2, ep=4), "a100-80g"),
    ):
        par = ParallelConfig(**kw)
        s = _step(ex.models.load("mixtral-8x7b"), par, hw)
        mesh = Mesh({"pp": par.pp, "edp": par.edp, "ep": par.ep, "etp": par.tp}, hardware=hw)
        size = 1e8
        assert mesh.collective_time("all-to-all", size, ("ep",)) == s.mesh.collective_time(
            "all-to-all", size, ("ep",)
        )


def test_qwen3_235b_layout_simulates_with_its_all_to_all_on_the_expert_mesh():
    cfg = from_hf_config(QWEN3_235B)
    par = QWEN3_LAYOUT
    s = _step(cfg, par, gb=16 * 4, seq=4096)
    mesh = expert_mesh(par, s.cluster)
    # 32 consecutive ranks: four 8-GPU nodes (the old layout could not hold an ep of 32)
    assert mesh.levels("ep") == ("intra-node", "inter-node")
    size = 1 * 4096 * 8 * cfg.capacity_factor * cfg.hidden_size * 2 / par.tp
    bw = s.tparams.cost.bandwidth_efficiency
    assert s.ep_s == pytest.approx(2 * mesh.collective_time("all-to-all", size, ("ep",)) / bw)
    assert s.ep_bytes == pytest.approx(2 * size * 31 / 32)
    # experts whole on each device (etp 1): 128 / 32 = 4 experts of every layer
    assert ep_terms.layer_params(s.costs.layer, par.tp, par.ep, par.etp) == pytest.approx(
        (s.costs.layer.params - s.costs.layer.expert_params) / 2 + s.costs.layer.expert_params / 32
    )
    r = ex.simulate(cfg, par, "h100-sxm", global_batch=1024, seq=4096)
    assert r.step_time_s > 0 and dict(r.comm_bytes)["ep"] > 0
    # the same job with experts carved out of dp (ep 16) sends the same bytes per device
    # over a smaller group: the folded one's all-to-all is no cheaper
    unfolded = _step(cfg, par.replace(ep=16, etp=None), gb=16 * 4, seq=4096)
    assert s.ep_s >= unfolded.ep_s


def test_a_folded_job_across_datacenters_keeps_its_experts_in_a_replica():
    # 2048 GPUs on two datacenters: dp outermost, so an expert group (etp x ep) must lie in
    # one replica's tp x cp devices
    cfg = ex.models.load("mixtral-8x7b")
    par = ParallelConfig(dp=256, tp=8, ep=4, etp=2)
    s = _step(cfg, par, "dgx-h100-2dc", gb=256, seq=512)
    mesh = expert_mesh(par, s.cluster)
    assert mesh.axis_names == ("dp", "pp", "edp", "ep", "etp")
    assert mesh.levels("ep") == ("nvlink",) and s.ep_s > 0  # inside one node
    with pytest.raises(ParallelConfigError, match="inside one data-parallel replica"):
        _step(cfg, par.replace(ep=8), "dgx-h100-2dc", gb=256, seq=512)
