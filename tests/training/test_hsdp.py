"""Hybrid sharded data parallelism (HSDP, ``ParallelConfig.dp_shard``): ZeRO shards over
``dp_shard * cp`` devices, its collectives run in that group, and the ``dp_replicate``
copies of a shard all-reduce it once a step; ``dp_shard = dp`` is plain ZeRO exactly."""

from __future__ import annotations

import pytest

import explorer as ex
from explorer.training import ParallelConfigError, TrainingParams
from explorer.training.calibration.published import published_runs
from explorer.training.simulate import estimate
from explorer.training.step_model.model import StepModel
from explorer.training.step_model.terms import dp, zero

HW = ex.hardware.load("a100-80g")  # 8 chips a node
GPT = ex.models.load("gpt3-1.3b")


def _step(par: ex.ParallelConfig, gb: int) -> StepModel:
    return StepModel(GPT, par, HW, gb, 2048, TrainingParams())


# --- configuration ------------------------------------------------------------------------
def test_replicate_degree_and_shard_group():
    par = ex.ParallelConfig(dp=64, cp=2, zero=3, dp_shard=16)
    assert (par.shard_degree, par.dp_replicate, par.shard_replicas) == (16, 4, 32)
    assert par.weight_replicas == 128  # gradients still reduced over every replica
    assert "hsdp16" in str(par)


def test_text_form_round_trips_through_the_config_parser():
    from explorer.training.planning.diff import parse_config

    par = ex.ParallelConfig(dp=512, zero=3, dp_shard=128, microbatch_size=2)
    assert parse_config(str(par))["dp_shard"] == 128
    assert ex.ParallelConfig(**parse_config(str(par))) == par


def test_dp_shard_equal_to_dp_is_plain_zero():
    par = ex.ParallelConfig(dp=16, zero=3, dp_shard=16)
    assert par.dp_shard is None and par == ex.ParallelConfig(dp=16, zero=3)
    assert (par.dp_replicate, par.shard_replicas) == (1, 16)
    assert "hsdp" not in str(par)


@pytest.mark.parametrize(
    "kw, words",
    [
        (dict(dp=16, zero=3, dp_shard=5), ("dp_shard=5", "does not divide dp=16", "divisors")),
        (dict(dp=16, zero=0, dp_shard=4), ("dp_shard=4", "zero=0", "set zero")),
        (dict(dp=16, zero=3, dp_shard=0), ("dp_shard=0", "int >= 1")),
        (dict(dp=16, zero=3, dp_shard=4.0), ("dp_shard=4.0", "int >= 1")),
        (dict(dp=16, ep=8, zero=1, dp_shard=4), ("dp_shard=4", "multiple of ep=8", "multiples")),
    ],
)
def test_bad_dp_shard_is_refused_with_value_reason_and_fix(kw, words):
    with pytest.raises(ParallelConfigError) as e:
        ex.ParallelConfig(**kw)
    for w in words:
        assert w in str(e.value)


# --- dp_shard = dp: today's numbers -------------------------------------------------------
@pytest.mark.parametrize(
    "kw",
    [
        dict(dp=32, zero=3),
        dict(dp=16, zero=1),
        dict(dp=8, tp=2, zero=2),
        dict(dp=4, tp=2, cp=2, zero=3),
        dict(dp=16, zero=3, recompute="full"),
    ],
)
def test_split_mesh_without_replicas_prices_as_the_step_models_mesh(kw):
    """The shard mesh with a ``dp_replicate`` axis of 1 gives the same collective seconds
    and bytes as the step model's own mesh, on which plain ZeRO runs."""
    s = _step(ex.ParallelConfig(**kw), 64)
    split = zero._split_dp(s.mesh, 1)
    assert split.axis_names != s.mesh.axis_names  # a real second mesh
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        assert split.collective_time(kind, 3e8, zero.AXES) == s.collective_s(kind, 3e8, zero.AXES)
        assert split.collective_bytes(kind, 3e8, zero.AXES) == s.mesh.collective_bytes(
            kind, 3e8, zero.AXES
        )
    assert zero.replicate_s(s, 1e9) == 0.0


# --- HSDP against hand formulas -----------------------------------------------------------
def test_hsdp_model_states_are_sharded_over_the_shard_group():
    s = _step(ex.ParallelConfig(dp=64, zero=3, dp_shard=8), 64)
    st = TrainingParams().state
    p = 1e9
    w, g, o = zero.state_bytes(s, p)
    assert (w, g, o) == pytest.approx(
        (p * st.weight_bytes / 8, p * st.gradient_bytes / 8, p * st.optimizer_bytes / 8)
    )
    assert zero.updated_params(s, p) == pytest.approx(p / 8)


def test_hsdp_memory_equals_the_shard_groups_own_job():
    """dp 64 as 8 replicas of an FSDP group of 8 holds on a device what dp 8 holds: the
    same shards and the same activations (same microbatches per replica)."""
    hsdp = estimate(GPT, ex.ParallelConfig(dp=64, zero=3, dp_shard=8), HW, 64 * 4, 2048)
    alone = estimate(GPT, ex.ParallelConfig(dp=8, zero=3), HW, 8 * 4, 2048)
    whole = estimate(GPT, ex.ParallelConfig(dp=64, zero=3), HW, 64 * 4, 2048)
    assert hsdp.memory.total == pytest.approx(alone.memory.total, rel=1e-12)
    assert hsdp.memory.total > whole.memory.total  # sharded 8 ways, not 64


def test_hsdp_bytes_per_collective():
    n, r, m = 8, 4, 4  # shard group, replicas, microbatches
    s = _step(ex.ParallelConfig(dp=n * r, zero=3, dp_shard=n), n * r * m)
    p = 1e9
    gb_ = zero.reduced_gradient_bytes(s)
    shard_rs = p * gb_ * (n - 1) / n  # ring reduce-scatter in the shard group, per microbatch
    replicate_ar = 2 * (p * gb_ / n) * (r - 1) / r  # ring all-reduce of the shard over r
    assert dp.comm_bytes(s, p) == pytest.approx(m * shard_rs + replicate_ar)
    gathers = 2 * m * p * zero.gathered_weight_bytes(s) * (n - 1) / n  # forward + backward
    assert zero.comm_bytes(s, p) == pytest.approx(gathers)


def test_hsdp_collectives_run_in_the_shard_group_and_replicas_cross_nodes():
    """The gathers and reduce-scatters of dp 32 hsdp 8 are those of the dp 8 job (one
    node, NVLink); the replicas' all-reduce crosses the inter-node level and is priced."""
    hsdp = _step(ex.ParallelConfig(dp=32, zero=3, dp_shard=8), 32)
    alone = _step(ex.ParallelConfig(dp=8, zero=3), 8)
    whole = _step(ex.ParallelConfig(dp=32, zero=3), 32)
    p = 5e7
    assert zero.gather_s(hsdp, p, 1) == pytest.approx(zero.gather_s(alone, p, 1), rel=1e-12)
    assert zero.reduce_scatter_s(hsdp, p, 1) == pytest.approx(
        zero.reduce_scatter_s(alone, p, 1), rel=1e-12
    )
    assert zero.gather_s(hsdp, p, 1) < zero.gather_s(whole, p, 1)  # no inter-node hop
    assert zero.ring_latency_s(hsdp) == pytest.approx(7 * 5e-6)  # 7 NVLink hops
    mesh = zero.shard_mesh(hsdp)
    assert mesh.levels(zero.REPLICATE_AXES) != mesh.levels(("dp",))
    assert zero.replicate_s(hsdp, p) > 0
    assert dp.tail_s(hsdp, p) == pytest.approx(
        zero.replicate_s(hsdp, p) * (1 - hsdp.tparams.cost.grad_comm_overlap)
    )
    assert dp.tail_s(alone, p) == 0.0  # ZeRO-3 alone: no once-a-step reduction


def test_hsdp_zero1_reduce_scatters_in_the_group_and_all_reduces_the_shard():
    hsdp = _step(ex.ParallelConfig(dp=32, zero=1, dp_shard=8), 32)
    alone = _step(ex.ParallelConfig(dp=8, zero=1), 8)
    p = 5e7
    assert dp.tail_s(hsdp, p) == pytest.approx(
        dp.tail_s(alone, p) + zero.replicate_s(hsdp, p) * (1 - hsdp.tparams.cost.grad_comm_overlap)
    )
    assert zero.tail_gather_s(hsdp, p) == pytest.approx(zero.tail_gather_s(alone, p))


# --- published rows -----------------------------------------------------------------------
def test_maxtext_rows_read_their_sharding_column_as_hsdp():
    rows = [r for r in published_runs("dgxc_2411_h100") if r.stack == "maxtext"]
    assert len(rows) == 12
    for r in rows:
        gpus = r.config.devices
        if gpus > 256:  # "JAX FSDP 128 x DP 4/8/16"
            assert r.config.dp_shard == 128 and r.config.dp_replicate == gpus // 128
            assert "HSDP: dp_shard 128" in r.source
        else:  # "JAX FSDP n x DP 1": plain FSDP over all of dp
            assert r.config.dp_shard is None and r.config.dp_replicate == 1


# --- exports and rank map -----------------------------------------------------------------
def test_megatron_args_name_the_optimizer_instances_and_deepspeed_refuses():
    from explorer.export.launch_args import deepspeed_args, deepspeed_config, megatron_args

    hsdp = ex.ParallelConfig(dp=16, tp=2, zero=3, dp_shard=4)
    args = megatron_args(hsdp)
    i = args.index("--num-distributed-optimizer-instances")
    assert args[i + 1] == "4"
    assert "--num-distributed-optimizer-instances" not in megatron_args(hsdp.replace(dp_shard=None))
    for export in (deepspeed_args, lambda c: deepspeed_config(c, global_batch=16)):
        with pytest.raises(ex.ExplorerError, match="dp_shard=4 of dp=16"):
            export(hsdp)


def test_rank_map_groups_follow_the_shard_mesh():
    from explorer.teach.ranks import RankLayout, rank_map

    m = rank_map(RankLayout.from_config(ex.ParallelConfig(dp=8, tp=2, zero=3, dp_shard=4)))
    assert m.groups["fsdp"][0] == (0, 2, 4, 6)  # dp_shard ranks inside, tp innermost
    assert m.groups["replicate"][0] == (0, 8)  # the copies of a shard, outermost
    assert RankLayout.from_config(ex.ParallelConfig(dp=8, zero=3)).dp_replicate == 1
