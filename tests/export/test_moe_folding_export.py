"""Folded expert layouts exported: Megatron-LM arguments, DeepSpeed's refusal, and one JAX
mesh holding the attention's and the experts' axes (`explorer.export.folding`)."""

from __future__ import annotations

import pytest

from explorer.export import ExportError, deepspeed_args, deepspeed_config, megatron_args
from explorer.export.folding import EXPERT_WEIGHT_SPECS, folded_mesh
from explorer.training import ParallelConfig
from explorer.training.step_model.placement import expert_ranks, stage_ranks

QWEN3_LAYOUT = ParallelConfig(dp=16, tp=2, pp=8, ep=32, etp=1, sp=True)


def test_megatron_args_emit_the_folded_layout():
    got = " ".join(megatron_args(QWEN3_LAYOUT))
    assert got.startswith(
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 --sequence-parallel "
        "--expert-model-parallel-size 32 --expert-tensor-parallel-size 1 "
    )
    # unfolded: etp follows tp, Megatron-Core's default, and no flag is written
    old = " ".join(megatron_args(ParallelConfig(dp=8, tp=2, ep=4)))
    assert "--expert-model-parallel-size 4" in old and "expert-tensor" not in old
    assert "--expert-tensor-parallel-size 4" in " ".join(
        megatron_args(ParallelConfig(dp=2, tp=2, ep=1, etp=4))
    )


def test_deepspeed_refuses_a_folded_layout_and_says_why():
    for export in (deepspeed_args, lambda c: deepspeed_config(c, global_batch=32)):
        with pytest.raises(ExportError) as e:
            export(QWEN3_LAYOUT)
        for w in ("ep=32", "dp=16", "ep dividing dp", "megatron_args"):
            assert w in str(e.value)
    assert deepspeed_args(ParallelConfig(dp=8, tp=2, ep=4))  # unfolded: as before


@pytest.mark.parametrize(
    "par",
    [
        QWEN3_LAYOUT,
        ParallelConfig(dp=4, tp=2, ep=2),
        ParallelConfig(dp=4, tp=2, cp=2, ep=2),
        ParallelConfig(dp=2, tp=4, cp=2, ep=8, etp=2),
        ParallelConfig(dp=8, tp=1, ep=2, etp=2),
    ],
    ids=str,
)
def test_one_jax_mesh_holds_both_layouts(par):
    """The folded mesh's groups along each logical axis are the step model's: the
    attention's tp and replica groups (`stage_ranks`) and the experts' (`expert_ranks`)."""
    f = folded_mesh(par)
    n = par.tp * par.cp * par.dp
    assert f.mesh.size == n
    stage = stage_ranks(par)[0] - stage_ranks(par)[0].min()
    experts = expert_ranks(par)[0] - expert_ranks(par)[0].min()
    assert sorted(f.groups("tp")) == sorted(tuple(sorted(r)) for r in stage.tolist())
    ep_groups = experts.transpose(0, 2, 1).reshape(-1, par.ep)
    assert sorted(f.groups("ep")) == sorted(tuple(sorted(g)) for g in ep_groups.tolist())
    etp_groups = experts.reshape(-1, par.expert_tp)
    assert sorted(f.groups("etp")) == sorted(tuple(sorted(g)) for g in etp_groups.tolist())
    for name, dims in EXPERT_WEIGHT_SPECS.items():
        assert len(f.spec(*dims)) == 3, name


def test_qwen3_layout_specs():
    f = folded_mesh(QWEN3_LAYOUT)
    assert f.mesh.axes == (("dp_ep", 16), ("tp_ep", 2))
    assert f.spec(*EXPERT_WEIGHT_SPECS["gate_up"]) == (("dp_ep", "tp_ep"), None, None)
    assert f.spec("dp", None, "tp") == (("dp_ep",), None, ("tp_ep",))


def test_strides_that_do_not_nest_have_no_single_mesh():
    par = ParallelConfig(dp=6, tp=2, ep=2, etp=3)
    with pytest.raises(ExportError) as e:
        folded_mesh(par)
    for w in ("2 does not divide 3", "etp", "jax.sharding.Mesh"):
        assert w in str(e.value)
    with pytest.raises(ExportError, match="unknown logical axis 'xp'"):
        folded_mesh(QWEN3_LAYOUT).spec("xp")
    with pytest.raises(ExportError, match="expected a ParallelConfig"):
        folded_mesh("tp2")
