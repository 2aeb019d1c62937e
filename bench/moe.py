"""Benchmark: DeepSeek-V3's published training run against what the step model predicts.

Published (DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, sections 3.1-3.2
and Table 1): 2048 NVIDIA H800 GPUs, 8 per node on NVLink/NVSwitch, InfiniBand between
nodes ("IB (50 GB/s)", "NVLink (160 GB/s)", section 3.2.2); 16-way pipeline parallelism
(DualPipe), 64-way expert parallelism over 8 nodes, ZeRO-1 data parallelism, no tensor
parallelism; 14.8T pre-training tokens; sequence 4096; batch size ramped to 15360; 2.664M
H800 GPU hours of pre-training (2.788M with context extension and post-training).

The model comes from the published config.json (datasets/hf/deepseek-ai__DeepSeek-V3.json,
read by ``from_hf_config``: MLA, 1 shared + 256 routed experts top-8 of 2048, 3 dense first
layers; 671,026,404,352 parameters) with the one multi-token-prediction module it trained
with (``mtp_layers=1``: 682,636,472,320 with the embedding and head shared). The H800 is the H100 SXM
profile (same chip peak and HBM) with NVLink 160 GB/s and 50 GB/s per GPU between nodes.
We simulate the published configuration (1F1B in place of DualPipe, bf16 in place of FP8
GEMMs, flash attention; without recomputation and with full recomputation, around what
DeepSeek did: recompute norms and MLA up-projections, cache activations in FP8) at batch
15360 x 4096 and plan the fastest configuration with
expert parallelism in the search space. Prints the table; nothing is fitted to the target.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import explorer as ex
from explorer.training import TrainingParams

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 14.8e12
PUBLISHED_GPU_HOURS = 2.664e6  # pre-training only (Table 1)
BATCH, SEQ, DEVICES = 15360, 4096, 2048


def h800_cluster() -> ex.hardware.Cluster:
    """2048 H800s: the H100 SXM chip; NVLink 160 GB/s, 50 GB/s per GPU between nodes."""
    h100 = ex.hardware.load("h100-sxm")
    chip = dataclasses.replace(h100.chip, name="NVIDIA H800 SXM5 80GB")
    return dataclasses.replace(
        h100, name="h800-2048", chip=chip, intra_node_bandwidth_bytes_per_s=160e9,
        inter_node_bandwidth_bytes_per_s=50e9, max_nodes=DEVICES // 8, link_levels=(),
        source="H100 SXM profile; NVLink and IB per GPU from the DeepSeek-V3 report, 3.2.2",
    )  # fmt: skip


def deepseek_v3() -> ex.models.ModelConfig:
    raw = json.loads((ROOT / "datasets/hf/deepseek-ai__DeepSeek-V3.json").read_text())
    return ex.models.from_hf_config(raw, name="deepseek-v3").replace(mtp_layers=1)


def gpu_hours(step_s: float) -> float:
    return TOKENS / (BATCH * SEQ) * step_s * DEVICES / 3600


def main() -> None:
    cfg, hw = deepseek_v3(), h800_cluster()
    params = TrainingParams(flash_attention=True)
    print(f"{cfg}\n{cfg.num_params():,} parameters on {hw}")
    for recompute in ("none", "full"):  # DeepSeek recomputed norms and MLA up-projections
        published = ex.ParallelConfig(dp=128, ep=64, tp=1, pp=16, microbatch_size=1, zero=1,
                                      recompute=recompute)  # fmt: skip
        t = time.perf_counter()
        r = ex.simulate(cfg, published, hw, global_batch=BATCH, seq=SEQ, params=params)
        sim_s = time.perf_counter() - t
        print(f"published {published}: step {r.step_time_s:.1f} s (simulated in {sim_s:.1f} s), "
              f"MFU {r.mfu:.1%}, fits {r.fits} ({r.memory.total / 2**30:.1f} GiB), stages "
              f"{r.partition_choice.method}")  # fmt: skip
        print("  time by kind:",
              ", ".join(f"{k} {v:.1f} s" for k, v in r.time_by_kind if v > 0.05))  # fmt: skip
        hours = gpu_hours(r.step_time_s)
        print(
            f"  14.8T tokens: {hours / 1e6:.2f}M H800 GPU hours predicted vs "
            f"{PUBLISHED_GPU_HOURS / 1e6:.3f}M published ({hours / PUBLISHED_GPU_HOURS:.2f}x)"
        )
    space = ex.training.SearchSpace(
        tp=(1, 2, 4, 8), pp=(8, 16), microbatch_sizes=(1,), schedules=("1f1b",), zero=(1,),
        ep=(8, 16, 32, 64), recompute=("none", "per_layer"),
    )  # fmt: skip
    t = time.perf_counter()
    plan = ex.plan_training(cfg, DEVICES, hw, global_batch=BATCH, seq=SEQ, space=space,
                            params=params)  # fmt: skip
    print(
        f"planned in {time.perf_counter() - t:.1f} s ({plan.searched} configurations): "
        f"{plan.config}, step {plan.sim.step_time_s:.1f} s, "
        f"{gpu_hours(plan.sim.step_time_s) / 1e6:.2f}M GPU hours"
    )


if __name__ == "__main__":
    main()
