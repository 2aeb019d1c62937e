"""Megatron arguments for uneven pipeline splits: the mimic of Megatron-Core's layer rules
against hand cases, and every emitted split decoded back to the plan's layer counts."""

from __future__ import annotations

import random
import types

import pytest

import explorer as ex
from explorer.export import ExportError, megatron_args
from explorer.export.megatron_split import (
    layout_stage_layers,
    layout_string,
    megatron_stage_layers,
    split_args,
)
from explorer.training.calibration.measured import cluster_with_devices
from explorer.training.pipeline.partition import StagePartition
from explorer.training.simulate import estimate

LLAMA3_SPLIT = (0,) + (1,) * 126 + (0,)  # 126 layers on pp16 x v8, embedding and head alone


def decode(args, pp: int, num_layers: int, mtp_layers: int = 0) -> tuple[int, ...]:
    """The layers per stage a Megatron run with these arguments builds: v as
    megatron/training/arguments.py derives it, then the layer rule."""
    args = list(args)

    def value(flag):
        return int(args[args.index(flag) + 1]) if flag in args else None

    if "--pipeline-model-parallel-layout" in args:
        text = args[args.index("--pipeline-model-parallel-layout") + 1]
        return layout_stage_layers(text, pp, num_layers, mtp_layers)
    v = value("--num-virtual-stages-per-pipeline-rank")
    per_chunk = value("--num-layers-per-virtual-pipeline-stage")
    if per_chunk is not None:
        v = num_layers // pp // per_chunk
    return megatron_stage_layers(
        num_layers, pp, v or 1,
        first=value("--decoder-first-pipeline-num-layers"),
        last=value("--decoder-last-pipeline-num-layers"),
        account_for_embedding="--account-for-embedding-in-pipeline-split" in args,
        account_for_loss="--account-for-loss-in-pipeline-split" in args,
    )  # fmt: skip


# --- the mimic of Megatron-Core's get_num_layers_to_build, by hand ------------------------
def test_default_rule_divides_evenly_or_refuses():
    assert megatron_stage_layers(96, 16, 2) == (3,) * 32  # GPT-3 175B, pp16 x v2
    assert megatron_stage_layers(32, 4) == (8, 8, 8, 8)
    with pytest.raises(ExportError, match="do not divide into pp 16"):
        megatron_stage_layers(126, 16, 8)  # 126 % 16 = 14
    with pytest.raises(ExportError, match="do not divide into v 4"):
        megatron_stage_layers(24, 4, 4)  # 6 layers per rank, 4 chunks


def test_account_for_embedding_and_loss_llama3():
    # (126 + 2) / 16 = 8 per rank, / 8 = 1 per chunk; chunk 0 (rank 0) and chunk 127
    # (rank 15, its last chunk) build one fewer: the embedding and the head alone.
    got = megatron_stage_layers(126, 16, 8, account_for_embedding=True, account_for_loss=True)
    assert got == LLAMA3_SPLIT
    # the embedding alone counted: (31 + 1) / 4 = 8, the first stage builds 7
    assert megatron_stage_layers(31, 4, account_for_embedding=True) == (7, 8, 8, 8)
    # interleaved: only the pipeline's first chunk loses a layer, not rank 0's other chunks
    assert megatron_stage_layers(15, 2, 2, account_for_embedding=True) == (3, 4, 4, 4)


def test_first_last_rule_by_hand():
    assert megatron_stage_layers(30, 4, first=9, last=9) == (9, 6, 6, 9)
    assert megatron_stage_layers(30, 4, first=6) == (6, 8, 8, 8)
    # v2: rank 0 holds 4 (2 a chunk), the middle ranks (28-4-4)/2 = 10 (5 a chunk)
    assert megatron_stage_layers(28, 4, 2, first=4, last=4) == (2, 5, 5, 2) * 2
    with pytest.raises(ExportError, match="does not divide evenly"):
        megatron_stage_layers(30, 4, first=8)  # 22 layers over the other 3 ranks
    with pytest.raises(ExportError, match="do not divide into v 8"):
        megatron_stage_layers(126, 16, 8, first=7, last=7)  # 7 layers over 8 chunks
    with pytest.raises(ExportError, match="larger than 0"):
        megatron_stage_layers(30, 4, first=0)  # TransformerConfig refuses an empty first rank
    with pytest.raises(ExportError, match="does not combine"):
        megatron_stage_layers(30, 4, first=9, account_for_loss=True)


# --- the layout grammar -----------------------------------------------------------------
def test_layout_parses_megatrons_own_examples():
    # PipelineParallelLayerLayout.parse_str_to_list's docstring: "Ettt|(tt|)*29,m|L" is
    # [E,t,t,t] + [t,t]*29 + [m] + [L]: 32 chunks, DeepSeek-V3's 61 layers + 1 MTP on pp16 v2
    got = layout_stage_layers("Ettt|(tt|)*29,m|L", 16, 61, mtp_layers=1)
    assert got == (3,) + (2,) * 29 + (0, 0)
    # Megatron-MoE-ModelZoo's DeepSeek-V3 pp8 x v4: "Et*2|(tt|)*22t|(tt|)*7mL"
    got = layout_stage_layers("Et*2|(tt|)*22t|(tt|)*7mL", 8, 61, mtp_layers=1)
    assert got == (2,) + (2,) * 22 + (1,) + (2,) * 7 + (0,)
    assert len(got) == 32 and sum(got) == 61


def test_layout_refuses_what_megatron_refuses():
    with pytest.raises(ExportError, match="not a multiple of pp 2"):
        layout_stage_layers("Et|t|tL", 2, 3)
    with pytest.raises(ExportError, match="start with E"):
        layout_stage_layers("tE|tL", 2, 2)
    with pytest.raises(ExportError, match="the model needs"):
        layout_stage_layers("Et|tL", 2, 3)
    with pytest.raises(ExportError, match="after an MTP"):
        layout_stage_layers("Et|mtL", 2, 2, mtp_layers=1)
    with pytest.raises(ExportError, match="unknown part"):
        layout_stage_layers("Ex|tL", 2, 1)


def test_layout_string_round_trips_through_the_parser():
    rng = random.Random(0)
    for _ in range(200):
        pp, v = rng.choice([2, 3, 4, 8]), rng.choice([1, 2, 3])
        counts = tuple(rng.choice([0, 1, 1, 2, 3, 7, 12]) for _ in range(pp * v))
        mtp = rng.choice([0, 0, 1, 3])
        text = layout_string(counts, mtp)
        assert layout_stage_layers(text, pp, sum(counts), mtp) == counts, text
    assert layout_string(LLAMA3_SPLIT) == "E|(t|)*126L"
    assert layout_string((2, 3, 3, 2), mtp_layers=1) == "Et*2|(t*3|)*2t*2mL"


# --- which arguments a split gets ---------------------------------------------------------
@pytest.mark.parametrize(
    "counts, pp, v, want",
    [
        ((3,) * 32, 16, 2, "--num-layers-per-virtual-pipeline-stage 3"),
        ((8,) * 4, 4, 1, ""),
        (LLAMA3_SPLIT, 16, 8, "--num-virtual-stages-per-pipeline-rank 8 "
         "--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split"),
        ((7, 8, 8, 8), 4, 1, "--account-for-embedding-in-pipeline-split"),
        ((9, 6, 6, 9), 4, 1, "--decoder-first-pipeline-num-layers 9 "
         "--decoder-last-pipeline-num-layers 9"),
        ((2, 5, 5, 2) * 2, 4, 2, "--num-virtual-stages-per-pipeline-rank 2 "
         "--decoder-first-pipeline-num-layers 4 --decoder-last-pipeline-num-layers 4"),
        ((8, 8, 7, 7), 4, 1, "layout"),  # no flag rule gives it (uniform_partition(30, 4))
    ],
)  # fmt: skip
def test_split_args_fewest_flags_and_decode_back(counts, pp, v, want):
    if want == "layout":
        want = f"--pipeline-model-parallel-layout {layout_string(counts)}"
    got = split_args(counts, pp, v, sum(counts))
    assert " ".join(got) == want
    assert decode(got, pp, sum(counts)) == counts


def test_without_layout_flag_an_inexpressible_split_names_the_closest():
    with pytest.raises(ExportError) as e:
        split_args((8, 8, 7, 7), 4, 1, 30, layout=False)
    msg = str(e.value)
    assert "(8, 8, 7, 7)" in msg and "needs --pipeline-model-parallel-layout" in msg
    # closest: account for both ends, (7, 8, 8, 7): one layer moved from stage 1 to 2
    assert "closest they express is (7, 8, 8, 7)" in msg and "1 layer(s) moved" in msg
    # an expressible split needs no layout flag
    assert split_args((9, 6, 6, 9), 4, 1, 30, layout=False)[0].startswith("--decoder-first")


def test_split_args_refuses_a_split_of_another_config():
    with pytest.raises(ExportError, match="pp 4 x v 2 = 8 stages"):
        split_args((8, 8, 7, 7), 4, 2, 30)


# --- megatron_args on the planner's splits ------------------------------------------------
def _plan(par, sim):
    return types.SimpleNamespace(config=par, sim=sim)  # what megatron_args reads of a plan


def test_llama3_405b_interleaved_plan_exports_its_uneven_split():
    hw = cluster_with_devices("h100-sxm", 8192)
    par = ex.ParallelConfig(dp=64, tp=8, pp=16, sp=True, schedule="interleaved_1f1b",
                            virtual_stages=8, zero=1, recompute="full")  # fmt: skip
    sim = estimate("llama3-405b", par, hw, 2048, 8192)
    assert sim.partition.layer_counts() == LLAMA3_SPLIT
    got = megatron_args(_plan(par, sim), model="llama3-405b")
    assert "--num-layers-per-virtual-pipeline-stage" not in got
    assert decode(got, 16, 126) == sim.partition.layer_counts()
    assert got[got.index("--num-layers") + 1] == "126"
    # a bare config of the same shape was refused before; it now gets the even split,
    # which for 126 on 128 chunks is the same layout
    assert decode(megatron_args(par, model="llama3-405b"), 16, 126) == LLAMA3_SPLIT


@pytest.mark.parametrize(
    "par",
    [
        ex.ParallelConfig(dp=1, pp=2, schedule="interleaved_1f1b", virtual_stages=4),
        ex.ParallelConfig(dp=2, pp=4, schedule="interleaved_1f1b", virtual_stages=2),
        ex.ParallelConfig(dp=2, pp=4),
        ex.ParallelConfig(dp=1, pp=3),
    ],
)
def test_planner_splits_decode_back_exactly(par):
    sim = estimate("gpt2", par, "a100-80g", 8, 512)
    counts = sim.partition.layer_counts()
    got = megatron_args(_plan(par, sim), model="gpt2")
    assert decode(got, par.pp, 12) == counts


def test_plan_and_model_must_agree():
    par = ex.ParallelConfig(dp=1, pp=2)
    plan = _plan(par, types.SimpleNamespace(partition=StagePartition((0, 5, 14), 12)))
    with pytest.raises(ExportError, match="has 32 layers but the plan splits 12"):
        megatron_args(plan, model="llama2-7b")
    three = _plan(ex.ParallelConfig(dp=1, pp=3), plan.sim)
    with pytest.raises(ExportError, match="2 stages, its config pp 3"):
        megatron_args(three)
    # without model=, the plan's split alone writes the flags (4 + 8: first 4, last 8)
    assert decode(megatron_args(plan), 2, 12) == (4, 8)


def test_a_real_training_plan_exports_its_own_split():
    plan = ex.plan_training("gpt2", devices=8, global_batch=64, seq=512,
                            space=ex.training.SearchSpace(tp=(1,), pp=(2,)))  # fmt: skip
    counts = plan.sim.partition.layer_counts()
    got = megatron_args(plan, model="gpt2")
    assert decode(got, plan.config.pp, 12) == counts
    if counts != (6, 6):  # an uneven split needs a flag beyond the pipeline size
        assert any(a.startswith(("--decoder-", "--pipeline-model-parallel-layout")) for a in got)


def test_mtp_layers_go_before_the_loss_in_a_layout():
    cfg = ex.models.load("gpt2").replace(mtp_layers=1)
    part = StagePartition((0, 5, 9, 12, 14), 12)  # embed+4 | 4 | 3 | 1+head
    plan = types.SimpleNamespace(config=ex.ParallelConfig(dp=1, pp=4),
                                 sim=types.SimpleNamespace(partition=part), model_config=cfg)  # fmt: skip
    for got in (megatron_args(plan), megatron_args(plan, model=cfg)):
        text = got[got.index("--pipeline-model-parallel-layout") + 1]
        assert text.endswith("tmL")  # the last stage: its layer, the MTP layer, the loss
        assert decode(got, 4, 12, mtp_layers=1) == (4, 4, 3, 1)


def test_layout_false_on_planner_splits():
    # Llama 3's split needs no layout flag; 12 layers on 8 chunks as 1,1,1,2,2,2,2,1 (what
    # the planner gave gpt2 on pp2 x v4) do: refused, naming the closest split the flags give
    par = ex.ParallelConfig(dp=64, tp=8, pp=16, schedule="interleaved_1f1b", virtual_stages=8)
    assert decode(megatron_args(par, model="llama3-405b", layout=False), 16, 126) == LLAMA3_SPLIT
    par = ex.ParallelConfig(dp=1, pp=2, schedule="interleaved_1f1b", virtual_stages=4)
    part = StagePartition((0, 2, 3, 4, 6, 8, 10, 12, 14), 12)
    assert part.layer_counts() == (1, 1, 1, 2, 2, 2, 2, 1)
    plan = _plan(par, types.SimpleNamespace(partition=part))
    assert decode(megatron_args(plan), 2, 12) == part.layer_counts()
    with pytest.raises(ExportError, match=r"closest they express is \(\d"):
        megatron_args(plan, layout=False)
