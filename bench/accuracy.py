"""Benchmark: how well the step model predicts published runs, before and after
calibration, and how fast calibration is. Not a timed test.

0. The values set on fit rows (ZeRO overlap and ZeRO-3 bandwidth efficiency on Table 2's
   fit ZeRO-3 rows, DeepSpeed's pipeline overhead on two MT-NLG rows) re-fitted and
   compared with the stored ones; the dataset facts (`published.RUN_FACTS`) and FLOP conventions (`published.FLOP_CONVENTIONS`).
1. Uncalibrated: every published run we hold (Narayanan et al. 2021 Tables 1 and 2, MT-NLG 530B,
   BLOOM 176B, Llama 3 405B Table 4), predicted step time vs published; target: every row
   within 10%.
2. Out of sample: per dataset with several layouts, fit on half the rows (even positions),
   predict the other half (odd positions): Spearman rank correlation of per-GPU
   throughput on the unseen half, and how far the predicted best unseen layout measured
   from the measured best (targets: Spearman >= 0.8, within 3%).
3. Recovery: runs generated from known parameters with 3% noise (5 seeds); calibrate
   recovers each fitted parameter within 10%.
4. Speed: calibrate on 20 runs (target 2 s); plan_training gpt3-175b on 1024 devices
   (target 5 s). Wall seconds of this run, on this machine.
5. Today's stacks (issue 24): every file of ``datasets/published`` with the stack columns
   (torchtitan, Megatron-Core, NeMo, Megatron-Bridge, NeMo AutoModel, MaxText; roles fixed
   in the files before any prediction), uncalibrated, each row predicted with its stack's
   preset (`published.measured_params`; the default TrainingParams while
   ``explorer.training.stacks`` does not exist, said in the output). Per file and stack,
   fit and check rows apart: n, within 10% and 20%, median and worst |error| of step time,
   memory calls right (every published run ran) and |error| of memory where published;
   Spearman of tokens/s per GPU within each sweep (one model on one chip, several
   layouts); the rows skipped, each with its reason; the FLOP conventions checked against
   the rows that publish both TFLOP/s and tokens/s. Targets on the check rows: >= 80%
   within 10%, median |error| <= 6%, no run predicted not to fit. ``--today`` runs this
   section alone (``--today --no-write``: prints only); ``--fit`` and ``--fit-rowwise`` fit
   the stored values on fit rows only; ``--fit-chip NAME`` fits one chip's GEMM ceiling and
   attention efficiency on its fit rows alone (prints only).
6. The best open peer side by side (``--peer`` alone): MooreThreads' SimuMax on the same rows
   with the layout this project predicts each with (bench/simumax_peer.py says what it is
   given); needs ``SIMUMAX_PYTHON`` (and ``SIMUMAX_PATH``), else it prints why not.

Cost: sections 0-4 as before; section 5 plans the open fields of ~200 rows (one
`plan_homogeneous` each, within the row's layout, best one simulated) and predicts every
row once with `estimate` (the closed-form pipeline time, as sections 1-2 use).

Every table says which rows are fit data and which are check data.
Writes bench/results/accuracy.json (``--today``: only its ``today_stacks`` key is rewritten).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from pathlib import Path

import numpy as np
from accuracy_fit import fit_chip, fit_rowwise, fit_today
from accuracy_peer import peer_simumax
from scipy.optimize import least_squares, minimize_scalar
from scipy.stats import spearmanr

import explorer as ex
from explorer.training import TrainingParams
from explorer.training.calibration.fit import float_fields, predict, with_values
from explorer.training.calibration.measured import ROLES, load_measured_rows, measured_datasets
from explorer.training.calibration.published import (
    DEEPSPEED_PIPELINE_OVERHEAD_S,
    FLOP_CONVENTIONS,
    RUN_FACTS,
    STACK_NAMES,
    flops_per_step,
    measured_params,
    megatron_table1_runs,
    published_runs,
    row_role,
    run_params,
    stack_params,
)

P = ex.ParallelConfig
OUT = Path(__file__).parent / "results" / "accuracy.json"
MATMUL = (
    "matmul_efficiency_cap"
    if "matmul_efficiency_cap" in float_fields()
    else "cost.compute_efficiency"
)


def model_tflops(run: ex.MeasuredRun, step_time_s: float) -> float:
    """Per-GPU model TFLOP/s of ``run`` at ``step_time_s`` (the simulator's model FLOPs,
    which do not depend on the fitted knobs)."""
    sim = predict(run, TrainingParams())
    return sim.tflops_per_device * sim.step_time_s / step_time_s


SKIPPED: list[str] = []


def datasets() -> dict[str, tuple[ex.MeasuredRun, ...]]:
    out = {"megatron_2021_table1": megatron_table1_runs()}
    for name in measured_datasets():
        out[name] = published_runs(name, skipped=SKIPPED)
    for s in SKIPPED:
        print(f"skipped {s}")
    return out


# ----- 0. the defaults and dataset facts fitted on fit rows --------------------------------
def _fit_1d(runs, make, lo: float, hi: float) -> float:
    """The value in [lo, hi] minimising the squared log error of ``runs`` under
    ``make(value)`` (a TrainingParams)."""

    def loss(x: float) -> float:
        return sum(np.log(predict(r, make(x)).step_time_s / r.step_time_s) ** 2 for r in runs)

    return float(minimize_scalar(loss, bounds=(lo, hi), method="bounded",
                                 options={"xatol": 1e-4}).x)  # fmt: skip


def _fit_zero(runs) -> tuple[float, float]:
    """(zero_gather_overlap_fraction = zero_grad_overlap_fraction, zero_bandwidth_efficiency)
    minimising the squared log error of the ZeRO-3 fit ``runs``, each within [0.05, 1]."""

    def make(x) -> TrainingParams:
        return TrainingParams(zero_gather_overlap_fraction=x[0], zero_grad_overlap_fraction=x[0],
                              zero_bandwidth_efficiency=x[1])  # fmt: skip

    def res(x) -> list[float]:
        return [np.log(predict(r, make(x)).step_time_s / r.step_time_s) for r in runs]

    fit = least_squares(res, [0.7, 0.9], bounds=([0.05, 0.05], [1.0, 1.0]), diff_step=1e-3)
    return float(fit.x[0]), float(fit.x[1])


def fit_dataset_facts(data) -> dict:
    """Re-fit the two values set on fit rows and compare them with the stored ones."""
    print("0. Values fitted on fit rows (stored as defaults / dataset facts; rows marked 'fit')")
    z_rows = [r for r in data["megatron_2021_table2"] if r.config.zero == 3]
    z_fit = [r for r in z_rows if row_role("megatron_2021_table2", r.model_name, r.config.dp)
             == "fit"]  # fmt: skip
    z, zb = _fit_zero(z_fit)
    stored_z = TrainingParams().zero_gather_overlap_fraction
    stored_zb = TrainingParams().zero_bandwidth_efficiency
    print(f"   ZeRO overlap (gather and reduce-scatter, one value) and ZeRO-3 bandwidth "
          f"efficiency on {len(z_fit)} ZeRO-3 rows of Table 2 (bounded least squares): "
          f"fitted {z:.3f} and {zb:.3f}, stored defaults {stored_z} and {stored_zb}")  # fmt: skip
    mt = data["mtnlg_2022"]
    mt_fit = [r for r in mt if row_role("mtnlg_2022", r.model_name, r.config.dp) == "fit"]
    o = _fit_1d(mt_fit, lambda x: TrainingParams(microbatch_overhead_s=x), 0.0, 0.1)
    print(
        f"   DeepSpeed pipeline overhead per stage pass on {len(mt_fit)} MT-NLG rows: "
        f"fitted {o * 1e3:.1f} ms, stored {DEEPSPEED_PIPELINE_OVERHEAD_S * 1e3:.1f} ms"
    )
    print("   dataset facts (RUN_FACTS):")
    for name, f in RUN_FACTS.items():
        print(f"     {name}: {dict(f.values)}")
    print("   FLOP conventions (a published TFLOP/s becomes a step time with its source's):")
    for c in FLOP_CONVENTIONS.values():
        print(f"     {c.name}: {c.formula} [{c.source}]")
    print()
    return {"zero_overlap_fitted": z, "zero_overlap_stored": stored_z,
            "zero_bandwidth_efficiency_fitted": zb, "zero_bandwidth_efficiency_stored": stored_zb,
            "deepspeed_overhead_fitted_s": o,
            "deepspeed_overhead_stored_s": DEEPSPEED_PIPELINE_OVERHEAD_S,
            "run_facts": {k: {"values": dict(v.values), "source": v.source}
                          for k, v in RUN_FACTS.items()},
            "flop_conventions": {k: {"formula": c.formula, "source": c.source}
                                 for k, c in FLOP_CONVENTIONS.items()}}  # fmt: skip


# ----- 1. uncalibrated --------------------------------------------------------------------
def uncalibrated(data) -> dict:
    print("1. Uncalibrated: predicted vs published step time (defaults + the dataset's "
          "RUN_FACTS, estimate); role: fit = the row set a default or fact, check = not")  # fmt: skip
    print("   memory: the step model's peak bytes per device of the layout (GiB) and whether "
          "it fits the chip (every published run did)")  # fmt: skip
    print(f"{'dataset':20s} {'role':5s} {'run':44s} {'published s':>11s} {'predicted s':>11s} "
          f"{'error':>7s} {'memory GiB':>14s}")  # fmt: skip
    rows, planned = [], []
    for name, runs in data.items():
        base = run_params(name)  # the dataset's published facts (RUN_FACTS), else defaults
        for r in runs:
            sim = predict(r, base)
            t = sim.step_time_s
            err = t / r.step_time_s - 1
            role = row_role(name, r.model_name, r.config.dp)
            mem, cap = sim.memory.total / 2**30, sim.memory_cap_bytes / 2**30
            rows.append({"dataset": name, "role": role, "run": r.label, "config": str(r.config),
                         "published_s": r.step_time_s, "predicted_s": t, "error": err,
                         "memory_gib": mem, "memory_cap_gib": cap, "fits": sim.fits,
                         "memory_rows_gib": {k: v / 2**30 for k, v in sim.memory.rows()},
                         "memory_stage": sim.memory.stage, "source": r.source})  # fmt: skip
            print(f"{name:20s} {role:5s} {r.label:44s} {r.step_time_s:>11.3f} {t:>11.3f} "
                  f"{err:>+7.1%} {mem:>6.1f}/{cap:<4.0f}{'' if sim.fits else ' over'}")  # fmt: skip
            if any("recompute" in x and "chosen by the planner" in x
                   for x in r.source.split("; ")):  # fmt: skip
                planned.append((name, r, base))
    errs = np.abs([x["error"] for x in rows])
    summary = {
        "rows": len(rows), "within_10pct": int((errs <= 0.10).sum()),
        "over_memory": [x["run"] for x in rows if not x["fits"]],
        "median_abs_error": float(np.median(errs)), "worst_abs_error": float(errs.max()),
        "worst_row": rows[int(errs.argmax())]["run"], "target": "every row within 10%",
    }  # fmt: skip
    for role in ("fit", "check"):
        e = np.abs([x["error"] for x in rows if x["role"] == role])
        summary[role] = {"rows": len(e), "within_10pct": int((e <= 0.10).sum()),
                         "median_abs_error": float(np.median(e)),
                         "worst_abs_error": float(e.max())}  # fmt: skip
    print(
        f"   {summary['within_10pct']}/{summary['rows']} within 10%, median |error| "
        f"{summary['median_abs_error']:.1%}, worst {summary['worst_abs_error']:.1%} "
        f"({summary['worst_row']})"
    )
    for role in ("fit", "check"):
        x = summary[role]
        print(f"   {role} rows: {x['within_10pct']}/{x['rows']} within 10%, median "
              f"{x['median_abs_error']:.1%}, worst {x['worst_abs_error']:.1%}")  # fmt: skip
    over = summary["over_memory"]
    print(f"   {len(over)}/{len(rows)} published layouts over the memory cap by our model"
          + (f": {', '.join(over)}" if over else ""))  # fmt: skip
    _tight_breakdowns(rows)
    summary["planner_recompute"] = [_recompute_ladder(*x) for x in planned]
    print()
    return {"rows": rows, "summary": summary}


def _tight_breakdowns(rows: list[dict], share: float = 0.9) -> None:
    """Print the per-term memory of the worst device of every row above ``share`` of its
    chip (the rows whose fit a memory term can flip)."""
    tight = [x for x in rows if x["memory_gib"] > share * x["memory_cap_gib"]]
    if tight:
        print(f"   memory per term of the worst device, rows above {share:.0%} of the chip (GiB):")
    for x in tight:
        terms = ", ".join(f"{k} {v:.2f}" for k, v in x["memory_rows_gib"].items() if v)
        print(f"     {x['run']} (pipeline device {x['memory_stage']}): {terms}; total "
              f"{x['memory_gib']:.2f}/{x['memory_cap_gib']:.0f}")  # fmt: skip
    if tight:
        print("     sources: model states by ZeRO stage (Rajbhandari et al. 2020, section 3.1); "
              "activations: Korthikanti et al. 2022 counted for the model's layer x the "
              "schedule's peak chunk-microbatches in flight (Narayanan et al. 2021); "
              "zero_reduce_buffer: one FSDP unit or DeepSpeed reduce bucket of whole gradients; "
              "runtime_context, communication_buffers, fragmentation: assumptions "
              "(MemoryAllowances)")  # fmt: skip


def _recompute_ladder(name: str, run: ex.MeasuredRun, base: TrainingParams) -> dict:
    """A row whose recomputation the planner chose: step time and memory under each policy."""
    out = {"run": run.label, "chosen": run.config.recompute, "policies": {}}
    for policy in ("none", "selective", "full"):
        sim = predict(replace(run, config=run.config.replace(recompute=policy)), base)
        err = sim.step_time_s / run.step_time_s - 1
        out["policies"][policy] = {"error": err, "memory_gib": sim.memory.total / 2**30,
                                   "fits": sim.fits}  # fmt: skip
        print(f"   {run.label} (recompute chosen by the planner: {run.config.recompute}) with "
              f"{policy:9s}: error {err:+.1%}, memory {sim.memory.total / 2**30:.1f}/"
              f"{sim.memory_cap_bytes / 2**30:.0f} GiB{'' if sim.fits else ' (over)'}")  # fmt: skip
    if run.config.cp > 1 and run.config.cp_kv_exchange == "all_gather":
        # the gathered K, V dropped after the forward and all-gathered again in the backward
        # (TrainingParams.cp_kv_regather, TransformerEngine's all-gather CP)
        again = base.replace(cp_kv_regather=True)
        for policy in ("none", "full"):
            sim = predict(replace(run, config=run.config.replace(recompute=policy)), again)
            err = sim.step_time_s / run.step_time_s - 1
            out["policies"][f"{policy}, cp_kv_regather"] = {"error": err, "fits": sim.fits,
                                                            "memory_gib": sim.memory.total / 2**30}  # fmt: skip
            print(f"   {run.label} with {policy}, K/V re-gathered in the backward: error "
                  f"{err:+.1%}, memory {sim.memory.total / 2**30:.1f}/"
                  f"{sim.memory_cap_bytes / 2**30:.0f} GiB{'' if sim.fits else ' (over)'}")  # fmt: skip
    return out


# ----- 2. out of sample -------------------------------------------------------------------
def out_of_sample(data) -> dict:
    print(
        "2. Out of sample: fit on the even rows of a dataset, predict the odd rows (start: "
        "defaults + the dataset's RUN_FACTS)"
    )
    out = {}
    for name, runs in data.items():
        if len(runs) < 3:
            print(f"   {name}: {len(runs)} usable rows, too few to split\n")
            continue
        fit, check = runs[0::2], runs[1::2]
        cal = ex.calibrate(fit, run_params(name), check=check, loo=len(fit) >= 3)
        print(
            f"   {name}: fitted {', '.join(f'{k}={v:.3f}' for k, v in cal.fitted.items())}"
            + ("" if cal.determined else " (no more fit rows than knobs: not unique)")
        )
        print(f"   {'role':5s} {'run':44s} {'published s':>11s} {'before':>7s} {'after':>7s}")
        for r in cal.table:
            print(f"   {r.role:5s} {r.run.label:44s} {r.measured_s:>11.3f} "
                  f"{r.error_before:>+7.1%} {r.error_after:>+7.1%}")  # fmt: skip
        seen = [r for r in cal.table if r.role == "check"]
        meas = np.array([model_tflops(r.run, r.measured_s) for r in seen])
        pred = np.array([model_tflops(r.run, r.after_s) for r in seen])
        rho = float(spearmanr(meas, pred).statistic) if len(seen) >= 3 else None
        gap = float(1 - meas[int(pred.argmax())] / meas.max())
        errs = [abs(r.error_after) for r in seen]
        res = {
            "fit_rows": [r.label for r in fit], "check_rows": [r.label for r in check],
            "fitted": cal.fitted, "at_bounds": list(cal.at_bounds),
            "determined": cal.determined,
            "check_median_abs_error_before": float(np.median([abs(r.error_before) for r in seen])),
            "check_median_abs_error_after": float(np.median(errs)),
            "check_worst_abs_error_after": float(max(errs)),
            "fit_loo_error": cal.loo_error, "spearman_check": rho,
            "predicted_best_gap_check": gap, "seconds": cal.seconds,
        }  # fmt: skip
        out[name] = res
        rho_s = "n/a (fewer than 3 check rows)" if rho is None else f"{rho:.2f}"
        print(
            f"   check rows: median |error| {res['check_median_abs_error_before']:.1%} before, "
            f"{res['check_median_abs_error_after']:.1%} after; Spearman {rho_s} (target "
            f">= 0.8); predicted best measured {gap:.1%} below the best (target 3%); "
            f"{cal.seconds:.1f} s\n"
        )
    return out


# ----- 3. recovery ------------------------------------------------------------------------
TRUTH = {MATMUL: 0.55, "hbm_efficiency": 0.7, "cost.bandwidth_efficiency": 0.6}
# Layouts whose times weigh matmuls, memory-bound kernels (the 125M model's small hidden
# size) and links (data- and tensor-parallel traffic) differently, so the three knobs are
# identifiable.
LAYOUTS = (
    ("gpt3-1.3b", P(dp=64), 128, 2048), ("gpt3-1.3b", P(dp=8, tp=8), 64, 2048),
    ("gpt3-1.3b", P(dp=4, tp=16), 64, 2048), ("gpt3-1.3b", P(dp=16, tp=2, pp=2), 64, 2048),
    ("gpt3-1.3b", P(dp=32, tp=2), 256, 2048), ("gpt3-1.3b", P(dp=2, tp=8, pp=4), 64, 2048),
    ("gpt3-125m", P(dp=8), 64, 2048), ("gpt3-125m", P(dp=8, microbatch_size=8), 512, 2048),
)  # fmt: skip


# The runs are generated from TrainingParams() with the truth's values, and the fit starts
# from the same params (calibrate's default start is the default stack's, which sets other
# knobs too).
START = TrainingParams()


def synthetic(truth: dict, layouts, noise: float, seed: int):
    params = with_values(TrainingParams(), truth)
    rng = np.random.default_rng(seed)
    out = []
    for model, cfg, gb, seq in layouts:
        probe = ex.MeasuredRun(model, cfg, "a100-80g", gb, seq, 1.0)
        t = predict(probe, params).step_time_s * (1 + noise * rng.standard_normal())
        out.append(ex.MeasuredRun(model, cfg, "a100-80g", gb, seq, t, source=f"synthetic {seed}"))
    return out


def recovery() -> dict:
    truth = {k: v for k, v in TRUTH.items() if k in float_fields()}
    print(f"3. Recovery: {len(LAYOUTS)} gpt3-1.3b/125m runs from {truth} + 3% noise, 5 seeds")
    seeds = []
    for seed in range(5):
        cal = ex.calibrate(synthetic(truth, LAYOUTS, 0.03, seed), START, fit=tuple(truth),
                           loo=False)  # fmt: skip
        errs = {k: cal.fitted[k] / v - 1 for k, v in truth.items()}
        seeds.append({"seed": seed, "fitted": cal.fitted, "relative_error": errs,
                      "seconds": cal.seconds})  # fmt: skip
        print(f"   seed {seed}: " + ", ".join(f"{k} {cal.fitted[k]:.3f} ({e:+.1%})"
                                                for k, e in errs.items()))  # fmt: skip
    worst = {k: max(abs(s["relative_error"][k]) for s in seeds) for k in truth}
    ok = all(v <= 0.10 for v in worst.values())
    print(f"   worst |error| per parameter: "
          f"{', '.join(f'{k} {v:.1%}' for k, v in worst.items())}; all within 10%: {ok}\n")  # fmt: skip
    return {"truth": truth, "noise": 0.03, "seeds": seeds, "worst_abs_error": worst,
            "all_within_10pct": ok}  # fmt: skip


# ----- 4. speed ---------------------------------------------------------------------------
def speed() -> dict:
    print("4. Speed (wall seconds, this machine)")
    layouts = []
    for dp, tp, pp in ((64, 1, 1), (32, 2, 1), (16, 4, 1), (8, 8, 1), (4, 16, 1), (16, 2, 2),
                       (8, 4, 2), (4, 8, 2), (2, 8, 4), (8, 2, 4)):  # fmt: skip
        for mb in (1, 2):
            layouts.append(("gpt3-1.3b", P(dp=dp, tp=tp, pp=pp, microbatch_size=mb), 256, 2048))
    truth = {MATMUL: 0.55, "cost.bandwidth_efficiency": 0.6}
    runs = synthetic(truth, layouts, 0.03, 0)
    t0 = time.perf_counter()
    cal = ex.calibrate(runs, START, fit=tuple(truth), loo=False)
    fit_s = time.perf_counter() - t0
    # Knobs outside CostParams leave the operator search's memo valid: only kernel times
    # are recomputed per evaluation.
    kernel_knobs = tuple(k for k in (MATMUL, "hbm_efficiency") if not k.startswith("cost."))
    kernel_s = None
    if len(kernel_knobs) == 2:
        runs_k = synthetic({MATMUL: 0.55, "hbm_efficiency": 0.7}, layouts, 0.03, 0)
        t0 = time.perf_counter()
        cal_k = ex.calibrate(runs_k, START, fit=kernel_knobs, loo=False)
        kernel_s = time.perf_counter() - t0
        print(
            f"   calibrate, 20 runs, {' + '.join(kernel_knobs)}: {kernel_s:.1f} s "
            f"({cal_k.evaluations} evaluations; target 2 s)"
        )
    t0 = time.perf_counter()
    cal_loo = ex.calibrate(runs, START, fit=tuple(truth), loo=True)
    loo_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = ex.plan_training("gpt3-175b", 1024, "a100-80g", 1536, 2048, params=cal.params)
    plan_s = time.perf_counter() - t0
    print(
        f"   calibrate, 20 runs, {' + '.join(truth)}: {fit_s:.1f} s ({cal.evaluations} step-model "
        f"evaluations; target 2 s); with leave-one-out: {loo_s:.1f} s"
    )
    print(
        f"   plan_training gpt3-175b on 1024 a100-80g with the fitted params: {plan_s:.1f} s "
        f"(target 5 s) -> {plan.config}\n"
    )
    return {"calibrate_20_runs_s": fit_s, "calibrate_20_runs_evaluations": cal.evaluations,
            "calibrate_20_runs_with_loo_s": loo_s, "calibrate_20_runs_kernel_knobs_s": kernel_s, "loo_error": cal_loo.loo_error,
            "plan_training_gpt3_175b_1024_s": plan_s, "targets_s": {"calibrate": 2,
            "plan_training": 5}}  # fmt: skip


# ----- 5. today's stacks -----------------------------------------------------------------


def _stats(rows: list[dict]) -> dict:
    """n, within 10% / 20%, median and worst |error| of step time, memory calls right,
    median and worst |error| of memory (rows that publish it)."""
    if not rows:
        return {"n": 0}
    e = np.abs([x["error"] for x in rows])
    mem = np.abs([x["memory_error"] for x in rows if x["memory_error"] is not None])
    return {
        "n": len(rows), "within_10pct": int((e <= 0.10).sum()),
        "median_signed_error": float(np.median([x["error"] for x in rows])),
        "within_20pct": int((e <= 0.20).sum()), "median_abs_error": float(np.median(e)),
        "worst_abs_error": float(e.max()), "worst_row": rows[int(e.argmax())]["run"],
        "memory_fits_called_right": sum(x["fits"] for x in rows),
        "memory_rows": len(mem),
        "memory_median_abs_error": float(np.median(mem)) if len(mem) else None,
        "memory_worst_abs_error": float(mem.max()) if len(mem) else None,
    }  # fmt: skip


def _stats_line(label: str, st: dict) -> str:
    if not st["n"]:
        return f"   {label:44s}     0"
    mem = (f"{st['memory_median_abs_error']:>7.1%} {st['memory_worst_abs_error']:>7.1%}"
           if st["memory_rows"] else f"{'-':>7s} {'-':>7s}")  # fmt: skip
    return (f"   {label:44s} {st['n']:>5d} {st['within_10pct']:>4d} {st['within_20pct']:>4d} "
            f"{st['median_abs_error']:>7.1%} {st['median_signed_error']:>+7.1%} "
            f"{st['worst_abs_error']:>7.1%} "
            f"{st['memory_fits_called_right']:>3d}/{st['n']:<3d} {st['memory_rows']:>3d} {mem}")  # fmt: skip


def _flop_conventions_checked() -> list[dict]:
    """Rows that publish TFLOP/s and tokens/s: the source's FLOPs per token (their ratio)
    over the closed form of the row's convention (megatron2024's where it has none)."""
    out = []
    for name in measured_datasets("stacks"):
        for row in load_measured_rows(name):
            tf, tps = row["tflops_per_gpu"].strip(), row["tokens_per_s_per_gpu"].strip()
            if not (tf and tps and row["flops_convention"].strip()):
                continue
            conv = row["flops_convention"].strip()
            try:
                cfg = ex.models.load(row["model"])
            except ex.ExplorerError:
                continue
            gb, seq = int(row["global_batch"]), int(row["seq"])
            closed = conv if conv in ("megatron2024", "nemo2407", "nemo2403") else "megatron2024"
            ours = flops_per_step(closed, cfg, gb, seq) / (gb * seq)
            theirs = float(tf) * 1e12 / float(tps)
            out.append({"dataset": name, "model": row["model"], "role": row["role"],
                        "convention": conv, "compared_with": closed,
                        "published_flops_per_token": theirs, "ratio": theirs / ours})  # fmt: skip
    return out


def _fitted_values() -> dict[str, str]:
    """Every value whose source says it was fitted: `TrainingParams` knobs, stack presets
    (`explorer.training.stacks`) and chip efficiencies (`hardware.chip.EFFICIENCY_FACTS`)."""

    def says_fitted(src: str) -> bool:  # not "assumption ... until fitted"
        return src.startswith("fitted") or "fitted on" in src or "fitted with" in src

    out = {}
    for f in dataclass_fields(TrainingParams):
        src = f.metadata.get("source", "")
        if says_fitted(src):
            out[f"TrainingParams.{f.name}"] = src
    stacks = getattr(ex.training, "stacks", None) or getattr(ex, "stacks", None)
    for st in getattr(stacks, "STACKS", {}).values():
        for key, src in st.sources:
            if says_fitted(src):
                out[f"stack {st.name}.{key}"] = src
    facts = getattr(ex.hardware.chip, "EFFICIENCY_FACTS", {})
    for chip, (*values, src) in facts.items():
        if says_fitted(src):
            out[f"chip {chip} efficiencies {tuple(values)}"] = src
    return out


def today_stacks() -> dict:
    print("5. Today's stacks (issue 24): uncalibrated, each row with its stack's preset; "
          "roles as fixed in the files (fit: a preset value may be fitted on it; check: never)")  # fmt: skip
    t0 = time.perf_counter()
    skipped: list[str] = []
    runs = {name: published_runs(name, skipped=skipped) for name in measured_datasets("stacks")}
    load_s = time.perf_counter() - t0
    presets = {stack: stack_params(stack)[1] for stack in STACK_NAMES}
    print("   predicted with (explorer.training.stacks preset per stack, or the defaults):")
    for stack, which in presets.items():
        print(f"     {stack}: {which}")
    fitted = _fitted_values()
    print("   values fitted on published rows, as their sources say (they may use fit rows only):")
    for what, source in fitted.items():
        print(f"     {what}: {source}")
    if not fitted:
        print("     none")
    rows = []
    for name, rs in runs.items():
        for r in rs:
            try:
                sim = predict(r, measured_params(r))
            except ex.ExplorerError as e:
                skipped.append(f"{name} ({r.role}): {r.label} on {r.hardware_name}: the step "
                               f"model cannot predict it ({e})")  # fmt: skip
                continue
            err = sim.step_time_s / r.step_time_s - 1
            mem = sim.memory.total
            mem_err = mem / r.memory_bytes - 1 if r.memory_bytes else None
            tokens = r.global_batch * r.seq / r.config.devices
            rows.append({
                "dataset": name, "stack": r.stack, "role": r.role, "run": r.label,
                "model": r.model_name, "hardware": r.hardware_name.split("+")[0],
                "precision": r.precision, "config": str(r.config),
                "measured_s": r.step_time_s, "predicted_s": sim.step_time_s, "error": err,
                "fits": bool(sim.fits), "memory_gib": mem / 2**30,
                "memory_cap_gib": sim.memory_cap_bytes / 2**30,
                "measured_memory_gib": r.memory_bytes / 2**30 if r.memory_bytes else None,
                "memory_error": mem_err, "tokens_per_s_per_gpu": tokens / r.step_time_s,
                "predicted_tokens_per_s_per_gpu": tokens / sim.step_time_s,
                "source": r.source,
            })  # fmt: skip
    predict_s = time.perf_counter() - t0 - load_s
    print(f"   rows: {len(rows)} predicted, {len(skipped)} skipped "
          f"(reasons below); loading and planning the open fields {load_s:.0f} s, "
          f"predicting {predict_s:.0f} s (estimate)")  # fmt: skip
    head = (f"   {'file / stack / role':44s} {'n':>5s} {'10%':>4s} {'20%':>4s} {'median':>7s} "
            f"{'signed':>7s} {'worst':>7s} {'fits':>7s} {'mem':>3s} {'mem med':>7s} "
            f"{'mem max':>7s}")  # fmt: skip
    print("   error = predicted / measured step time - 1 (signed median: < 0 predicted too "
          "fast); fits: runs predicted to fit / runs (every one ran); mem: rows publishing "
          "memory, median and worst |error| of the predicted peak")  # fmt: skip
    print(head)
    groups: dict = defaultdict(list)
    for x in rows:
        groups[(x["dataset"], x["stack"], x["role"])].append(x)
    per_group = {}
    for (name, stack, role), xs in sorted(groups.items()):
        st = _stats(xs)
        per_group[f"{name} / {stack} / {role}"] = st
        print(_stats_line(f"{name} / {stack} / {role}", st))
    print("   per stack:")
    per_stack = {}
    for stack in STACK_NAMES:
        for role in ROLES:
            xs = [x for x in rows if x["stack"] == stack and x["role"] == role]
            if xs:
                per_stack[f"{stack} / {role}"] = st = _stats(xs)
                print(_stats_line(f"{stack} / {role}", st))
    print("   per chip:")
    per_chip = {}
    for hw in sorted({x["hardware"] for x in rows}):
        for role in ROLES:
            xs = [x for x in rows if x["hardware"] == hw and x["role"] == role]
            if xs:
                per_chip[f"{hw} / {role}"] = st = _stats(xs)
                print(_stats_line(f"{hw} / {role}", st))
    # sweeps: one model on one chip in one file, several layouts
    sweeps: dict = defaultdict(list)
    for x in rows:
        sweeps[(x["dataset"], x["model"], x["hardware"], x["precision"])].append(x)
    print("   Spearman of tokens/s per GPU within each sweep (one model, chip and precision in "
          "one file; 3+ rows): all rows, and fit / check rows apart where 3+")  # fmt: skip
    spearman = []
    for (name, model, hw, prec), xs in sorted(sweeps.items()):
        if len(xs) < 3:
            continue
        res = {"dataset": name, "model": model, "hardware": hw, "precision": prec,
               "n": len(xs)}  # fmt: skip
        for role in ("all", *ROLES):
            ys = xs if role == "all" else [x for x in xs if x["role"] == role]
            meas = [y["tokens_per_s_per_gpu"] for y in ys]
            pred = [y["predicted_tokens_per_s_per_gpu"] for y in ys]
            if len(ys) >= 3 and len(set(meas)) > 1 and len(set(pred)) > 1:
                res[role] = float(spearmanr(meas, pred).statistic)
            else:
                res[role] = None
        spearman.append(res)
        # n/a: fewer than 3 rows, or every prediction (or measurement) the same
        fmt = lambda v: "  n/a" if v is None else f"{v:+.2f}"  # noqa: E731
        n_fit = sum(x["role"] == "fit" for x in xs)
        print(f"     {name} {model} {hw} {prec}: {len(xs)} rows ({n_fit} fit, "
              f"{len(xs) - n_fit} check): all {fmt(res['all'])}, fit {fmt(res['fit'])}, "
              f"check {fmt(res['check'])}")  # fmt: skip
    overall = {}
    for role in ROLES:
        xs = [x for x in rows if x["role"] == role]
        st = _stats(xs)
        st["predicted_not_to_fit"] = [x["run"] for x in xs if not x["fits"]]
        overall[role] = st
    c = overall["check"]
    targets = {"check_within_10pct_share": 0.8, "check_median_abs_error": 0.06,
               "predicted_not_to_fit": 0}  # fmt: skip
    for role in ROLES:
        st = overall[role]
        if not st["n"]:
            print(f"   overall {role} rows: none predicted")
            continue
        print(f"   overall {role} rows: {st['within_10pct']}/{st['n']} within 10% "
              f"({st['within_10pct'] / st['n']:.0%}), {st['within_20pct']}/{st['n']} within "
              f"20%, median |error| {st['median_abs_error']:.1%}, worst "
              f"{st['worst_abs_error']:.1%} ({st['worst_row']}); predicted not to fit: "
              f"{len(st['predicted_not_to_fit'])}")  # fmt: skip
    if c["n"]:
        print(f"   targets on the check rows: >= 80% within 10% "
              f"({'met' if c['within_10pct'] >= 0.8 * c['n'] else 'not met'}), median "
              f"|error| <= 6% ({'met' if c['median_abs_error'] <= 0.06 else 'not met'}), 0 "
              f"predicted not to fit ({'met' if not c['predicted_not_to_fit'] else 'not met'})")  # fmt: skip
    print(f"   skipped rows ({len(skipped)}):")
    reasons: dict = defaultdict(int)
    for line in skipped:
        print(f"     {line}")
        reasons[line.split(": ", 1)[1].split(" (")[0]] += 1
    conv = _flop_conventions_checked()
    print("   FLOP conventions against the rows that publish TFLOP/s and tokens/s (published "
          "FLOPs per token / the closed form; tokens/s gives these rows' step times):")  # fmt: skip
    by_conv: dict = defaultdict(list)
    for x in conv:
        by_conv[(x["convention"], x["compared_with"])].append(x["ratio"])
    for (name, closed), ratios in sorted(by_conv.items()):
        print(f"     {name} vs {closed}: {len(ratios)} rows, ratio {min(ratios):.3f} to "
              f"{max(ratios):.3f} (median {np.median(ratios):.3f})")  # fmt: skip
    print()
    return {"predicted_with": presets, "fitted_values": fitted, "rows": rows, "skipped": skipped,
            "skipped_by_reason": dict(reasons), "per_file_stack_role": per_group,
            "per_stack_role": per_stack, "per_chip_role": per_chip, "spearman": spearman,
            "overall": overall, "targets": targets, "flop_conventions": conv,
            "seconds": {"load_and_plan": load_s, "predict": predict_s}}  # fmt: skip


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):  # not a run: the whole bench writes its results
        print(__doc__)
        return
    if "--peer" in sys.argv[1:]:
        result = json.loads(OUT.read_text()) if OUT.is_file() else {}
        result["peer_simumax"] = peer_simumax()
        OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {OUT} (peer_simumax)")
        return
    if "--fit-rowwise" in sys.argv[1:]:
        result = json.loads(OUT.read_text()) if OUT.is_file() else {}
        result["today_fit_rowwise"] = fit_rowwise()
        OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {OUT} (today_fit_rowwise)")
        return
    if "--fit" in sys.argv[1:]:
        result = json.loads(OUT.read_text()) if OUT.is_file() else {}
        result["today_fit"] = fit_today()
        OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {OUT} (today_fit)")
        return
    if "--fit-chip" in sys.argv[1:]:  # prints only: the chip's source cites it
        i = sys.argv.index("--fit-chip")
        fit_chip(sys.argv[i + 1] if i + 1 < len(sys.argv) else "h100-hbm2e-96g")
        return
    if "--today" in sys.argv[1:]:
        today = today_stacks()
        if "--no-write" in sys.argv[1:]:
            return
        result = json.loads(OUT.read_text()) if OUT.is_file() else {}
        result["today_stacks"] = today
        OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
        print(f"wrote {OUT} (today_stacks)")
        return
    t0 = time.perf_counter()
    old = json.loads(OUT.read_text()) if OUT.is_file() else {}
    data = datasets()
    result = {
        "conditions": os.environ.get("BENCH_CONDITIONS", "not stated"),
        "datasets": {k: [r.source for r in v] for k, v in data.items()},
        "skipped_rows": SKIPPED,
        "fitted_facts": fit_dataset_facts(data),
        "uncalibrated": uncalibrated(data),
        "out_of_sample": out_of_sample(data),
        "recovery": recovery(),
        "speed": speed(),
        "today_stacks": today_stacks(),
        "peer_simumax": peer_simumax(),
    }
    result["total_s"] = time.perf_counter() - t0
    for key in ("today_fit", "today_fit_rowwise"):  # written by --fit / --fit-rowwise only
        if key in old:
            result[key] = old[key]
    OUT.write_text(json.dumps(result, indent=1, default=float) + "\n")
    print(f"wrote {OUT} ({result['total_s']:.0f} s)")


if __name__ == "__main__":
    main()
