"""The best open peer on the same rows: MooreThreads' SimuMax (an analytical simulator of
Megatron-style training with measured GEMM, attention and collective tables), given the
layout this project predicts each published row with, side by side in bench/accuracy.py
(``--peer``; issue 24).

What SimuMax is given, and what not (so its numbers are its own, not ours):

- its model config from the row's `ModelConfig` (dense decoders only: hidden size, heads,
  key/value heads, head size, MLP size, layers, vocabulary, SwiGLU or not);
- its strategy from the row's `ParallelConfig` as this project predicts it (the published
  layout; the fields the source leaves open as this project's planner fills them: the same
  recomputation, ZeRO stage and virtual stages) and the row's precision;
- its system config built from this project's hardware profile of the row's chip: the
  datasheet peaks (BF16 and FP8 TFLOP/s, HBM GB/s, memory, NVLink and NIC GB/s per GPU, GPUs
  per NVLink domain) with the efficiencies of SimuMax's own "minimal viable template"
  (docs/system.md at 4dcaae5: 0.75 of peak for every op, 0.9 of HBM, 0.5 of every link;
  latencies 40, 10 and 30 us). SimuMax ships measured tables for an A100 PCIe and a
  one-node B200 only, neither the chip of any row here; measuring its tables for H100,
  H200, GB200 and B200 takes the hardware (simu_tools/efficency_test), so these are
  SimuMax out of the box on a machine it has not measured, as this project is run here.

Rows SimuMax cannot express are skipped with the reason: MoE and MLA models (not
translated here), ZeRO-2/3 and FSDP (SimuMax supports ZeRO 0 and 1).

SimuMax runs in its own interpreter (``SIMUMAX_PYTHON``, with ``SIMUMAX_PATH`` on its
``PYTHONPATH`` unless it is installed there) through ``bench/simumax_driver.py``;
`available` says why not when it cannot.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

import explorer as ex

DRIVER = Path(__file__).parent / "simumax_driver.py"
SIMUMAX_COMMIT = "4dcaae5 (github.com/MooreThreads/SimuMax, 'docs: finalize v1.2 release notes')"
# docs/system.md "Minimal viable template" of SimuMax at 4dcaae5
TEMPLATE = {"compute": 0.75, "hbm": 0.9, "link": 0.5, "hbm_latency_us": 40.0,
            "intra_latency_us": 10.0, "inter_latency_us": 30.0}  # fmt: skip
_OPS = {
    "all_reduce": {"scale": 2, "offset": -1},
    "all_gather": {"scale": 1, "offset": -1},
    "reduce_scatter": {"scale": 1, "offset": -1},
    "p2p": {"scale": 1, "offset": 0},
    "all2all": {"scale": 1, "offset": -1},
}


def available() -> tuple[str | None, str]:
    """(interpreter, "") when SimuMax can run, else (None, why not)."""
    py = os.environ.get("SIMUMAX_PYTHON", "")
    if not py:
        return None, ("SIMUMAX_PYTHON is not set: point it at a Python that imports simumax "
                      "(pip install pandas tabulate matplotlib sympy tqdm; SIMUMAX_PATH = a "
                      f"checkout of MooreThreads/SimuMax, read at {SIMUMAX_COMMIT})")  # fmt: skip
    env = _env()
    probe = subprocess.run([py, "-c", "import simumax.core.perf_llm"], env=env,
                           capture_output=True, text=True)  # fmt: skip
    if probe.returncode:
        return None, f"{py} cannot import simumax: {probe.stderr.strip().splitlines()[-1:]}"
    return py, ""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    path = os.environ.get("SIMUMAX_PATH", "")
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    return env


def system_config(hardware: str) -> dict:
    """SimuMax's system config of this project's hardware profile ``hardware``: datasheet
    figures, SimuMax's template efficiencies (`TEMPLATE`)."""
    cluster = ex.hardware.load(hardware)
    chip, levels = cluster.chip, cluster.levels
    bf16 = chip.peak_flops("bf16") / 1e12
    fp8 = chip.peak_flops("fp8") / 1e12 if "fp8" in chip.dtypes else 2 * bf16
    nvlink = [lv for lv in levels if lv.bandwidth_bytes_per_s >= levels[0].bandwidth_bytes_per_s]
    per_domain = max(lv.group_size for lv in nvlink)
    nic = [lv for lv in levels if lv.group_size > per_domain][0]

    def op(tflops: float) -> dict:
        return {"tflops": tflops, "efficient_factor": TEMPLATE["compute"],
                "accurate_efficient_factor": {}}  # fmt: skip

    def link(gbps: float, latency: float) -> dict:
        return {"processor_usage": 0.0, "op": dict(_OPS),
                "bandwidth": {"efficient_factor": TEMPLATE["link"], "gbps": gbps,
                              "latency_us": latency}}  # fmt: skip

    hbm = {"efficient_factor": TEMPLATE["hbm"], "gbps": chip.memory_bandwidth_bytes_per_s / 1e9,
           "latency_us": TEMPLATE["hbm_latency_us"]}  # fmt: skip
    intra = levels[0].bandwidth_bytes_per_s / 1e9
    return {
        "sys_name": f"{hardware}_datasheet_template",
        "num_per_node": per_domain,
        "accelerator": {
            "backend": "cuda",
            "mem_gbs": round(chip.memory_bytes / 2**30),
            "op": {
                "default": op(bf16),
                "matmul": op(bf16),
                "fp8_matmul": op(fp8),
                "sdp_fwd": op(bf16),
                "sdp_bwd": op(bf16),
                "group_matmul": op(bf16),
                "fp8_group_matmul": op(fp8),
            },  # fmt: skip
            "bandwidth": {k: dict(hbm) for k in ("default", "permute_fwd", "permute_bwd", "ce")},
            "mode": "roofline",
        },
        "networks": {
            "intra_with_pcie": False,
            "low_intra_node": link(intra, TEMPLATE["intra_latency_us"]),
            "high_intra_node": link(intra, TEMPLATE["intra_latency_us"]),
            "inter_node": link(nic.bandwidth_bytes_per_s / 1e9, TEMPLATE["inter_latency_us"]),
        },
    }


def model_config(cfg) -> dict:
    """SimuMax's model config of a dense decoder; `ValueError` naming what it is not."""
    if cfg.is_moe or cfg.is_mla:
        raise ValueError("MoE / MLA model (not translated to SimuMax's MoE config here)")
    if cfg.arch != "decoder":
        raise ValueError(f"arch {cfg.arch!r} is not a decoder")
    return {
        "model_type": "dense", "model_name": cfg.name.replace("-", "_"),
        "hidden_size": cfg.hidden_size, "head_num": cfg.num_heads,
        "kv_head_num": cfg.kv_heads, "head_size": cfg.dim_head, "intermediate_size": cfg.ffn,
        "layer_num": cfg.num_layers, "vocab_size": cfg.vocab_size,
        "use_swiglu": cfg.activation == "swiglu",
    }  # fmt: skip


def strategy_config(run: ex.MeasuredRun, params: ex.TrainingParams) -> dict:
    """SimuMax's strategy of ``run``'s layout as this project predicts it (with ``params``,
    the row's stack preset: its gradient-reduce dtype); `ValueError` naming what SimuMax
    does not support. Where SimuMax needs a setting of its own: an interleaved pipeline runs
    with ``pp_comm_async=False`` (its cost analysis refuses async VPP and says so), a layer
    count the stages do not divide counts the embedding and the loss as a layer each
    (Megatron's account_for_embedding/loss_in_pipeline_split, as Megatron-Bridge's Llama 3
    405B recipes do), context parallelism exchanges K/V by SimuMax's a2a (its all_gather is
    "not implemented yet" at 4dcaae5; Megatron's p2p ring is not among its choices)."""
    par = run.config
    if par.zero > 1:
        raise ValueError(f"ZeRO-{par.zero} / FSDP (SimuMax supports ZeRO 0 and 1)")
    if par.ep > 1:
        raise ValueError("expert parallelism")
    layers_per_stage = max(1, run.cfg.num_layers // par.pp)
    s = {
        "seq_len": run.seq, "micro_batch_size": par.microbatch_size,
        "micro_batch_num": run.global_batch // (par.dp * par.microbatch_size),
        "dtype": "bf16", "fp8": run.precision == "fp8",
        "world_size": par.dp * par.tp * par.pp * par.cp, "tp_size": par.tp,
        "cp_size": par.cp, "pp_size": par.pp, "ep_size": 1, "etp_size": 1,
        "enable_sequence_parallel": bool(par.sp) and par.tp > 1,
        "interleaving_size": par.virtual_stages or 1, "zero_state": par.zero,
        "enable_dropout": False, "use_flash_sdp": True, "use_math_sdp": False,
        "mem_factor": 0.94, "enable_recompute": par.recompute != "none",
        "grad_reduce_in_bf16": (params.grad_reduce_bytes_per_param or params.state.gradient_bytes) <= 2,
        "cp_comm_type": "a2a",
    }  # fmt: skip
    if (par.virtual_stages or 1) > 1:
        s["pp_comm_async"] = False
    if run.cfg.num_layers % par.pp:
        if (run.cfg.num_layers + 2) % par.pp:
            raise ValueError(f"{run.cfg.num_layers} layers over pp={par.pp} stages")
        s |= {"account_for_embedding_in_pipeline_split": True,
              "account_for_loss_in_pipeline_split": True}  # fmt: skip
    if par.recompute == "full":
        s |= {"recompute_granularity": "full_block", "recompute_layer_num": layers_per_stage}
    elif par.recompute == "per_layer":
        n = par.recompute_num_layers or layers_per_stage
        s |= {"recompute_granularity": "full_block", "recompute_layer_num": n}
    elif par.recompute == "selective":
        s |= {"recompute_granularity": "selective_recompute", "attn_recompute": True,
              "recompute_layer_num": layers_per_stage, "recompute_variance": True}  # fmt: skip
    return s


def run_simumax(jobs: list[dict], python: str) -> dict[str, dict]:
    """SimuMax's result per job key (`bench/simumax_driver.py` in ``python``)."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "jobs.json"
        path.write_text(json.dumps(jobs))
        proc = subprocess.run([python, str(DRIVER), str(path)], env=_env(), cwd=d,
                              capture_output=True, text=True)  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"SimuMax driver failed: {proc.stderr.strip()[-500:]}")
    return {r["key"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}
