"""The exercises of each concept notebook, built from the numbers that notebook shows.

=========  ================================================================================
notebook   what its questions ask
=========  ================================================================================
02         ring collective bytes, the tensor-parallel all-reduces of a layer, which collective
           a layout change needs, the pipeline bubble (1F1B and interleaved), ZeRO memory per
           stage, activations under each recompute policy, a model's parameters
03         which collective a layout change needs on the 2 x 4 mesh and the bytes it sends
04         alpha-beta time of collectives inside and between nodes, with the bandwidth scaled
           as the notebook scales it; the tensor-parallel all-reduce volume
06         parameters of the models scaled, model states of GPT-3 175B under ZeRO, the bubble
           of deep pipelines, the fastest of three layouts
08         MFU of a simulated step and the error of an uncalibrated prediction
=========  ================================================================================

>>> len(notebook_exercises("02")) > 10
True
"""

from __future__ import annotations

import dataclasses

from ..hardware import Mesh
from ..ir import TensorType
from ..memo import memoize
from ..models import load as load_model
from ..sharding import Layout
from ..training import ParallelConfig, published_runs
from . import kinds
from .errors import TeachError
from .exercises import Exercise
from .ranks import RankLayout

__all__ = ["NOTEBOOKS", "notebook_exercises", "all_exercises"]

NOTEBOOKS = ("02", "03", "04", "06", "08")
_MIB = 2**20


def _02() -> list[Exercise]:
    mesh = Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    t = TensorType((2, 8, 16), "fp32")  # the notebook's [batch, sequence, hidden]
    partial = Layout(((), (), ()), partial=("tp",))
    seq_split = Layout(((), ("tp",), ()))
    whole = Layout.replicated(3)
    hidden_split = Layout(((), (), ("tp",)))
    bsh = (("b", "batch"), ("s", "sequence"), ("h", "hidden"))
    cfg = load_model("gpt3-6.7b")
    p = cfg.num_params()
    s, b, h, a = 2048, 1, 12288, 96  # the notebook's recompute cell
    return [
        kinds.collective_bytes("all-reduce", 64 * _MIB, 8, key="02-allreduce-8",
                               what="data-parallel gradients"),
        kinds.collective_bytes("all-reduce", 64 * _MIB, 2, key="02-allreduce-2",
                               what="data-parallel gradients"),
        kinds.collective_bytes("all-gather", 256 * _MIB, 4, key="02-allgather-4"),
        kinds.collective_bytes("reduce-scatter", 256 * _MIB, 4, key="02-reducescatter-4"),
        kinds.tp_allreduce("gpt3-6.7b", 1, 2048, 4, key="02-tp-allreduce"),
        *(kinds.redistribution(a, b, t, mesh, key=f"02-move-{k}", dims=bsh)
          for k, a, b in (("partial-whole", partial, whole), ("partial-seq", partial, seq_split),
                          ("seq-whole", seq_split, whole), ("whole-hidden", whole, hidden_split),
                          ("seq-hidden", seq_split, hidden_split))),
        kinds.bubble("1f1b", 4, 8, key="02-bubble-1f1b-m8"),
        kinds.bubble("1f1b", 4, 32, key="02-bubble-1f1b-m32"),
        kinds.bubble("interleaved_1f1b", 4, 8, 2, key="02-bubble-interleaved"),
        *(kinds.zero_memory(p, 8, z, key=f"02-zero-{z}", model=cfg.name) for z in (0, 1, 2, 3)),
        *(kinds.activation_memory(s, b, h, a, recompute=r, key=f"02-activations-{r}")
          for r in ("none", "selective", "full")),
        kinds.activation_memory(s, b, h, a, tp=8, recompute="none", key="02-activations-tp8"),
        kinds.model_params("gpt3-6.7b", key="02-params"),
        # the rank map cell: dp 2 x tp 4 x pp 2 on nodes of 8 GPUs
        kinds.rank_nodes(RankLayout(dp=2, tp=4, pp=2), "pp", key="02-ranks-pp"),
        kinds.rank_nodes(RankLayout(dp=2, tp=4, pp=2), "dp", "megatron-pp-before-dp",
                         key="02-ranks-dp-pp-first"),
        kinds.rank_nodes(RankLayout(dp=4, tp=2, pp=2, cp=2), "dp-cp", key="02-ranks-dp-cp"),
    ]  # fmt: skip


def _03() -> list[Exercise]:
    mesh = Mesh({"dp": 2, "tp": 4}, hardware="a100-80g")
    t = TensorType((8, 64), "bf16")  # a tiny MLP's activation [tokens, features]
    rows_dp = Layout((("dp",), ()))
    rows_dp_partial = Layout((("dp",), ()), partial=("tp",))
    rows_dp_cols_tp = Layout((("dp",), ("tp",)))
    rows_tp = Layout((("tp",), ()))
    cols_tp = Layout(((), ("tp",)))
    whole = Layout.replicated(2)
    th = (("t", "tokens"), ("h", "hidden"))  # the lesson's letters for x·W2's output
    move, nbytes = kinds.redistribution, kinds.redistribution_bytes
    return [
        move(rows_dp_partial, rows_dp, t, mesh, key="03-move-fc2-out", dims=th),
        move(rows_dp_partial, rows_dp_cols_tp, t, mesh, key="03-move-fc2-rs", dims=th),
        move(rows_dp_cols_tp, rows_dp, t, mesh, key="03-move-gather-cols", dims=th),
        move(rows_dp, rows_dp_cols_tp, t, mesh, key="03-move-slice", dims=th),
        move(rows_tp, cols_tp, t, mesh, key="03-move-rows-cols", dims=th),
        nbytes(rows_dp_partial, rows_dp, t, mesh, key="03-bytes-allreduce", dims=th),
        nbytes(rows_dp_cols_tp, rows_dp, t, mesh, key="03-bytes-allgather", dims=th),
        nbytes(rows_tp, whole, t, mesh, key="03-bytes-allgather-rows", dims=th),
    ]  # fmt: skip


def _04() -> list[Exercise]:
    return [
        kinds.collective_time("all-reduce", 64 * _MIB, 4, key="04-time-allreduce-nvlink"),
        kinds.collective_time("all-reduce", 64 * _MIB, 4, link="inter",
                              key="04-time-allreduce-ib"),
        kinds.collective_time("all-gather", 16 * _MIB, 4, key="04-time-allgather-nvlink"),
        kinds.collective_time("all-reduce", 64 * _MIB, 4, bandwidth_scale=0.05,
                              key="04-time-allreduce-slow"),
        kinds.collective_time("all-reduce", 64 * 2**10, 8, key="04-time-allreduce-small"),
        kinds.tp_allreduce("gpt2", 8, 1024, 4, key="04-tp-allreduce-gpt2"),
    ]  # fmt: skip


def _06() -> list[Exercise]:
    cfg = load_model("gpt3-175b")
    p = cfg.num_params()
    return [
        kinds.model_params("gpt3-175b", key="06-params-gpt3"),
        kinds.model_params("pangu-alpha-200b", key="06-params-pangu"),
        kinds.model_params("llama2-70b", key="06-params-llama2"),
        kinds.zero_memory(p, 8, 3, key="06-zero3-8", model=cfg.name),
        kinds.zero_memory(p, 64, 1, key="06-zero1-64", model=cfg.name),
        kinds.bubble("1f1b", 16, 64, key="06-bubble-pp16"),
        kinds.bubble("interleaved_1f1b", 16, 64, 4, key="06-bubble-pp16-v4"),
        kinds.fastest_layout(
            "gpt3-1.3b",
            (ParallelConfig(dp=8), ParallelConfig(dp=4, tp=2),
             ParallelConfig(dp=2, tp=2, pp=2, microbatch_size=1)),
            "a100-80g", 64, 2048, key="06-fastest-1.3b"),
        kinds.fastest_layout(
            "gpt3-13b",
            (ParallelConfig(dp=2, tp=8, pp=2, microbatch_size=1),
             ParallelConfig(dp=4, tp=4, pp=2, microbatch_size=1),
             ParallelConfig(dp=8, tp=2, pp=2, microbatch_size=1, recompute="full")),
            "a100-80g", 128, 2048, key="06-fastest-13b"),
        # Megatron-LM Table 1's largest run: tp 8, pp 64 on 3072 GPUs (so dp 6)
        kinds.rank_nodes(RankLayout(dp=6, tp=8, pp=64), "dp", key="06-ranks-1t-dp"),
        kinds.rank_nodes(RankLayout(dp=6, tp=8, pp=64), "pp", key="06-ranks-1t-pp"),
    ]  # fmt: skip


def _08() -> list[Exercise]:
    mtnlg = published_runs("mtnlg_2022")  # the notebook's three MT-NLG runs, as it loads them
    return [
        kinds.mfu("gpt3-1.3b", ParallelConfig(dp=8), "a100-80g", 64, 2048, key="08-mfu-1.3b"),
        kinds.mfu("gpt3-13b", ParallelConfig(dp=2, tp=4, recompute="full",
                                             microbatch_size=1), "a100-80g", 64, 2048,
                  key="08-mfu-13b-recompute"),
        *(kinds.prediction_error(r.cfg, r.config, r.hardware, r.global_batch, r.seq,
                                 r.step_time_s, label=r.label, key=f"08-error-mtnlg-{k}")
          for k, r in enumerate(mtnlg)),
    ]  # fmt: skip


_BUILDERS = {"02": _02, "03": _03, "04": _04, "06": _06, "08": _08}


@memoize(maxsize=16, name="teach.notebook_exercises")
def notebook_exercises(notebook: str) -> tuple[Exercise, ...]:
    """The exercises of a concept notebook (``"02"``, ``"03"``, ``"04"``, ``"06"``, ``"08"``),
    every truth computed now by the project's functions."""
    if notebook not in _BUILDERS:
        raise TeachError(
            f"notebook {notebook!r} has no exercises; use one of {', '.join(NOTEBOOKS)}"
        )
    return tuple(_with_notebook(q, notebook) for q in _BUILDERS[notebook]())


def _with_notebook(q: Exercise, notebook: str) -> Exercise:
    return dataclasses.replace(q, notebook=notebook)


def all_exercises() -> tuple[Exercise, ...]:
    """Every notebook's exercises, in notebook order."""
    return tuple(q for nb in NOTEBOOKS for q in notebook_exercises(nb))
