"""Section 5b-5d of bench/accuracy.py: today's fitted values, each fitted on the FIT rows of
today's stack files only (check rows are never read). Run through ``bench/accuracy.py --fit``,
``--fit-rowwise`` and ``--fit-chip NAME``."""

from __future__ import annotations

import time

import numpy as np
from scipy.optimize import least_squares, minimize_scalar

import explorer as ex
from explorer.training import TrainingParams, stacks
from explorer.training.calibration.fit import predict
from explorer.training.calibration.measured import measured_datasets
from explorer.training.calibration.published import measured_params, published_runs

# ----- 5b. the least-squares fit of today's values on fit rows ------------------------------
#: The chips whose efficiencies are fitted, by the hardware profile names the rows use: each
#: fits one scale of its (GEMM ceiling, fused-attention efficiency) pair; a chip listed with
#: another's name shares that one's scale (the H200 is the H100's GH100 die).
FIT_CHIPS = {"a100-80g": "a100-80g", "h100-sxm": "h100-sxm", "h200": "h100-sxm",
             "h100-hbm2e-96g": "h100-hbm2e-96g", "b200": "b200", "gb200-nvl72": "gb200-nvl72"}  # fmt: skip
#: The presets whose per-kernel overhead (``kernel_overhead_s``, seconds per kernel launched:
#: the framework's launch and dispatch gap between dependent kernels) is fitted: torchtitan,
#: whose rows run eager PyTorch (and torch.compile without CUDA graphs). Fitting it for the
#: Megatron-Core stacks as well traded it against the chips' GEMM ceilings (44-57 us a kernel,
#: implausible beside CUDA-graphed Transformer Engine kernels, for an rms log error of 0.362
#: against 0.380): they keep TrainingParams' 2 us.
FIT_OVERHEAD_STACKS = ("torchtitan",)
#: Chips whose fused-attention efficiency gets a scale of its own (on top of the chip's):
#: those with attention-heavy fit rows (NeMo's 16K-128K-token Llama 2 runs on H100).
FIT_ATTENTION_CHIPS = ("h100-sxm",)
_KERNEL_OVERHEAD_BOUNDS = (0.0, 30e-6)  # assumption: a host-bound eager launch gap at most


def fit_today() -> dict:
    """Least squares (scipy.optimize.least_squares, residuals log(predicted / measured))
    over the FIT rows of today's stack files only: one scale per chip of `FIT_CHIPS` on
    its (matmul_efficiency, attention_efficiency) and one ``kernel_overhead_s`` per preset
    of `FIT_OVERHEAD_STACKS`. Check rows are never read. Prints and returns the values with
    the rows each was fitted on (what the chip and preset sources then cite)."""
    print("5b. Least-squares fit on the FIT rows of today's stack files (check rows unread)")
    t0 = time.perf_counter()
    rows = []
    for name in measured_datasets("stacks"):
        for r in published_runs(name, skipped=[]):
            if r.role != "fit":
                continue
            hw = r.hardware_name.split("+")[0]
            preset = stacks.FRAMEWORK_STACKS.get(r.stack, stacks.DATASET_STACKS.get(name))
            if hw not in FIT_CHIPS:
                continue
            base = measured_params(r)
            try:
                predict(r, base)
            except ex.ExplorerError:
                continue
            rows.append((name, r, hw, preset, base))
    chips = sorted(set(FIT_CHIPS[hw] for _, _, hw, _, _ in rows))
    overheads = [s for s in FIT_OVERHEAD_STACKS if any(p == s for *_, p, _ in rows)]
    r8 = len(chips) + len(overheads)  # the FP8 GEMM ratio, one for every chip and stack
    io = r8 + 1  # overlap_interference, one for every stack
    mo = r8 + 2  # moe_layer_overhead_s, one for the stacks whose preset has it
    att_chips = [c for c in chips if c in FIT_ATTENTION_CHIPS]
    me = mo + 1  # moe_expert_overhead_s, one for the stacks whose preset has it
    a0 = me + 1  # then one attention scale per chip of FIT_ATTENTION_CHIPS
    start = {c: (ex.hardware.load(c).chip.matmul_efficiency,
                 ex.hardware.load(c).chip.attention_efficiency) for c in chips}  # fmt: skip
    k0 = TrainingParams().kernel_overhead_s

    def params_of(x, hw, preset, base):
        chip = FIT_CHIPS[hw]
        g = x[chips.index(chip)]
        mm, att = start[chip]
        ga = g * (x[a0 + att_chips.index(chip)] if chip in att_chips else 1.0)
        k = x[len(chips) + overheads.index(preset)] if preset in overheads else k0
        return base.replace(matmul_efficiency_cap=min(1.0, mm * g),
                            flash_attention_efficiency=min(1.0, att * ga),
                            kernel_overhead_s=float(k),
                            fp8_matmul_efficiency_ratio=float(x[r8]),
                            overlap_interference=float(x[io]),
                            # each MoE cost where the stack's preset has it
                            moe_layer_overhead_s=float(x[mo]) if base.moe_layer_overhead_s else 0.0,
                            moe_expert_overhead_s=float(x[me]) if base.moe_expert_overhead_s
                            else 0.0)  # fmt: skip

    def residuals(x):
        return np.array([np.log(predict(r, params_of(x, hw, pre, b)).step_time_s / r.step_time_s)
                         for _, r, hw, pre, b in rows])  # fmt: skip

    r0 = stacks.params("nemo").fp8_matmul_efficiency_ratio
    i0 = stacks.params("nemo").overlap_interference
    m0 = stacks.params("torchtitan").moe_layer_overhead_s
    e0 = stacks.params("nemo").moe_expert_overhead_s
    x0 = np.array([1.0] * len(chips) + [k0] * len(overheads)
                  + [r0, max(i0, 0.05), max(m0, 1e-3), max(e0, 1e-4)]
                  + [1.0] * len(att_chips))  # fmt: skip
    lo = np.array([0.3] * len(chips) + [_KERNEL_OVERHEAD_BOUNDS[0]] * len(overheads)
                  + [0.3, 0, 0, 0] + [0.3] * len(att_chips))  # fmt: skip
    hi = np.array([min(1 / max(start[c]), 2.0) for c in chips]
                  + [_KERNEL_OVERHEAD_BOUNDS[1]] * len(overheads) + [1.0, 1.0, 0.05, 0.005]
                  + [1 / start[c][1] for c in att_chips])  # fmt: skip
    scale = np.array([0.1] * len(chips) + [1e-5] * len(overheads) + [0.1, 0.1, 1e-3, 1e-4]
                     + [0.1] * len(att_chips))  # fmt: skip
    res0 = residuals(x0)
    # soft_l1 at 10%: a row the physics cannot yet explain (an MoE run 3x off) weighs as a
    # 10% miss, not its square; every finite difference a 1% step of its value
    sol = least_squares(residuals, x0, bounds=(lo, hi), x_scale=scale, diff_step=1e-2,
                        loss="soft_l1", f_scale=0.1, max_nfev=200, verbose=1)  # fmt: skip
    res1 = residuals(sol.x)
    out = {"fit_rows": len(rows), "nfev": int(sol.nfev), "status": int(sol.status),
           "rms_log_error_before": float(np.sqrt(np.mean(res0**2))),
           "rms_log_error_after": float(np.sqrt(np.mean(res1**2))), "chips": {}, "stacks": {},
           "seconds": 0.0}  # fmt: skip
    for i, c in enumerate(chips):
        used = [(n, r) for n, r, hw, _, _ in rows if FIT_CHIPS[hw] == c]
        mm, att = start[c]
        ga = sol.x[i] * (sol.x[a0 + att_chips.index(c)] if c in att_chips else 1.0)
        out["chips"][c] = {
            "scale": float(sol.x[i]), "matmul_efficiency": round(min(1.0, mm * sol.x[i]), 3),
            "attention_scale": float(ga), "attention_efficiency": round(min(1.0, att * ga), 3),
            "from": [round(mm, 3), round(att, 3)], "rows": len(used),
            "datasets": sorted({n for n, _ in used}),
        }  # fmt: skip
    for j, st in enumerate(overheads):
        used = [(n, r) for n, r, _, pre, _ in rows if pre == st]
        out["stacks"][st] = {"kernel_overhead_s": float(sol.x[len(chips) + j]),
                             "rows": len(used), "datasets": sorted({n for n, _ in used})}  # fmt: skip
    fp8 = [(n, r) for n, r, *_ in rows if r.precision == "fp8"]
    out["fp8_matmul_efficiency_ratio"] = {
        "value": float(sol.x[r8]),
        "fp8_rows": len(fp8),
        "datasets": sorted({n for n, _ in fp8}),
    }
    out["overlap_interference"] = {"value": float(sol.x[io]), "rows": len(rows)}
    for key, j in (("moe_layer_overhead_s", mo), ("moe_expert_overhead_s", me)):
        used = [(n, r) for n, r, *_, b in rows if r.cfg.is_moe and getattr(b, key)]
        out[key] = {"value": float(sol.x[j]), "moe_rows": len(used),
                    "datasets": sorted({n for n, _ in used})}  # fmt: skip
    out["seconds"] = time.perf_counter() - t0
    print(f"   {len(rows)} fit rows; rms log error {out['rms_log_error_before']:.3f} -> "
          f"{out['rms_log_error_after']:.3f} ({sol.nfev} evaluations, {out['seconds']:.0f} s)")  # fmt: skip
    for c, v in out["chips"].items():
        print(f"   chip {c}: scale {v['scale']:.3f}: matmul {v['from'][0]} -> "
              f"{v['matmul_efficiency']}, attention {v['from'][1]} -> "
              f"{v['attention_efficiency']} ({v['rows']} fit rows of {', '.join(v['datasets'])})")  # fmt: skip
    for st, v in out["stacks"].items():
        print(f"   stack {st}: kernel_overhead_s {v['kernel_overhead_s'] * 1e6:.1f} us "
              f"({v['rows']} fit rows of {', '.join(v['datasets'])})")  # fmt: skip
    v = out["fp8_matmul_efficiency_ratio"]
    print(f"   fp8_matmul_efficiency_ratio {v['value']:.3f} ({v['fp8_rows']} FP8 fit rows of "
          f"{', '.join(v['datasets'])}, with the BF16 ones)")  # fmt: skip
    print(f"   overlap_interference {out['overlap_interference']['value']:.3f} (every fit row)")
    v = out["moe_layer_overhead_s"]
    print(f"   moe_layer_overhead_s {v['value'] * 1e3:.2f} ms ({v['moe_rows']} MoE fit rows of "
          f"{', '.join(v['datasets'])})")  # fmt: skip
    v = out["moe_expert_overhead_s"]
    print(f"   moe_expert_overhead_s {v['value'] * 1e6:.1f} us per local expert "
          f"({v['moe_rows']} MoE fit rows of {', '.join(v['datasets'])})")  # fmt: skip
    return out


def fit_rowwise() -> dict:
    """``stacks.FP8_ROWWISE_MATMUL_RATIO``: minimize_scalar of the summed squared
    log(predicted / measured) over the FIT rows whose knobs name torchao's rowwise FP8
    recipe (``float8_recipe=rowwise``), every other value as stored. Check rows unread."""
    print("5c. torchao rowwise FP8: fp8_scaling_matmul_ratio on its FIT rows (check rows unread)")
    rows = []
    for name in measured_datasets("stacks"):
        for r in published_runs(name, skipped=[]):
            p = measured_params(r)
            if r.role == "fit" and p.fp8_scaling_matmul_ratio != 1.0:
                rows.append((name, r, p))

    def loss(x: float) -> float:
        return sum(
            np.log(predict(r, p.replace(fp8_scaling_matmul_ratio=x)).step_time_s / r.step_time_s)
            ** 2
            for _, r, p in rows
        )

    sol = minimize_scalar(loss, bounds=(0.05, 1.0), method="bounded")
    out = {"value": float(sol.x), "stored": stacks.FP8_ROWWISE_MATMUL_RATIO,
           "rows": [f"{n}: {r.label} ({r.source.split('column')[-1].strip()[:40]})"
                    for n, r, _ in rows]}  # fmt: skip
    for n, r, p in rows:
        e = predict(r, p.replace(fp8_scaling_matmul_ratio=sol.x)).step_time_s / r.step_time_s - 1
        print(f"   {n} fit {r.label}: error {e:+.1%} at the fitted value")
    print(f"   fp8_scaling_matmul_ratio {sol.x:.3f} on {len(rows)} fit rows "
          f"(stored: {stacks.FP8_ROWWISE_MATMUL_RATIO})")  # fmt: skip
    return out


def fit_chip(chip_name: str) -> dict:
    """One chip's (GEMM ceiling, fused-attention efficiency) alone, by least squares
    (residuals log(predicted / measured), soft_l1 at 10%, as `fit_today`) over the FIT rows
    that ran on it, every other value as stored: what `explorer.hardware.chip
    .EFFICIENCY_FACTS` then cites. Check rows are never read. Prints the rows used."""
    print(f"5d. {chip_name}: its GEMM ceiling and attention efficiency on its FIT rows alone "
          "(check rows unread)")  # fmt: skip
    chip = ex.hardware.load(chip_name).chip
    mm0, at0 = chip.matmul_efficiency, chip.attention_efficiency
    rows = []
    for name in measured_datasets("stacks"):
        for r in published_runs(name, skipped=[]):
            if r.role == "fit" and r.hardware_name.split("+")[0] == chip_name:
                rows.append((name, r, measured_params(r)))
    if not rows:
        print(f"   no fit rows on {chip_name}")
        return {"chip": chip_name, "fit_rows": 0}

    def residuals(x):
        return np.array([
            np.log(predict(r, p.replace(matmul_efficiency_cap=min(1.0, mm0 * x[0]),
                                        flash_attention_efficiency=min(1.0, at0 * x[1])))
                   .step_time_s / r.step_time_s)
            for _, r, p in rows
        ])  # fmt: skip

    x0 = np.ones(2)
    sol = least_squares(residuals, x0, bounds=([0.3, 0.3], [1 / mm0, 1 / at0]),
                        diff_step=1e-2, loss="soft_l1", f_scale=0.1)  # fmt: skip
    r0, r1 = residuals(x0), residuals(sol.x)
    for (n, r, _), e in zip(rows, np.expm1(r1), strict=True):
        print(f"   {n} fit {r.label}: error {e:+.1%} at the fitted values")
    out = {"chip": chip_name, "fit_rows": len(rows),
           "datasets": sorted({n for n, _, _ in rows}),
           "from": [mm0, at0], "scale": [float(v) for v in sol.x],
           "matmul_efficiency": float(mm0 * sol.x[0]),
           "attention_efficiency": float(at0 * sol.x[1]),
           "rms_log_error_before": float(np.sqrt(np.mean(r0**2))),
           "rms_log_error_after": float(np.sqrt(np.mean(r1**2)))}  # fmt: skip
    print(f"   {len(rows)} fit rows of {', '.join(out['datasets'])}: matmul {mm0:.3f} x "
          f"{sol.x[0]:.3f} = {out['matmul_efficiency']:.3f}, attention {at0:.3f} x "
          f"{sol.x[1]:.3f} = {out['attention_efficiency']:.3f}; rms log error "
          f"{out['rms_log_error_before']:.3f} -> {out['rms_log_error_after']:.3f}")  # fmt: skip
    return out
